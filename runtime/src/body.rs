//! The response body type every handler returns.
//!
//! An enum rather than a boxed trait object: a cached file is one `Bytes`
//! handed to hyper without a copy or an allocation, and large files stream
//! from disk in bounded chunks. Bodies a guest streams are boxed (one
//! allocation per response, next to a whole instance).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use tokio::io::{AsyncReadExt, Take};

use crate::file_stamp::OpenStamp;

/// Size of the chunks a large file is read in.
pub const FILE_CHUNK_BYTES: usize = 64 << 10;

/// Size of the placeholder chunks of a file the connection sends itself.
/// Never copied (see [`is_placeholder`]): the size only paces the body,
/// which yields the next chunk once the stream has sent the last.
const PLACEHOLDER_BYTES: usize = 1 << 20;

/// What placeholder chunks are cut from: never read, never written to a
/// socket, and in untouched zero pages (no memory).
static PLACEHOLDER: [u8; PLACEHOLDER_BYTES] = [0; PLACEHOLDER_BYTES];

/// Whether an answer with `status` has no body on the wire whatever it
/// was given: 1xx, 204 and 304 (RFC 9110 §6.4.1). hyper drops such a body
/// over HTTP/1 without reading it.
pub(crate) fn status_has_no_body(status: http::StatusCode) -> bool {
    status.is_informational()
        || status == http::StatusCode::NO_CONTENT
        || status == http::StatusCode::NOT_MODIFIED
}

/// Whether `data` is a placeholder chunk, to be sent from its file by the
/// connection rather than written.
pub(crate) fn is_placeholder(data: &Bytes) -> bool {
    data.as_ptr() == PLACEHOLDER.as_ptr()
}

/// Between a placeholder body and the stream that sends its file: how
/// many bytes the body has yielded and the stream has sent, and the body's
/// waker. The body yields its next chunk only once the stream has caught
/// up, so the response stays in flight (and its bytes counted) about as
/// long as its file is being sent.
#[derive(Default)]
pub(crate) struct Pacer {
    yielded: std::sync::atomic::AtomicU64,
    sent: std::sync::atomic::AtomicU64,
    waker: futures_util::task::AtomicWaker,
    /// What must live until the stream is done with the bytes (see
    /// [`Pacer::hold`]).
    held: std::sync::Mutex<Option<Box<dyn std::any::Any + Send>>>,
    /// The stream is done: sent everything, or gave up.
    closed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Pacer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pacer")
            .field("owed", &self.owed())
            .finish_non_exhaustive()
    }
}

impl Pacer {
    /// Bytes yielded that the stream has not sent yet.
    pub(crate) fn owed(&self) -> u64 {
        use std::sync::atomic::Ordering::Acquire;
        self.yielded
            .load(Acquire)
            .saturating_sub(self.sent.load(Acquire))
    }

    /// Keeps `what` until the stream is done with the bytes the body
    /// yielded (hyper drops a body once it has counted its last chunk,
    /// which may still be owed): at once when it is done already.
    pub(crate) fn hold(&self, what: Box<dyn std::any::Any + Send>) {
        use std::sync::atomic::Ordering::Acquire;
        // Checked under the lock `close` takes: a close between the check
        // and the store would leave `what` held for good.
        let Ok(mut held) = self.held.lock() else {
            return;
        };
        if !self.closed.load(Acquire) {
            *held = Some(what);
        }
    }

    /// The stream is done (everything sent, or it gave up): what was held
    /// goes now.
    pub(crate) fn close(&self) {
        let held = self.held.lock().ok().and_then(|mut h| {
            self.closed
                .store(true, std::sync::atomic::Ordering::Release);
            h.take()
        });
        drop(held);
    }

    /// The stream sent `n` more bytes; wakes the body once none are owed.
    pub(crate) fn sent(&self, n: u64) {
        self.sent.fetch_add(n, std::sync::atomic::Ordering::AcqRel);
        if self.owed() == 0 {
            self.waker.wake();
        }
    }
}

