//! The response body type every handler returns.
//!
//! An enum rather than a boxed trait object: a cached file is one `Bytes`
//! handed to hyper without a copy or an allocation, and large files stream
//! from disk in bounded chunks. Bodies a guest streams are boxed (one
//! allocation per response, next to a whole instance).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_core::Stream;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use tokio::io::{AsyncReadExt, Take};
use tokio_util::io::ReaderStream;

/// Size of the chunks a large file is read in.
pub const FILE_CHUNK_BYTES: usize = 64 << 10;

/// A response body.
#[derive(Debug)]
pub struct Body {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Empty,
    Full(Option<Bytes>),
    File {
        stream: ReaderStream<Take<tokio::fs::File>>,
        remaining: u64,
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

    /// `len` bytes streamed from an already positioned file.
    pub fn file(file: tokio::fs::File, len: u64) -> Body {
        Body {
            kind: Kind::File {
                stream: ReaderStream::with_capacity(file.take(len), FILE_CHUNK_BYTES),
                remaining: len,
            },
        }
    }
}

#[cfg(test)]
impl Body {
    /// The bytes of an in-memory body (tests only).
    pub(crate) fn into_bytes(self) -> Option<Bytes> {
        match self.kind {
            Kind::Full(b) => b,
            Kind::Empty => Some(Bytes::new()),
            Kind::File { .. } | Kind::Stream(_) => None,
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
        matches!(self.kind, Kind::File { .. } | Kind::Stream(_))
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
            Kind::File { stream, remaining } => match ready!(Pin::new(stream).poll_next(cx)) {
                Some(Ok(chunk)) => {
                    *remaining = remaining.saturating_sub(chunk.len() as u64);
                    Poll::Ready(Some(Ok(Frame::data(chunk))))
                }
                Some(Err(e)) => Poll::Ready(Some(Err(e))),
                None if *remaining > 0 => Poll::Ready(Some(Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shrank while it was being sent",
                )))),
                None => Poll::Ready(None),
            },
            Kind::Stream(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Empty => true,
            Kind::Full(b) => b.is_none(),
            Kind::File { remaining, .. } => *remaining == 0,
            Kind::Stream(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Empty => SizeHint::with_exact(0),
            Kind::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Kind::File { remaining, .. } => SizeHint::with_exact(*remaining),
            Kind::Stream(body) => body.size_hint(),
        }
    }
}
