//! Files sent with `sendfile(2)` on plain TCP: the kernel copies from the
//! page cache to the socket, with no read into user space and no copy
//! through hyper's buffer.
//!
//! hyper still frames the response: the body becomes placeholder chunks
//! (see `Body::take_file`), so hyper writes the head with the right
//! `Content-Length`, counts the body and keeps the connection's state as
//! for any response. A placeholder reaches hyper as a [`Chunk::Ghost`]: a
//! length with no bytes, which hyper counts and copies nothing of (its
//! flattening write buffer copies a chunk's slices, and a ghost has none).
//! The connection's stream (`WatchedIo`, in `stream`) lets the head
//! through, then sends as many bytes of the file as hyper counted before
//! it writes anything else; the body yields its next chunk once they are
//! sent (`body::Pacer`).
//!
//! The stream can tell where the head ends only if hyper had nothing else
//! left to write when the response was offered (but a `100 Continue` head,
//! which it lets through ahead of the response's own): a response offered while
//! an earlier one is still being written (pipelining) is read from the
//! file as usual.

use std::io;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncWrite, Interest};
use tokio::net::TcpStream;

use crate::body::{Body, FileRange, Pacer};

/// In-memory bodies from this size are written by the stream from where
/// they are (the cache) instead of copied into hyper's buffer first; below
/// it, one copy and one `write(2)` for head and body is cheaper.
const LARGE_BODY: usize = 64 << 10;

/// What [`Handoff::offer`] did with a response's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handed {
    /// Left to hyper.
    No,
    /// A file, for `sendfile(2)`.
    File,
    /// Bytes in memory, written from where they are.
    Memory,
}

/// What a [`Sender`] sends in place of the placeholders.
#[derive(Debug)]
enum Source {
    File(FileRange),
    /// The bytes, from the first not yet sent.
    Memory(Bytes),
}

/// A stream `sendfile(2)` may write to.
pub(crate) trait Target {
    /// Sends up to `count` bytes of `file` from `offset`; the number sent.
    fn poll_sendfile(
        &self,
        _cx: &mut Context<'_>,
        _file: &std::fs::File,
        _offset: u64,
        _count: usize,
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Err(io::Error::from(io::ErrorKind::Unsupported)))
    }

    /// Makes closing the connection a reset, which drops what its socket
    /// has not sent yet.
    fn reset_on_close(&self) {}
}

impl Target for TcpStream {
    fn poll_sendfile(
        &self,
        cx: &mut Context<'_>,
        file: &std::fs::File,
        offset: u64,
        count: usize,
    ) -> Poll<io::Result<usize>> {
        loop {
            ready!(self.poll_write_ready(cx))?;
            let sent = self.try_io(Interest::WRITABLE, || {
                let mut at = offset;
                rustix::fs::sendfile(self, file, Some(&mut at), count).map_err(io::Error::from)
            });
            match sent {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                other => return Poll::Ready(other),
            }
        }
    }

    fn reset_on_close(&self) {
        let _ = socket2::SockRef::from(self).set_linger(Some(std::time::Duration::ZERO));
    }
}

// TLS encrypts in user space: never offered a file (see `Handoff::enable`).
impl<S> Target for tokio_rustls::server::TlsStream<S> {}

#[cfg(test)]
impl Target for () {}

/// Where a connection's service leaves a file for its stream to send.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    /// Plain TCP: the stream can send files.
    enabled: AtomicBool,
    /// Whether `slot` holds a file (read on every write, locked only then).
    offered: AtomicBool,
    /// Boxed, like the sender in `WatchedIo`: every connection holds the
    /// slot, few ever fill it (a pointer here, not a file range).
    slot: Mutex<Option<Box<Sender>>>,
    /// Bytes were written that have not been flushed since: hyper may
    /// still hold an earlier response.
    unflushed: AtomicBool,
}

