//! A coarse millisecond clock for connection timeouts.
//!
//! Connection bookkeeping stamps every read and write; a background thread
//! advancing an atomic every few milliseconds makes each stamp a plain
//! atomic load instead of a clock syscall.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the clock advances.
pub(crate) const TICK: Duration = Duration::from_millis(5);

static NOW_MS: AtomicU64 = AtomicU64::new(0);
static START: OnceLock<Instant> = OnceLock::new();

/// Starts the ticker thread (once) and returns the clock's origin.
pub(crate) fn start() -> Instant {
    *START.get_or_init(|| {
        let origin = Instant::now();
        let spawned = std::thread::Builder::new()
            .name("swan-clock".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(TICK);
                    NOW_MS.store(origin.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
            });
        if let Err(e) = spawned {
            tracing::error!(error = %e, "cannot start the clock thread; timeouts will be coarse");
        }
        origin
    })
}

/// Milliseconds since [`start`], to within [`TICK`].
#[inline]
pub(crate) fn now_ms() -> u64 {
    NOW_MS.load(Ordering::Relaxed)
}

/// The `Instant` matching a [`now_ms`] value.
pub(crate) fn instant_at(ms: u64) -> Instant {
    start() + Duration::from_millis(ms)
}
