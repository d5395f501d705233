//! The request layer: where a request from a connection becomes an answer.
//!
//! For each request: an id (logged with every line about it and sent back
//! as `x-request-id`) and a debug-level `request` span (method, path,
//! site, route, status, duration); the site by Host; the path normalised,
//! once; then the servlet route or the static files. Every failure on the
//! way is a [`RequestError`], turned into a response here and only here.

use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use futures_util::FutureExt;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response};
use hyper::body::Incoming;
use tracing::Instrument;
use tracing::field::Empty;

use crate::body::Body;
use crate::config::{Config, ServerConfig};
use crate::request::{BodyPolicy, RequestError, RequestId, path};
use crate::servlet::{CallContext, Loader, LoaderError, Target};
use crate::site::{Site, Sites};
use crate::static_files::{self, CacheError};
use crate::store::Stores;

/// Sent as `Server` on every response.
pub const SERVER_NAME: HeaderValue = HeaderValue::from_static("swan");
/// The response header carrying the request id.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// Everything a request needs, shared by all workers.
#[derive(Debug)]
pub struct App {
    /// Process-wide limits.
    pub server: ServerConfig,
    /// The sites; swapped whole on reload, read without a lock.
    pub sites: ArcSwap<Sites>,
    /// Loads servlets (the wasm engine), when some site can have them.
    pub loader: Option<Arc<Loader>>,
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
        let stores = if config.wants_servlets() {
            Stores::open(&config.stores, &config.stores_used())?
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
        Ok(App::new(config.server.clone(), sites, loader))
    }

    /// An app serving already loaded `sites`.
    pub fn new(server: ServerConfig, sites: Sites, loader: Option<Arc<Loader>>) -> App {
        App {
            server,
            sites: ArcSwap::from_pointee(sites),
            loader,
        }
    }

    /// Answers one request.
    pub async fn handle(&self, req: Request<Incoming>, remote: SocketAddr) -> Response<Body> {
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
        let started = (!span.is_disabled()).then(Instant::now);
        // Pinned in place: the wrappers below hold a pointer to the
        // handling, not a copy of its state.
        let handling = self.route(req, remote, id);
        tokio::pin!(handling);
        let mut res = answer_or_500(handling.as_mut().instrument(span.clone()), id).await;
        let headers = res.headers_mut();
        headers.insert(header::SERVER, SERVER_NAME);
        if self.server.request_id_header {
            headers.insert(REQUEST_ID_HEADER, id.header_value());
        }
        if let Some(started) = started {
            span.record("status", res.status().as_u16());
            span.record("ms", started.elapsed().as_secs_f64() * 1000.0);
            span.in_scope(|| tracing::debug!("answered"));
        }
        res
    }

    async fn route(
        &self,
        req: Request<Incoming>,
        remote: SocketAddr,
        id: RequestId,
    ) -> Response<Body> {
        let sites = self.sites.load();
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().as_bytes())
            .or_else(|| req.headers().get(header::HOST).map(|h| h.as_bytes()));
        let site = sites.for_host(host);
        tracing::Span::current().record("site", site.config.name.as_str());
        let head = req.method() == Method::HEAD;
        match self.dispatch(site, req, remote, id).await {
            Ok(res) => res,
            Err(e) => error_response(e, site, head, id),
        }
    }

    async fn dispatch(
        &self,
        site: &Site,
        req: Request<Incoming>,
        remote: SocketAddr,
        id: RequestId,
    ) -> Result<Response<Body>, RequestError> {
        check_host(&req)?;
        if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
            match len.to_str().ok().and_then(|s| s.parse::<u64>().ok()) {
                Some(n) if n > self.server.max_body_bytes => {
                    return Err(RequestError::PayloadTooLarge);
                }
                Some(_) => {}
                None => return Err(RequestError::BadRequest("malformed Content-Length")),
            }
        }
        let normalized = match path::normalize(req.uri().path()) {
            Ok(p) => p,
            Err(e) if e.is_not_found() => return Err(RequestError::NotFound),
            Err(_) => return Err(RequestError::BadRequest("malformed path")),
        };
        let routes = &site.servlets.routes;
        if !routes.is_empty()
            && let Some(m) = routes.find(&normalized)
        {
            tracing::Span::current().record("route", tracing::field::display(&m.route.path));
            return match &m.route.target {
                Target::Servlet(servlet) => {
                    // The request moves into the servlet: keep the path.
                    let info_at = normalized.len() - m.path_info.len();
                    let path = normalized.into_owned();
                    let ctx = CallContext {
                        path: &path,
                        path_info: &path[info_at..],
                        remote,
                        id,
                        body: BodyPolicy {
                            max_bytes: self.server.max_body_bytes,
                            timeout: self.server.body_timeout,
                            min_rate: self.server.body_min_rate,
                        },
                    };
                    // Boxed: a guest call's state is kilobytes, and the
                    // static path should not carry (and move) it.
                    Box::pin(servlet.call(req, ctx)).await
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

/// RFC 9112 §3.2: an HTTP/1.1 request needs exactly one Host, and no
/// request may carry several or a malformed one. A Host that disagrees
/// with an absolute-form target (or HTTP/2's `:authority`) is refused
/// too: two names for one request is how caches get poisoned.
fn check_host<B>(req: &Request<B>) -> Result<(), RequestError> {
    let mut values = req.headers().get_all(header::HOST).iter();
    let host = values.next();
    if values.next().is_some() {
        return Err(RequestError::BadRequest("more than one Host header"));
    }
    let Some(host) = host else {
        return if req.version() == http::Version::HTTP_11 {
            Err(RequestError::BadRequest("HTTP/1.1 request without Host"))
        } else {
            Ok(())
        };
    };
    let value = host.as_bytes();
    if !value.iter().all(|&b| is_authority_byte(b)) {
        return Err(RequestError::BadRequest("malformed Host"));
    }
    if let Some(authority) = req.uri().authority() {
        let (name, port) = split_port(value);
        let same_name = name.eq_ignore_ascii_case(authority.host().as_bytes());
        let same_port = match (port, authority.port_u16()) {
            (Some(p), Some(q)) => p == q.to_string().as_bytes(),
            _ => true,
        };
        if !same_name || !same_port {
            return Err(RequestError::BadRequest(
                "Host disagrees with the request target",
            ));
        }
    }
    Ok(())
}

/// Bytes an RFC 3986 authority (host and port, no userinfo) may hold.
fn is_authority_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'%'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'['
                | b']'
        )
}

/// `name:port` → (`name`, `port`); IPv6 literals keep their brackets.
fn split_port(host: &[u8]) -> (&[u8], Option<&[u8]>) {
    let after_literal = host.iter().position(|&b| b == b']').map_or(0, |i| i + 1);
    match host[after_literal..].iter().position(|&b| b == b':') {
        Some(i) => (
            &host[..after_literal + i],
            Some(&host[after_literal + i + 1..]),
        ),
        None => (host, None),
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
        *res.body_mut() = Body::empty();
    }
    res
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

    #[test]
    fn host_ports_split_after_ipv6_literals() {
        assert_eq!(
            split_port(b"a.example:80"),
            (&b"a.example"[..], Some(&b"80"[..]))
        );
        assert_eq!(split_port(b"a.example"), (&b"a.example"[..], None));
        assert_eq!(
            split_port(b"[::1]:8080"),
            (&b"[::1]"[..], Some(&b"8080"[..]))
        );
        assert_eq!(split_port(b"[::1]"), (&b"[::1]"[..], None));
    }
}