/// Part of an open file, to be sent as it is.
#[derive(Debug)]
pub(crate) struct FileRange {
    pub(crate) file: std::fs::File,
    /// Where the part starts in the file.
    pub(crate) offset: u64,
    pub(crate) len: u64,
    /// The file as it was opened, when a change while it is sent must cut
    /// the answer off.
    pub(crate) stamp: Option<OpenStamp>,
}

/// A response body.
#[derive(Debug)]
pub struct Body {
    kind: Kind,
}

#[derive(Debug)]
struct FileBody {
    /// The file until its first read; then the part of it being read,
    /// until its end.
    unread: Option<tokio::fs::File>,
    reading: Option<Take<tokio::fs::File>>,
    /// What the next chunk is read into.
    buf: BytesMut,
    /// Where the body starts in the file, and how much is left to read.
    start: u64,
    remaining: u64,
    /// Whether the seek to `start` has begun. Only reading needs it:
    /// `sendfile(2)` takes the offset itself.
    seeking: bool,
    /// The file as its answer's headers describe it: a change seen
    /// between two reads ends the body with an error.
    stamp: Option<OpenStamp>,
    /// A place the file holds (among its connection's open files) until
    /// the body is dropped.
    _place: Option<tokio::sync::OwnedSemaphorePermit>,
}

#[derive(Debug)]
enum Kind {
    Empty,
    Full(Option<Bytes>),
    /// Boxed: a file's state is large, and every cached response would
    /// carry its size.
    File(Box<FileBody>),
    /// A file the connection sends itself: placeholder bytes for hyper to
    /// frame and count (see `server::sendfile`).
    Placeholder {
        remaining: u64,
        pacer: std::sync::Arc<Pacer>,
    },
    Stream(UnsyncBoxBody<Bytes, io::Error>),
}

impl Body {
    /// No body at all.
    pub fn empty() -> Body {
        Body { kind: Kind::Empty }
    }

    /// A body held in memory.
    pub fn full(bytes: impl Into<Bytes>) -> Body {
        Body {
            kind: Kind::Full(Some(bytes.into())),
        }
    }

    /// `len` bytes of a file from `start` (the file's own position does not
    /// matter).
    pub fn file(file: tokio::fs::File, start: u64, len: u64) -> Body {
        Body::file_holding(file, start, len, None, None)
    }

    /// [`Body::file`], holding `place` until the body is dropped (a
    /// budget of open files). With `stamp` (the file as it was opened),
    /// a change to the file while it is sent (a write in place, a
    /// truncation) ends the body with an error ([`FileChanged`]), which
    /// cuts the answer off, rather than mixing two versions under one
    /// length and validator.
    ///
    /// [`FileChanged`]: crate::file_stamp::FileChanged
    pub(crate) fn file_holding(
        file: tokio::fs::File,
        start: u64,
        len: u64,
        place: Option<tokio::sync::OwnedSemaphorePermit>,
        stamp: Option<OpenStamp>,
    ) -> Body {
        Body {
            kind: Kind::File(Box::new(FileBody {
                unread: Some(file),
                reading: None,
                buf: BytesMut::new(),
                start,
                remaining: len,
                seeking: false,
                stamp,
                _place: place,
            })),
        }
    }

    /// A placeholder body's pacer (its bytes are sent by the connection).
    pub(crate) fn pacer(&self) -> Option<&std::sync::Arc<Pacer>> {
        match &self.kind {
            Kind::Placeholder { pacer, .. } => Some(pacer),
            _ => None,
        }
    }

    /// Whether this is a file body not yet read from.
    pub(crate) fn is_unread_file(&self) -> bool {
        matches!(&self.kind, Kind::File(f) if f.unread.is_some())
    }

