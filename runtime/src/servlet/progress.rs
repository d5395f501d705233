//! Progress of servlet compiles that take long (a large interpreter
//! component at start-up takes tens of seconds on a small machine),
//! logged every few seconds while they run.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// How often a compile still running is reported.
const EVERY: Duration = Duration::from_secs(5);

/// Compiles of one load, and how many have ended.
pub(super) struct Progress {
    total: usize,
    /// Compiles ended, and whether the load is over (all joined, or given
    /// up on a panic: a compile that never started never ends).
    done: Mutex<(usize, bool)>,
    /// Signalled at each end: the logger returns as soon as the last one
    /// ends (a reload does not wait for a poll).
    ended: Condvar,
}

/// Counts its compile as ended when dropped (a panic included).
pub(super) struct Ended<'a>(&'a Progress);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let progress = self.0;
        if let Ok(mut done) = progress.done.lock() {
            done.0 += 1;
        }
        progress.ended.notify_all();
    }
}

/// Ends the logging when dropped: held by the load for as long as it
/// waits for its compiles, so a panic there (a thread that could not be
/// spawned) does not leave the logger waiting for compiles that never ran.
pub(super) struct Over<'a>(&'a Progress);

impl Drop for Over<'_> {
    fn drop(&mut self) {
        let progress = self.0;
        if let Ok(mut done) = progress.done.lock() {
            done.1 = true;
        }
        progress.ended.notify_all();
    }
}

impl Progress {
    pub(super) fn new(total: usize) -> Progress {
        Progress {
            total,
            done: Mutex::new((0, false)),
            ended: Condvar::new(),
        }
    }

    /// Whether there is anything to compile (and so to report).
    pub(super) fn any(&self) -> bool {
        self.total > 0
    }

    /// Held by a compile for as long as it runs.
    pub(super) fn started(&self) -> Ended<'_> {
        Ended(self)
    }

    /// Held by the load while it waits for its compiles.
    pub(super) fn waiting(&self) -> Over<'_> {
        Over(self)
    }

    /// Logs how far the compiles got, every [`EVERY`], until all have
    /// ended; at once when there is nothing to compile.
    pub(super) fn log_until_done(&self) {
        self.log_every(EVERY);
    }

    /// [`Progress::log_until_done`] every `every`; the lines logged.
    fn log_every(&self, every: Duration) -> usize {
        let started = Instant::now();
        let mut lines = 0;
        let Ok(mut done) = self.done.lock() else {
            return 0;
        };
        let running = |done: &mut (usize, bool)| done.0 < self.total && !done.1;
        while running(&mut done) {
            let waited = self.ended.wait_timeout_while(done, every, running);
            let Ok((now, timeout)) = waited else {
                return lines;
            };
            done = now;
            if timeout.timed_out() && running(&mut done) {
                lines += 1;
                tracing::info!(
                    done = done.0,
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
        // The logger returns as soon as the last compile ends, not at its
        // next period.
        let progress = Progress::new(1);
        let started = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| progress.log_every(Duration::from_secs(60)));
            drop(progress.started());
        });
        assert!(started.elapsed() < Duration::from_secs(30));
        // A load given up before its compiles ran ends the logging too.
        let progress = Progress::new(3);
        let started = Instant::now();
        std::thread::scope(|scope| {
            scope.spawn(|| progress.log_every(Duration::from_secs(60)));
            drop(progress.waiting());
        });
        assert!(started.elapsed() < Duration::from_secs(30));
    }
}
