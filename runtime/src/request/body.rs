//! Reading a request body under the server's rules: a size limit, and a
//! deadline that grows with progress (`body_timeout` plus one second per
//! `body_min_rate` bytes received), so a slow but steady upload completes
//! and a trickle that would hold a connection forever does not.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header;
use http_body::Body as HttpBody;
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::RequestError;

/// The rules a request body is read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyPolicy {
    /// Largest body, in bytes (413 past it).
    pub max_bytes: u64,
    /// Time allowed before the minimum rate counts.
    pub timeout: Duration,
    /// Bytes per second the body must keep up after `timeout`; 0 makes
    /// `timeout` a limit on the whole body.
    pub min_rate: u64,
}

impl BodyPolicy {
    /// When the body must be complete, having received `received` bytes by
    /// now, for a body that started at `started`.
    pub fn deadline(&self, started: Instant, received: u64) -> Instant {
        let earned = match self.min_rate {
            0 => Duration::ZERO,
            rate => Duration::from_secs_f64(received as f64 / rate as f64),
        };
        started + self.timeout + earned
    }

    /// The same rules with a smaller size limit.
    pub fn at_most(self, max_bytes: u64) -> BodyPolicy {
        BodyPolicy {
            max_bytes: self.max_bytes.min(max_bytes),
            ..self
        }
    }
}

/// The length a message's `Content-Length` declares, if it is a number.
pub fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads a body whole under `policy`. A declared `Content-Length` over
/// the limit fails before anything is read.
pub async fn read_whole<B>(
    headers: &http::HeaderMap,
    mut body: B,
    policy: BodyPolicy,
) -> Result<Bytes, RequestError>
where
    B: HttpBody<Data = Bytes> + Send + Unpin,
{
    let declared = declared_length(headers);
    if declared.is_some_and(|n| n > policy.max_bytes) {
        return Err(RequestError::PayloadTooLarge);
    }
    if declared == Some(0) || body.is_end_stream() {
        return Ok(Bytes::new());
    }
    let started = Instant::now();
    let mut received = BytesMut::new();
    loop {
        let deadline = policy.deadline(started, received.len() as u64);
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(RequestError::BodyTimeout),
            Ok(None) => break,
            Ok(Some(Err(_))) => return Err(RequestError::BadRequest("unreadable request body")),
            Ok(Some(Ok(frame))) => frame,
        };
        if let Ok(data) = frame.into_data() {
            if (received.len() + data.len()) as u64 > policy.max_bytes {
                return Err(RequestError::PayloadTooLarge);
            }
            received.extend_from_slice(&data);
        }
    }
    Ok(received.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_grows_with_progress() {
        let policy = BodyPolicy {
            max_bytes: 1 << 20,
            timeout: Duration::from_secs(10),
            min_rate: 1000,
        };
        let t0 = Instant::now();
        assert_eq!(policy.deadline(t0, 0), t0 + Duration::from_secs(10));
        assert_eq!(policy.deadline(t0, 5000), t0 + Duration::from_secs(15));
        let flat = BodyPolicy {
            min_rate: 0,
            ..policy
        };
        assert_eq!(flat.deadline(t0, 1 << 20), t0 + Duration::from_secs(10));
        assert_eq!(policy.at_most(10).max_bytes, 10);
    }
}
