//! The embedded store's file: the database open on it, shared by the
//! request threads and the writer, and what is wrong with it (a disk that
//! failed, a file removed or replaced), reopened by the writer until it
//! works again.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use redb::Database;

use crate::store::StoreError;

/// How often a store in trouble tries to reopen its file.
pub(super) const RETRY_OPEN: Duration = Duration::from_secs(1);

pub(super) fn other(e: impl std::fmt::Display) -> StoreError {
    StoreError::Other(e.to_string())
}

/// Whether redb failed because of the disk (the database must be
/// reopened), not because of what was asked.
fn disk_failed(e: &redb::Error) -> bool {
    matches!(
        e,
        redb::Error::Io(_)
            | redb::Error::PreviousIo
            | redb::Error::DatabaseClosed
            | redb::Error::Backend(_)
    )
}

/// What the request threads and the writer share: the database, and what
/// is wrong with it.
pub(super) struct Shared {
    pub(super) path: PathBuf,
    /// `None` while the writer reopens it.
    pub(super) db: ArcSwapOption<Database>,
    /// The file it was opened from (device, inode).
    pub(super) file: Mutex<Option<(u64, u64)>>,
    /// Why the store fails now, if it does.
    pub(super) trouble: Mutex<Option<String>>,
}

impl Shared {
    /// The database for a read, or why there is none.
    pub(super) fn for_read(&self) -> Result<arc_swap::Guard<Option<Arc<Database>>>, StoreError> {
        let db = self.db.load();
        if db.is_none() {
            return Err(self.unavailable());
        }
        Ok(db)
    }

    pub(super) fn unavailable(&self) -> StoreError {
        let why = self.trouble.lock().ok().and_then(|t| t.clone());
        StoreError::Unavailable(why.unwrap_or_else(|| "the store is reopening".to_owned()))
    }

    /// A redb error as the caller sees it; one from the disk puts the store
    /// in trouble (the writer reopens it).
    pub(super) fn failed(&self, e: impl Into<redb::Error>) -> StoreError {
        let e = e.into();
        if disk_failed(&e) {
            self.in_trouble(format!("{}: {e}", self.path.display()));
            return self.unavailable();
        }
        other(e)
    }

    fn in_trouble(&self, why: String) {
        if let Ok(mut trouble) = self.trouble.lock() {
            if trouble.is_none() {
                tracing::error!(error = %why, "store failing: its writes fail as unavailable until it can be reopened");
            }
            *trouble = Some(why);
        }
    }

    /// Whether the store is fine, and why not.
    pub(super) fn health(&self) -> Result<(), StoreError> {
        self.check_file()?;
        match self.trouble.lock().ok().and_then(|t| t.clone()) {
            Some(why) => Err(StoreError::Unavailable(why)),
            None => Ok(()),
        }
    }

    /// Whether the file the database was opened from is still at its
    /// path; reopens it if another file took its place.
    fn check_file(&self) -> Result<(), StoreError> {
        use std::os::unix::fs::MetadataExt;
        let now = match std::fs::metadata(&self.path) {
            Ok(m) => (m.dev(), m.ino()),
            Err(e) => {
                let why = format!(
                    "{}: {e}: the file was removed while open; writes are refused (they would be lost) until it is back, or swan restarts with an empty store",
                    self.path.display()
                );
                self.in_trouble(why.clone());
                return Err(StoreError::Unavailable(why));
            }
        };
        // Another file in its place: the one open stays (reads go on), and
        // writes are refused as for a removed file; switching to the new
        // file unchecked could leave the store with neither.
        let opened = self.file.lock().ok().and_then(|f| *f);
        if opened.is_some() && opened != Some(now) {
            let why = format!(
                "{}: another file took its place while open; writes are refused (they would go to the old file) until it is back, or swan restarts on the new one",
                self.path.display()
            );
            self.in_trouble(why.clone());
            return Err(StoreError::Unavailable(why));
        }
        Ok(())
    }

    /// The database for the writer: reopened first if it is in trouble.
    pub(super) fn for_write(&self) -> Result<Arc<Database>, StoreError> {
        self.check_file()?;
        let trouble = self.trouble.lock().map(|t| t.is_some()).unwrap_or(true);
        if !trouble && let Some(db) = self.db.load_full() {
            return Ok(db);
        }
        self.reopen()
    }

    /// Closes the database (once readers are done with it) and opens its
    /// file again.
    fn reopen(&self) -> Result<Arc<Database>, StoreError> {
        if let Some(mut old) = self.db.swap(None) {
            let deadline = Instant::now() + RETRY_OPEN;
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(still) if Instant::now() < deadline => {
                        old = still;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(still) => {
                        tracing::warn!(path = %self.path.display(), "store still in use: reopened later");
                        self.db.store(Some(still));
                        return Err(self.unavailable());
                    }
                }
            }
        }
        let db = match open_file(&self.path) {
            Ok(db) => Arc::new(db.0),
            Err(e) => {
                self.in_trouble(e.to_string());
                return Err(self.unavailable());
            }
        };
        if let Ok(mut file) = self.file.lock() {
            *file = crate::file_stamp::identity(&self.path);
        }
        self.db.store(Some(db.clone()));
        if let Ok(mut trouble) = self.trouble.lock()
            && trouble.take().is_some()
        {
            tracing::info!(path = %self.path.display(), "store reopened: it works again");
        }
        Ok(db)
    }
}

/// An opened database (a tuple struct so the error type stays ours).
pub(super) struct Opened(pub(super) Database);

/// Opens (or creates) the database file at `path`.
pub(super) fn open_file(path: &Path) -> Result<Opened, StoreError> {
    Database::create(path).map(Opened).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => StoreError::InUse(path.display().to_string()),
        e => other(format!("{}: {e}", path.display())),
    })
}
