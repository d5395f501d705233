//! What "a guest that answers a request" is, whatever its kind: something
//! that makes instances ahead of time and runs one request in one. The
//! instance pool, limits, routing and reload are shared by every kind;
//! each kind (`native`, and wasi:http components next) implements this.

use std::future::Future;

use http::Response;

use super::info::CallContext;
use crate::body::Body;
use crate::request::RequestError;

/// A kind of guest.
pub(crate) trait Guest: Send + Sync + Sized + 'static {
    /// One live instance, ready for a request.
    type Instance: Send + 'static;
    /// A request as this kind takes it (read before an instance is taken,
    /// so a slow client never holds one).
    type Input: Send;

    /// Makes a new instance, start functions and initialisers run, under
    /// the servlet's deadline.
    fn instantiate(&self) -> impl Future<Output = Result<Self::Instance, GuestError>> + Send;

    /// Runs one request in the lent instance, and gives the lease back
    /// ([`Lent::finish`]) when the request is over and went well; a
    /// dropped lease discards the instance.
    fn handle<L: Lent<Self::Instance>>(
        &self,
        lease: L,
        input: Self::Input,
        ctx: &CallContext<'_>,
    ) -> impl Future<Output = Result<Response<Body>, RequestError>> + Send;
}

/// An instance lent to one request (by the pool: `pool::Lease`). It may
/// outlive `handle`, held by a response body that is still streaming.
pub(crate) trait Lent<I>: Send + 'static {
    /// The instance; `None` only after it was given back.
    fn instance(&mut self) -> Option<&mut I>;
    /// The request is over and went well: the instance may serve again.
    fn finish(self);
}

/// Why an instance could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GuestError {
    /// The process-wide instance budget (`max_instances`) is used up: the
    /// server is busy, the guest is not broken.
    #[error("no free instance slot (server.max_instances)")]
    PoolFull,
    /// The guest trapped, timed out or failed while starting.
    #[error("{0:#}")]
    Failed(wasmtime::Error),
}
