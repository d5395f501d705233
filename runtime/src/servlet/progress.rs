//! Progress of servlet compiles that take long (a large interpreter
//! component at start-up takes tens of seconds on a small machine),
//! logged every few seconds while they run.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How often a compile still running is reported.
const EVERY: Duration = Duration::from_secs(5);

/// Compiles of one load, and how many have ended.
pub(super) struct Progress {
    total: usize,
    done: AtomicUsize,
}

/// Counts its compile as ended when dropped (a panic included).
pub(super) struct Ended<'a>(&'a Progress);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.done.fetch_add(1, Ordering::Relaxed);
    }
}

impl Progress {
    pub(super) fn new(total: usize) -> Progress {
        Progress {
            total,
            done: AtomicUsize::new(0),
        }
    }

    /// Held by a compile for as long as it runs.
    pub(super) fn started(&self) -> Ended<'_> {
        Ended(self)
    }

    /// Logs how far the compiles got, every [`EVERY`], until all have
    /// ended; at once when there is nothing to compile.
    pub(super) fn log_until_done(&self) {
        self.log_every(EVERY);
    }

    /// [`Progress::log_until_done`] every `every`; the lines logged.
    fn log_every(&self, every: Duration) -> usize {
        let started = Instant::now();
        let mut next = every;
        let mut lines = 0;
        while self.done.load(Ordering::Relaxed) < self.total {
            std::thread::sleep(Duration::from_millis(50).min(every));
            if started.elapsed() >= next {
                next += every;
                lines += 1;
                tracing::info!(
                    done = self.done.load(Ordering::Relaxed),
                    of = self.total,
                    elapsed_s = started.elapsed().as_secs(),
                    "compiling servlets"
                );
            }
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_compile_is_reported_until_it_ends_and_none_is_not() {
        assert_eq!(Progress::new(0).log_every(Duration::from_millis(10)), 0);
        let progress = Progress::new(2);
        let lines = std::thread::scope(|scope| {
            let logger = scope.spawn(|| progress.log_every(Duration::from_millis(100)));
            drop(progress.started());
            let slow = progress.started();
            std::thread::sleep(Duration::from_millis(450));
            drop(slow);
            logger.join().unwrap_or_default()
        });
        assert!(lines >= 1, "{lines}");
    }
}
