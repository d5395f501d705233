//! Reading a file that must be a regular file: opened without waiting, so
//! a FIFO put at its path (whose open would wait for a writer, for good)
//! is refused instead of holding the reader, and read up to a size.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Whether a link in the path's last component is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Links {
    /// Followed (a Kubernetes Secret's files are links).
    Follow,
    /// Not followed: a file replaced by a link since it was looked at
    /// cannot lead elsewhere.
    NoFollow,
}

/// The contents of `path` if it is a regular file of at most `max` bytes.
pub(crate) fn read(path: &Path, links: Links, max: u64) -> std::io::Result<Vec<u8>> {
    let mut flags = rustix::fs::OFlags::NONBLOCK;
    if links == Links::NoFollow {
        flags |= rustix::fs::OFlags::NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    if meta.len() > max {
        return Err(std::io::Error::other(format!(
            "{} bytes, larger than the {max} allowed",
            meta.len()
        )));
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // A file still growing stops at the cap too.
    file.take(max).read_to_end(&mut data)?;
    Ok(data)
}
