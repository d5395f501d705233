//! The files of the compiled-code cache: written whole (a temporary name,
//! flushed, renamed into place) with the SHA-256 of their bytes beside
//! them, and checked against it before they are mapped; in a folder only
//! swan's user can write to.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

/// `digest` in lower-case hexadecimal.
pub(super) fn hex(digest: &[u8]) -> String {
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Where an artifact's checksum is kept.
pub(super) fn sum_path(artifact: &Path) -> PathBuf {
    artifact.with_extension("sum")
}

/// Whether `artifact`'s bytes are those its checksum (written by
/// `publish`, only swan's user can write it) names. The file is read, not
/// mapped: its pages go to the kernel's cache, not to swan's memory.
pub(super) fn intact(artifact: &Path) -> bool {
    let sum = sum_path(artifact);
    if !fs::metadata(&sum).is_ok_and(|m| owned(&m)) {
        return false;
    }
    let (Ok(want), Ok(mut file)) = (fs::read_to_string(&sum), fs::File::open(artifact)) else {
        return false;
    };
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).is_ok() && hex(&hasher.finalize()) == want.trim()
}

/// Creates `dir` if needed (private to swan's user), and says whether
/// only swan's user can write in it.
pub(super) fn private_dir(dir: &Path) -> std::io::Result<bool> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    Ok(owned(&fs::metadata(dir)?))
}

/// Whether only swan's user can write to this file or folder.
pub(super) fn owned(meta: &fs::Metadata) -> bool {
    meta.uid() == rustix::process::geteuid().as_raw() && meta.mode() & 0o022 == 0
}

/// Marks an artifact used, for eviction's order.
pub(super) fn touch(path: &Path) {
    if let Ok(file) = fs::File::open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// Writes the artifact `bytes` to `path`, and their checksum beside it,
/// each whole (see [`write_whole`]). The checksum goes first: until the
/// artifact follows, an old one there fails its check and is compiled
/// again.
pub(super) fn publish(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let sum = hex(&Sha256::digest(bytes));
    write_whole(dir, &sum_path(path), sum.as_bytes())?;
    write_whole(dir, path, bytes)
}

/// Writes `bytes` to `path` whole: under a temporary name first, flushed
/// to disk, then renamed, so a reader sees the old file, the new one or
/// none, even after a power cut.
fn write_whole(dir: &Path, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        "{}.{}.tmp",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}
