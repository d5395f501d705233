//! What `swan serve` tells systemd (`Type=notify` or `Type=notify-reload`
//! units): `READY=1` once it serves; `RELOADING=1` with the time, then
//! `READY=1`, around a configuration reload (SIGHUP); `STOPPING=1` when a
//! stop begins; and, once an upgrade (SIGUSR2) has handed the sockets to a
//! new process, that process's `MAINPID=`, so the unit follows it.
//!
//! Only where systemd asks for it (`NOTIFY_SOCKET` in the environment);
//! elsewhere each call does nothing. The variable is kept: an upgrade's new
//! process reports through it too. A report that cannot be sent is logged
//! at debug level: the service manager's trouble is not the server's.

use sd_notify::NotifyState;

/// Serving: listeners bound, sites loaded.
pub(super) fn ready() {
    send(&[NotifyState::Ready, NotifyState::Status("serving")]);
}

/// A configuration reload begins (SIGHUP); [`ready`] when it has ended.
pub(super) fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[
            NotifyState::Reloading,
            now,
            NotifyState::Status("reloading the configuration"),
        ]),
        Err(e) => tracing::debug!(error = %e, "cannot read the monotonic clock for systemd"),
    }
}

/// A stop begins: the drain.
pub(super) fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

/// An upgrade's new process, `pid`, serves now; this one drains and ends.
pub(super) fn handed_over(pid: u32) {
    send(&[
        NotifyState::MainPid(pid),
        NotifyState::Status("upgraded: the new process serves"),
    ]);
}

fn send(states: &[NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!(error = %e, "cannot notify systemd");
    }
}
