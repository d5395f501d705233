//! The per-connection watchdog: header-read, keep-alive and send timeouts.
//!
//! hyper's own `header_read_timeout` starts when it begins waiting for the
//! next request head, so it cannot tell a slow head from an idle keep-alive
//! connection, and it knows nothing of slow readers. swan stamps reads and
//! writes instead (with the coarse clock, an atomic store), counts requests
//! being handled and responses being sent, and a per-connection watchdog
//! decides:
//! - a response being sent that makes no write progress for
//!   `send_timeout` (a client that stopped reading): dropped. A response
//!   that keeps moving completes however long it takes;
//! - HTTP/1: bytes of a new head arrived but no request yet after
//!   `header_read_timeout`: dropped (slowloris);
//! - nothing in flight and nothing exchanged for `keepalive_timeout` (or
//!   `header_read_timeout` before the first request): closed gracefully
//!   (HTTP/2: GOAWAY). For HTTP/2 only requests count as activity, so PING
//!   or SETTINGS traffic cannot keep an idle connection open;
//! - a graceful close with nothing in flight that does not finish within
//!   `header_read_timeout`: dropped;
//! - HTTP/1 on plain TCP (`park`): nothing in flight for [`PARK_AFTER_MS`]:
//!   parked, its hyper connection (and buffers) released until the client
//!   sends again (see `parking`).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::sendfile::{Handoff, Sender, Target};
use crate::clock;
use crate::config::ServerConfig;

/// What starts every HTTP/2 connection with prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";
/// hyper's answer to a request head over `max_header_bytes`.
const STATUS_431: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\n";
/// The answer when the request line alone is over the limit, padded with
/// spaces (allowed in a reason phrase) to the same length, so the rewrite
/// keeps hyper's byte counts right.
const STATUS_414: &[u8] = b"HTTP/1.1 414 URI Too Long                   \r\n";

/// How long an HTTP/1 connection on plain TCP stays idle before it is
/// parked. Short enough that idle connections hold no buffers; long enough
/// that a busy keep-alive connection never pays for a new hyper connection.
pub(crate) const PARK_AFTER_MS: u64 = 500;

/// Timeouts a watchdog enforces, in coarse-clock milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header_read_ms: u64,
    pub(crate) keepalive_ms: u64,
    pub(crate) send_ms: u64,
}

impl Limits {
    pub(crate) fn from_config(config: &ServerConfig) -> Limits {
        Limits {
            header_read_ms: config.header_read_timeout.as_millis() as u64,
            keepalive_ms: config.keepalive_timeout.as_millis() as u64,
            send_ms: config.send_timeout.as_millis() as u64,
        }
    }
}

pub(crate) enum Verdict {
    /// Close gracefully.
    Idle,
    /// Idle for [`PARK_AFTER_MS`]: release the hyper connection.
    Park,
    /// Drop the connection now.
    Drop,
}

/// Sleeps until one of the connection's deadlines passes. `closing`: a
/// graceful close is under way since the watchdog started; `park`: the
/// connection may be parked when idle.
pub(crate) async fn watch(
    state: Arc<ConnState>,
    limits: Limits,
    closing: bool,
    park: bool,
) -> Verdict {
    let recheck = limits
        .header_read_ms
        .min(limits.keepalive_ms)
        .min(limits.send_ms);
    // A parkable connection is parked 0.5 s after its last request, which
    // can be much sooner than the deadline computed while a request ran:
    // after finding one running, look again in 0.5 s, then back off (1,
    // 2, 4... s up to `recheck`) while the connection stays that busy, so
    // a busy connection costs no more wake-ups than before.
    let mut busy_recheck = PARK_AFTER_MS.min(recheck);
    let closing_since = clock::now_ms();
    loop {
        let now = clock::now_ms();
        let (deadline, verdict) = state.deadline(limits, closing.then_some(closing_since), park);
        if now >= deadline {
            return verdict;
        }
        // State changes (a new head starting, a request ending) can bring a
        // deadline forward; waking at least every `recheck` ms bounds how
        // late that is noticed.
        let mut next = recheck;
        if park {
            if state.in_flight() {
                next = busy_recheck;
                busy_recheck = (busy_recheck * 2).min(recheck);
            } else {
                busy_recheck = PARK_AFTER_MS.min(recheck);
            }
        }
        let wake = deadline.min(now + next) + clock::TICK.as_millis() as u64;
        tokio::time::sleep_until(clock::instant_at(wake).into()).await;
    }
}

