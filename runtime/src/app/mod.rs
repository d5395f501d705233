//! The request layer: where a request from a connection becomes an answer.
//!
//! For each request: an id (logged with every line about it and sent back
//! as `x-request-id`) and a debug-level `request` span (method, path,
//! site, route, status, duration); the site by Host; the path normalised,
//! once; then the servlet route or the static files. Every failure on the
//! way is a [`RequestError`], turned into a response here and only here.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use arc_swap::ArcSwap;
use futures_util::FutureExt;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response};
use tracing::Instrument;
use tracing::field::Empty;

use crate::body::Body;
use crate::config::{AdminConfig, Config, LogConfig, ServerConfig};
use crate::observe::Observe;
use crate::observe::SiteCounters;
use crate::observe::access_log::{self, AccessLog};
use crate::observe::counters::RouteCounters;
use crate::request::{
    BodyPolicy, Peer, RequestBody, RequestError, RequestId, ServletMark, checks, path,
};
use crate::servlet::{CallContext, Loader, LoaderError, Route, Target};
use crate::site::{Site, Sites};
use crate::static_files::{self, CacheError};
use crate::store::{Opening, Stores};

mod exchange;

pub use exchange::Exchange;
use exchange::{LogHead, Unanswered};

/// A body from memory this size or smaller goes to hyper in one piece
/// (HTTP/2 hands over 16 KiB pieces), so it is sent whole or not at all.
const WHOLE_BODY_BYTES: u64 = 16 << 10;

/// Sent as `Server` on every response.
pub const SERVER_NAME: HeaderValue = HeaderValue::from_static("swan");
pub use crate::request::id::REQUEST_ID_HEADER;

/// Everything a request needs, shared by all workers.
#[derive(Debug)]
pub struct App {
    /// Process-wide limits.
    pub server: ServerConfig,
    /// The sites; swapped whole on reload, read without a lock.
    pub sites: ArcSwap<Sites>,
    /// Loads servlets (the wasm engine), when some site can have them.
    pub loader: Option<Arc<Loader>>,
    /// Counters, readiness, reloads, the access log.
    pub observe: Arc<Observe>,
    /// `[log]` as the app was loaded with: like `server`, it changes only
    /// with a restart (a reload compares against it).
    pub log: LogConfig,
    /// `[admin]`, likewise.
    pub admin: Option<AdminConfig>,
}

/// Empties the body of an HTTP/2 response that must not have one: an
/// answer to HEAD, a 204 or a 304 (RFC 9110 §6.4.1). hyper drops these
/// bodies itself on HTTP/1 only, and a body there is a protocol error for
/// the client. A HEAD answer keeps the length a GET would have had.
fn strip_h2_body(res: &mut Response<Body>, head: bool) {
    let no_content = crate::body::status_has_no_body(res.status());
    let size = http_body::Body::size_hint(res.body()).exact();
    if !(head || no_content) || size == Some(0) {
        return;
    }
    if !no_content
        && let Some(n) = size
        && !res.headers().contains_key(header::CONTENT_LENGTH)
    {
        res.headers_mut()
            .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
    }
    *res.body_mut() = Body::empty();
}

/// The Host of a request: the absolute-form authority, else the header.
pub(crate) fn host_of<B>(req: &Request<B>) -> Option<&[u8]> {
    req.uri()
        .authority()
        .map(|a| a.as_str().as_bytes())
        .or_else(|| req.headers().get(header::HOST).map(|h| h.as_bytes()))
}

