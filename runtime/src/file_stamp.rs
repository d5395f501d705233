//! What a file looks like from its metadata: how reloads tell a changed
//! file from an unchanged one without reading it.

use std::path::Path;
use std::time::UNIX_EPOCH;

/// Size, modification time (nanoseconds since the epoch), and which file
/// it is (device, inode) with its change time. Size and modification time
/// alone miss a file replaced by one with the same of both (`cp -p`,
/// `tar x`, `rsync -a`, builds with `SOURCE_DATE_EPOCH`): a rename over it
/// is another inode, and a write in place moves the change time, which no
/// one can set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct FileStamp {
    pub(crate) len: u64,
    pub(crate) mtime_ns: u128,
    dev: u64,
    ino: u64,
    ctime_ns: i128,
}

impl FileStamp {
    /// Which file this is and when it last changed, as one number (device,
    /// inode and change time mixed): what tells two files of one size and
    /// date apart.
    pub(crate) fn identity_bits(&self) -> u64 {
        let ctime = self.ctime_ns as u64 ^ (self.ctime_ns >> 64) as u64;
        self.dev.rotate_left(32) ^ self.ino ^ ctime.rotate_left(17)
    }

    /// The stamp of `path` (following links), if it exists.
    pub(crate) fn of(path: &Path) -> Option<FileStamp> {
        std::fs::metadata(path)
            .ok()
            .map(|m| FileStamp::from_meta(&m))
    }

    /// The stamp from already read metadata.
    pub(crate) fn from_meta(meta: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        FileStamp {
            len: meta.len(),
            mtime_ns,
            dev: meta.dev(),
            ino: meta.ino(),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
        }
    }
}

impl FileStamp {
    /// The stamp of an open file (`fstat`): what [`FileStamp::from_meta`]
    /// gives for the same file.
    #[allow(
        clippy::unnecessary_fallible_conversions,
        clippy::unnecessary_cast,
        reason = "the fields' types differ between architectures"
    )]
    pub(crate) fn of_open(file: impl std::os::fd::AsFd) -> std::io::Result<FileStamp> {
        let st = rustix::fs::fstat(file)?;
        // As std's `modified()`: a time before the epoch counts as 0.
        let mtime_ns = match (
            u128::try_from(st.st_mtime),
            u128::try_from(st.st_mtime_nsec),
        ) {
            (Ok(secs), Ok(nanos)) => secs * 1_000_000_000 + nanos,
            _ => 0,
        };
        Ok(FileStamp {
            len: u64::try_from(st.st_size).unwrap_or(0),
            mtime_ns,
            dev: st.st_dev,
            ino: st.st_ino,
            ctime_ns: i128::from(st.st_ctime) * 1_000_000_000 + i128::from(st.st_ctime_nsec as i64),
        })
    }

    /// Whether the open `file` is still as this stamp says: an error
    /// ([`FileChanged`]) if it was written to, truncated or grew since.
    pub(crate) fn unchanged(&self, file: impl std::os::fd::AsFd) -> std::io::Result<()> {
        if FileStamp::of_open(file)? == *self {
            Ok(())
        } else {
            Err(std::io::Error::other(FileChanged))
        }
    }
}

/// A file changed while it was being sent: the answer, already under way
/// with the old version's length and validator, is cut off.
#[derive(Debug, thiserror::Error)]
#[error("the file changed while it was being sent")]
pub(crate) struct FileChanged;

/// The (device, inode) of what `path` names, following links: which file
/// or folder it is, whatever its contents.
pub(crate) fn identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_open_files_stamp_matches_its_metadata_and_sees_a_write_in_place() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"one version").expect("write");
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("open");
        let stamp = FileStamp::of_open(&file).expect("fstat");
        assert_eq!(stamp, FileStamp::from_meta(&file.metadata().expect("meta")));
        assert!(stamp.unchanged(&file).is_ok());
        // The same length, other bytes.
        file.write_all(b"two").expect("write in place");
        let e = stamp.unchanged(&file).expect_err("a write in place");
        assert!(e.get_ref().is_some_and(|inner| inner.is::<FileChanged>()));
    }
}
