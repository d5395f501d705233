//! Bodies between hyper and a component, both streamed:
//! - [`LimitedBody`]: the request body as the guest reads it, under the
//!   server's size and rate rules (`request::BodyPolicy`); what broke the
//!   rules is remembered, so the answer can be 413 or 408;
//! - [`GuestBody`]: the response body as the guest writes it, with
//!   backpressure (the guest's writes wait while the client is slow). A
//!   guest that fails mid-stream makes the body fail, so hyper aborts the
//!   response (HTTP/1.1: the connection closes without the last chunk;
//!   HTTP/2: the stream is reset) instead of ending a truncated 200 cleanly.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

use crate::clock;
use crate::request::BodyPolicy;
use crate::servlet::stats::ServletStats;

/// What became of a request body, and how long the guest has waited for
/// the client to send it.
#[derive(Debug, Default)]
pub(crate) struct BodyVerdict(AtomicU8, Waiting, Ended);

/// Whether the request body has ended: read to its end, failed, or
/// dropped. One that has not when the answer is out is held by the guest.
#[derive(Debug, Default)]
struct Ended(std::sync::atomic::AtomicBool);

/// Time spent waiting for the client's bytes, on the coarse clock
/// (`crate::clock`): the body's own rules (`body_timeout`,
/// `body_min_rate`) govern it, not the guest's deadline.
#[derive(Debug, Default)]
struct Waiting {
    /// When the current wait began, plus one (0: not waiting).
    since_ms: AtomicU64,
    /// Milliseconds of the waits that ended.
    total_ms: AtomicU64,
}

impl Waiting {
    fn begin(&self) {
        if self.since_ms.load(Ordering::Relaxed) == 0 {
            self.since_ms.store(clock::now_ms() + 1, Ordering::Relaxed);
        }
    }

    fn end(&self) {
        let since = self.since_ms.swap(0, Ordering::Relaxed);
        if since != 0 {
            self.total_ms.fetch_add(
                (clock::now_ms() + 1).saturating_sub(since),
                Ordering::Relaxed,
            );
        }
    }

    fn so_far(&self) -> Duration {
        let current = match self.since_ms.load(Ordering::Relaxed) {
            0 => 0,
            since => (clock::now_ms() + 1).saturating_sub(since),
        };
        Duration::from_millis(self.total_ms.load(Ordering::Relaxed) + current)
    }
}

impl BodyVerdict {
    const TOO_LARGE: u8 = 1;
    const TOO_SLOW: u8 = 2;
    const UNREADABLE: u8 = 3;

    /// How long the guest has waited for the client's body so far
    /// (including a wait under way).
    pub(crate) fn waited(&self) -> Duration {
        self.1.so_far()
    }

    /// What the client gets for a body that failed on its side (413, 408
    /// or 400), whatever the guest made of the error it read; `None` when
    /// the body did not fail.
    pub(crate) fn client_error(&self) -> Option<crate::request::RequestError> {
        use crate::request::RequestError;
        match self.0.load(Ordering::Relaxed) {
            Self::TOO_LARGE => Some(RequestError::PayloadTooLarge),
            Self::TOO_SLOW => Some(RequestError::BodyTimeout),
            Self::UNREADABLE => Some(RequestError::BadRequest("unreadable request body")),
            _ => None,
        }
    }

    /// Whether the body is still open: neither read to its end, nor
    /// failed, nor dropped. Something of the guest's holds it (a stream
    /// kept in a global, say), and could read it on a later request.
    pub(crate) fn still_open(&self) -> bool {
        !self.2.0.load(Ordering::Relaxed)
    }

    fn end(&self) {
        self.2.0.store(true, Ordering::Relaxed);
    }
}

/// A request body read under a [`BodyPolicy`].
pub(crate) struct LimitedBody<B> {
    inner: B,
    policy: BodyPolicy,
    started: Instant,
    received: u64,
    timer: Option<Pin<Box<Sleep>>>,
    verdict: Arc<BodyVerdict>,
}

