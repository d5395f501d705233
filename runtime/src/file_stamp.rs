//! A file's size and modification time: how reloads tell a changed file
//! from an unchanged one without reading it.

use std::path::Path;
use std::time::UNIX_EPOCH;

/// Size and modification time (nanoseconds since the epoch) of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) struct FileStamp {
    pub(crate) len: u64,
    pub(crate) mtime_ns: u128,
}

impl FileStamp {
    /// The stamp of `path` (following links), if it exists.
    pub(crate) fn of(path: &Path) -> Option<FileStamp> {
        std::fs::metadata(path)
            .ok()
            .map(|m| FileStamp::from_meta(&m))
    }

    /// The stamp from already read metadata.
    pub(crate) fn from_meta(meta: &std::fs::Metadata) -> FileStamp {
        let mtime_ns = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_nanos());
        FileStamp {
            len: meta.len(),
            mtime_ns,
        }
    }
}

/// The (device, inode) of what `path` names, following links: which file
/// or folder it is, whatever its contents.
pub(crate) fn identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
