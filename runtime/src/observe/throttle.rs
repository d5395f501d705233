//! Warnings a client can cause at will (a refused PROXY header on every
//! connection), let through at most once per period so the log cannot be
//! flooded; the ones held back are counted in the next line let through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Lets one event through per period.
#[derive(Debug)]
pub(crate) struct Throttle {
    every_ms: u64,
    /// When the last event was let through (coarse clock, ms; `u64::MAX`
    /// for never).
    last_ms: AtomicU64,
    /// Events held back since.
    held: AtomicU64,
}

impl Throttle {
    pub(crate) const fn new(every: Duration) -> Throttle {
        Throttle {
            every_ms: every.as_millis() as u64,
            last_ms: AtomicU64::new(u64::MAX),
            held: AtomicU64::new(0),
        }
    }

    /// `Some(held back since the last one)` when this event may be logged.
    pub(crate) fn allow(&self) -> Option<u64> {
        // The coarse clock runs once a server started it; started here
        // too, so a throttle used without one does not stop at its first
        // event for good.
        crate::clock::start();
        self.allow_at(crate::clock::now_ms())
    }

    fn allow_at(&self, now: u64) -> Option<u64> {
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == u64::MAX || now.saturating_sub(last) >= self.every_ms;
        if due
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_period_and_the_rest_counted() {
        let t = Throttle::new(Duration::from_secs(10));
        assert_eq!(t.allow_at(5), Some(0));
        assert_eq!(t.allow_at(6), None);
        assert_eq!(t.allow_at(9_000), None);
        assert_eq!(t.allow_at(10_005), Some(2));
        assert_eq!(t.allow_at(10_006), None);
    }
}
