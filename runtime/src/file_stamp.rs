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

/// The (device, inode) of what `path` names, following links: which file
/// or folder it is, whatever its contents.
pub(crate) fn identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
