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

/// `path` opened for reading if it is a regular file (`Err` with
/// [`NOT_REGULAR`] otherwise).
pub(crate) fn open(path: &Path, links: Links) -> std::io::Result<std::fs::File> {
    let mut flags = rustix::fs::OFlags::NONBLOCK;
    if links == Links::NoFollow {
        flags |= rustix::fs::OFlags::NOFOLLOW;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(NOT_REGULAR));
    }
    Ok(file)
}

/// Why [`open`] refuses a FIFO, a device or a socket.
const NOT_REGULAR: &str = "not a regular file";

/// The contents of `path` if it is a regular file of at most `max` bytes.
pub(crate) fn read(path: &Path, links: Links, max: u64) -> std::io::Result<Vec<u8>> {
    let file = open(path, links)?;
    let len = file.metadata()?.len();
    if len > max {
        return Err(std::io::Error::other(format!(
            "{len} bytes, larger than the {max} allowed"
        )));
    }
    let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    // A file still growing stops at the cap too.
    file.take(max).read_to_end(&mut data)?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A FIFO, a folder and a device are refused at once (the FIFO's open
    /// does not wait for a writer); a regular file is read, and a link to
    /// one only where links are followed.
    #[test]
    fn only_regular_files_open_and_nothing_waits() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo.wasm");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        for path in [fifo.as_path(), dir.path(), Path::new("/dev/null")] {
            let err = open(path, Links::Follow).expect_err("refused");
            assert_eq!(err.to_string(), NOT_REGULAR, "{}", path.display());
        }
        let file = dir.path().join("a.wasm");
        std::fs::write(&file, b"\0asm").expect("write");
        assert_eq!(read(&file, Links::NoFollow, 4).expect("read"), b"\0asm");
        assert!(read(&file, Links::NoFollow, 3).is_err());
        let link = dir.path().join("link.wasm");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert!(open(&link, Links::Follow).is_ok());
        assert!(open(&link, Links::NoFollow).is_err());
    }
}
