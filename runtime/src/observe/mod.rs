//! What swan reports about itself: request counters (`counters`), the
//! access log (`access_log`), readiness, and the recent reloads. The
//! request layer records into it; the admin listener (the `admin` module)
//! reads it. Recording costs a few uncontended atomic adds per request,
//! plus one queued line when the access log is on.

pub mod access_log;
pub mod counters;
mod log_line;
pub mod one_line;
pub(crate) mod throttle;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use access_log::AccessLog;
use counters::{Counter, RouteCounters};

/// A servlet route: (site name, route path).
pub type RouteKey = (Arc<str>, Arc<str>);

/// Reloads remembered for the status page.
const RECENT_RELOADS: usize = 20;

/// Whether the server should get traffic (`/readyz`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Readiness {
    /// Loading, or not accepting yet.
    Starting = 0,
    /// Serving.
    Ready = 1,
    /// A shutdown signal came: finishing, not taking new work.
    Draining = 2,
}

/// One reload, as the status page lists it.
#[derive(Debug, Clone)]
pub struct ReloadEvent {
    /// When it finished.
    pub at: SystemTime,
    /// What changed ("files of site main", "configuration", ...).
    pub what: String,
    /// Whether it went live whole (false: refused, the previous state
    /// serves, or see `applied`).
    pub ok: bool,
    /// Whether it went live at all: a configuration reload that refused
    /// some servlets is applied (their routes do not serve) but not `ok`.
    pub applied: bool,
    /// Details (the refusal's reason).
    pub detail: String,
}

/// Counters of one site's static files.
#[derive(Debug, Default)]
pub struct SiteCounters {
    /// Requests answered from the files (not by a servlet).
    pub requests: Arc<RouteCounters>,
    /// Of those, answered from memory.
    pub cache_hits: Counter,
    /// Of those, streamed from disk.
    pub streamed: Counter,
}

/// The statuses of request heads refused before the app saw them
/// ([`Observe::heads_refused`]).
pub const REFUSED_STATUSES: [u16; 4] = [400, 408, 414, 431];

/// The server's own accounting.
#[derive(Debug)]
pub struct Observe {
    /// When the process started serving.
    pub started: Instant,
    /// The same, as wall time.
    pub started_at: SystemTime,
    readiness: AtomicU8,
    sites: Mutex<HashMap<Arc<str>, Arc<SiteCounters>>>,
    routes: Mutex<HashMap<RouteKey, Arc<RouteCounters>>>,
    /// The sites configured now, once a reload has said (`None`: any):
    /// counters first asked for by a request of a site a reload removed
    /// are not listed, so its series do not come back.
    current_sites: Mutex<Option<Vec<Arc<str>>>>,
    /// Connections open now.
    pub connections_open: AtomicI64,
    /// Open connections parked now: idle HTTP/1 keep-alive connections
    /// holding no HTTP connection state (and no buffers).
    pub connections_parked: AtomicI64,
    /// Connections accepted.
    pub connections_total: Counter,
    /// TLS handshakes that failed or timed out.
    pub tls_failed: Counter,
    /// Connections closed for a missing, malformed or untrusted PROXY
    /// protocol header.
    pub proxy_refused: Counter,
    /// Streamed responses sent with `sendfile(2)` (HTTP/1 on plain TCP).
    pub sendfile_responses: Counter,
    /// Request heads refused before the app saw them: 400, 414 and 431
    /// (answered by hyper itself) and 408 (cut off by
    /// `header_read_timeout`), in [`REFUSED_STATUSES`]' order.
    pub heads_refused: [Counter; 4],
    /// Access log lines dropped because the writer could not keep up.
    pub access_log_dropped: Arc<Counter>,
    /// The access log, when on.
    pub access_log: Option<AccessLog>,
    /// Reloads that went live.
    pub reloads_ok: Counter,
    /// Reloads refused.
    pub reloads_failed: Counter,
    /// Reloads that went live with some servlets refused.
    pub reloads_partial: Counter,
    reloads: Mutex<VecDeque<ReloadEvent>>,
}

impl Default for Observe {
    fn default() -> Self {
        Observe {
            started: Instant::now(),
            started_at: SystemTime::now(),
            readiness: AtomicU8::new(Readiness::Starting as u8),
            sites: Mutex::default(),
            routes: Mutex::default(),
            current_sites: Mutex::default(),
            connections_open: AtomicI64::new(0),
            connections_parked: AtomicI64::new(0),
            connections_total: Counter::default(),
            tls_failed: Counter::default(),
            proxy_refused: Counter::default(),
            sendfile_responses: Counter::default(),
            heads_refused: Default::default(),
            access_log_dropped: Arc::default(),
            access_log: None,
            reloads_ok: Counter::default(),
            reloads_failed: Counter::default(),
            reloads_partial: Counter::default(),
            reloads: Mutex::default(),
        }
    }
}

