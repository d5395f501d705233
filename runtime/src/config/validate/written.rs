//! Files swan writes, not reads: the access log and the pid file, each
//! writable where it is and outside every site (it would be served, and
//! each write would reload the site); and an embedded store's file, which
//! must be one it can make.

use std::path::Path;

use super::{At, resolved};
use crate::config::ops::AccessLogTarget;
use crate::config::types::Config;

/// Checks the access log's and the pid file's paths.
pub(super) fn check(config: &Config, finding: &mut impl FnMut(At, String, &str)) {
    if let AccessLogTarget::File(log) = &config.log.access {
        if let Some(problem) = unwritable(log) {
            finding(
                At::AccessLog,
                format!("the access log {} {problem}", log.display()),
                "point `access` at a file swan can append to (its folder must exist), or \"stdout\"",
            );
        }
        outside_sites(config, log, At::AccessLog, finding);
    }
    if let Some(pid_file) = &config.server.pid_file {
        if pid_file.as_os_str().is_empty() {
            finding(
                At::PidFile,
                "an empty path names no file".to_owned(),
                "give a file such as /run/swan/swan.pid, or leave `pid_file` out for none",
            );
            return;
        }
        if let Some(problem) = pid_file_unusable(pid_file) {
            finding(
                At::PidFile,
                format!("the pid file {} {problem}", pid_file.display()),
                "point `pid_file` at a file in a folder swan can write to, such as /run/swan/swan.pid (systemd: RuntimeDirectory=swan)",
            );
        }
        outside_sites(config, pid_file, At::PidFile, finding);
        if let AccessLogTarget::File(log) = &config.log.access
            && resolved(log) == resolved(pid_file)
        {
            finding(
                At::PidFile,
                format!(
                    "the pid file {} is the access log: each would overwrite the other",
                    pid_file.display()
                ),
                "give `pid_file` a file of its own, such as /run/swan/swan.pid",
            );
        }
    }
}

/// Why the access log could not be appended to, found without creating
/// it: its folder is missing or not writable, it is a folder, or an
/// existing file cannot be appended to.
/// Other kinds of file (`/dev/null`, a FIFO) are taken as they are:
/// opening a FIFO here would wait for its reader.
fn unwritable(log: &Path) -> Option<String> {
    match std::fs::metadata(log) {
        Ok(m) if m.is_dir() => Some("is a folder".to_owned()),
        // As the server opens it (the file exists: nothing is created).
        Ok(m) if m.is_file() => std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .err()
            .map(|e| format!("cannot be written: {e}")),
        Ok(_) => None,
        Err(_) => folder_unwritable(log),
    }
}

/// Why a pid file could not be put at `path`: it is written beside and
/// renamed over, so its folder must be writable whether or not it exists,
/// and an existing file must be a regular one (a rename over `/dev/null`
/// would replace the device).
fn pid_file_unusable(path: &Path) -> Option<String> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Some("is a folder".to_owned()),
        Ok(m) if !m.is_file() && !m.is_symlink() => Some(
            "is not a regular file (a device, FIFO or socket): swan replaces the file by a rename"
                .to_owned(),
        ),
        _ => folder_unwritable(path),
    }
}

/// Why a file could not be created in `path`'s folder: the folder is
/// missing, or this user may not write there (a root-owned /var/log, a
/// read-only mount), found without creating anything.
fn folder_unwritable(path: &Path) -> Option<String> {
    let folder = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if !folder.is_dir() {
        return Some(format!(
            "cannot be created: its folder {} does not exist",
            folder.display()
        ));
    }
    not_writable(folder).map(|e| {
        format!(
            "cannot be created: its folder {} is not writable: {e}",
            folder.display()
        )
    })
}

