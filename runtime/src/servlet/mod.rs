//! Wasm servlets: which path runs which guest, loading guests, and running
//! a request in a sandboxed instance.
//!
//! - `route`: the route table, pure (`find`, `add`);
//! - `loader`: a site's servlets from its configuration and folders, in
//!   three steps: plan, decide what to reuse, compile;
//! - `changes`: what a reload changed (routes added, replaced, removed);
//! - `source`: source folders built into modules (development mode);
//! - `pool`: a servlet's instances: ready queue, refill, reuse,
//!   concurrency and queue limits;
//! - `guest`: what "a guest that answers a request" is, whatever its kind;
//! - `native`: guests speaking swan's native ABI (`guest-sdk/ABI.md`);
//! - `component`: standard `wasi:http/proxy` components;
//! - `outbound`: what a servlet may reach over HTTP (`public_address`:
//!   which addresses are public);
//! - `output`: guest stdout and stderr, per request, to the log;
//! - `stats`: what a servlet has done (instances, traps, timeouts, errors).
//!
//! Every request runs in a fresh instance unless the servlet opts into
//! `reuse = N`. Instances are created ahead of time, so the request path
//! usually only takes one from a lock-free queue.

mod changes;
mod component;
mod deadline;
mod fault;
mod guest;
mod info;
mod loader;
mod native;
mod outbound;
mod output;
mod plan;
mod pool;
mod progress;
mod public_address;
mod refused;
mod route;
mod source;
pub mod stats;

use std::sync::Arc;

use http::{Request, Response};
use http_body::Body as HttpBody;

pub use changes::{Change, ChangeKind, log_changes};
pub use info::{CallContext, ServletInfo};
pub use loader::{Loader, LoaderError, Refused, SiteServlets};
pub use native::{ABI_VERSION, LoadError};
pub use route::{Route, RouteMatch, RouteOrigin, RouteTable, Target};
pub use source::{BUILD_FOLDER, BuildError};

use crate::body::Body;
use crate::engine::Tier;
use crate::request::RequestError;
use pool::InstancePool;

/// A loaded servlet: its compiled code and its pool of instances.
pub struct Servlet {
    info: Arc<ServletInfo>,
    tier: Tier,
    pool: Pool,
    stats: Arc<stats::ServletStats>,
    /// The file's stamp when its bytes were read (none if it changed
    /// while they were): a recompile of a file since changed is not the
    /// same servlet.
    stamp: Option<crate::file_stamp::FileStamp>,
    /// How long compiling and checking it took.
    compiled_in: std::time::Duration,
}

/// A servlet's instances, by kind of guest.
enum Pool {
    Native(Arc<InstancePool<native::NativeGuest>>),
    Component(Arc<InstancePool<component::ComponentGuest>>),
}

/// What kind of guest a servlet is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServletKind {
    /// A core module speaking the native ABI (version 1).
    Native,
    /// A `wasi:http/proxy` 0.2 (or `wasi:http/service` 0.3) component; its
    /// exports.
    Component {
        /// The component's exports (`wasi:http/incoming-handler@0.2.x`, ...).
        exports: Vec<String>,
    },
}

impl std::fmt::Display for ServletKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServletKind::Native => write!(f, "native ABI {ABI_VERSION}"),
            ServletKind::Component { exports } => {
                if let Some(handler) = exports
                    .iter()
                    .find(|e| e.starts_with("wasi:http/handler@0.3"))
                {
                    return write!(f, "component (wasi:http/service, p3: {handler})");
                }
                let world = exports
                    .iter()
                    .find(|e| e.starts_with("wasi:http/incoming-handler"))
                    .map_or("wasi:http/proxy", |e| e.as_str());
                write!(f, "component ({world})")
            }
        }
    }
}

impl std::fmt::Debug for Servlet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Servlet")
            .field("info", &self.info)
            .field("tier", &self.tier)
            .finish_non_exhaustive()
    }
}

impl Servlet {
    /// What this servlet is.
    pub fn info(&self) -> &ServletInfo {
        &self.info
    }

    /// The compiler that made this servlet's code.
    pub fn tier(&self) -> Tier {
        self.tier
    }

    /// How long compiling and checking this servlet's code took: the
    /// compile time shown is that of the code serving, whatever version
    /// or tier counted into its stats before.
    pub fn compile_time(&self) -> std::time::Duration {
        self.compiled_in
    }

    /// Whether `other` was compiled from the very bytes this was: the
    /// file unchanged between the two reads.
    pub fn same_file_as(&self, other: &Servlet) -> bool {
        self.stamp.is_some() && self.stamp == other.stamp
    }

    /// Instances ready to serve right now.
    pub fn ready_instances(&self) -> usize {
        match &self.pool {
            Pool::Native(p) => p.ready(),
            Pool::Component(p) => p.ready(),
        }
    }

    /// Requests running right now.
    pub fn in_use(&self) -> usize {
        match &self.pool {
            Pool::Native(p) => p.in_use(),
            Pool::Component(p) => p.in_use(),
        }
    }