impl Handoff {
    /// The connection's stream is plain TCP.
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// An HTTP/1 response about to be written: when its body is a file, or
    /// at least [`LARGE_BODY`] bytes in memory, and nothing else is waiting
    /// to be written, the stream sends it itself.
    pub(crate) fn offer(&self, body: &mut Body) -> Handed {
        // No lock unless there is a body to hand over: a small cached
        // response pays two atomic loads and two matches.
        if !self.enabled.load(Ordering::Relaxed)
            || self.unflushed.load(Ordering::Relaxed)
            || !(body.is_unread_file()
                || http_body::Body::size_hint(body).lower() >= LARGE_BODY as u64)
        {
            return Handed::No;
        }
        let Ok(mut slot) = self.slot.lock() else {
            return Handed::No;
        };
        let pacer = std::sync::Arc::new(Pacer::default());
        let (source, left, handed) = if let Some(range) = body.take_file(pacer.clone()) {
            let len = range.len;
            (Source::File(range), len, Handed::File)
        } else if let Some(bytes) = body.take_large_bytes(LARGE_BODY, &pacer) {
            let len = bytes.len() as u64;
            (Source::Memory(bytes), len, Handed::Memory)
        } else {
            return Handed::No;
        };
        *slot = Some(Box::new(Sender {
            source,
            left,
            pacer,
            head: Head::Start,
        }));
        self.offered.store(true, Ordering::Relaxed);
        handed
    }

    /// Whether a file waits for the next response's head.
    pub(crate) fn offered(&self) -> bool {
        self.offered.load(Ordering::Relaxed)
    }

    pub(crate) fn unflushed(&self) -> bool {
        self.unflushed.load(Ordering::Relaxed)
    }

    pub(crate) fn set_unflushed(&self, unflushed: bool) {
        self.unflushed.store(unflushed, Ordering::Relaxed);
    }

    /// The file offered for the next response, if any.
    pub(crate) fn take(&self) -> Option<Box<Sender>> {
        if !self.offered.swap(false, Ordering::Relaxed) {
            return None;
        }
        self.slot.lock().ok()?.take()
    }
}

/// `\r\n\r\n`, which ends a response head.
const HEAD_END: &[u8; 4] = b"\r\n\r\n";

/// How an interim (1xx) head starts: hyper may write a `100 Continue`
/// ahead of the response's own head.
const INTERIM: &[u8] = b"HTTP/1.1 1";

#[derive(Debug)]
enum Head {
    /// Nothing of the next head written yet.
    Start,
    /// `matched`: how many bytes of [`HEAD_END`] the bytes written so far
    /// end with; `interim`: the head is a 1xx one, which the response's
    /// own head follows.
    Reading {
        matched: usize,
        interim: bool,
    },
    Done,
}

/// One response's writes: the head as hyper wrote it, then the file in
/// place of the placeholders.
#[derive(Debug)]
pub(crate) struct Sender {
    source: Source,
    /// File bytes not yet sent.
    left: u64,
    /// How many the body has yielded (hyper counted) beyond those sent.
    pacer: std::sync::Arc<Pacer>,
    head: Head,
}

impl Sender {
    /// Whether the whole file has been sent.
    pub(crate) fn done(&self) -> bool {
        self.left == 0
    }

    /// File bytes not yet sent.
    pub(crate) fn left(&self) -> u64 {
        self.left
    }

    /// Writes `data`, or part of it: the response's head. Once the head
    /// is out, whatever hyper writes comes after the file: the bytes hyper
    /// counted are sent first (`poll_owed`), and bytes written before the
    /// body ended are an error.
    pub(crate) fn poll_write<S: AsyncWrite + Target + Unpin>(
        &mut self,
        stream: &mut S,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.head {
            Head::Done => Poll::Ready(Err(io::Error::other(
                "bytes written before a file's body ended",
            ))),
            Head::Start | Head::Reading { .. } => {
                let (matched, interim) = match self.head {
                    Head::Reading { matched, interim } => (matched, interim),
                    // A head's first write holds its whole status line
                    // (hyper writes its buffer from the start).
                    _ => (0, data.starts_with(INTERIM)),
                };
                let (upto, _) = scan(matched, data);
                let n = ready!(std::pin::Pin::new(stream).poll_write(cx, &data[..upto]))?;
                self.head = match scan(matched, &data[..n]) {
                    (_, 4) if interim => Head::Start,
                    (_, 4) => Head::Done,
                    (_, matched) => Head::Reading { matched, interim },
                };
                Poll::Ready(Ok(n))
            }
        }
    }

