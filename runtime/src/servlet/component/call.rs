//! One request's call into a guest: the request made into its resources,
//! where its answer will come from, per world, and the guard that stops
//! the guest when nobody waits for that answer any more.

use http::Response;
use tokio::sync::oneshot;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use super::body::Head;
use super::failure::p2_code;
#[cfg(feature = "p3")]
use super::p3_serve;

/// The task running a guest that was still running after its first poll;
/// empty when it finished within it, on the request's own task.
#[derive(Clone)]
pub(crate) struct GuestTask(pub(crate) Option<tokio::task::AbortHandle>);

impl GuestTask {
    /// Stops the guest, if it still runs.
    pub(crate) fn abort(&self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// Stops the guest's task when dropped, unless disarmed.
pub(super) struct AbortOnDrop(pub(super) Option<GuestTask>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// A request made into a guest's resources, per world.
pub(super) enum Call {
    P2(
        wasmtime::component::Resource<wasmtime_wasi_http::p2::types::HostIncomingRequest>,
        wasmtime::component::Resource<wasmtime_wasi_http::p2::types::HostResponseOutparam>,
    ),
    #[cfg(feature = "p3")]
    P3(p3_serve::Prepared, oneshot::Sender<Head>),
}

/// Where the guest's answer will come from, per world.
pub(super) enum HeadRx {
    P2(oneshot::Receiver<Result<Response<HyperOutgoingBody>, ErrorCode>>),
    #[cfg(feature = "p3")]
    P3(oneshot::Receiver<Head>),
}

impl HeadRx {
    /// The guest's answer, when it comes; an error if it never will.
    pub(super) async fn recv(self) -> Result<Head, oneshot::error::RecvError> {
        match self {
            HeadRx::P2(rx) => rx
                .await
                .map(|r| r.map(|res| (res, None)).map_err(|c| p2_code(&c))),
            #[cfg(feature = "p3")]
            HeadRx::P3(rx) => rx.await,
        }
    }
}
