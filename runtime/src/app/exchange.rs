//! What a request leaves to record: its access log line and counters,
//! when its body has been sent ([`Exchange`]), or when its client went
//! away before the answer ([`Unanswered`], NGINX's 499).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use http::Method;
use http::Request;
use http::header::{self, HeaderValue};

use super::App;
use crate::observe::Observe;
use crate::observe::access_log::{Entry, RequestText};
use crate::observe::counters::RouteCounters;
use crate::request::RequestId;
use crate::servlet::Route;
use crate::site::Site;

/// What is left to record when a response's body has been sent: its
/// access log line, and the bytes of a body that may not go whole.
pub struct Exchange {
    pub(super) started: Instant,
    /// Where the bytes sent are counted, for a body counted at its end.
    pub(super) count_at_end: Option<Arc<RouteCounters>>,
    pub(super) log: Option<Entry>,
}

impl Exchange {
    /// The body is sent (or the client went away): `bytes` went out.
    pub fn finish(self, observe: &Observe, bytes: u64) {
        if let Some(counters) = self.count_at_end {
            counters.add_bytes(bytes);
        }
        if let (Some(mut entry), Some(log)) = (self.log, &observe.access_log) {
            entry.bytes = bytes;
            entry.duration = self.started.elapsed();
            log.log(&entry);
        }
    }
}

/// What the request layer keeps of a request for its access log line.
pub(super) struct LogHead {
    method: Method,
    version: http::Version,
    text: RequestText,
}

impl LogHead {
    /// The request's access log line, answered `status` after `elapsed`
    /// (its bytes are counted when the body is sent).
    pub(super) fn entry(
        self,
        client: SocketAddr,
        status: u16,
        elapsed: std::time::Duration,
        site: &Site,
        route: Option<Arc<str>>,
        id: RequestId,
    ) -> Entry {
        Entry {
            // To within the clock's tick (5 ms), without a clock read.
            time: crate::clock::wall() - elapsed,
            client,
            method: Some(self.method),
            version: self.version,
            status,
            bytes: 0,
            duration: elapsed,
            site: site.name.clone(),
            route,
            id,
            text: self.text,
        }
    }

    pub(super) fn of<B>(req: &Request<B>) -> LogHead {
        let header = |name| req.headers().get(name).map(HeaderValue::as_bytes);
        LogHead {
            method: req.method().clone(),
            version: req.version(),
            // The target as sent: a CONNECT's is its authority.
            text: RequestText::new(
                match (req.uri().path_and_query(), req.uri().authority()) {
                    (Some(p), _) => p.as_str(),
                    (None, Some(a)) => a.as_str(),
                    (None, None) => req.uri().path(),
                },
                header(header::REFERER),
                header(header::USER_AGENT),
            ),
        }
    }
}

/// NGINX's status for a request whose client went away before its answer.
pub(super) const CLIENT_CLOSED: u16 = 499;

/// A request not answered yet: if its handling is dropped before the
/// answer (an HTTP/2 client resets the stream, a connection closes), it
/// is still logged and counted, as NGINX's 499, never lost.
pub(super) struct Unanswered<'a> {
    pub(super) app: &'a App,
    pub(super) site: &'a Site,
    /// The route the request was routed to, once it was.
    pub(super) hit: &'a OnceLock<&'a Route>,
    pub(super) head: Option<LogHead>,
    pub(super) client: SocketAddr,
    pub(super) id: RequestId,
    pub(super) started: Instant,
    pub(super) answered: bool,
}

impl Unanswered<'_> {
    /// The answer is here: what the access log keeps of the request.
    pub(super) fn answered(mut self) -> Option<LogHead> {
        self.answered = true;
        self.head.take()
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let elapsed = self.started.elapsed();
        let hit = self.hit.get().copied();
        let counters = self.app.counters_for(self.site, hit);
        counters.record(CLIENT_CLOSED, 0, elapsed);
        tracing::debug!(request_id = %self.id, "the client went away before the answer");
        if let (Some(head), Some(log)) = (self.head.take(), &self.app.observe.access_log) {
            let route = route_name(&counters, hit);
            let entry = head.entry(
                self.client,
                CLIENT_CLOSED,
                elapsed,
                self.site,
                route,
                self.id,
            );
            log.log(&entry);
        }
    }
}

/// The route a log line names: the route's own name, shared with its
/// counters; none for static files.
pub(super) fn route_name(counters: &RouteCounters, hit: Option<&Route>) -> Option<Arc<str>> {
    hit.map(|_| counters.route.clone())
}
