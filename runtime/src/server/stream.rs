//! The stream under every hyper connection: it stamps reads and writes
//! into the connection's state (for the watchdog), tells a request
//! boundary (for parking), rewrites hyper's own answers to refused heads
//! (`refused_head`), and sends files for `sendfile`.

use std::io;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::refused_head;
use super::sendfile::{Sender, Target};
use super::watchdog::ConnState;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

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
    /// Whether writes here are progress: not over TLS, where they only
    /// fill rustls's buffer ([`SocketStamp`] stamps the socket's instead).
    stamps_writes: bool,
    /// hyper's answer to a refused head, rewritten (`refused_head`) and
    /// being written: what was sent of it, and the length of hyper's
    /// bytes it stands for (reported written once it all is).
    rewritten: Option<(Vec<u8>, usize, usize)>,
    /// HTTP/1: [`ConnState::started`] when bytes of a head (not of a
    /// request body) were last read. Only while it is still current can
    /// hyper be refusing a head: those bytes started no request.
    head_read_at: Option<u32>,
}

/// The socket under TLS: a write the kernel took is what `send_timeout`
/// counts as progress (rustls takes plaintext into its buffer whether or
/// not the client reads; counted there, a client that stopped reading was
/// dropped after twice `send_timeout`).
pub(crate) struct SocketStamp<S: AsFd> {
    inner: S,
    state: Arc<ConnState>,
}

/// A TLS connection whose answer was cut off part-way ends with a reset,
/// as a plain one does (see `parking`): a close-delimited body (HTTP/1.0)
/// that ended with a FIN, even without close_notify, looks complete to
/// clients that forgive a missing close_notify (curl does).
impl<S: AsFd> Drop for SocketStamp<S> {
    fn drop(&mut self) {
        if self.state.is_aborted() {
            let _ = socket2::SockRef::from(&self.inner).set_linger(Some(std::time::Duration::ZERO));
        }
    }
}

impl<S: AsFd> SocketStamp<S> {
    pub(crate) fn new(inner: S, state: Arc<ConnState>) -> SocketStamp<S> {
        SocketStamp { inner, state }
    }
}

impl<S: AsFd> AsFd for SocketStamp<S> {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

impl<S: AsFd + std::os::fd::AsRawFd> std::os::fd::AsRawFd for SocketStamp<S> {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.inner.as_raw_fd()
    }
}

impl<S: AsFd + AsyncRead + Unpin> AsyncRead for SocketStamp<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.state.touched_socket();
        }
        result
    }
}

impl<S: AsFd + AsyncWrite + Unpin> AsyncWrite for SocketStamp<S> {
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
            stamps_writes: true,
            rewritten: None,
            head_read_at: None,
        }
    }

    /// Over TLS: write progress is stamped by the socket under it
    /// ([`SocketStamp`]), not here.
    pub(crate) fn writes_stamped_below(mut self) -> WatchedIo<S> {
        self.stamps_writes = false;
        self
    }

    /// Stamps a write as progress, unless the socket below stamps its own.
    fn stamp_write(&self, result: &Poll<io::Result<usize>>) {
        if self.stamps_writes {
            self.state.touch_write(result);
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

impl<S> Drop for WatchedIo<S> {
    /// A body offered to a stream that never took it (the connection ended
    /// first) is dropped with it: what its response held goes too.
    fn drop(&mut self) {
        drop(self.state.sendfile.take());
    }
}

/// Whether `read`, which ends with `\n`, ends with a blank line.
fn ends_blank_line(read: &[u8]) -> bool {
    read.ends_with(b"\n\r\n") || read.ends_with(b"\n\n")
}

/// Whether bytes ending with `tail` end a head: a blank line, `\r\n\r\n`
/// or, as hyper also accepts, bare `\n\n`.
fn ends_head(tail: &[u8; 4]) -> bool {
    ends_blank_line(tail)
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
            if !this.state.reading_body() {
                this.head_read_at = Some(this.state.started());
            }
            // HTTP/1 heads only (a body being read is left alone): the
            // last line ending read tells. A blank line with more bytes
            // after it leaves the next request's line open (a head
            // pipelined behind another in one read is judged on its own);
            // any other ends a line of the head being read, and a read
            // that ends with a blank line is a whole head.
            if !this.state.h2.load(Ordering::Relaxed)
                && !this.state.reading_body()
                && let Some(at) = new.iter().rposition(|&b| b == b'\n')
            {
                this.line_done = !ends_blank_line(&new[..=at]) || at + 1 == new.len();
            }
        }
        result
    }
}