/// What the watchdog knows of a connection.
#[derive(Debug)]
pub(crate) struct ConnState {
    /// Last read and last write, in coarse-clock ms.
    read_ms: AtomicU64,
    write_ms: AtomicU64,
    /// When a request last started, began sending, or ended.
    exchange_ms: AtomicU64,
    /// HTTP/1: when the first bytes of a not-yet-parsed head arrived (0:
    /// none).
    head_started_ms: AtomicU64,
    /// Requests whose handler is running.
    handling: AtomicU32,
    /// Responses whose body is being sent.
    sending: AtomicU32,
    /// Requests answered so far.
    served: AtomicU32,
    /// Whether the connection speaks HTTP/2.
    h2: AtomicBool,
    /// The server is draining: HTTP/1 responses say `Connection: close`.
    draining: AtomicBool,
    /// The hyper connection should end at the next request boundary
    /// (to park the connection, or to close it when idle).
    release: AtomicBool,
    /// HTTP/1: the bytes read so far end inside a head (not at a blank
    /// line): the start of a next request may already be in hyper's buffer.
    partial_tail: AtomicBool,
    /// The request being handled came without a body: when it ends, a
    /// partial tail is the next request's head.
    bodyless: AtomicBool,
    /// hyper's 431 went out as a 414 (the request line never ended).
    pub(crate) uri_too_long: AtomicBool,
    /// Files the service leaves for the stream to send itself; also
    /// whether everything written has been flushed.
    pub(crate) sendfile: Handoff,
}

impl ConnState {
    pub(crate) fn new() -> ConnState {
        let now = clock::now_ms();
        ConnState {
            read_ms: AtomicU64::new(now),
            write_ms: AtomicU64::new(now),
            exchange_ms: AtomicU64::new(now),
            head_started_ms: AtomicU64::new(0),
            handling: AtomicU32::new(0),
            sending: AtomicU32::new(0),
            served: AtomicU32::new(0),
            h2: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            release: AtomicBool::new(false),
            partial_tail: AtomicBool::new(false),
            bodyless: AtomicBool::new(false),
            uri_too_long: AtomicBool::new(false),
            sendfile: Handoff::default(),
        }
    }

    /// Asks the hyper connection to end at the next request boundary: its
    /// next read that would wait reads end of stream instead.
    pub(crate) fn release(&self) {
        self.release.store(true, Ordering::Relaxed);
    }

    /// A parked connection has bytes to read: activity, so its idle time
    /// starts again.
    pub(crate) fn resumed(&self) {
        self.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
    }

    /// Marks the connection draining (the server shuts down).
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// The next deadline, and what happens when it passes.
    fn deadline(&self, limits: Limits, closing_since: Option<u64>, park: bool) -> (u64, Verdict) {
        let now = clock::now_ms();
        if self.sending.load(Ordering::Relaxed) > 0 {
            let progress = self
                .write_ms
                .load(Ordering::Relaxed)
                .max(self.exchange_ms.load(Ordering::Relaxed));
            return (progress + limits.send_ms, Verdict::Drop);
        }
        if self.handling.load(Ordering::Relaxed) > 0 {
            // A handler is running; it has deadlines of its own.
            return (now + limits.keepalive_ms, Verdict::Idle);
        }
        if let Some(since) = closing_since {
            return (since + limits.header_read_ms, Verdict::Drop);
        }
        let h2 = self.h2.load(Ordering::Relaxed);
        let head_started = self.head_started_ms.load(Ordering::Relaxed);
        if !h2 && head_started != 0 {
            return (head_started + limits.header_read_ms, Verdict::Drop);
        }
        let idle_limit = if self.served.load(Ordering::Relaxed) == 0 {
            limits.header_read_ms
        } else {
            limits.keepalive_ms
        };
        let mut idle_since = self.exchange_ms.load(Ordering::Relaxed);
        if !h2 {
            idle_since = idle_since
                .max(self.read_ms.load(Ordering::Relaxed))
                .max(self.write_ms.load(Ordering::Relaxed));
        }
        if park && !h2 && !self.release.load(Ordering::Relaxed) {
            return (idle_since + PARK_AFTER_MS.min(idle_limit), Verdict::Park);
        }
        (idle_since + idle_limit, Verdict::Idle)
    }

    /// Whether an HTTP/1 request head has started to arrive and no
    /// request is being handled: what a timeout then cuts off is a head.
    pub(crate) fn head_pending(&self) -> bool {
        !self.in_flight()
            && !self.h2.load(Ordering::Relaxed)
            && self.head_started_ms.load(Ordering::Relaxed) != 0
    }

    fn in_flight(&self) -> bool {
        self.handling.load(Ordering::Relaxed) > 0 || self.sending.load(Ordering::Relaxed) > 0
    }

    fn touch_write(&self, result: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = result
            && *n > 0
        {
            self.write_ms.store(clock::now_ms(), Ordering::Relaxed);
        }
    }