    /// Sends the file bytes hyper has counted and the stream has not sent:
    /// ready once none are owed (or the head is not out yet).
    pub(crate) fn poll_owed<S: AsyncWrite + Target + Unpin>(
        &mut self,
        stream: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        if !matches!(self.head, Head::Done) {
            return Poll::Ready(Ok(()));
        }
        loop {
            let owed = self.pacer.owed().min(self.left);
            if owed == 0 {
                return Poll::Ready(Ok(()));
            }
            let count = usize::try_from(owed).unwrap_or(usize::MAX);
            let n = match &mut self.source {
                Source::File(range) => {
                    let n = ready!(stream.poll_sendfile(cx, &range.file, range.offset, count))?;
                    if n == 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "file shrank while it was being sent",
                        )));
                    }
                    // Checked after each send: a change before or during it
                    // shows. What was sent may hold new bytes; a reset
                    // (not a clean close) drops what the socket still
                    // holds, and the client never sees the answer end.
                    if let Some(stamp) = &range.stamp
                        && let Err(e) = stamp.unchanged(&range.file)
                    {
                        stream.reset_on_close();
                        return Poll::Ready(Err(e));
                    }
                    range.offset += n as u64;
                    n
                }
                Source::Memory(bytes) => {
                    let part = &bytes[..count.min(bytes.len())];
                    let n = ready!(std::pin::Pin::new(&mut *stream).poll_write(cx, part))?;
                    if n == 0 {
                        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                    }
                    bytes.advance(n);
                    n
                }
            };
            self.left -= n as u64;
            self.pacer.sent(n as u64);
        }
    }
}

impl Drop for Sender {
    /// Done with the body's bytes, sent or not: the response ends now.
    fn drop(&mut self) {
        self.pacer.close();
    }
}

/// A response body's data as hyper sees it: bytes to write, or a
/// placeholder's length, which hyper counts and the stream sends from a
/// file (see the module's documentation).
///
/// A ghost breaks one promise of [`Buf`]: its `chunk` is empty while
/// `remaining` is not. That is what keeps hyper from copying it: hyper's
/// flattening write buffer (`writev(false)`, HTTP/1 only) copies chunks
/// until an empty one, and counts a body by `remaining`. Ghosts exist only
/// on plain-TCP HTTP/1 connections, whose stream replaces them; the
/// sendfile tests compare every byte sent.
#[derive(Debug)]
pub(crate) enum Chunk {
    Bytes(Bytes),
    Ghost(usize),
}

impl Chunk {
    pub(crate) fn new(data: Bytes) -> Chunk {
        if crate::body::is_placeholder(&data) {
            Chunk::Ghost(data.len())
        } else {
            Chunk::Bytes(data)
        }
    }
}

impl Buf for Chunk {
    #[inline]
    fn remaining(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.remaining(),
            Chunk::Ghost(n) => *n,
        }
    }

    #[inline]
    fn chunk(&self) -> &[u8] {
        match self {
            Chunk::Bytes(b) => b.chunk(),
            Chunk::Ghost(_) => &[],
        }
    }

    #[inline]
    fn advance(&mut self, cnt: usize) {
        match self {
            Chunk::Bytes(b) => b.advance(cnt),
            Chunk::Ghost(n) => *n = n.saturating_sub(cnt),
        }
    }
}

/// Follows `data` from `matched` bytes of [`HEAD_END`]: how many bytes of
/// `data` belong to the head (all of them when it does not end there), and
/// how many bytes of [`HEAD_END`] they end with (4: the head ended).
fn scan(mut matched: usize, data: &[u8]) -> (usize, usize) {
    for (i, &b) in data.iter().enumerate() {
        matched = if b == HEAD_END[matched] {
            matched + 1
        } else {
            usize::from(b == b'\r')
        };
        if matched == 4 {
            return (i + 1, 4);
        }
    }
    (data.len(), matched)
}

#[cfg(test)]
mod tests {
    use super::{Handoff, Sender, scan};

    /// Every connection holds a handoff and a sender slot, nearly always
    /// empty: a file range in each (48 bytes, twice) cost ten thousand
    /// idle connections 5 MiB (BENCHMARKS.md).
    #[test]
    fn an_idle_connection_pays_pointers_for_sendfile_not_file_ranges() {
        assert_eq!(size_of::<Option<Box<Sender>>>(), size_of::<usize>());
        assert!(size_of::<Handoff>() <= 3 * size_of::<usize>());
    }

    #[test]
    fn the_head_ends_at_the_first_blank_line_however_it_is_split() {
        assert_eq!(scan(0, b"HTTP/1.1 200 OK\r\na: b\r\n\r\n\0\0\0"), (25, 4));
        assert_eq!(scan(0, b"HTTP/1.1 200 OK\r\n"), (17, 2));
        assert_eq!(scan(2, b"\r\n\0"), (2, 4));
        assert_eq!(scan(3, b"\n"), (1, 4));
        assert_eq!(scan(1, b"\r\n\r\n"), (4, 4));
        assert_eq!(scan(0, b"\r\n\r\r\n\r\n"), (7, 4));
        assert_eq!(scan(0, b"a\r\nb\r\n"), (6, 2));
    }
}