impl<S: AsyncWrite + Unpin> WatchedIo<S> {
    /// Writes hyper's answer to a refused head as rewritten: `Ready` with
    /// the length of hyper's bytes once the rewritten ones are all sent
    /// (hyper passes the same bytes again after a `Pending`).
    fn poll_rewritten(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        loop {
            let Some((bytes, sent, stands_for)) = self.rewritten.as_mut() else {
                return Poll::Ready(Ok(0));
            };
            let result = Pin::new(&mut self.inner).poll_write(cx, &bytes[*sent..]);
            match &result {
                Poll::Ready(Ok(n)) if *n > 0 => {
                    *sent += n;
                    if *sent == bytes.len() {
                        let done = Poll::Ready(Ok(*stands_for));
                        self.rewritten = None;
                        self.stamp_write(&done);
                        return done;
                    }
                }
                Poll::Pending => return Poll::Pending,
                Poll::Ready(_) => {
                    self.rewritten = None;
                    self.stamp_write(&result);
                    return result;
                }
            }
        }
    }
}

impl<S: AsyncWrite + Target + Unpin> WatchedIo<S> {
    /// Sends the file bytes hyper has counted and the stream has not sent
    /// (see `sendfile`): ready once none are owed. Everything hyper writes
    /// after a file's head waits for this.
    fn poll_owed(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let Some(sender) = self.sender.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        let before = sender.left();
        let result = sender.poll_owed(&mut self.inner, cx);
        // Progress is activity, for `send_timeout`, even while pending.
        if sender.left() < before {
            self.state.wrote();
        }
        if sender.done() || matches!(result, Poll::Ready(Err(_))) {
            self.sender = None;
        }
        result
    }
}

impl<S: AsyncWrite + Target + Unpin> AsyncWrite for WatchedIo<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_owed(cx))?;
        this.state.sendfile.set_unflushed(true);
        if this.sender.is_none() {
            this.sender = this.state.sendfile.take();
        }
        if let Some(sender) = this.sender.as_mut() {
            let result = sender.poll_write(&mut this.inner, cx, data);
            if matches!(result, Poll::Ready(Err(_))) {
                this.sender = None;
            }
            this.stamp_write(&result);
            return result;
        }
        // hyper answers a refused head while no request is in flight and
        // after reading head bytes that started no request. A response's
        // own bytes go out while it is in flight, or just after it ended,
        // when no bytes were read since its request started: hyper reads
        // nothing while a bodyless request is answered. A request body's
        // bytes can be read after its handler returned, so a connection
        // that carried one is left alone (its refusals go out as hyper
        // wrote them, without `Server`). And the bytes would have to be an
        // exact refusal (see `refused_head`).
        if this.rewritten.is_none()
            && !this.state.in_flight()
            && !this.state.had_body()
            && this.head_read_at == Some(this.state.started())
            && let Some(r) = refused_head::rewrite(data, this.line_done)
        {
            if r.uri_too_long {
                this.state.uri_too_long.store(true, Ordering::Relaxed);
            }
            this.rewritten = Some((r.bytes, 0, data.len()));
        }
        if this.rewritten.is_some() {
            return this.poll_rewritten(cx);
        }
        let result = Pin::new(&mut this.inner).poll_write(cx, data);
        this.stamp_write(&result);
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
        this.stamp_write(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper flushes the stream only once its own buffer is written.
        let this = self.get_mut();
        ready!(this.poll_owed(cx))?;
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        if let Poll::Ready(Ok(())) = result {
            this.state.sendfile.set_unflushed(false);
            if let Some(waker) = this.retry.take() {
                waker.wake();
            }
        }
        result
    }

    /// hyper's end of a connection, once its own buffer is flushed. A
    /// released connection stays open (it is parked, or closed by its
    /// owner); any other ends its side.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // A response cut off part-way: no orderly end (over TLS its
        // close_notify would make a close-delimited body look complete);
        // the socket's close ends the connection.
        if this.state.is_aborted() {
            return Poll::Ready(Err(io::ErrorKind::ConnectionAborted.into()));
        }
        ready!(this.poll_owed(cx))?;
        if this.released {
            return Pin::new(&mut this.inner).poll_flush(cx);
        }
        Pin::new(&mut this.inner).poll_shutdown(cx)
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
}
