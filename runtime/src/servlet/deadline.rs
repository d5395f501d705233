//! A guest's deadline, checked at every epoch tick.
//!
//! The deadline is wall-clock time from the start of the request (or of
//! instantiation): the epoch ticker is a thread like any other, and on a
//! busy machine its ticks (1 ms while a guest runs long, 5 ms else)
//! stretch, so counting ticks alone let a
//! request with `timeout = "2s"` run for 3 s when two servlets spun on one
//! worker. Native servlets still count ticks, as a second cap; components
//! count their run time per poll of their task (`component::handle`),
//! and use the wall clock only until their response head is out.

use std::time::{Duration, Instant};

use wasmtime::UpdateDeadline;

use crate::engine::EPOCH_TICK;

/// Extra time, past its own deadline, that a guest blocked in a host call
/// (which epochs cannot interrupt) gets before it is abandoned.
pub(crate) const HOST_CALL_GRACE: Duration = Duration::from_millis(500);

/// Marker error returned by the epoch callback at the deadline (both
/// kinds of servlet).
#[derive(Debug, thiserror::Error)]
#[error("servlet ran past its deadline")]
pub(crate) struct DeadlineExceeded;

/// When a guest must stop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
    ticks_left: u64,
    /// An epoch tick has come while the guest ran.
    ticked: bool,
}

impl Default for Deadline {
    fn default() -> Deadline {
        Deadline {
            at: Instant::now(),
            ticks_left: 0,
            ticked: false,
        }
    }
}

impl Deadline {
    /// A deadline `timeout` from now.
    pub(crate) fn after(timeout: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + timeout,
            ticks_left: (timeout.as_micros() / EPOCH_TICK.as_micros()).max(1) as u64,
            ticked: false,
        }
    }

    /// What a guest that has not run out of time does at an epoch tick
    /// (both kinds of servlet): not at the first tick of a call, which a
    /// short request that happens to span one does not pay a trip round
    /// the scheduler for; at every later one it yields to its worker's
    /// other tasks, and has the ticker tick fast while it runs on.
    /// tokio's yield, not a bare wake: the worker polls its I/O driver
    /// before the guest resumes, so a spinning guest cannot keep the
    /// worker's other connections waiting for their reads (a bare wake
    /// polled it only every 61 ticks, about 300 ms).
    pub(crate) fn at_tick(&mut self) -> UpdateDeadline {
        if !self.yields_now() {
            return UpdateDeadline::Continue(1);
        }
        crate::engine::spinning();
        UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now()))
    }

    /// Whether a tick that came now is past the call's first.
    fn yields_now(&mut self) -> bool {
        std::mem::replace(&mut self.ticked, true)
    }

    /// Called at an epoch tick (native servlets): whether the guest must
    /// stop now, its time or its ticks run out.
    pub(crate) fn passed(&mut self) -> bool {
        if self.ticks_left == 0 || self.wall_clock_passed(Duration::ZERO) {
            return true;
        }
        self.ticks_left -= 1;
        false
    }

    /// Whether the wall-clock deadline has passed, `waited` (time spent
    /// waiting for the client's request body) excepted. Components count
    /// their run time themselves (per poll of their task).
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
        assert!(!d.passed());
        std::thread::sleep(Duration::from_millis(25));
        // Plenty of ticks left, but the time is up.
        assert!(d.passed());
        assert!(d.ticks_left > 0);
    }

    #[test]
    fn ticks_cap_run_time_before_the_wall_clock() {
        // Three ticks, and a wall clock far off (a test preempted for a
        // tick's length must not reach it).
        let mut d = Deadline {
            at: Instant::now() + Duration::from_secs(60),
            ticks_left: 3,
            ticked: false,
        };
        assert!(!d.passed());
        assert!(!d.passed());
        assert!(!d.passed());
        assert!(d.passed());
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
    fn a_guest_yields_from_its_second_tick_on() {
        let yields = |d: &mut Deadline| matches!(d.at_tick(), UpdateDeadline::YieldCustom(..));
        let mut d = Deadline::after(Duration::from_secs(1));
        assert!(!yields(&mut d));
        assert!(yields(&mut d));
        assert!(yields(&mut d));
        // A new call starts afresh.
        assert!(!yields(&mut Deadline::after(Duration::from_secs(1))));
    }

    #[test]
    fn a_default_deadline_has_passed() {
        assert!(Deadline::default().passed());
        assert!(Deadline::default().wall_clock_passed(Duration::ZERO));
    }
}
