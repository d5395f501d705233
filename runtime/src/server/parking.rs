//! HTTP/1 on plain TCP, parked between requests.
//!
//! hyper keeps a connection's read and write buffers (8 KiB and more) and
//! its dispatcher for as long as the connection lives; ten thousand idle
//! keep-alive connections held about 200 MiB. Here an idle connection is
//! only its socket, its state and a timer:
//! - a new connection gets a hyper connection once its first bytes arrive;
//! - after [`PARK_AFTER_MS`](super::watchdog::PARK_AFTER_MS) with nothing
//!   in flight, the watchdog asks for a release: the stream's next read
//!   that would wait reads end of stream, which hyper takes for a client
//!   that closed an idle connection, and hands back the stream
//!   (`without_shutdown`);
//! - the parked connection waits for bytes on the bare socket (a peek,
//!   which leaves them there), then gets a new hyper connection, which
//!   reads them.
//!
//! A release happens only at a request boundary (see
//! `WatchedIo::may_release`), so hyper never holds part of a request when
//! it lets go. Timeouts and the drain behave as for any connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use hyper_util::rt::TokioIo;
use tokio::io::ReadBuf;
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::client_gone::ClientGone;
use super::conn::{self, Builders, Linger};
use super::places::Slot;
use super::sendfile::Target;
use super::stream::WatchedIo;
use super::watchdog::{self, ConnState, Limits, Verdict};
use crate::app::App;
use crate::observe::Observe;
use crate::request::Peer;

/// What opens every HTTP/2 connection with prior knowledge.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long a first byte `P` waits for the next one, in pauses.
const LONE_P_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);
const LONE_P_WAITS: u32 = 200;

/// Serves one plain TCP connection until it closes, times out, or the
/// server shuts down.
pub(crate) async fn serve(
    stream: TcpStream,
    peer: Peer,
    app: Arc<App>,
    builders: Arc<Builders>,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
    slot: Slot,
) {
    let observe = app.observe.clone();
    let state = Arc::new(ConnState::new());
    state.sendfile.enable();
    let mut io = WatchedIo::new(stream, state.clone()).parkable();
    let mut service = conn::service(app, state.clone(), peer);
    let mut linger = Linger::default();
    let mut first = true;
    let mut lone_p_waits = 0;
    loop {
        let parked_now = Parked::new(&observe);
        let mut first_bytes = [0u8; H2_PREFACE.len()];
        let Some(n) = parked(
            &io,
            &mut first_bytes,
            &state,
            &mut shutdown,
            &mut linger,
            limits,
            // A connection that has not sent its first request yet is not
            // an idle keep-alive one: it keeps its place.
            (!first).then_some(&slot),
        )
        .await
        else {
            return;
        };
        drop(parked_now);
        // A lone `P` may start POST, PUT or PATCH as well as HTTP/2's
        // preface: wait briefly for a second byte (up to 1 s, then it is
        // taken for HTTP/1, whose head timeout then runs).
        if first && n == 1 && first_bytes[0] == b'P' && lone_p_waits < LONE_P_WAITS {
            lone_p_waits += 1;
            tokio::time::sleep(LONE_P_PAUSE).await;
            continue;
        }
        state.resumed();
        if first {
            first = false;
            // HTTP/2 with prior knowledge: hyper's automatic builder.
            // HTTP/1 requests never start like its preface past a letter.
            if n > 0 && H2_PREFACE.starts_with(&first_bytes[..n]) {
                // Boxed: inline, hyper's connection would size every
                // parked connection's task.
                let watched = conn::Watch {
                    state: state.clone(),
                    shutdown,
                    limits,
                    slot: &slot,
                };
                let protocol = conn::Protocol::Detect(&builders.auto);
                let ended = Box::pin(conn::drive(io, service, peer.addr, protocol, watched)).await;
                conn::ended_with(ended, &state, &observe, peer);
                return;
            }
        }
        // Run to its end with hyper's shutdown, which flushes what hyper
        // still holds: `without_shutdown` returns as soon as both sides are
        // done, and a response's last bytes, not yet taken by a slow
        // reader's socket, went with hyper's buffer when hyper closed the
        // connection itself (a request body left unread). The stream ends
        // its side only when hyper closes the connection: a release keeps
        // it open (see `WatchedIo::poll_shutdown`).
        // Boxed: the task holds a pointer while parked, not a connection.
        #[allow(
            unsafe_code,
            reason = "polled only beside `conn`, which owns the socket"
        )]
        // SAFETY: `gone` is polled only in the `select!` below, beside
        // `conn` (which owns the socket), and dropped with this pass.
        let mut gone = unsafe { ClientGone::new(io.get_ref(), state.clone()) };
        let mut conn = Box::pin(builders.http1.serve_connection(TokioIo::new(io), service));
        let mut closing = false;
        let mut watchdog = Box::pin(watchdog::watch(state.clone(), limits, None, true));
        let ended = loop {
            tokio::select! {
                result = conn.as_mut() => break result,
                () = &mut gone => {
                    // Dropping the connection drops the handler: its
                    // request is logged and counted as 499.
                    tracing::debug!(remote = %peer.addr, "the client left while its request was handled");
                    return;
                }
                _ = shutdown.changed(), if !closing && !linger.started() => linger.start(&state),
                () = linger.wait(), if !closing => {
                    state.release();
                    closing = true;
                    watchdog = Box::pin(watchdog::watch(state.clone(), limits, Some(crate::clock::now_ms()), false));
                }
                verdict = &mut watchdog => match verdict {
                    Verdict::Park if !closing => {
                        state.release();
                        watchdog = Box::pin(watchdog::watch(state.clone(), limits, None, true));
                    }
                    Verdict::Idle if !closing => {
                        tracing::debug!(remote = %peer.addr, "idle: closing gracefully");
                        state.release();
                        closing = true;
                        watchdog = Box::pin(watchdog::watch(state.clone(), limits, Some(crate::clock::now_ms()), false));
                    }
                    Verdict::Idle | Verdict::Drop | Verdict::Park => {
                        tracing::debug!(remote = %peer.addr, "connection dropped by timeout");
                        conn::ended_with(Err(Box::new(conn::Dropped)), &state, &observe, peer);
                        if state.in_flight() {
                            // Cut off mid-answer (`send_timeout`).
                            reset(std::pin::Pin::into_inner(conn).into_parts().io.into_inner());
                        }
                        return;
                    }
                },
            }
        };
        match ended {
            Ok(()) => {
                let parts = std::pin::Pin::into_inner(conn).into_parts();
                io = parts.io.into_inner();
                // Released to close, or the client closed, or hyper
                // closed (`Connection: close`, a bad request, an answer
                // such as 413 given before the body was read).
                if closing {
                    return;
                }
                if !io.take_released() {
                    // Boxed: its buffer would otherwise size every
                    // connection's task.
                    Box::pin(conn::linger_close(io)).await;
                    return;
                }
                service = parts.service;
            }
            Err(e) => {
                if e.is_user() {
                    // A response body failed (a servlet trapped mid-body,
                    // or passed `max_response_bytes`).
                    reset(std::pin::Pin::into_inner(conn).into_parts().io.into_inner());
                }
                conn::ended_with(Err(e.into()), &state, &observe, peer);
                return;
            }
        }
    }
}

