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

/// What a file being sent must keep for its answer to stay one version:
/// its size and modification time, and its change time unless its link
/// count moved too. A write in place moves the modification time, and the
/// change time, which nobody can set back (`cp -p` over it, a `touch -d`).
/// A rename over the path, a deletion or a new hard link moves the change
/// time and the link count without touching a byte: the answer goes on
/// with the file it opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpenStamp {
    len: i64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    nlink: u64,
}

impl OpenStamp {
    /// The stamp of an open file (`fstat`).
    #[allow(
        clippy::unnecessary_cast,
        reason = "the fields' types differ between architectures"
    )]
    pub(crate) fn of(file: impl std::os::fd::AsFd) -> std::io::Result<OpenStamp> {
        let st = rustix::fs::fstat(file)?;
        Ok(OpenStamp {
            len: st.st_size as i64,
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
            nlink: st.st_nlink as u64,
        })
    }

    /// The stamp from the open file's metadata, as [`OpenStamp::of`] gives
    /// it (no second `fstat` where the metadata is at hand).
    pub(crate) fn from_meta(meta: &std::fs::Metadata) -> OpenStamp {
        use std::os::unix::fs::MetadataExt;
        OpenStamp {
            len: i64::try_from(meta.size()).unwrap_or(i64::MAX),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            nlink: meta.nlink(),
        }
    }

    /// Whether the open `file` still holds what it held when this stamp was
    /// taken: an error ([`FileChanged`]) if it was written to, truncated
    /// or grew since.
    pub(crate) fn unchanged(&self, file: impl std::os::fd::AsFd) -> std::io::Result<()> {
        let now = OpenStamp::of(file)?;
        let same = now.len == self.len
            && now.mtime == self.mtime
            && (now.ctime == self.ctime || now.nlink != self.nlink);
        if same {
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

    fn open(path: &Path) -> std::fs::File {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .expect("open")
    }

    #[test]
    fn a_write_in_place_changes_an_open_files_stamp_and_a_rename_over_it_does_not() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"one version").expect("write");
        let mut file = open(&path);
        // An old time, as a copy keeping its date has: the write below
        // moves it whatever the clock's grain.
        file.set_modified(UNIX_EPOCH + std::time::Duration::from_secs(1_000_000))
            .expect("set mtime");
        let stamp = OpenStamp::of(&file).expect("fstat");
        assert_eq!(
            stamp,
            OpenStamp::from_meta(&file.metadata().expect("metadata"))
        );
        assert!(stamp.unchanged(&file).is_ok());
        // The same length, other bytes.
        file.write_all(b"two").expect("write in place");
        let e = stamp.unchanged(&file).expect_err("a write in place");
        assert!(e.get_ref().is_some_and(|inner| inner.is::<FileChanged>()));

        // Renamed over, linked again, then deleted: its bytes are the same.
        let file = open(&path);
        let stamp = OpenStamp::of(&file).expect("fstat");
        std::fs::write(dir.path().join("new"), b"another version").expect("new");
        std::fs::rename(dir.path().join("new"), &path).expect("rename over");
        assert!(stamp.unchanged(&file).is_ok(), "renamed over");
        let other = dir.path().join("g");
        std::fs::write(&other, b"third").expect("g");
        let file = open(&other);
        let stamp = OpenStamp::of(&file).expect("fstat");
        std::fs::hard_link(&other, dir.path().join("h")).expect("link");
        assert!(stamp.unchanged(&file).is_ok(), "linked");
        std::fs::remove_file(&other).expect("rm");
        std::fs::remove_file(dir.path().join("h")).expect("rm");
        assert!(stamp.unchanged(&file).is_ok(), "deleted");
    }
}
