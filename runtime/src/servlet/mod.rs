//! Wasm servlets: which path runs which guest, loading guests, and running
//! a request in a sandboxed instance.
//!
//! - `route`: the route table, pure (`find`, `add`);
//! - `loader`: a site's servlets from its configuration and folders, in
//!   three steps: plan, decide what to reuse, compile;
//! - `source`: source folders built into modules (development mode);
//! - `pool`: a servlet's instances: ready queue, refill, reuse,
//!   concurrency and queue limits;
//! - `guest`: what "a guest that answers a request" is, whatever its kind;
//! - `native`: guests speaking swan's native ABI (`guest-sdk/ABI.md`).
//!
//! Every request runs in a fresh instance unless the servlet opts into
//! `reuse = N`. Instances are created ahead of time, so the request path
//! usually only takes one from a lock-free queue.

mod guest;
mod info;
mod loader;
mod native;
mod output;
mod plan;
mod pool;
mod route;
mod source;

use std::sync::Arc;

use http::{Request, Response};
use http_body::Body as HttpBody;

pub use info::{CallContext, ServletInfo};
pub use loader::{Loader, LoaderError, Refused, SiteServlets};
pub use native::{ABI_VERSION, LoadError};
pub use route::{Route, RouteMatch, RouteOrigin, RouteTable, Target};
pub use source::BuildError;

use crate::body::Body;
use crate::engine::Tier;
use crate::request::RequestError;
use pool::InstancePool;

/// A loaded servlet: its compiled code and its pool of instances.
pub struct Servlet {
    info: Arc<ServletInfo>,
    tier: Tier,
    pool: Arc<InstancePool<native::NativeGuest>>,
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

    /// Instances ready to serve right now.
    pub fn ready_instances(&self) -> usize {
        self.pool.ready()
    }

    /// Runs one request.
    pub async fn call<B>(
        &self,
        req: Request<B>,
        ctx: CallContext<'_>,
    ) -> Result<Response<Body>, RequestError>
    where
        B: HttpBody<Data = bytes::Bytes> + Send + Unpin,
    {
        let policy = ctx.body.at_most(self.info.limits.max_body_bytes);
        let input = native::read_request(req, policy).await?;
        self.pool.call(input, &ctx).await
    }
}
