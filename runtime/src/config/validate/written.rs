//! Files swan writes, not reads: the access log and the pid file. Each
//! must be writable where it is, and outside every site (it would be
//! served, and each write would reload the site).

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
    rustix::fs::access(
        folder,
        rustix::fs::Access::WRITE_OK | rustix::fs::Access::EXEC_OK,
    )
    .err()
    .map(|e| {
        format!(
            "cannot be created: its folder {} is not writable: {}",
            folder.display(),
            std::io::Error::from(e)
        )
    })
}

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
