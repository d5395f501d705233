//! What "a guest that answers a request" is, whatever its kind: something
//! that makes instances ahead of time and runs one request in one. The
//! instance pool, limits, routing and reload are shared by every kind;
//! each kind (`native`, and wasi:http components next) implements this.

use std::future::Future;

use http::Response;

use super::info::CallContext;
use crate::body::Body;
use crate::request::RequestError;

/// The most a guest's response headers may weigh, whatever its kind: the
/// host holds them outside the guest's `max_memory`.
pub(crate) const HEADER_SET_LIMIT: usize = 64 << 10;

/// The most bytes one WASI random call (`random_get`, `get-random-bytes`)
/// may ask for; past it the guest traps. The host fills the buffer on the
/// worker thread without yielding (7 to 13 ms a MiB): under wasmtime's
/// own cap, 64 MiB, one 32 MiB call stalled the worker's other
/// connections for 407 ms; keys
/// and seeds are bytes, and a guest wanting more calls again.
pub(crate) const MAX_RANDOM_BYTES: u64 = 1 << 20;

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
    /// The servlet's counters, for a failure seen after `handle` returned.
    fn stats(&self) -> std::sync::Arc<super::stats::ServletStats>;
}

/// Why an instance could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GuestError {
    /// The process-wide instance budget (`max_instances`) is used up: the
    /// server is busy, the guest is not broken.
    #[error("no free instance slot (server.max_instances)")]
    PoolFull,
    /// A load's trial instance found no free slot for all of
    /// [`TRIAL_WAIT`]: requests in flight held every one. Loading again
    /// later may succeed.
    #[error(
        "no free instance slot for {} s to try it in: raise server.max_instances (requests in flight hold every slot)",
        TRIAL_WAIT.as_secs()
    )]
    NoSlotToTry,
    /// The guest trapped, ran out of time or failed while starting.
    #[error("{}", super::fault::fault_line(.0))]
    Failed(wasmtime::Error),
    /// Starting (start functions, `_initialize`, a component's own start)
    /// waited in a host call past the servlet's `timeout` and its grace.
    #[error(
        "starting did not finish within the servlet's timeout ({} ms) and {} ms more for a host call",
        .0.as_millis(),
        super::deadline::HOST_CALL_GRACE.as_millis()
    )]
    TimedOut(std::time::Duration),
}

/// How long a servlet's trial instance at load waits for a free instance
/// slot: a busy server is not a broken servlet.
const TRIAL_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Makes the trial instance a load checks the servlet with. When
/// `max_instances` is used up, another servlet's idle instance gives way
/// (`engine`); when requests in flight hold every slot, it waits (up to
/// [`TRIAL_WAIT`]) instead of refusing a working servlet for it.
pub(crate) async fn trial_instance<G: Guest>(
    engine: &crate::engine::Engine,
    guest: &G,
) -> Result<G::Instance, GuestError> {
    let deadline = tokio::time::Instant::now() + TRIAL_WAIT;
    loop {
        match guest.instantiate().await {
            Err(GuestError::PoolFull) if tokio::time::Instant::now() < deadline => {
                // Another servlet's idle instance gives way; failing that
                // (or if a refill took the place meanwhile), wait a little.
                if !engine.release_idle(std::ptr::null::<()>()) {
                    tokio::time::sleep(std::time::Duration::from_millis(25)).await;
                } else {
                    tokio::task::yield_now().await;
                }
            }
            Err(GuestError::PoolFull) => return Err(GuestError::NoSlotToTry),
            made => return made,
        }
    }
}

/// `starting` (instantiation, start functions, `_initialize`, the load's
/// version probe) held to the wall clock: `timeout` and the host-call
/// grace, as a request is, since a guest waiting in a host call is out of
/// the epochs' reach.
pub(crate) async fn started_within<T>(
    timeout: std::time::Duration,
    starting: impl Future<Output = Result<T, GuestError>>,
) -> Result<T, GuestError> {
    tokio::time::timeout(timeout + super::deadline::HOST_CALL_GRACE, starting)
        .await
        .map_err(|_| GuestError::TimedOut(timeout))?
}
