//! `[server] pid_file`: the serving process's id, for init scripts,
//! `logrotate`'s `kill -USR1 $(cat FILE)` and monitoring.
//!
//! Written once the process serves, never before: a second swan that fails
//! to bind (or to load) leaves the running one's file alone. After a
//! SIGUSR2 upgrade the new process writes its own id once it serves; the
//! old one, at its exit, removes the file only while it still names the
//! old one, so the file always names the process serving.

use std::path::Path;

/// Writes this process's id to `path`: a temporary file beside it renamed
/// over it, so a reader never sees an empty or half-written file.
pub(crate) fn write(path: &Path) -> std::io::Result<()> {
    let pid = std::process::id();
    // Checked at load too: a rename over a device (`/dev/null`) would
    // replace it.
    if std::fs::symlink_metadata(path).is_ok_and(|m| !m.is_file() && !m.is_symlink()) {
        return Err(std::io::Error::other(
            "not a regular file: swan replaces the pid file by a rename",
        ));
    }
    if let Some(other) = read(path).filter(|&p| p != pid && p != parent() && alive(p)) {
        tracing::warn!(
            pid_file = %path.display(),
            "the pid file named another running process ({other}); it now names this one ({pid})"
        );
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temporary = path.with_file_name(format!(".{name}.{pid}.tmp"));
    // Made new (O_EXCL), never opened through a link planted at its
    // predictable name; one left by a crash is removed first.
    let _ = std::fs::remove_file(&temporary);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temporary)
        .and_then(|mut f| std::io::Write::write_all(&mut f, format!("{pid}\n").as_bytes()))
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

/// Removes `path` if it names this process, or a process that is gone (a
/// new process of an upgrade stopped after it wrote its id). After an
/// upgrade it names the new one, which keeps it.
pub(crate) fn remove_if_ours(path: &Path) {
    match read(path) {
        Some(pid) if pid == std::process::id() || !alive(pid) => {}
        _ => return,
    }
    if let Err(e) = std::fs::remove_file(path) {
        tracing::warn!(pid_file = %path.display(), error = %e, "cannot remove the pid file");
    }
}

/// The id a pid file holds, if it holds one.
fn read(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The process that started this one: the old process in an upgrade,
/// whose id the file holds until this one takes over.
fn parent() -> u32 {
    rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32)
}

fn alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}
