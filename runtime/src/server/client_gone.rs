//! HTTP/1: noticing a client that left while a servlet handles its
//! request, on plain and TLS listeners.
//!
//! hyper reads nothing while it waits for a request's answer (`half_close`
//! lets a client that only ends its sending side still get its answer),
//! so a client that closed or reset its connection would go unseen until
//! the answer is written: a servlet would run to its end, or its
//! `timeout`, for nobody, holding its instance and its `max_concurrency`
//! place, and the log would say 200. [`ClientGone`] asks the kernel about
//! the socket once a servlet has had the request for [`LOOK_AFTER_MS`]:
//! the peer's end of stream (`POLLRDHUP`) or a reset (`POLLHUP`,
//! `POLLERR`) means the client is gone, as NGINX decides for a proxied
//! request (`EPOLLRDHUP`). Nothing is read, so it works the same under
//! TLS (a `close_notify` alert still waiting is not mistaken for a
//! request) and behind a pipelined request still unread. The connection
//! is dropped, which drops the handler (its request is logged as 499).
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
    /// None: a connection not watched (HTTP/2 sees its client leave).
    fd: Option<RawFd>,
    state: Arc<ConnState>,
}

impl ClientGone {
    /// For the connection on `socket`.
    ///
    /// # Safety
    ///
    /// The returned future may be polled only while `socket` is open: it
    /// is polled beside the hyper connection that owns the socket (itself,
    /// or under TLS), in the same `select!`, and never after that
    /// connection ends or is taken apart.
    #[allow(unsafe_code, reason = "the contract of `peer_left`")]
    pub(super) unsafe fn new(socket: &impl AsRawFd, state: Arc<ConnState>) -> ClientGone {
        ClientGone {
            fd: Some(socket.as_raw_fd()),
            state,
        }
    }

    /// Never ready.
    pub(super) fn unwatched(state: Arc<ConnState>) -> ClientGone {
        ClientGone { fd: None, state }
    }
}

impl Future for ClientGone {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        if let Some(fd) = self.fd
            && self.state.servlet_running_ms() >= LOOK_AFTER_MS
            && peer_left(fd)
        {
            return Poll::Ready(());
        }
        // Woken with the connection's task (see the module's doc).
        Poll::Pending
    }
}

/// Whether the peer closed or reset the connection on `fd`: a poll that
/// does not wait, and consumes nothing.
#[allow(unsafe_code, reason = "borrowing the connection's socket; see below")]
fn peer_left(fd: RawFd) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    // SAFETY: `fd` is the socket `ClientGone::new` was given, which its
    // contract keeps open whenever the future is polled.
    let socket = unsafe { BorrowedFd::borrow_raw(fd) };
    let mut fds = [PollFd::new(&socket, PollFlags::RDHUP)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&now)) {
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
        Err(_) => false,
    }
}