/// Ends a connection whose answer was cut off with a reset, not a plain
/// close: a close-delimited body (HTTP/1.0, no chunks) that ended with a
/// close would look complete.
fn reset(io: WatchedIo<TcpStream>) {
    io.get_ref().reset_on_close();
}

/// Counts a connection parked for as long as it lives.
struct Parked<'a>(&'a Observe);

impl<'a> Parked<'a> {
    fn new(observe: &'a Observe) -> Parked<'a> {
        observe.connections_parked.fetch_add(1, Ordering::Relaxed);
        Parked(observe)
    }
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.connections_parked.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Waits, with no hyper connection, until the client sends (or closes):
/// peeks at what arrived, leaving it in the socket, and says how many
/// bytes that is. `None` when the connection is to be closed instead
/// (timeout, drain, error, or a new connection needing the `slot` of this
/// idle keep-alive one at `max_connections`).
async fn parked(
    io: &WatchedIo<TcpStream>,
    first_bytes: &mut [u8],
    state: &Arc<ConnState>,
    shutdown: &mut watch::Receiver<bool>,
    linger: &mut Linger,
    limits: Limits,
    slot: Option<&Slot>,
) -> Option<usize> {
    let mut watchdog = Box::pin(watchdog::watch(state.clone(), limits, None, false));
    let mut room_wanted = std::pin::pin!(async {
        match slot {
            Some(slot) => slot.room_wanted().await,
            None => std::future::pending().await,
        }
    });
    loop {
        tokio::select! {
            // Bytes first: a request already sent is served, never cut
            // off by a request for room that came at the same time.
            biased;
            // Readiness alone can be stale; a peek waits for bytes. (A
            // poll, not `peek().await`: no waiter node for it in every
            // parked connection's task.)
            peeked = std::future::poll_fn(|cx| {
                let mut buf = ReadBuf::new(first_bytes);
                io.get_ref().poll_peek(cx, &mut buf)
            }) => return peeked.ok(),
            _ = shutdown.changed(), if !linger.started() => linger.start(state),
            // Idle when the drain's linger ends: closed.
            () = linger.wait() => return None,
            _ = &mut watchdog => return None,
            () = &mut room_wanted => {
                tracing::debug!("max_connections reached: an idle keep-alive connection closes to make room");
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::H2_PREFACE;

    #[test]
    fn no_http1_method_starts_like_the_h2_preface_past_its_first_letter() {
        for method in [
            "GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE",
        ] {
            let line = format!("{method} / HTTP/1.1\r\n");
            assert!(!H2_PREFACE.starts_with(&line.as_bytes()[..2]), "{method}");
        }
    }
}
