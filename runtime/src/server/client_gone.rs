//! HTTP/1 on plain TCP: noticing a client that left while its request is
//! being handled.
//!
//! hyper reads nothing while it waits for a request's answer (`half_close`
//! lets a client that only ends its sending side still get a quick
//! answer), so a client that closed or reset its connection would go
//! unseen until the answer is written: a servlet would run to its end, or
//! its `timeout`, for nobody, holding its instance and its
//! `max_concurrency` place, and the log would say 200. While a handler
//! runs, [`ClientGone`] looks at the socket every [`LOOK_EVERY`] without
//! reading from it: an end of stream or an error there means the client
//! is gone (as NGINX decides for a proxied request), and the connection
//! is dropped, which drops the handler (its request is logged as 499).
//! Bytes waiting (a pipelined request) are left for hyper.

use std::future::Future;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use super::watchdog::ConnState;

/// How often a running handler's connection is looked at: a client that
/// left is noticed within this long. Requests answered sooner are never
/// looked at.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// Ready when the client has closed or reset the connection while a
/// request on it is being handled. Polled next to the hyper connection
/// that owns the socket, in the same task, and never after it.
pub(super) struct ClientGone {
    fd: RawFd,
    state: Arc<ConnState>,
    /// Made the first time a handler outlasts a poll, then reused.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether the timer runs for the request being handled.
    armed: bool,
}

impl ClientGone {
    /// For the connection on `socket`; polled only while the hyper
    /// connection that owns `socket` is alive.
    pub(super) fn new(socket: &tokio::net::TcpStream, state: Arc<ConnState>) -> ClientGone {
        ClientGone {
            fd: socket.as_raw_fd(),
            state,
            timer: None,
            armed: false,
        }
    }
}

impl Future for ClientGone {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if !this.state.handler_running() {
            // Polled again whenever the connection's task wakes, so the
            // next request arms it.
            this.armed = false;
            return Poll::Pending;
        }
        let next = || tokio::time::Instant::now() + LOOK_EVERY;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(next())));
        if !this.armed {
            timer.as_mut().reset(next());
            this.armed = true;
        }
        loop {
            ready!(timer.as_mut().poll(cx));
            if peer_left(this.fd) {
                return Poll::Ready(());
            }
            timer.as_mut().reset(next());
        }
    }
}

/// Whether the peer closed or reset the connection on `fd`: a peek at
/// one byte, which consumes nothing. The socket is non-blocking, so
/// nothing waiting is "still open".
#[allow(unsafe_code, reason = "borrowing the connection's socket; see below")]
fn peer_left(fd: RawFd) -> bool {
    // SAFETY: `fd` is the socket of the hyper connection that `ClientGone`
    // is polled beside, in the same task (`parking::serve`): that
    // connection owns the socket and is alive whenever this runs, so the
    // descriptor is open and is that socket.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut byte = [std::mem::MaybeUninit::<u8>::uninit(); 1];
    match socket2::SockRef::from(&socket).peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        ),
    }
}