    /// Stamps a read; true when it starts a new HTTP/1 head.
    fn touch_read(&self) -> bool {
        let now = clock::now_ms().max(1);
        self.read_ms.store(now, Ordering::Relaxed);
        if !self.in_flight() && self.head_started_ms.load(Ordering::Relaxed) == 0 {
            self.head_started_ms.store(now, Ordering::Relaxed);
            return true;
        }
        false
    }
}

/// Marks a request's handler running for as long as it lives.
pub(crate) struct Handling(Arc<ConnState>);

impl Handling {
    /// A request's handler starts; `bodyless`: the request has no body.
    pub(crate) fn start(state: Arc<ConnState>, bodyless: bool) -> Handling {
        state.handling.fetch_add(1, Ordering::Relaxed);
        state.head_started_ms.store(0, Ordering::Relaxed);
        state.bodyless.store(bodyless, Ordering::Relaxed);
        state.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
        Handling(state)
    }

    /// Whether the server is draining this connection.
    pub(crate) fn draining(&self) -> bool {
        self.0.draining.load(Ordering::Relaxed)
    }

    /// Hands the response's file to the stream, to send with `sendfile(2)`
    /// (see [`Handoff::offer`]).
    pub(crate) fn offer_file(&self, body: &mut crate::body::Body) -> bool {
        self.0.sendfile.offer(body)
    }

    /// The handler returned a response: its body is being sent until the
    /// returned guard is dropped (with the body).
    pub(crate) fn into_sending(self) -> Sending {
        let state = self.0.clone();
        state.sending.fetch_add(1, Ordering::Relaxed);
        drop(self);
        Sending(state)
    }
}

impl Drop for Handling {
    fn drop(&mut self) {
        self.0.handling.fetch_sub(1, Ordering::Relaxed);
        self.0.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
    }
}

/// Marks a response body being sent for as long as it lives.
pub(crate) struct Sending(Arc<ConnState>);

impl Drop for Sending {
    fn drop(&mut self) {
        let state = &self.0;
        state.sending.fetch_sub(1, Ordering::Relaxed);
        state.served.fetch_add(1, Ordering::Relaxed);
        let now = clock::now_ms();
        state.exchange_ms.store(now, Ordering::Relaxed);
        // A bodyless request read together with part of the next head
        // (one read, pipelined): that head started already, and its
        // `header_read_timeout` runs from now, not from a later read.
        if !state.in_flight()
            && state.bodyless.load(Ordering::Relaxed)
            && state.partial_tail.load(Ordering::Relaxed)
        {
            state.head_started_ms.store(now.max(1), Ordering::Relaxed);
        }
    }
}

/// A stream that stamps its traffic into a [`ConnState`].
pub(crate) struct WatchedIo<S = TcpStream> {
    inner: S,
    state: Arc<ConnState>,
    /// Whether the first bytes have been seen (to tell HTTP/2).
    started: bool,
    /// HTTP/1: whether the request line of the head being read has ended.
    line_done: bool,
    /// Parking: whether this connection may be released between requests.
    park: bool,
    /// The last bytes read (up to four), to tell a request boundary.
    tail: [u8; 4],
    /// The response whose file is being sent (plain TCP, see `sendfile`).
    /// Boxed: a pointer in every parked connection's task, not a file
    /// range and its progress.
    sender: Option<Box<Sender>>,
    /// Whether a read ended the hyper connection at a request boundary
    /// (see [`ConnState::release`]), rather than the client closing.
    released: bool,
    /// A release that had to wait: the reader to wake once the response
    /// is flushed.
    retry: Option<std::task::Waker>,
}

impl<S> WatchedIo<S> {
    pub(crate) fn new(inner: S, state: Arc<ConnState>) -> WatchedIo<S> {
        WatchedIo {
            inner,
            state,
            started: false,
            line_done: true,
            park: false,
            tail: *b"\r\n\r\n",
            sender: None,
            released: false,
            retry: None,
        }
    }

