//! Request ids: 16 hex digits, unique within the process and, with a random
//! starting point per process, all but certainly across the processes of a
//! deployment. Made where the connection hands a request to the app.
//!
//! Each thread counts in a range of its own (the thread's number in the
//! top bits), so making an id touches no memory shared between cores.

use std::cell::Cell;
use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use http::HeaderValue;

/// Threads that made ids so far.
static THREADS: AtomicU64 = AtomicU64::new(0);
/// The process's random starting point.
static SEED: OnceLock<u64> = OnceLock::new();
/// Bits of an id that count; the bits above tell the threads apart.
const COUNT_BITS: u32 = 40;

thread_local! {
    /// This thread's next id.
    static NEXT: Cell<u64> = Cell::new({
        // std's hasher keys are random per process: a free seed.
        let seed = *SEED.get_or_init(|| {
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        });
        let thread = THREADS.fetch_add(1, Ordering::Relaxed);
        seed ^ (thread << COUNT_BITS)
    });
}

/// The id of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(u64);

impl RequestId {
    /// A new id.
    pub fn next() -> RequestId {
        NEXT.with(|next| {
            let id = next.get();
            // Count in the low bits only, never into another thread's range.
            let low = (id.wrapping_add(1)) & ((1 << COUNT_BITS) - 1);
            next.set((id & !((1 << COUNT_BITS) - 1)) | low);
            RequestId(id)
        })
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

/// The header carrying the request id: on every response, and on a
/// component's request.
pub const REQUEST_ID_HEADER: &str = "x-request-id";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_print_as_16_hex_digits() {
        let a = RequestId::next();
        let b = RequestId::next();
        assert_ne!(a, b);
        let other = std::thread::spawn(RequestId::next).join().expect("thread");
        assert_ne!(
            other.0 >> COUNT_BITS,
            a.0 >> COUNT_BITS,
            "threads share a range"
        );
        let text = a.to_string();
        assert_eq!(text.len(), 16);
        assert_eq!(text.as_bytes(), &a.hex());
        assert_eq!(a.header_value().as_bytes(), text.as_bytes());
    }
}