/// The app could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The servlet loader (the wasm engine) could not start.
    #[error(transparent)]
    Loader(#[from] LoaderError),
    /// A site's files could not be loaded.
    #[error(transparent)]
    Site(#[from] CacheError),
    /// A key-value store could not be opened.
    #[error(transparent)]
    Store(#[from] crate::store::OpenError),
}

impl App {
    /// Loads everything a configuration names: the engine (if any site can
    /// have servlets), every site's files and servlets.
    pub fn load(config: &Config) -> Result<App, AppError> {
        App::load_as(config, &Opening::Alone)
    }

    /// [`App::load`] in a process started as `opening` says (an upgrade
    /// takes embedded stores over from the process it replaces).
    pub fn load_as(config: &Config, opening: &Opening) -> Result<App, AppError> {
        let stores = if config.wants_servlets() {
            Stores::open(&config.stores, &config.stores_used(), opening)?
        } else {
            Stores::default()
        };
        App::load_with(config, stores)
    }

    /// Like [`App::load`], with the stores already open (`swan check` opens
    /// what it can and reports the rest).
    pub fn load_with(config: &Config, stores: Stores) -> Result<App, AppError> {
        let loader = if config.wants_servlets() {
            Some(Loader::new(&config.server, Arc::new(stores))?)
        } else {
            None
        };
        let sites = Sites::load(config, loader.as_ref())?;
        let mut app = App::new(config.server.clone(), sites, loader);
        app.log = config.log.clone();
        app.admin = config.admin.clone();
        Ok(app)
    }

    /// Starts the access log `log` configures (before the app is shared).
    pub fn start_access_log(&mut self, log: &LogConfig) -> Result<(), access_log::OpenError> {
        let Some(observe) = Arc::get_mut(&mut self.observe) else {
            return Ok(());
        };
        observe.access_log =
            AccessLog::start(log, self.server.workers, observe.access_log_dropped.clone())?;
        Ok(())
    }

    /// An app serving already loaded `sites`.
    pub fn new(server: ServerConfig, sites: Sites, loader: Option<Arc<Loader>>) -> App {
        App {
            server,
            sites: ArcSwap::from_pointee(sites),
            loader,
            observe: Arc::default(),
            log: LogConfig::default(),
            admin: None,
        }
    }

    /// `site`'s counters for its static files (looked up once per site).
    fn site_counters<'s>(&self, site: &'s Site) -> &'s Arc<SiteCounters> {
        site.counters
            .get_or_init(|| self.observe.site(&site.config.name))
    }

    /// The counters a request to `site` is recorded in: a route's own (a
    /// servlet's, kept with it; one whose servlet was refused or failed to
    /// build, looked up: such requests are 500s, not the hot path); the
    /// site's for static files.
    fn counters_for<'s>(
        &self,
        site: &'s Site,
        hit: Option<&'s Route>,
    ) -> Cow<'s, Arc<RouteCounters>> {
        match hit.map(|route| (route, &route.target)) {
            Some((route, Target::Servlet(s))) => {
                Cow::Borrowed(s.stats().requests.get_or_init(|| {
                    self.observe
                        .route(&site.config.name, &route.path.to_string())
                }))
            }
            Some((route, _)) => Cow::Owned(
                self.observe
                    .route(&site.config.name, &route.path.to_string()),
            ),
            None => Cow::Borrowed(&self.site_counters(site).requests),
        }
    }

    /// Answers one request from `peer`; the [`Exchange`] (when there is
    /// something left to record) goes with the response body and is
    /// finished when the body is sent. `servlet_mark` is set if the
    /// request goes to a servlet.
    pub async fn handle(
        &self,
        req: Request<RequestBody>,
        peer: Peer,
        servlet_mark: &ServletMark,
    ) -> (Response<Body>, Option<Exchange>) {
        let started = Instant::now();
        let id = RequestId::next();
        let span = tracing::debug_span!(
            "request",
            id = %id,
            method = %req.method(),
            path = %req.uri().path(),
            site = Empty,
            route = Empty,
            status = Empty,
            ms = Empty,
        );
        let (client, https) = if self.server.proxy.trusted.is_empty() {
            (peer.client, peer.tls)
        } else {
            peer.forwarded(req.headers(), &self.server.proxy)
        };
        let log_head = self.observe.access_log.is_some().then(|| LogHead::of(&req));
        let is_head = req.method() == Method::HEAD;
        // HTTP/2: whether this is a HEAD (see `strip_h2_body`).
        let h2_head = (req.version() == http::Version::HTTP_2).then_some(is_head);
        let sites = self.sites.load();
        let site = sites.for_host(host_of(&req));
        let routing = Routing {
            hit: OnceLock::new(),
            servlet: servlet_mark,
        };
        let unanswered = Unanswered {
            app: self,
            site,
            hit: &routing.hit,
            head: log_head,
            client,
            id,
            started,
            answered: false,
        };
        let mut res = {
            // Pinned in place: the wrappers below hold a pointer to the
            // handling, not a copy of its state.
            // Only a plain listener redirects: a request that came over
            // TLS redirected to itself would loop, whatever a proxy says.
            let redirect = !https && !peer.tls && self.redirects_http();
            let scheme = (!redirect).then_some(https);
            let handling = self.route(site, req, client, scheme, id, &routing);
            tokio::pin!(handling);
            answer_or_500(handling.as_mut().instrument(span.clone()), id).await
        };
        let log_head = unanswered.answered();
        if let Some(head) = h2_head {
            strip_h2_body(&mut res, head);
        }
        let headers = res.headers_mut();
        headers.insert(header::SERVER, SERVER_NAME);
        if self.server.request_id_header {
            headers.insert(REQUEST_ID_HEADER, id.header_value());
        }
        if https
            && let Some(hsts) = self.server.tls.as_ref().and_then(|t| t.hsts.as_deref())
            && let Ok(v) = HeaderValue::from_str(hsts)
        {
            headers.insert(header::STRICT_TRANSPORT_SECURITY, v);
        }
        let status = res.status().as_u16();
        let size = http_body::Body::size_hint(res.body()).exact();
        let elapsed = started.elapsed();
        let hit = routing.hit.get().copied();
        let counters = self.counters_for(site, hit);
        if hit.is_none() {
            let sc = self.site_counters(site);
            if res.body().is_streamed() {
                sc.streamed.add(1);
            } else if (200..400).contains(&status) {
                sc.cache_hits.add(1);
            }
        }
        // Bytes are those sent, as in the access log: none for a HEAD
        // (its Content-Length is the GET's) or a 1xx, 204 or 304 (hyper
        // drops their bodies); counted when the body ends for one that
        // may not go whole (streamed, a file the connection sends, larger
        // than one piece; any over HTTP/2, whose stream hyper reads only
        // as the client's window allows), since its client can leave
        // part-way; at once for the rest (small HTTP/1 bodies from
        // memory, sent whole with their head), which spares them a clone
        // of the counters.
        let no_body = is_head || crate::body::status_has_no_body(res.status());
        let whole_now = size
            .filter(|&n| n <= WHOLE_BODY_BYTES && !res.body().is_streamed() && h2_head.is_none());
        let count_at_end = (!no_body && whole_now.is_none()).then(|| Arc::clone(&counters));
        let counted_now = if no_body { 0 } else { whole_now.unwrap_or(0) };
        counters.record(status, counted_now, elapsed);
        if !span.is_disabled() {
            span.record("site", site.config.name.as_str());
            span.record("status", status);
            span.record("ms", elapsed.as_secs_f64() * 1000.0);
            span.in_scope(|| tracing::debug!("answered"));
        }
        let log = log_head.map(|head| {
            let route = exchange::route_name(&counters, hit);
            head.entry(client, status, elapsed, site, route, id)
        });
        let exchange = (count_at_end.is_some() || log.is_some()).then_some(Exchange {
            started,
            count_at_end,
            log,
        });
        (res, exchange)
    }

    /// The site's answer; `routing` learns where it went.
    /// `https`: the client's scheme (as trusted proxies say); `None` when
    /// the request is to be redirected to HTTPS instead.
    async fn route<'s>(
        &self,
        site: &'s Site,
        req: Request<RequestBody>,
        client: SocketAddr,
        https: Option<bool>,
        id: RequestId,
        routing: &Routing<'s, '_>,
    ) -> Response<Body> {
        tracing::Span::current().record("site", site.config.name.as_str());
        let head = req.method() == Method::HEAD;
        let Some(https) = https else {
            // The Host goes into the Location: checked as for any request,
            // and a request without one cannot be redirected.
            let redirect = checks::host(&req).and_then(|()| {
                self.redirect_to_https(&req)
                    .ok_or(RequestError::BadRequest("no usable Host to redirect to"))
            });
            return redirect.unwrap_or_else(|e| error_response(e, site, head, id));
        };
        match self.dispatch(site, req, client, https, id, routing).await {
            Ok(res) => res,
            Err(e) => {
                if let Some(Route {
                    target: Target::Servlet(s),
                    ..
                }) = routing.hit.get().copied()
                {
                    s.stats().failed(&e, id);
                }
                error_response(e, site, head, id)
            }
        }
    }

    /// Whether plain-HTTP requests are redirected to a TLS listener.
    fn redirects_http(&self) -> bool {
        self.server.tls.as_ref().is_some_and(|t| t.redirect_http)
            && self.server.listen.iter().any(|l| l.tls)
    }

    /// With `redirect_http`, a plain-HTTP request's answer: 308 to the same
    /// URL on the first TLS listener; `None` without a usable Host.
    fn redirect_to_https(&self, req: &Request<RequestBody>) -> Option<Response<Body>> {
        let port = self.server.listen.iter().find(|l| l.tls)?.addr.port();
        let host = host_of(req).and_then(|h| std::str::from_utf8(h).ok())?;
        let authority = http::uri::Authority::try_from(host).ok()?;
        let name = authority.host();
        if name.is_empty() || (name.contains(':') && !name.starts_with('[')) {
            return None;
        }
        // `OPTIONS *` has no path: the site's root stands in.
        let target = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .filter(|t| t.starts_with('/'))
            .unwrap_or("/");
        // A URI is ASCII: raw bytes past it (which hyper lets into the
        // target) go percent-encoded, as a browser would send them.
        let target = ascii_target(target);
        let location = if port == 443 {
            format!("https://{name}{target}")
        } else {
            format!("https://{name}:{port}{target}")
        };
        let value = HeaderValue::from_str(&location).ok()?;
        let mut res = Response::new(Body::empty());
        *res.status_mut() = http::StatusCode::PERMANENT_REDIRECT;
        res.headers_mut().insert(header::LOCATION, value);
        Some(res)
    }

    async fn dispatch<'s>(
        &self,
        site: &'s Site,
        req: Request<RequestBody>,
        remote: SocketAddr,
        https: bool,
        id: RequestId,
        routing: &Routing<'s, '_>,
    ) -> Result<Response<Body>, RequestError> {
        checks::host(&req)?;
        checks::framing(req.headers())?;
        if req.version() == http::Version::HTTP_2 {
            checks::h2_field_values(req.headers())?;
        }
        // `OPTIONS *` asks about the server, not a resource: a no-op, a
        // proxy's ping (RFC 9110 §9.3.7). Any other `*` is no path.
        // (HTTP/2 carries a scheme and authority beside the `*` path.)
        if req.method() == Method::OPTIONS && req.uri().path() == "*" {
            return Ok(Response::new(Body::empty()));
        }
        let normalized = match path::normalize(req.uri().path()) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Err(RequestError::NotFound),
            Err(_) => return Err(RequestError::BadRequest("malformed path")),
        };
        let routes = &site.servlets.routes;
        let found = if routes.is_empty() {
            None
        } else {
            routes.find(&normalized)
        };
        // Routed before the body's size is checked: a refusal is the
        // route's, in the log and the metrics.
        if let Some(m) = &found {
            tracing::Span::current().record("route", tracing::field::display(&m.route.path));
            let _ = routing.hit.set(m.route);
        }
        if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
            match len.to_str().ok().and_then(|s| s.parse::<u64>().ok()) {
                Some(n) if n > self.server.max_body_bytes => {
                    return Err(RequestError::PayloadTooLarge);
                }
                Some(_) => {}
                None => return Err(RequestError::BadRequest("malformed Content-Length")),
            }
        }
        if let Some(m) = found {
            return match &m.route.target {
                Target::Servlet(servlet) => {
                    // The request moves into the servlet: keep the path.
                    let info_at = normalized.len() - m.path_info.len();
                    let path = normalized.into_owned();
                    let ctx = CallContext {
                        path: &path,
                        path_info: &path[info_at..],
                        remote,
                        https,
                        id,
                        body: BodyPolicy {
                            max_bytes: self.server.max_body_bytes,
                            timeout: self.server.body_timeout,
                            min_rate: self.server.body_min_rate,
                        },
                    };
                    // The connection now watches for a client that leaves.
                    routing.servlet.set();
                    // Boxed: a guest call's state is kilobytes, and the
                    // static path should not carry (and move) it.
                    Box::pin(servlet.call(req, ctx)).await
                }
                Target::Refused(name) => {
                    tracing::warn!(servlet = %name, request_id = %id, "the route's servlet was refused at load");
                    Err(RequestError::fault("refused at load"))
                }
                Target::BuildFailed(e) => Err(RequestError::BuildFailed {
                    servlet: e.name.clone(),
                    output: Arc::from(e.output.as_str()),
                }),
            };
        }
        static_files::respond(&site.cache, &req, &normalized).await
    }
}

