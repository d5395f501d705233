//! The request entry point: pick the site, check limits, dispatch.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use http::header::{self, HeaderValue};
use http::{Request, Response};
use hyper::body::Incoming;

use crate::body::Body;
use crate::config::ServerConfig;
use crate::respond;
use crate::site::Sites;
use crate::static_files;

/// Sent as `Server` on every response.
pub const SERVER_NAME: HeaderValue = HeaderValue::from_static("swan");

/// Everything a request needs, shared by all workers.
#[derive(Debug)]
pub struct App {
    /// Process-wide limits.
    pub server: ServerConfig,
    /// The sites; swapped whole on reload, read without a lock.
    pub sites: ArcSwap<Sites>,
}

impl App {
    /// An app serving `sites` under `server` limits.
    pub fn new(server: ServerConfig, sites: Sites) -> App {
        App {
            server,
            sites: ArcSwap::from_pointee(sites),
        }
    }

    /// Answers one request.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        _remote: SocketAddr,
    ) -> Response<Body> {
        let mut res = self.route(req).await;
        res.headers_mut().insert(header::SERVER, SERVER_NAME);
        res
    }

    async fn route(&self, req: Request<Incoming>) -> Response<Body> {
        if let Some(len) = req.headers().get(header::CONTENT_LENGTH) {
            match len.to_str().ok().and_then(|s| s.parse::<u64>().ok()) {
                Some(n) if n > self.server.max_body_bytes => return respond::payload_too_large(),
                Some(_) => {}
                None => return respond::bad_request(),
            }
        }
        let sites = self.sites.load();
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().as_bytes())
            .or_else(|| req.headers().get(header::HOST).map(|h| h.as_bytes()));
        let site = sites.for_host(host);
        static_files::respond(&site.cache, &req).await
    }
}
