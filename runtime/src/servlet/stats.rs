//! What a route's servlet has done since the route was loaded (a new
//! version of its file, and an optimising recompile, count on in the same
//! stats, so the counters only ever grow), for metrics and the status
//! page: instances made, requests that trapped, timed out or found no
//! free instance, its last few errors. Counted off the hot path's way:
//! sharded counters, and a lock only when an error happens.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use crate::observe::counters::{Counter, RouteCounters};
use crate::request::RequestError;

/// Errors remembered per servlet.
const RECENT_ERRORS: usize = 10;

/// Bytes of an error's text remembered.
const MAX_ERROR_TEXT: usize = 400;

/// One remembered failure.
#[derive(Debug, Clone)]
pub struct RecentError {
    /// When.
    pub at: SystemTime,
    /// The request's id.
    pub request_id: String,
    /// What happened (the error, no request data).
    pub what: String,
}

/// Why an outbound request was refused, as `swan_servlet_outbound_refused`
/// labels it: a URL that is not absolute http(s), no rule allowing the
/// destination, a non-public address, `max_outbound_concurrency` reached.
pub const OUTBOUND_REFUSALS: [&str; 4] =
    ["invalid_url", "denied", "private_address", "concurrency"];

/// A servlet's counters.
#[derive(Debug, Default)]
pub struct ServletStats {
    /// Instances made (ahead of requests and on demand).
    pub instantiated: Counter,
    /// Requests that trapped or broke the ABI (500, or an aborted body
    /// once a component's head is out).
    pub traps: Counter,
    /// Requests past their `timeout` (504, or an aborted body).
    pub timeouts: Counter,
    /// Requests that found no free instance in time (503).
    pub busy: Counter,
    /// Outbound requests refused before any connection, by reason (in
    /// the order of [`OUTBOUND_REFUSALS`]).
    pub outbound_refused: [Counter; 4],
    /// Outbound requests that failed before their response head (the
    /// upstream: no connection, a timeout, a broken answer).
    pub outbound_failed: Counter,
    /// The route's request counters, looked up once.
    pub requests: OnceLock<Arc<RouteCounters>>,
    recent: Mutex<VecDeque<RecentError>>,
}

impl ServletStats {
    /// Counts a failed request and remembers it.
    pub fn failed(&self, e: &RequestError, request_id: impl std::fmt::Display) {
        match e {
            RequestError::ServletFault(_) => self.traps.add(1),
            RequestError::ServletTimeout => self.timeouts.add(1),
            RequestError::ServletBusy => self.busy.add(1),
            // The client's fault (a body too large, malformed, too slow):
            // not the servlet's, and not worth pushing its last real
            // errors off the status page.
            _ if e.status().is_client_error() => return,
            _ => {}
        }
        let what = match e {
            RequestError::ServletFault(Some(what)) => format!("{e}: {what}"),
            _ => e.to_string(),
        };
        self.remember(request_id, what);
    }

    /// Counts a request whose guest failed after its response head went
    /// out (the client saw an abort, not an error status): as a timeout
    /// when it ran past its deadline, else as a trap.
    pub(crate) fn failed_mid_stream(&self, why: &str, timed_out: bool, request_id: &str) {
        if timed_out {
            self.timeouts.add(1);
        } else {
            self.traps.add(1);
        }
        // The first line: a trap's wasm backtrace stays in the log.
        let why = why.lines().next().unwrap_or_default();
        self.remember(request_id, format!("failed mid-stream: {why}"));
    }

    fn remember(&self, request_id: impl std::fmt::Display, mut what: String) {
        // A guest's own error text can be long.
        if what.len() > MAX_ERROR_TEXT {
            // Room for the ellipsis (3 bytes).
            let mut end = MAX_ERROR_TEXT - 3;
            while !what.is_char_boundary(end) {
                end -= 1;
            }
            what.truncate(end);
            what.push('…');
        }
        if let Ok(mut recent) = self.recent.lock() {
            if recent.len() == RECENT_ERRORS {
                recent.pop_front();
            }
            recent.push_back(RecentError {
                at: SystemTime::now(),
                request_id: request_id.to_string(),
                what,
            });
        }
    }

    /// The last errors, oldest first.
    pub fn recent_errors(&self) -> Vec<RecentError> {
        self.recent
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }
}
