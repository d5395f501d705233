//! HTTP/1 on a plain listener: noticing a client that left while a
//! servlet handles its request.
//!
//! hyper reads nothing while it waits for a request's answer (`half_close`
//! lets a client that only ends its sending side still get its answer),
//! so a client that closed or reset its connection would go unseen until
//! the answer is written: a servlet would run to its end, or its
//! `timeout`, for nobody, holding its instance and its `max_concurrency`
//! place, and the log would say 200. [`ClientGone`] looks at the socket
//! without reading from it once a servlet has had the request for
//! [`LOOK_AFTER_MS`]: an end of stream or an error there means the
//! client is gone (as NGINX decides for a proxied request), and the
//! connection is dropped, which drops the handler (its request is logged
//! as 499). Bytes waiting (a pipelined request) are left for hyper.
//! Static answers, which come at once, are never held back by this.
//!
//! It sets no timer of its own: it looks whenever the connection's task
//! wakes, which the watchdog makes happen half a second after it finds a
//! request running, then at growing intervals (1, 2, 4 s...).

use std::future::Future;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use super::watchdog::ConnState;

/// How long a servlet has the request before the socket is looked at:
/// requests answered sooner cost nothing.
const LOOK_AFTER_MS: u64 = 250;

/// Ready when the client has closed or reset the connection while a
/// servlet handles a request on it.
pub(super) struct ClientGone {
    fd: RawFd,
    state: Arc<ConnState>,
}

impl ClientGone {
    /// For the connection on `socket`.
    ///
    /// # Safety
    ///
    /// The returned future may be polled only while `socket` is open: in
    /// `parking::serve` it is polled beside the hyper connection that owns
    /// the socket, in the same `select!`, and never after that connection
    /// ends or is taken apart.
    #[allow(unsafe_code, reason = "the contract of `peer_left`")]
    pub(super) unsafe fn new(socket: &tokio::net::TcpStream, state: Arc<ConnState>) -> ClientGone {
        ClientGone {
            fd: socket.as_raw_fd(),
            state,
        }
    }
}

impl Future for ClientGone {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if self.state.servlet_running_ms() >= LOOK_AFTER_MS && peer_left(self.fd) {
            return Poll::Ready(());
        }
        // Woken with the connection's task (see the module's doc).
        Poll::Pending
    }
}

/// Whether the peer closed or reset the connection on `fd`: a peek at
/// one byte, which consumes nothing. The socket is non-blocking, so
/// nothing waiting is "still open".
#[allow(unsafe_code, reason = "borrowing the connection's socket; see below")]
fn peer_left(fd: RawFd) -> bool {
    // SAFETY: `fd` is the socket `ClientGone::new` was given, which its
    // contract keeps open whenever the future is polled.
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