impl Observe {
    /// Readiness now.
    pub fn readiness(&self) -> Readiness {
        match self.readiness.load(Ordering::Relaxed) {
            1 => Readiness::Ready,
            2 => Readiness::Draining,
            _ => Readiness::Starting,
        }
    }

    /// Moves readiness on (never back from draining).
    pub fn set_readiness(&self, r: Readiness) {
        let _ = self
            .readiness
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |now| {
                (now != Readiness::Draining as u8).then_some(r as u8)
            });
    }

    /// The counters of `site`'s static files (made on first use; kept
    /// across reloads).
    pub fn site(&self, site: &str) -> Arc<SiteCounters> {
        if !self.is_current(site) {
            return Arc::default();
        }
        let Ok(mut map) = self.sites.lock() else {
            return Arc::default();
        };
        map.entry(Arc::from(site)).or_default().clone()
    }

    /// Whether `site` is configured now (its counters are listed).
    fn is_current(&self, site: &str) -> bool {
        self.current_sites.lock().map_or(true, |now| {
            now.as_ref()
                .is_none_or(|names| names.iter().any(|n| &**n == site))
        })
    }

    /// The counters of a servlet route (made on first use; kept across
    /// reloads).
    pub fn route(&self, site: &str, route: &str) -> Arc<RouteCounters> {
        let route: Arc<str> = Arc::from(route);
        if !self.is_current(site) {
            return Arc::new(RouteCounters::named(route));
        }
        let Ok(mut map) = self.routes.lock() else {
            return Arc::new(RouteCounters::named(route));
        };
        map.entry((Arc::from(site), route.clone()))
            .or_insert_with(|| Arc::new(RouteCounters::named(route)))
            .clone()
    }

    /// Forgets the counters of sites no longer configured (a reload
    /// removed or renamed them), so their series leave `/metrics` rather
    /// than piling up with every rename; requests of such a site still in
    /// flight count nowhere. Called before the new sites serve.
    pub fn keep_only_sites(&self, names: &[&str]) {
        if let Ok(mut now) = self.current_sites.lock() {
            *now = Some(names.iter().map(|&n| Arc::from(n)).collect());
        }
        if let Ok(mut sites) = self.sites.lock() {
            sites.retain(|name, _| names.contains(&&**name));
        }
        if let Ok(mut routes) = self.routes.lock() {
            routes.retain(|(site, _), _| names.contains(&&**site));
        }
    }

    /// Forgets the counters of `site`'s routes other than `routes` (a
    /// reload removed them: a servlet file deleted, a route taken out of
    /// the configuration), so deploys under new names do not pile up
    /// series for good. The routes kept keep their counts.
    pub fn keep_only_routes(&self, site: &str, routes: &[String]) {
        if let Ok(mut map) = self.routes.lock() {
            map.retain(|(s, route), _| &**s != site || routes.iter().any(|r| **r == **route));
        }
    }

    /// Every site's counters, by name.
    pub fn sites(&self) -> Vec<(Arc<str>, Arc<SiteCounters>)> {
        let mut all: Vec<_> = self
            .sites
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Every servlet route's counters, by (site, route).
    pub fn routes(&self) -> Vec<(RouteKey, Arc<RouteCounters>)> {
        let mut all: Vec<_> = self
            .routes
            .lock()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Records a reload.
    pub fn reloaded(&self, what: impl Into<String>, ok: bool, detail: impl Into<String>) {
        if ok {
            self.reloads_ok.add(1);
        } else {
            self.reloads_failed.add(1);
        }
        self.remember_reload(what.into(), ok, ok, detail.into());
    }

    /// A reload that went live with some of its servlets refused (their
    /// routes do not serve): neither "ok" nor "refused".
    pub fn reloaded_in_part(&self, what: impl Into<String>, detail: impl Into<String>) {
        self.reloads_partial.add(1);
        self.remember_reload(what.into(), false, true, detail.into());
    }

    fn remember_reload(&self, what: String, ok: bool, applied: bool, detail: String) {
        if let Ok(mut r) = self.reloads.lock() {
            if r.len() == RECENT_RELOADS {
                r.pop_front();
            }
            r.push_back(ReloadEvent {
                at: SystemTime::now(),
                what,
                ok,
                applied,
                detail,
            });
        }
    }

    /// The recent reloads, newest first.
    pub fn recent_reloads(&self) -> Vec<ReloadEvent> {
        self.reloads
            .lock()
            .map(|r| r.iter().rev().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_site_a_reload_removed_does_not_come_back_in_the_series() {
        let observe = Observe::default();
        observe.route("old", "/a/*");
        observe.site("old");
        observe.keep_only_sites(&["new"]);
        assert!(observe.routes().is_empty() && observe.sites().is_empty());
        // A request of the removed site still in flight finishes: its
        // counters are not listed again.
        observe.route("old", "/a/*");
        observe.site("old");
        assert!(observe.routes().is_empty() && observe.sites().is_empty());
        observe.route("new", "/a/*");
        observe.site("new");
        assert_eq!((observe.routes().len(), observe.sites().len()), (1, 1));
    }
}