/// Why this process could not make a file in `folder`, found without
/// making one: checked with the credentials the open will use (the
/// effective ids and capabilities, which `access` alone does not). A
/// seccomp filter older than faccessat2 (Linux 5.8) may refuse that with
/// EPERM: then, when the real and effective ids are one, `access`
/// answers the same.
fn not_writable(folder: &Path) -> Option<std::io::Error> {
    let writable = |flags| {
        rustix::fs::accessat(
            rustix::fs::CWD,
            folder,
            rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
            flags,
        )
    };
    let same_ids = rustix::process::getuid() == rustix::process::geteuid()
        && rustix::process::getgid() == rustix::process::getegid();
    match writable(rustix::fs::AtFlags::EACCESS) {
        Err(rustix::io::Errno::PERM | rustix::io::Errno::NOSYS) if same_ids => {
            writable(rustix::fs::AtFlags::empty())
        }
        other => other,
    }
    .err()
    .map(std::io::Error::from)
}

/// Why an embedded store's file could not be opened or made, if it could
/// not, found without creating anything: a folder in its place, a file
/// where a folder on its way should be (swan creates the missing folders,
/// not those), or, for a store a start opens (`used`, see
/// `Config::stores_used`), a nearest existing folder that is not writable
/// or holds no files (`/proc`, `/sys`). Another is never opened: its
/// folder need not be writable (the default store of a static site).
pub(super) fn store_file_unusable(path: &Path, used: bool) -> Option<String> {
    if path.is_dir() {
        return Some(format!(
            "{} is a folder, not a database file",
            path.display()
        ));
    }
    // An existing file (whether it can be written now is the store's to
    // find: on a configuration reload, a disk remounted read-only must not
    // refuse changes elsewhere), or a link, which the open follows to a
    // folder of its own.
    if path.symlink_metadata().is_ok() {
        return None;
    }
    let existing = path
        .ancestors()
        .skip(1)
        .filter(|a| !a.as_os_str().is_empty())
        .find(|a| a.exists())?;
    if !existing.is_dir() {
        return Some(format!(
            "{} cannot be made: {} is a file, not a folder",
            path.display(),
            existing.display()
        ));
    }
    if !used {
        return None;
    }
    if let Ok(fs) = rustix::fs::statfs(existing)
        && [rustix::fs::PROC_SUPER_MAGIC, SYSFS_MAGIC].contains(&fs.f_type)
    {
        return Some(format!(
            "{} cannot be made: {} is a kernel file system (procfs or sysfs), which holds no database",
            path.display(),
            existing.display()
        ));
    }
    not_writable(existing).map(|e| {
        format!(
            "{} cannot be made: {} is not writable: {e}",
            path.display(),
            existing.display()
        )
    })
}

/// sysfs's `f_type` (linux/magic.h), which rustix does not name.
const SYSFS_MAGIC: rustix::fs::FsWord = 0x6265_6572;

/// A file swan writes (`at`: the access log or the pid file) inside a
/// site's root would be served to anyone, and each write would reload the
/// site (or rescan its servlets).
fn outside_sites(config: &Config, log: &Path, at: At, finding: &mut impl FnMut(At, String, &str)) {
    let (what_file, hint) = match at {
        At::PidFile => (
            "the pid file",
            "write it outside every site's root and servlets folder, e.g. pid_file = \"/run/swan/swan.pid\"",
        ),
        _ => (
            "the access log",
            "write it outside every site's root and servlets folder, e.g. access = \"/var/log/swan/access.log\"",
        ),
    };
    // The file may not exist yet: its folder is what can be resolved.
    let Some(log) = log
        .parent()
        .and_then(|p| p.canonicalize().ok())
        .zip(log.file_name())
        .map(|(dir, name)| dir.join(name))
    else {
        return;
    };
    for site in &config.sites {
        let folders = [
            ("root", Some(&site.root)),
            ("servlets folder", site.servlets.as_ref()),
        ];
        for (what, folder) in folders {
            let Some(folder) = folder.and_then(|f| f.canonicalize().ok()) else {
                continue;
            };
            if log.starts_with(&folder) {
                finding(
                    at,
                    format!(
                        "{what_file} {} is inside the {what} of site {:?} ({}): anyone could download it, and every write would reload the site",
                        log.display(),
                        site.name,
                        folder.display()
                    ),
                    hint,
                );
                return;
            }
        }
    }
}
