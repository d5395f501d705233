//! Opening a site's files as they are now, which may not be as they were
//! when looked at: a file or folder may have been replaced since by a
//! link (perhaps out of the root) or by a FIFO (whose open would wait for
//! a writer, for good).

use std::io::ErrorKind;
use std::path::Path;

/// `path` (resolved, inside `root`) opened for reading:
/// - resolved beneath `root` (`RESOLVE_BENEATH`): a folder on the way
///   replaced by a link out of the root is not followed;
/// - without following a link in its last component;
/// - without waiting (`O_NONBLOCK`): the caller then finds a FIFO is not
///   a regular file.
pub(super) fn beneath(root: &Path, path: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let inside = path
        .strip_prefix(root)
        .map_err(|_| std::io::Error::from(ErrorKind::NotFound))?;
    let dir = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    match rustix::fs::openat2(&dir, inside, flags, Mode::empty(), ResolveFlags::BENEATH) {
        Ok(fd) => Ok(fd.into()),
        // A kernel before 5.6 (or a sandbox refusing the call): the last
        // component is still not followed.
        Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
            Ok(rustix::fs::open(path, flags, Mode::empty())?.into())
        }
        Err(e) => Err(e.into()),
    }
}