    /// Takes the file out of a file body not yet read from, for a
    /// connection that sends it itself; the body then yields as many
    /// placeholder bytes, paced by `pacer`, which that connection replaces
    /// with the file's.
    pub(crate) fn take_file(&mut self, pacer: std::sync::Arc<Pacer>) -> Option<FileRange> {
        let Kind::File(f) = &mut self.kind else {
            return None;
        };
        let FileBody {
            unread,
            start,
            remaining,
            stamp,
            ..
        } = &mut **f;
        // A file never read has no operation under way: `try_into_std`
        // gives it back.
        match unread.take()?.try_into_std() {
            Ok(file) => {
                let range = FileRange {
                    file,
                    offset: *start,
                    len: *remaining,
                    stamp: *stamp,
                };
                self.kind = Kind::Placeholder {
                    remaining: range.len,
                    pacer,
                };
                Some(range)
            }
            Err(file) => {
                *unread = Some(file);
                None
            }
        }
    }

    /// Takes the bytes out of an in-memory body of at least `at_least`
    /// bytes, for a connection that writes them itself; the body then
    /// yields as many placeholder bytes, paced by `pacer`, as for a file.
    pub(crate) fn take_large_bytes(
        &mut self,
        at_least: usize,
        pacer: &std::sync::Arc<Pacer>,
    ) -> Option<Bytes> {
        let Kind::Full(Some(bytes)) = &self.kind else {
            return None;
        };
        if bytes.len() < at_least {
            return None;
        }
        let remaining = bytes.len() as u64;
        let Kind::Full(bytes) = std::mem::replace(
            &mut self.kind,
            Kind::Placeholder {
                remaining,
                pacer: pacer.clone(),
            },
        ) else {
            return None;
        };
        bytes
    }
}

#[cfg(test)]
impl Body {
    /// The bytes of an in-memory body (tests only).
    pub(crate) fn into_bytes(self) -> Option<Bytes> {
        match self.kind {
            Kind::Full(b) => b,
            Kind::Empty => Some(Bytes::new()),
            Kind::File(_) | Kind::Placeholder { .. } | Kind::Stream(_) => None,
        }
    }
}

impl Body {
    /// A body produced as it is sent (a guest's streamed response). An
    /// error ends the response abnormally: hyper closes the connection
    /// (HTTP/1.1) or resets the stream (HTTP/2) instead of ending it
    /// cleanly.
    pub fn stream(
        body: impl http_body::Body<Data = Bytes, Error = io::Error> + Send + 'static,
    ) -> Body {
        Body {
            kind: Kind::Stream(body.boxed_unsync()),
        }
    }

    /// Whether the body is read from somewhere as it is sent (a file on
    /// disk, a guest's stream) rather than held in memory.
    pub fn is_streamed(&self) -> bool {
        matches!(
            self.kind,
            Kind::File(_) | Kind::Placeholder { .. } | Kind::Stream(_)
        )
    }
}

impl Default for Body {
    fn default() -> Body {
        Body::empty()
    }
}

impl From<Bytes> for Body {
    fn from(bytes: Bytes) -> Body {
        Body::full(bytes)
    }
}

impl From<&'static str> for Body {
    fn from(s: &'static str) -> Body {
        Body::full(Bytes::from_static(s.as_bytes()))
    }
}