impl<B> LimitedBody<B> {
    pub(crate) fn new(inner: B, policy: BodyPolicy, verdict: Arc<BodyVerdict>) -> LimitedBody<B>
    where
        B: HttpBody,
    {
        if inner.is_end_stream() {
            verdict.end();
        }
        LimitedBody {
            inner,
            policy,
            started: Instant::now(),
            received: 0,
            timer: None,
            verdict,
        }
    }
}

impl<B> Drop for LimitedBody<B> {
    fn drop(&mut self) {
        self.verdict.end();
    }
}

impl<B> HttpBody for LimitedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    type Data = Bytes;
    type Error = wasmtime_wasi_http::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        use wasmtime_wasi_http::Error as E;
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if polled.is_ready() {
            this.verdict.1.end();
        } else {
            this.verdict.1.begin();
        }
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.received += data.len() as u64;
                    if this.received > this.policy.max_bytes {
                        this.verdict
                            .0
                            .store(BodyVerdict::TOO_LARGE, Ordering::Relaxed);
                        return Poll::Ready(Some(Err(E::HttpRequestBodySize(Some(this.received)))));
                    }
                }
                this.timer = None;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                // Unless it already failed for its size or its pace.
                let _ = this.verdict.0.compare_exchange(
                    0,
                    BodyVerdict::UNREADABLE,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
                this.verdict.end();
                Poll::Ready(Some(Err(E::InternalError(Some(e.to_string())))))
            }
            Poll::Ready(None) => {
                this.verdict.end();
                Poll::Ready(None)
            }
            Poll::Pending => {
                let deadline = this.policy.deadline(this.started, this.received);
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                ready!(timer.as_mut().poll(cx));
                this.verdict
                    .0
                    .store(BodyVerdict::TOO_SLOW, Ordering::Relaxed);
                Poll::Ready(Some(Err(E::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// What the guest answered: its response (with, for p3, the signal its
/// event loop waits for, dropped once the body is sent or abandoned), or
/// its own error code.
pub(super) type Head = Result<
    (
        http::Response<HyperOutgoingBody>,
        Option<oneshot::Sender<()>>,
    ),
    super::failure::GuestCode,
>;

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

/// How the guest's request ended, sent before its store is dropped.
pub(crate) type Outcome = Result<(), String>;

/// How a component's response body ends, and who hears of it.
pub(crate) struct Ends {
    /// How the guest's request ended.
    pub outcome: oneshot::Receiver<Outcome>,
    /// The task running the guest (none when it finished within its
    /// first poll): stopped when the client goes away before the body's
    /// end.
    pub task: GuestTask,
    /// Dropped with the body: a p3 guest's event loop runs until then.
    pub sent: Option<oneshot::Sender<()>>,
    /// Where a failure after the head is counted and named: the
    /// servlet's counters, the request's id, the servlet.
    pub tally: Tally,
}

/// Where a body's failure is counted, and what its log line names.
pub(crate) type Tally = (
    Arc<ServletStats>,
    String,
    Arc<crate::servlet::info::ServletInfo>,
);

/// A component's response body.
pub(crate) struct GuestBody {
    inner: HyperOutgoingBody,
    outcome: oneshot::Receiver<Outcome>,
    task: GuestTask,
    /// Whether the body reached its end cleanly: the task then finishes
    /// on its own (and can give its instance back for reuse).
    ended: bool,
    _sent: Option<oneshot::Sender<()>>,
    /// Taken when the body fails: counted once.
    tally: Option<Tally>,
    /// Bytes the body may still carry (`max_response_bytes`, when set).
    room: Option<u64>,
    /// Bytes the guest's own `Content-Length` still allows: hyper would
    /// cut a longer body to it and end the response as complete.
    declared: Option<u64>,
    /// What [`GuestBody::failed_before_any_byte`] read: the first frame
    /// (`None`: the end), handed on first.
    peeked: Option<Option<Frame<Bytes>>>,
}

impl GuestBody {
    pub(crate) fn new(
        inner: HyperOutgoingBody,
        ends: Ends,
        limit: Option<u64>,
        declared: Option<u64>,
    ) -> GuestBody {
        GuestBody {
            inner,
            outcome: ends.outcome,
            task: ends.task,
            ended: false,
            _sent: ends.sent,
            tally: Some(ends.tally),
            room: limit,
            declared,
            peeked: None,
        }
    }

    /// Whether the body has already failed, before the head is sent: its
    /// first frame, if the guest has written it, is read now (without
    /// waiting) and checked. A frame that passes is kept for hyper.
    pub(crate) fn failed_before_any_byte(&mut self) -> Option<String> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.step(&mut cx) {
            Poll::Pending => None,
            Poll::Ready(Some(Err(why))) => {
                // Counted and logged as an answer that never was.
                self.tally = None;
                Some(why)
            }
            Poll::Ready(Some(Ok(frame))) => {
                self.peeked = Some(Some(frame));
                None
            }
            Poll::Ready(None) => {
                self.peeked = Some(None);
                None
            }
        }
    }

    /// The next frame, checked against the limits; `Err` is why the body
    /// fails.
    fn step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, String>>> {
        use tokio::sync::oneshot::error::TryRecvError;
        match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
            Some(Ok(frame)) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                // Past the route's limit or the guest's own length: the
                // response is cut off as an abort, never as a
                // complete-looking one.
                let past = if !spend(&mut self.room, n) {
                    Some("max_response_bytes")
                } else if !spend(&mut self.declared, n) {
                    Some("its Content-Length")
                } else {
                    None
                };
                if let Some(what) = past {
                    self.task.abort();
                    return Poll::Ready(Some(Err(format!("the response body grew past {what}"))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e.to_string()))),
            // The body can end early only because the store was dropped,
            // and the task sends its outcome before dropping it: an end
            // with a failed (or vanished) outcome is an abort.
            None => match self.outcome.try_recv() {
                Ok(Ok(())) | Err(TryRecvError::Empty) => {
                    self.ended = true;
                    Poll::Ready(None)
                }
                Ok(Err(e)) => Poll::Ready(Some(Err(e))),
                Err(TryRecvError::Closed) => {
                    Poll::Ready(Some(Err("the guest task ended".to_owned())))
                }
            },
        }
    }

    /// The body fails because the guest did: the client sees an abort,
    /// and the servlet's counters see a trap or a timeout.
    fn fail(&mut self, why: String) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        if let Some((stats, id, info)) = self.tally.take() {
            let timed_out = why.contains("deadline");
            let first = why.lines().next().unwrap_or_default();
            tracing::warn!(servlet = %info.name, request_id = %id, error = %first, "response aborted: the servlet failed after setting its response head (the client sees the connection or stream reset, not an error status)");
            stats.failed_mid_stream(&why, timed_out, &id);
        }
        Poll::Ready(Some(Err(io::Error::other(why))))
    }
}

impl Drop for GuestBody {
    fn drop(&mut self) {
        if !self.ended {
            self.task.abort();
        }
    }
}

impl HttpBody for GuestBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        if let Some(peeked) = this.peeked.take() {
            return Poll::Ready(peeked.map(Ok));
        }
        match ready!(this.step(cx)) {
            Some(Ok(frame)) => Poll::Ready(Some(Ok(frame))),
            Some(Err(why)) => this.fail(why),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.peeked {
            Some(peeked) => peeked.is_none(),
            None => self.inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        // The inner body counts what it has yielded: a peeked frame is
        // still to come from this one.
        let mut hint = self.inner.size_hint();
        let peeked = match &self.peeked {
            Some(Some(frame)) => frame.data_ref().map_or(0, |d| d.len() as u64),
            _ => 0,
        };
        if peeked > 0 {
            let mut more = SizeHint::new();
            more.set_lower(hint.lower().saturating_add(peeked));
            if let Some(upper) = hint.upper() {
                more.set_upper(upper.saturating_add(peeked));
            }
            hint = more;
        }
        hint
    }
}

/// Takes `n` bytes from what a body may still carry (`None`: no limit);
/// false when they do not fit.
fn spend(room: &mut Option<u64>, n: u64) -> bool {
    match room {
        None => true,
        Some(left) => match left.checked_sub(n) {
            Some(rest) => {
                *left = rest;
                true
            }
            None => false,
        },
    }
}
