//! The per-connection watchdog: header-read and keep-alive timeouts.
//!
//! hyper's own `header_read_timeout` starts when it begins waiting for the
//! next request head, so it cannot tell a slow head from an idle keep-alive
//! connection. swan stamps reads and writes instead (with the coarse clock,
//! an atomic load), and a per-connection watchdog decides:
//! - bytes of a new head arrived but no request yet after
//!   `header_read_timeout`: the connection is dropped (slowloris);
//! - nothing in flight and no traffic for `keepalive_timeout` (or
//!   `header_read_timeout` before the first request): graceful close;
//! - a graceful close that does not finish within `header_read_timeout`
//!   (a client that stopped reading): the connection is dropped.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::clock;
use crate::config::ServerConfig;

/// Timeouts a watchdog enforces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header_read_ms: u64,
    pub(crate) keepalive_ms: u64,
}

impl Limits {
    pub(crate) fn from_config(config: &ServerConfig) -> Limits {
        Limits {
            header_read_ms: config.header_read_timeout.as_millis() as u64,
            keepalive_ms: config.keepalive_timeout.as_millis() as u64,
        }
    }
}

pub(crate) enum Verdict {
    /// Close gracefully.
    Idle,
    /// Drop the connection now.
    Drop,
}

/// Sleeps until one of the connection's deadlines passes.
pub(crate) async fn watch_idle(state: Arc<ConnState>, limits: Limits, closing: bool) -> Verdict {
    if closing {
        tokio::time::sleep(Duration::from_millis(limits.header_read_ms)).await;
        return Verdict::Drop;
    }
    let recheck = limits.header_read_ms.min(limits.keepalive_ms);
    loop {
        let now = clock::now_ms();
        let deadline = if state.in_flight.load(Ordering::Relaxed) > 0 {
            // A handler is running; it has deadlines of its own.
            now + limits.keepalive_ms
        } else {
            let head_started = state.head_started_ms.load(Ordering::Relaxed);
            if head_started != 0 {
                let deadline = head_started + limits.header_read_ms;
                if now >= deadline {
                    return Verdict::Drop;
                }
                deadline
            } else {
                let idle_limit = if state.served.load(Ordering::Relaxed) == 0 {
                    limits.header_read_ms
                } else {
                    limits.keepalive_ms
                };
                let deadline = state.activity_ms.load(Ordering::Relaxed) + idle_limit;
                if now >= deadline {
                    return Verdict::Idle;
                }
                deadline
            }
        };
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
    /// Last read or write, in coarse-clock ms.
    activity_ms: AtomicU64,
    /// When the first bytes of a not-yet-parsed head arrived (0: none).
    head_started_ms: AtomicU64,
    /// Requests being handled.
    in_flight: AtomicU32,
    /// Requests handled so far.
    served: AtomicU32,
}

impl ConnState {
    pub(crate) fn new() -> ConnState {
        ConnState {
            activity_ms: AtomicU64::new(clock::now_ms()),
            head_started_ms: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            served: AtomicU32::new(0),
        }
    }

    fn touch_write(&self, result: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = result
            && *n > 0
        {
            self.activity_ms.store(clock::now_ms(), Ordering::Relaxed);
        }
    }

    fn touch_read(&self) {
        let now = clock::now_ms().max(1);
        self.activity_ms.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Relaxed) == 0
            && self.head_started_ms.load(Ordering::Relaxed) == 0
        {
            self.head_started_ms.store(now, Ordering::Relaxed);
        }
    }
}

/// Marks a request in flight for as long as it lives.
pub(crate) struct InFlight(Arc<ConnState>);

impl InFlight {
    pub(crate) fn start(state: Arc<ConnState>) -> InFlight {
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        state.head_started_ms.store(0, Ordering::Relaxed);
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.served.fetch_add(1, Ordering::Relaxed);
        self.0.activity_ms.store(clock::now_ms(), Ordering::Relaxed);
    }
}

/// A stream that stamps its traffic into a [`ConnState`].
pub(crate) struct WatchedIo {
    inner: TcpStream,
    state: Arc<ConnState>,
}

impl WatchedIo {
    pub(crate) fn new(inner: TcpStream, state: Arc<ConnState>) -> WatchedIo {
        WatchedIo { inner, state }
    }
}

impl AsyncRead for WatchedIo {
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
            this.state.touch_read();
        }
        result
    }
}

impl AsyncWrite for WatchedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, data);
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