/// Where a request went, as its handling learns it.
struct Routing<'s, 'm> {
    /// The route it was routed to, once it was: its counters and log line
    /// (and a 499's) are that route's.
    hit: OnceLock<&'s Route>,
    /// The connection's mark, set when a servlet takes the request.
    servlet: &'m ServletMark,
}

/// Runs a request's handling; a panic in it ends that request with a 500,
/// logged with its id, and the connection and the server carry on.
async fn answer_or_500(
    handling: impl std::future::Future<Output = Response<Body>>,
    id: RequestId,
) -> Response<Body> {
    match AssertUnwindSafe(handling).catch_unwind().await {
        Ok(res) => res,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            tracing::error!(request_id = %id, panic = what, "request handling panicked; answered 500");
            RequestError::Internal.into_response()
        }
    }
}

/// The one mapping from a failed request to its response: the error's own
/// page, or the site's `404.html` for a missing path.
fn error_response(e: RequestError, site: &Site, head: bool, id: RequestId) -> Response<Body> {
    tracing::trace!(request_id = %id, error = %e, "request failed");
    if matches!(e, RequestError::NotFound)
        && let Some(page) = static_files::not_found_page(&site.cache, head)
    {
        return page;
    }
    let mut res = e.into_response();
    if head {
        // A HEAD answer carries the length a GET would have had (RFC 9110
        // §9.3.2), as the static files' heads do.
        if let Some(len) = http_body::Body::size_hint(res.body()).exact() {
            res.headers_mut()
                .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        }
        *res.body_mut() = Body::empty();
    }
    res
}

/// `target` with every byte past ASCII percent-encoded (`%C3%A9`); the
/// rest, `%` escapes included, as it was.
fn ascii_target(target: &str) -> std::borrow::Cow<'_, str> {
    if target.is_ascii() {
        return std::borrow::Cow::Borrowed(target);
    }
    let mut out = String::with_capacity(target.len() + 16);
    for b in target.bytes() {
        if b.is_ascii() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_while_handling_a_request_becomes_a_500_for_that_request_only() {
        let id = RequestId::next();
        let res = answer_or_500(
            async {
                if id != RequestId::next() {
                    panic!("a bug reachable from one request");
                }
                Response::new(Body::empty())
            },
            id,
        )
        .await;
        assert_eq!(res.status(), 500);
        let res = answer_or_500(async { Response::new(Body::from("fine")) }, id).await;
        assert_eq!(res.status(), 200);
    }
}
