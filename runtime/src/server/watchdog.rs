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
//!   `header_read_timeout`: dropped.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

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
    /// Drop the connection now.
    Drop,
}

/// Sleeps until one of the connection's deadlines passes. `closing`: a
/// graceful close is under way since the watchdog started.
pub(crate) async fn watch(state: Arc<ConnState>, limits: Limits, closing: bool) -> Verdict {
    let recheck = limits
        .header_read_ms
        .min(limits.keepalive_ms)
        .min(limits.send_ms);
    let closing_since = clock::now_ms();
    loop {
        let now = clock::now_ms();
        let (deadline, verdict) = state.deadline(limits, closing.then_some(closing_since));
        if now >= deadline {
            return verdict;
        }
        // State changes (a new head starting, a request ending) can bring a
        // deadline forward; waking at least every `recheck` ms bounds how
        // late that is noticed.
        let wake = deadline.min(now + recheck) + clock::TICK.as_millis() as u64;
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
        }
    }

    /// Marks the connection draining (the server shuts down).
    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// The next deadline, and what happens when it passes.
    fn deadline(&self, limits: Limits, closing_since: Option<u64>) -> (u64, Verdict) {
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
        (idle_since + idle_limit, Verdict::Idle)
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
    pub(crate) fn start(state: Arc<ConnState>) -> Handling {
        state.handling.fetch_add(1, Ordering::Relaxed);
        state.head_started_ms.store(0, Ordering::Relaxed);
        state.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
        Handling(state)
    }

    /// Whether the server is draining this connection.
    pub(crate) fn draining(&self) -> bool {
        self.0.draining.load(Ordering::Relaxed)
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
        self.0.sending.fetch_sub(1, Ordering::Relaxed);
        self.0.served.fetch_add(1, Ordering::Relaxed);
        self.0.exchange_ms.store(clock::now_ms(), Ordering::Relaxed);
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
}

impl<S> WatchedIo<S> {
    pub(crate) fn new(inner: S, state: Arc<ConnState>) -> WatchedIo<S> {
        WatchedIo {
            inner,
            state,
            started: false,
            line_done: true,
        }
    }
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
        if let Poll::Ready(Ok(())) = result
            && buf.filled().len() > before
        {
            let new = &buf.filled()[before..];
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

impl<S: AsyncWrite + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = match this.precise_status(data) {
            Some(rewritten) => Pin::new(&mut this.inner).poll_write(cx, &rewritten),
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
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.state.touch_write(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_414_status_line_replaces_the_431_one_byte_for_byte() {
        assert_eq!(STATUS_414.len(), STATUS_431.len());
        assert!(STATUS_414.ends_with(b"\r\n"));
    }
}
