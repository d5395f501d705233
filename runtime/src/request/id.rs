//! Request ids: 16 hex digits, unique within the process and, with a random
//! starting point per process, all but certainly across the processes of a
//! deployment. Made where the connection hands a request to the app.

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use http::HeaderValue;

static NEXT: AtomicU64 = AtomicU64::new(0);
static BASE: OnceLock<u64> = OnceLock::new();

/// The id of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(u64);

impl RequestId {
    /// A new id.
    pub fn next() -> RequestId {
        let base = *BASE.get_or_init(|| {
            // std's hasher keys are random per process: a free seed.
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
        RequestId(base.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    /// The id as 16 lower-case hex digits, without allocating.
    pub fn hex(self) -> [u8; 16] {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 16];
        for (i, b) in out.iter_mut().enumerate() {
            *b = DIGITS[((self.0 >> (60 - 4 * i)) & 0xf) as usize];
        }
        out
    }

    /// The id as a header value.
    pub fn header_value(self) -> HeaderValue {
        // Hex digits are always a valid header value.
        HeaderValue::from_bytes(&self.hex()).unwrap_or(HeaderValue::from_static("0"))
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_print_as_16_hex_digits() {
        let a = RequestId::next();
        let b = RequestId::next();
        assert_ne!(a, b);
        let text = a.to_string();
        assert_eq!(text.len(), 16);
        assert_eq!(text.as_bytes(), &a.hex());
        assert_eq!(a.header_value().as_bytes(), text.as_bytes());
    }
}