impl From<String> for Body {
    fn from(s: String) -> Body {
        Body::full(Bytes::from(s))
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match &mut self.get_mut().kind {
            Kind::Empty => Poll::Ready(None),
            Kind::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Kind::File(f) => {
                if f.reading.is_none()
                    && let Err(e) = ready!(f.poll_start(cx))
                {
                    return Poll::Ready(Some(Err(e)));
                }
                let f = &mut **f;
                let Some(reader) = f.reading.as_mut() else {
                    return Poll::Ready(None);
                };
                if f.buf.capacity() == 0 {
                    f.buf.reserve(FILE_CHUNK_BYTES);
                }
                let read = match ready!(tokio_util::io::poll_read_buf(
                    Pin::new(&mut *reader),
                    cx,
                    &mut f.buf
                )) {
                    Err(e) => Some(Err(e)),
                    Ok(0) => None,
                    Ok(_) => Some(Ok(f.buf.split().freeze())),
                };
                // Checked after each read: a change before or during it
                // shows, and the chunk is not sent.
                if let (Some(Ok(_)), Some(stamp)) = (&read, &f.stamp)
                    && let Err(e) = stamp.unchanged(reader.get_ref())
                {
                    return Poll::Ready(Some(Err(e)));
                }
                if read.is_none() {
                    f.reading = None;
                }
                file_frame(read, &mut f.remaining)
            }
            Kind::Placeholder { remaining, pacer } => {
                if *remaining == 0 {
                    return Poll::Ready(None);
                }
                if pacer.owed() > 0 {
                    pacer.waker.register(cx.waker());
                    if pacer.owed() > 0 {
                        return Poll::Pending;
                    }
                }
                let n = (*remaining).min(PLACEHOLDER_BYTES as u64) as usize;
                *remaining -= n as u64;
                pacer
                    .yielded
                    .fetch_add(n as u64, std::sync::atomic::Ordering::AcqRel);
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(&PLACEHOLDER[..n])))))
            }
            Kind::Stream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(b) => b.is_none(),
            Kind::File(f) => f.remaining == 0,
            Kind::Placeholder { remaining, .. } => *remaining == 0,
            Kind::Stream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::File(f) => SizeHint::with_exact(f.remaining),
            Kind::Placeholder { remaining, .. } => SizeHint::with_exact(*remaining),
            Kind::Stream(body) => body.size_hint(),
        }
    }
}

impl FileBody {
    /// Before the first read: positions the file at `start`, to be read
    /// from there.
    fn poll_start(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        use tokio::io::AsyncSeek;
        let Some(file) = self.unread.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        if self.start > 0 {
            if !self.seeking {
                Pin::new(&mut *file).start_seek(io::SeekFrom::Start(self.start))?;
                self.seeking = true;
            }
            ready!(Pin::new(&mut *file).poll_complete(cx))?;
        }
        if let Some(file) = self.unread.take() {
            self.reading = Some(file.take(self.remaining));
        }
        Poll::Ready(Ok(()))
    }
}

/// The frame for what a file's stream read.
fn file_frame(
    read: Option<io::Result<Bytes>>,
    remaining: &mut u64,
) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
    Poll::Ready(match read {
        Some(Ok(chunk)) => {
            *remaining = remaining.saturating_sub(chunk.len() as u64);
            Some(Ok(Frame::data(chunk)))
        }
        Some(Err(e)) => Some(Err(e)),
        None if *remaining > 0 => Some(Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "file shrank while it was being sent",
        ))),
        None => None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::Pacer;

    /// Sets its flag when dropped.
    struct Dropped(Arc<AtomicBool>);

    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn what_a_pacer_holds_goes_when_the_stream_is_done_and_not_before() {
        let pacer = Pacer::default();
        let gone = Arc::new(AtomicBool::new(false));
        pacer.hold(Box::new(Dropped(gone.clone())));
        assert!(
            !gone.load(Ordering::SeqCst),
            "dropped while bytes were owed"
        );
        pacer.close();
        assert!(
            gone.load(Ordering::SeqCst),
            "kept after the stream was done"
        );
        // Held after the stream gave up: dropped at once.
        let late = Arc::new(AtomicBool::new(false));
        pacer.hold(Box::new(Dropped(late.clone())));
        assert!(late.load(Ordering::SeqCst));
    }

    #[test]
    fn owed_bytes_are_those_yielded_and_not_yet_sent() {
        use std::sync::atomic::Ordering::Relaxed;
        let pacer = Pacer::default();
        pacer.yielded.store(1 << 20, Relaxed);
        assert_eq!(pacer.owed(), 1 << 20);
        pacer.sent(1000);
        assert_eq!(pacer.owed(), (1 << 20) - 1000);
        pacer.sent((1 << 20) - 1000);
        assert_eq!(pacer.owed(), 0);
    }
}