    /// What this servlet has done since it was loaded.
    pub fn stats(&self) -> &stats::ServletStats {
        &self.stats
    }

    /// What kind of guest this is.
    pub fn kind(&self) -> ServletKind {
        match &self.pool {
            Pool::Native(_) => ServletKind::Native,
            Pool::Component(p) => ServletKind::Component {
                exports: p.guest().exports.clone(),
            },
        }
    }

    /// Runs one request.
    pub async fn call<B>(
        &self,
        req: Request<B>,
        ctx: CallContext<'_>,
    ) -> Result<Response<Body>, RequestError>
    where
        B: HttpBody<Data = bytes::Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display,
    {
        let policy = ctx.body.at_most(self.info.limits.max_body_bytes);
        let (mut parts, body) = req.into_parts();
        remove_hop_by_hop(&mut parts.headers);
        // Either kind of guest always sees a Host: the client's, else the
        // target's authority (HTTP/2's `:authority`, an HTTP/1.0
        // absolute-form target), else the server's name (a Host-less
        // HTTP/1.0 request), as RFC 9113 §8.3.1 asks of a conversion.
        if !parts.headers.contains_key(http::header::HOST) {
            let host = parts
                .uri
                .authority()
                .and_then(|a| http::HeaderValue::from_str(a.as_str()).ok())
                .unwrap_or(http::HeaderValue::from_static("localhost"));
            parts.headers.insert(http::header::HOST, host);
        }
        // In place of any the client sent: the client's address and
        // scheme as swan found them (the connection, or per a trusted
        // proxy) and the request's id, for a component, which cannot learn
        // them otherwise, and for a native servlet reading headers (ABI
        // parts 6 and 7 say the same), which would otherwise believe a
        // client's own.
        if let Ok(client) = http::HeaderValue::from_str(&ctx.remote.ip().to_string()) {
            parts
                .headers
                .insert(crate::request::peer::X_FORWARDED_FOR, client);
        }
        parts.headers.insert(
            crate::request::peer::X_FORWARDED_PROTO,
            http::HeaderValue::from_static(if ctx.https { "https" } else { "http" }),
        );
        parts
            .headers
            .insert(crate::request::id::REQUEST_ID_HEADER, ctx.id.header_value());
        let answer = match &self.pool {
            Pool::Native(pool) => {
                let req = Request::from_parts(parts, body);
                let input = native::read_request(req, policy).await?;
                pool.call(input, &ctx).await
            }
            Pool::Component(pool) => {
                if crate::request::body::declared_length(&parts.headers)
                    .is_some_and(|n| n > policy.max_bytes)
                {
                    return Err(RequestError::PayloadTooLarge);
                }
                // The guest sees the normalised path.
                let mut target = crate::request::path::encode(ctx.path);
                if let Some(q) = parts.uri.query() {
                    target.push('?');
                    target.push_str(q);
                }
                parts.uri = http::Uri::try_from(target)
                    .map_err(|_| RequestError::BadRequest("unusable path"))?;
                let verdict = Arc::new(component::BodyVerdict::default());
                let body = component::LimitedBody::new(body, policy, verdict.clone());
                let input = component::ComponentInput::new(
                    http::Request::from_parts(parts, body),
                    verdict,
                    ctx.https,
                );
                pool.call(input, &ctx).await
            }
        };
        answer.map(|mut res| {
            tidy_response(&mut res);
            res
        })
    }
}

/// What a guest's response may not carry: `TE`, hop-by-hop (RFC 9110
/// §10.1.4), and a `Content-Length` on a 204 (§8.6: over HTTP/2 it made
/// the client fail the stream).
fn tidy_response(res: &mut Response<Body>) {
    let no_content = res.status() == http::StatusCode::NO_CONTENT;
    // 205 has no content either (RFC 9110 §15.3.6): whatever the guest
    // wrote is dropped, and the response says its length is 0.
    if res.status() == http::StatusCode::RESET_CONTENT {
        *res.body_mut() = Body::empty();
        res.headers_mut().remove(http::header::CONTENT_LENGTH);
    }
    let headers = res.headers_mut();
    headers.remove(http::header::TE);
    if no_content {
        headers.remove(http::header::CONTENT_LENGTH);
    }
}

/// Removes the headers a request's `Connection` header names, and `TE`:
/// they are hop-by-hop (RFC 9110 §7.6.1, §10.1.4), for this connection
/// only, not for the guest. wasi:http removes the other standard
/// hop-by-hop headers itself.
fn remove_hop_by_hop(headers: &mut http::HeaderMap) {
    headers.remove(http::header::TE);
    let listed: Vec<http::HeaderName> = headers
        .get_all(http::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| http::HeaderName::from_bytes(name.trim().as_bytes()).ok())
        // Never the headers that say where the request goes and how long
        // its body is.
        .filter(|name| name != http::header::HOST && name != http::header::CONTENT_LENGTH)
        .collect();
    for name in listed {
        headers.remove(name);
    }
}
