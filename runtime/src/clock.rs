//! A coarse millisecond clock for connection timeouts, and a coarse wall
//! clock for access log timestamps.
//!
//! Connection bookkeeping stamps every read and write; a background thread
//! advancing an atomic every few milliseconds makes each stamp a plain
//! atomic load instead of a clock syscall.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// How often the clock advances.
pub(crate) const TICK: Duration = Duration::from_millis(5);

static NOW_MS: AtomicU64 = AtomicU64::new(0);
static WALL_MS: AtomicU64 = AtomicU64::new(0);
static START: OnceLock<Instant> = OnceLock::new();

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Starts the ticker thread (once) and returns the clock's origin.
pub(crate) fn start() -> Instant {
    *START.get_or_init(|| {
        let origin = Instant::now();
        WALL_MS.store(wall_ms(), Ordering::Relaxed);
        let spawned = std::thread::Builder::new()
            .name("swan-clock".to_owned())
            .spawn(move || {
                loop {
                    std::thread::sleep(TICK);
                    NOW_MS.store(origin.elapsed().as_millis() as u64, Ordering::Relaxed);
                    // Read again each tick: a step of the system clock
                    // shows within a tick.
                    WALL_MS.store(wall_ms(), Ordering::Relaxed);
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

/// Wall-clock time to within [`TICK`]; the exact time (a clock read) when
/// the clock has not been started.
#[inline]
pub(crate) fn wall() -> SystemTime {
    match WALL_MS.load(Ordering::Relaxed) {
        0 => SystemTime::now(),
        ms => SystemTime::UNIX_EPOCH + Duration::from_millis(ms),
    }
}

/// The `Instant` matching a [`now_ms`] value.
pub(crate) fn instant_at(ms: u64) -> Instant {
    start() + Duration::from_millis(ms)
}
