//! The request entry point: pick the site, check limits, dispatch to a
//! servlet route or to the static files.

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;

use crate::body::Body;
use crate::config::{Config, ServerConfig};
use crate::engine::{Engine, EngineError};
use crate::respond;
use crate::servlet::Servlet;
use crate::site::Sites;
use crate::static_files::{self, path};

/// Sent as `Server` on every response.
pub const SERVER_NAME: HeaderValue = HeaderValue::from_static("swan");

/// Everything a request needs, shared by all workers.
#[derive(Debug)]
pub struct App {
    /// Process-wide limits.
    pub server: ServerConfig,
    /// The sites; swapped whole on reload, read without a lock.
    pub sites: ArcSwap<Sites>,
    /// The wasm engine, when some site can have servlets.
    pub engine: Option<Arc<Engine>>,
}

/// The app could not be built.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// The wasm engine could not start.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// A site could not be loaded.
    #[error(transparent)]
    Site(#[from] static_files::LoadError),
}

impl App {
    /// Loads everything a configuration names: the engine (if any site has
    /// servlets), every site's files and servlets.
    pub fn load(config: &Config) -> Result<App, AppError> {
        let wants_engine = config
            .sites
            .iter()
            .any(|s| s.servlets.is_some() || !s.routes.is_empty());
        let engine = if wants_engine {
            Some(Engine::new(&config.server)?)
        } else {
            None
        };
        let sites = Sites::load(config, engine.as_ref())?;
        Ok(App::new(config.server.clone(), sites, engine))
    }

    /// An app serving already loaded `sites`.
    pub fn new(server: ServerConfig, sites: Sites, engine: Option<Arc<Engine>>) -> App {
        App {
            server,
            sites: ArcSwap::from_pointee(sites),
            engine,
        }
    }

    /// Answers one request.
    pub async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
        remote: SocketAddr,
    ) -> Response<Body> {
        let mut res = self.route(req, remote).await;
        res.headers_mut().insert(header::SERVER, SERVER_NAME);
        res
    }

    async fn route(&self, req: Request<Incoming>, remote: SocketAddr) -> Response<Body> {
        let declared_len = match req.headers().get(header::CONTENT_LENGTH) {
            Some(len) => match len.to_str().ok().and_then(|s| s.parse::<u64>().ok()) {
                Some(n) if n > self.server.max_body_bytes => return respond::payload_too_large(),
                Some(n) => Some(n),
                None => return respond::bad_request(),
            },
            None => None,
        };
        let sites = self.sites.load();
        let host = req
            .uri()
            .authority()
            .map(|a| a.as_str().as_bytes())
            .or_else(|| req.headers().get(header::HOST).map(|h| h.as_bytes()));
        let site = sites.for_host(host);
        if !site.routes.is_empty()
            && let Ok(normalized) = path::normalize(req.uri().path())
        {
            if let Some(failed) = site.routes.build_error(&normalized) {
                return respond::build_failed(failed);
            }
            if let Some((servlet, path_info)) = site.routes.find(&normalized) {
                let (servlet, path, path_info) = (
                    servlet.clone(),
                    normalized.to_string(),
                    path_info.to_owned(),
                );
                return self
                    .call_servlet(&servlet, req, declared_len, &path, &path_info, remote)
                    .await;
            }
        }
        static_files::respond(&site.cache, &req).await
    }

    async fn call_servlet(
        &self,
        servlet: &Arc<Servlet>,
        req: Request<Incoming>,
        declared_len: Option<u64>,
        path: &str,
        path_info: &str,
        remote: SocketAddr,
    ) -> Response<Body> {
        let limit = servlet
            .info()
            .limits
            .max_body_bytes
            .min(self.server.max_body_bytes);
        if declared_len.is_some_and(|n| n > limit) {
            return respond::payload_too_large();
        }
        let (parts, body) = req.into_parts();
        let body = if declared_len == Some(0) {
            Bytes::new()
        } else {
            let read = Limited::new(body, limit as usize).collect();
            match tokio::time::timeout(self.server.header_read_timeout, read).await {
                Ok(Ok(collected)) => collected.to_bytes(),
                Ok(Err(e))
                    if e.downcast_ref::<http_body_util::LengthLimitError>()
                        .is_some() =>
                {
                    return respond::payload_too_large();
                }
                Ok(Err(_)) => return respond::bad_request(),
                Err(_) => return respond::request_timeout(),
            }
        };
        match servlet.call(parts, body, path, path_info, remote).await {
            Ok(res) => res,
            Err(e) => respond::servlet_error(&e),
        }
    }
}
