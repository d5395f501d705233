//! Request counters that cost a few uncontended atomic adds per request:
//! each counter set is split into shards, one per worker thread (by a
//! thread-local index), each on its own cache line; a scrape adds the
//! shards up.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crossbeam_utils::CachePadded;

/// Upper bounds (seconds) of the latency histogram's buckets; one more
/// bucket holds everything slower.
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Shards per counter set (threads beyond this share shards).
pub(crate) const SHARDS: usize = 16;
/// Status classes counted: 1xx to 5xx, and anything else.
pub const STATUS_CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

#[derive(Default)]
struct Shard {
    by_class: [AtomicU64; 6],
    bytes: AtomicU64,
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

/// Requests, bytes and latency of one route (or of a site's static files).
pub struct RouteCounters {
    shards: Box<[CachePadded<Shard>]>,
    /// The servlet route counted (empty for a site's files), shared:
    /// access log lines carry it.
    pub route: Arc<str>,
}

impl std::fmt::Debug for RouteCounters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteCounters").finish_non_exhaustive()
    }
}

impl Default for RouteCounters {
    fn default() -> Self {
        RouteCounters::named(Arc::from(""))
    }
}

impl RouteCounters {
    /// The counters of servlet route `route`.
    pub fn named(route: Arc<str>) -> RouteCounters {
        RouteCounters {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(Shard::default()))
                .collect(),
            route,
        }
    }
}

/// A sum of every shard, for a scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteTotals {
    /// Requests by status class ([`STATUS_CLASSES`]).
    pub by_class: [u64; 6],
    /// Response body bytes sent.
    pub bytes: u64,
    /// Requests per latency bucket (not cumulative; the last is +Inf).
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    /// Total latency, in seconds.
    pub sum_seconds: f64,
}

impl RouteTotals {
    /// Requests of every class.
    pub fn requests(&self) -> u64 {
        self.by_class.iter().sum()
    }
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// This thread's shard, `0..16`.
pub(crate) fn shard_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

fn class_index(status: u16) -> usize {
    match status {
        100..=599 => usize::from(status / 100) - 1,
        _ => 5,
    }
}

fn bucket_index(elapsed: Duration) -> usize {
    let secs = elapsed.as_secs_f64();
    LATENCY_BUCKETS
        .iter()
        .position(|&b| secs <= b)
        .unwrap_or(LATENCY_BUCKETS.len())
}

impl RouteCounters {
    /// Counts one answered request.
    #[inline]
    pub fn record(&self, status: u16, bytes: u64, elapsed: Duration) {
        let s = &self.shards[shard_index()];
        s.by_class[class_index(status)].fetch_add(1, Ordering::Relaxed);
        s.bytes.fetch_add(bytes, Ordering::Relaxed);
        s.buckets[bucket_index(elapsed)].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        s.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Adds body bytes counted after the fact (a streamed body).
    pub fn add_bytes(&self, bytes: u64) {
        self.shards[shard_index()]
            .bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// Every shard added up.
    pub fn totals(&self) -> RouteTotals {
        let mut t = RouteTotals::default();
        let mut micros = 0u64;
        for s in self.shards.iter() {
            for (total, c) in t.by_class.iter_mut().zip(&s.by_class) {
                *total += c.load(Ordering::Relaxed);
            }
            t.bytes += s.bytes.load(Ordering::Relaxed);
            for (total, b) in t.buckets.iter_mut().zip(&s.buckets) {
                *total += b.load(Ordering::Relaxed);
            }
            micros = micros.wrapping_add(s.sum_micros.load(Ordering::Relaxed));
        }
        t.sum_seconds = micros as f64 / 1e6;
        t
    }
}

/// A plain sharded counter (cache hits, dropped log lines, ...).
pub struct Counter {
    shards: Box<[CachePadded<AtomicU64>]>,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counter({})", self.get())
    }
}

impl Default for Counter {
    fn default() -> Self {
        Counter {
            shards: (0..SHARDS)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
        }
    }
}

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&self, n: u64) {
        self.shards[shard_index()].fetch_add(n, Ordering::Relaxed);
    }

    /// The total.
    pub fn get(&self) -> u64 {
        self.shards.iter().map(|s| s.load(Ordering::Relaxed)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_land_in_their_class_and_bucket() {
        let c = RouteCounters::default();
        c.record(200, 100, Duration::from_micros(300));
        c.record(404, 10, Duration::from_millis(3));
        c.record(503, 0, Duration::from_secs(30));
        c.record(42, 0, Duration::ZERO);
        let t = c.totals();
        assert_eq!(t.by_class, [0, 1, 0, 1, 1, 1]);
        assert_eq!(t.requests(), 4);
        assert_eq!(t.bytes, 110);
        assert_eq!(t.buckets[0], 2); // 300 µs and 0 s: <= 0.5 ms
        assert_eq!(t.buckets[3], 1); // 3 ms: <= 5 ms
        assert_eq!(t.buckets[LATENCY_BUCKETS.len()], 1); // 30 s: +Inf
        assert!((t.sum_seconds - 30.0033).abs() < 1e-6);
        // Counts from other threads add up.
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        c.record(200, 1, Duration::ZERO);
                    }
                });
            }
        });
        assert_eq!(c.totals().by_class[1], 4001);
    }
}
