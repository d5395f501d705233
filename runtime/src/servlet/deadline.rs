//! A guest's deadline, checked at every epoch tick.
//!
//! The deadline is wall-clock time from the start of the request (or of
//! instantiation): the epoch ticker is a thread like any other, and on a
//! busy machine its 5 ms ticks stretch, so counting ticks alone let a
//! request with `timeout = "2s"` run for 3 s when two servlets spun on one
//! worker. Ticks are still counted, as a cap on run time for the phase
//! where wall-clock time does not apply (a component streaming its body).

use std::time::{Duration, Instant};

use crate::engine::EPOCH_TICK;

/// When a guest must stop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
    ticks_left: u64,
}

impl Default for Deadline {
    fn default() -> Deadline {
        Deadline {
            at: Instant::now(),
            ticks_left: 0,
        }
    }
}

impl Deadline {
    /// A deadline `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + timeout,
            ticks_left: (timeout.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64,
        }
    }

    /// Called at an epoch tick: whether the guest must stop now. With
    /// `wall_clock` off, only the ticks it ran count; `waited` (time spent
    /// waiting for the client's request body, which the body's own rules
    /// bound) moves the wall-clock deadline back.
    pub(crate) fn passed(&mut self, wall_clock: bool, waited: Duration) -> bool {
        if self.ticks_left == 0 || (wall_clock && Instant::now() >= self.at + waited) {
            return true;
        }
        self.ticks_left -= 1;
        false
    }
}

impl Deadline {
    /// Whether the wall-clock deadline has passed, `waited` (time spent
    /// waiting for the client's request body) excepted. Components count
    /// their run time themselves.
    pub(crate) fn wall_clock_passed(&self, waited: Duration) -> bool {
        Instant::now() >= self.at + waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_stops_before_the_ticks_run_out() {
        let mut d = Deadline::after(Duration::from_millis(20));
        assert!(!d.passed(true, Duration::ZERO));
        std::thread::sleep(Duration::from_millis(25));
        // Plenty of ticks left, but the time is up.
        assert!(d.passed(true, Duration::ZERO));
        assert!(!d.passed(false, Duration::ZERO));
    }

    #[test]
    fn ticks_cap_run_time_without_the_wall_clock() {
        let mut d = Deadline::after(EPOCH_TICK * 3);
        assert!(!d.passed(false, Duration::ZERO));
        assert!(!d.passed(false, Duration::ZERO));
        assert!(!d.passed(false, Duration::ZERO));
        assert!(d.passed(false, Duration::ZERO));
    }

    #[test]
    fn the_wall_clock_deadline_moves_back_by_the_wait() {
        let d = Deadline::after(Duration::from_millis(20));
        assert!(!d.wall_clock_passed(Duration::ZERO));
        std::thread::sleep(Duration::from_millis(25));
        assert!(d.wall_clock_passed(Duration::ZERO));
        assert!(!d.wall_clock_passed(Duration::from_secs(10)));
    }

    #[test]
    fn a_default_deadline_has_passed() {
        assert!(Deadline::default().passed(true, Duration::ZERO));
        assert!(Deadline::default().passed(false, Duration::ZERO));
    }
}
