//! One request's call into a guest: the request made into its resources,
//! where its answer will come from, per world, and the guard that stops
//! the guest when nobody waits for that answer any more.

use http::Response;
use tokio::sync::oneshot;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use super::body::{GuestTask, Head};
use super::failure::p2_code;
#[cfg(feature = "p3")]
use super::p3_serve;

/// Stops the guest's task when dropped, unless disarmed.
pub(super) struct AbortOnDrop(pub(super) GuestTask);

impl AbortOnDrop {
    /// The guest goes on after this guard: a response body took it over.
    pub(super) fn disarm(&mut self) {
        self.0.0 = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts a guest's run: its first poll here, on the request's own task
/// (`inline`), and the rest, if any, in a task of its own (returned).
///
/// Most guests answer within their first poll: a hello sets its response,
/// writes its body into the response channel and returns. Run here, that
/// takes no trip through the worker's queue of tasks, during which the
/// request would hold its `max_concurrency` place while other requests
/// waited for one (at 1,000 connections, the wake-ups of requests queued
/// that way were an eventfd write for 35-44% of requests; BENCHMARKS.md,
/// stop 42). A guest that waits (for the request body, an
/// upstream, a full response channel, a timer) goes on in its own task:
/// its response body streams after `handle` returns, while the task keeps
/// the instance. That task starts with a turn of the worker's queue: a
/// guest that was yielding (one past its first epoch tick) has its yield
/// honoured, not skipped by a task that runs at once. A panic in the first
/// poll ends the request as any panic in handling does (a 500; the server
/// goes on).
pub(super) async fn start_guest<F>(run: F, inline: bool) -> Option<tokio::task::JoinHandle<()>>
where
    F: Future<Output = ()> + Send + 'static,
{
    let mut run = Box::pin(run);
    if !inline {
        return Some(tokio::spawn(run));
    }
    let done =
        std::future::poll_fn(|cx| std::task::Poll::Ready(run.as_mut().poll(cx).is_ready())).await;
    (!done).then(|| {
        tokio::spawn(async move {
            tokio::task::yield_now().await;
            run.await;
        })
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::{Notify, Semaphore};

    /// A guest that only counts its run, and the count.
    fn counting_guest() -> (Arc<AtomicUsize>, impl Future<Output = ()> + Send + 'static) {
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = ran.clone();
        (ran, async move {
            counted.fetch_add(1, Ordering::Relaxed);
        })
    }

    const PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

    #[tokio::test]
    async fn a_guest_done_in_its_first_poll_is_never_spawned() {
        let (ran, guest) = counting_guest();
        let task = start_guest(guest, true).await;
        assert!(task.is_none());
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_guest_that_waits_goes_on_in_its_own_task_and_hears_its_wake_up() {
        let go = Arc::new(Notify::new());
        let done = Arc::new(AtomicUsize::new(0));
        let (wait, finished) = (go.clone(), done.clone());
        let task = start_guest(
            async move {
                wait.notified().await;
                finished.fetch_add(1, Ordering::Relaxed);
            },
            true,
        )
        .await;
        let task = task.expect("a waiting guest is spawned");
        // The spawned task polls the guest again (after its turn of the
        // queue), so the wake-up below reaches that task's waker, not the
        // first poll's: one kept from the first poll would leave it asleep.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(done.load(Ordering::Relaxed), 0);
        go.notify_one();
        tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the guest finishes once woken")
            .expect("no panic");
        assert_eq!(done.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn stopping_a_spawned_guest_gives_its_place_back() {
        let places = Arc::new(Semaphore::new(1));
        let permit = places.clone().acquire_owned().await.expect("open");
        let task = start_guest(
            async move {
                let _held = permit;
                std::future::pending::<()>().await;
            },
            true,
        )
        .await
        .expect("a waiting guest is spawned");
        assert_eq!(places.available_permits(), 0);
        drop(AbortOnDrop(GuestTask(Some(task.abort_handle()))));
        let stopped = tokio::time::timeout(PATIENCE, task)
            .await
            .expect("the guest stops");
        assert!(stopped.is_err_and(|e| e.is_cancelled()));
        assert_eq!(places.available_permits(), 1);
    }

    #[tokio::test]
    async fn a_guest_not_run_here_is_spawned_before_its_first_poll() {
        let (ran, guest) = counting_guest();
        let task = start_guest(guest, false).await.expect("spawned");
        assert_eq!(ran.load(Ordering::Relaxed), 0);
        task.await.expect("no panic");
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }
}
