//! A raw HTTP/2 peer for abuse tests: frames written by hand (RFC 9113
//! §4.1), so a test can send what no well-behaved client would.

use std::time::Duration;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Frame types.
pub mod kind {
    /// DATA
    pub const DATA: u8 = 0x0;
    /// HEADERS
    pub const HEADERS: u8 = 0x1;
    /// RST_STREAM
    pub const RST_STREAM: u8 = 0x3;
    /// SETTINGS
    pub const SETTINGS: u8 = 0x4;
    /// PING
    pub const PING: u8 = 0x6;
    /// GOAWAY
    pub const GOAWAY: u8 = 0x7;
    /// WINDOW_UPDATE
    pub const WINDOW_UPDATE: u8 = 0x8;
    /// CONTINUATION
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    /// END_STREAM (DATA, HEADERS)
    pub const END_STREAM: u8 = 0x1;
    /// ACK (SETTINGS, PING)
    pub const ACK: u8 = 0x1;
    /// END_HEADERS (HEADERS, CONTINUATION)
    pub const END_HEADERS: u8 = 0x4;
}

/// One frame's bytes.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = Vec::with_capacity(9 + payload.len());
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&(stream & 0x7fff_ffff).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// An HPACK block for `GET path` on `authority`, with only static-table
/// indexes and literals (no Huffman), so it needs no encoder state.
pub fn get_headers(path: &str, authority: &str) -> Vec<u8> {
    let mut block = vec![0x82, 0x86]; // :method GET, :scheme http
    // :path, literal without indexing, name index 4.
    block.push(0x04);
    block.push(path.len() as u8);
    block.extend_from_slice(path.as_bytes());
    // :authority, literal without indexing, name index 1.
    block.push(0x01);
    block.push(authority.len() as u8);
    block.extend_from_slice(authority.as_bytes());
    block
}

/// A frame read back: type, flags, stream, payload.
#[derive(Debug)]
pub struct Frame {
    /// Type.
    pub kind: u8,
    /// Flags.
    pub flags: u8,
    /// Stream id.
    pub stream: u32,
    /// Payload.
    pub payload: Vec<u8>,
}

/// A connection that has sent the preface and an empty SETTINGS frame.
pub struct H2Conn {
    /// The socket.
    pub stream: TcpStream,
}

impl H2Conn {
    /// Connects and sends the preface and SETTINGS.
    pub async fn open(addr: std::net::SocketAddr) -> Result<H2Conn> {
        let mut stream = TcpStream::connect(addr).await?;
        stream.write_all(PREFACE).await?;
        stream.write_all(&frame(kind::SETTINGS, 0, 0, &[])).await?;
        Ok(H2Conn { stream })
    }

    /// Sends raw bytes; false once the server has closed the connection.
    pub async fn send(&mut self, bytes: &[u8]) -> bool {
        self.stream.write_all(bytes).await.is_ok()
    }

    /// Reads the next frame within `wait`; `None` at EOF, on an error or
    /// after `wait`.
    pub async fn next_frame(&mut self, wait: Duration) -> Option<Frame> {
        let read = async {
            let mut head = [0u8; 9];
            self.stream.read_exact(&mut head).await.ok()?;
            let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
            let mut payload = vec![0u8; len];
            self.stream.read_exact(&mut payload).await.ok()?;
            Some(Frame {
                kind: head[3],
                flags: head[4],
                stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
                payload,
            })
        };
        tokio::time::timeout(wait, read).await.ok().flatten()
    }

    /// Sends `block` as one HEADERS frame on `stream` (ending the stream
    /// when `end`) and waits for the answer's HEADERS on it.
    pub async fn request(
        &mut self,
        stream: u32,
        block: &[u8],
        end: bool,
        wait: Duration,
    ) -> Option<Frame> {
        let flags = flag::END_HEADERS | if end { flag::END_STREAM } else { 0 };
        self.send(&frame(kind::HEADERS, flags, stream, block)).await;
        self.wait_for(wait, |f| f.kind == kind::HEADERS && f.stream == stream)
            .await
    }

    /// Reads frames until one matches, the connection ends, or `wait`
    /// passes; acknowledges the server's SETTINGS on the way.
    pub async fn wait_for(
        &mut self,
        wait: Duration,
        mut matches: impl FnMut(&Frame) -> bool,
    ) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let f = self.next_frame(left).await?;
            if f.kind == kind::SETTINGS && f.flags & flag::ACK == 0 {
                let _ = self
                    .stream
                    .write_all(&frame(kind::SETTINGS, flag::ACK, 0, &[]))
                    .await;
            }
            if matches(&f) {
                return Some(f);
            }
        }
    }
}