    /// Lets this connection be released between requests (HTTP/1 on plain
    /// TCP, served with `without_shutdown` so the stream comes back).
    pub(crate) fn parkable(mut self) -> WatchedIo<S> {
        self.park = true;
        self
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Whether the hyper connection ended because it was released; clears
    /// the mark for the next one.
    pub(crate) fn take_released(&mut self) -> bool {
        std::mem::take(&mut self.released)
    }

    /// Whether a release may end the hyper connection now: nothing in
    /// flight, everything written flushed, and the bytes read so far end
    /// with a complete head (so hyper holds no partial request). A request
    /// whose body ends otherwise keeps its connection until a later one.
    fn may_release(&self) -> bool {
        !self.state.sendfile.unflushed() && ends_head(&self.tail) && !self.state.in_flight()
    }

    fn remember_tail(&mut self, new: &[u8]) {
        if new.len() >= 4 {
            self.tail.copy_from_slice(&new[new.len() - 4..]);
        } else {
            self.tail.rotate_left(new.len());
            self.tail[4 - new.len()..].copy_from_slice(new);
        }
    }
}

/// Whether bytes ending with `tail` end a head: a blank line, `\r\n\r\n`
/// or, as hyper also accepts, bare `\n\n`.
fn ends_head(tail: &[u8; 4]) -> bool {
    tail == b"\r\n\r\n" || tail[2..] == *b"\n\n"
}

impl<S: AsyncRead + Unpin> AsyncRead for WatchedIo<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if result.is_pending() && this.park && this.state.release.load(Ordering::Relaxed) {
            if this.may_release() {
                // End of stream for hyper, which closes an idle connection
                // cleanly; the stream itself stays open and comes back.
                this.state.release.store(false, Ordering::Relaxed);
                this.released = true;
                return Poll::Ready(Ok(()));
            }
            // Not at a boundary yet. hyper reads again only when the
            // socket wakes it, so the end of the response (its flush)
            // wakes it to try again.
            this.retry = Some(cx.waker().clone());
        }
        if let Poll::Ready(Ok(())) = result
            && buf.filled().len() > before
        {
            let new = &buf.filled()[before..];
            if this.park {
                this.remember_tail(new);
                this.state
                    .partial_tail
                    .store(!ends_head(&this.tail), Ordering::Relaxed);
            }
            if !this.started {
                this.started = true;
                if new.starts_with(H2_PREFACE) {
                    this.state.h2.store(true, Ordering::Relaxed);
                }
            }
            if this.state.touch_read() {
                this.line_done = false;
            }
            if !this.line_done && new.contains(&b'\n') {
                this.line_done = true;
            }
        }
        result
    }
}

impl<S> WatchedIo<S> {
    /// hyper answers any head over the limit with 431; when the request
    /// line itself never ended, 414 is the precise answer (RFC 9112 §3).
    fn precise_status(&self, data: &[u8]) -> Option<Vec<u8>> {
        if self.line_done || !data.starts_with(STATUS_431) {
            return None;
        }
        let mut out = data.to_vec();
        out[..STATUS_414.len()].copy_from_slice(STATUS_414);
        Some(out)
    }
}

impl<S: AsyncWrite + Target + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.state.sendfile.set_unflushed(true);
        if this.sender.is_none() {
            this.sender = this.state.sendfile.take();
        }
        if let Some(sender) = this.sender.as_mut() {
            let result = sender.poll_write(&mut this.inner, cx, data);
            if sender.done() || matches!(result, Poll::Ready(Err(_))) {
                this.sender = None;
            }
            this.state.touch_write(&result);
            return result;
        }
        let result = match this.precise_status(data) {
            Some(rewritten) => {
                this.state.uri_too_long.store(true, Ordering::Relaxed);
                Pin::new(&mut this.inner).poll_write(cx, &rewritten)
            }
            None => Pin::new(&mut this.inner).poll_write(cx, data),
        };
        this.state.touch_write(&result);
        result
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.sender.is_some() || this.state.sendfile.offered() {
            // Not with hyper's settings (`writev(false)`); correct anyway.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return Pin::new(this).poll_write(cx, first);
        }
        this.state.sendfile.set_unflushed(true);
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.state.touch_write(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper flushes the stream only once its own buffer is written.
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = result {
            this.state.sendfile.set_unflushed(false);
            if let Some(waker) = this.retry.take() {
                waker.wake();
            }
        }
        result
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail_after(chunks: &[&[u8]]) -> [u8; 4] {
        let mut io = WatchedIo::new((), Arc::new(ConnState::new()));
        for c in chunks {
            io.remember_tail(c);
        }
        io.tail
    }

    #[test]
    fn the_tail_is_the_last_four_bytes_read_across_chunks() {
        assert_eq!(&tail_after(&[b"GET / HTTP/1.1\r\n\r\n"]), b"\r\n\r\n");
        assert_eq!(&tail_after(&[b"GET / HTTP/1.1\r\n\r", b"\n"]), b"\r\n\r\n");
        assert_eq!(&tail_after(&[b"x\r\n", b"\r", b"\n"]), b"\r\n\r\n");
        assert_eq!(&tail_after(&[b"\r\n\r\n", b"GET"]), b"\nGET");
        assert_eq!(&tail_after(&[b"\r\n\r\nGET / HTTP/1.1\r\nHo"]), b"\r\nHo");
        assert_eq!(&tail_after(&[b"{\"a\":1}"]), b"\":1}");
    }

    #[test]
    fn the_414_status_line_replaces_the_431_one_byte_for_byte() {
        assert_eq!(STATUS_414.len(), STATUS_431.len());
        assert!(STATUS_414.ends_with(b"\r\n"));
    }
}
