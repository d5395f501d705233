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
    pub(super) trouble: Mutex<Option<Trouble>>,
    /// A disk error left the database needing to be reopened, and when
    /// the writer last tried (at most every [`RETRY_OPEN`]).
    reopen: Mutex<(bool, Option<Instant>)>,
}

/// Why a store fails.
#[derive(Clone)]
pub(super) struct Trouble {
    why: String,
    /// A disk error: over only once a write commits again (a reopened
    /// file on a disk still full would fail the next write). Otherwise
    /// the file was removed or replaced: over once it is back.
    disk: bool,
}

impl Shared {
    /// `db`: `None` while another process holds the file (`handoff`).
    pub(super) fn new(path: PathBuf, db: Option<Database>) -> Shared {
        Shared {
            file: Mutex::new(crate::file_stamp::identity(&path)),
            path,
            db: ArcSwapOption::new(db.map(Arc::new)),
            trouble: Mutex::new(None),
            reopen: Mutex::new((false, None)),
        }
    }

    /// Puts in place the database opened once the process this one
    /// replaced let go of its file.
    pub(super) fn install(&self, db: Database) {
        if let Ok(mut file) = self.file.lock() {
            *file = crate::file_stamp::identity(&self.path);
        }
        self.db.store(Some(Arc::new(db)));
    }

    /// The file could not be opened when it was let go: the store is in
    /// trouble, and the writer tries it again (at most every second).
    pub(super) fn cannot_open(&self, e: &StoreError) {
        if let Ok(mut reopen) = self.reopen.lock() {
            reopen.0 = true;
        }
        self.in_trouble(e.to_string(), true);
    }

    /// Whether the store fails now.
    pub(super) fn troubled(&self) -> bool {
        self.trouble.lock().map(|t| t.is_some()).unwrap_or(true)
    }

    /// The database for a read, or why there is none.
    pub(super) fn for_read(&self) -> Result<arc_swap::Guard<Option<Arc<Database>>>, StoreError> {
        let db = self.db.load();
        if db.is_none() {
            return Err(self.unavailable());
        }
        Ok(db)
    }

    pub(super) fn unavailable(&self) -> StoreError {
        let why = self
            .trouble
            .lock()
            .ok()
            .and_then(|t| t.clone())
            .map(|t| t.why);
        StoreError::Unavailable(why.unwrap_or_else(|| "the store is reopening".to_owned()))
    }

    /// A redb error as the caller sees it; one from the disk puts the store
    /// in trouble (the writer reopens it).
    pub(super) fn failed(&self, e: impl Into<redb::Error>) -> StoreError {
        let e = e.into();
        if disk_failed(&e) {
            if let Ok(mut reopen) = self.reopen.lock() {
                reopen.0 = true;
            }
            self.in_trouble(format!("{}: {e}", self.path.display()), true);
            return self.unavailable();
        }
        other(e)
    }

    fn in_trouble(&self, why: String, disk: bool) {
        if let Ok(mut trouble) = self.trouble.lock() {
            if trouble.is_none() {
                tracing::error!(error = %why, "store failing: its writes fail as unavailable until it works again");
            }
            *trouble = Some(Trouble { why, disk });
        }
    }

    /// Ends the trouble of the given kind (a write committed: any; the
    /// file is back: a file trouble).
    fn trouble_over(&self, committed: bool) {
        if let Ok(mut trouble) = self.trouble.lock()
            && trouble.as_ref().is_some_and(|t| committed || !t.disk)
        {
            *trouble = None;
            tracing::info!(path = %self.path.display(), "store works again");
        }
    }

    /// A write transaction committed: the disk takes writes.
    pub(super) fn committed(&self) {
        self.trouble_over(true);
    }

    /// Whether the store is fine, and why not.
    pub(super) fn health(&self) -> Result<(), StoreError> {
        self.check_file()?;
        match self.trouble.lock().ok().and_then(|t| t.clone()) {
            Some(t) => Err(StoreError::Unavailable(t.why)),
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
                self.in_trouble(why.clone(), false);
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
            self.in_trouble(why.clone(), false);
            return Err(StoreError::Unavailable(why));
        }
        // The file is back (or never left).
        self.trouble_over(false);
        Ok(())
    }

    /// The database for the writer, reopened first if a disk error left it
    /// refusing transactions. While the disk fails, one batch a second
    /// tries it; the others fail at once, as unavailable, without touching
    /// the database (a failed commit makes it refuse reads too, until it
    /// is reopened).
    pub(super) fn for_write(&self) -> Result<Arc<Database>, StoreError> {
        self.check_file()?;
        let disk = self
            .trouble
            .lock()
            .map(|t| t.as_ref().is_some_and(|t| t.disk))
            .unwrap_or(true);
        let needed = match self.reopen.lock() {
            Ok(mut reopen) => {
                if disk {
                    if reopen.1.is_some_and(|at| at.elapsed() < RETRY_OPEN) {
                        return Err(self.unavailable());
                    }
                    reopen.1 = Some(Instant::now());
                }
                reopen.0
            }
            Err(_) => true,
        };
        if needed {
            self.reopen_now()?;
        }
        self.db.load_full().ok_or_else(|| self.unavailable())
    }

    /// After a failed commit: a database the disk error left refusing
    /// every transaction is reopened at once, so reads go on (one attempt
    /// per batch that reached the disk, which the throttle in
    /// [`Shared::for_write`] keeps to one a second).
    pub(super) fn after_failure(&self) {
        if self.reopen.lock().map(|r| r.0).unwrap_or(false) {
            let _ = self.reopen_now();
        }
    }

    fn reopen_now(&self) -> Result<(), StoreError> {
        self.reopen()?;
        if let Ok(mut reopen) = self.reopen.lock() {
            reopen.0 = false;
        }
        Ok(())
    }

    /// Closes the database (once readers are done with it) and opens its
    /// file again.
    fn reopen(&self) -> Result<Arc<Database>, StoreError> {
        // A file the system will not open for writing (a disk remounted
        // read-only after errors, an immutable file) cannot be reopened:
        // closing the database would end the reads it still answers.
        if self.db.load().is_some()
            && let Err(e) = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&self.path)
        {
            self.in_trouble(format!("{}: {e}", self.path.display()), true);
            return Err(self.unavailable());
        }
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
                self.in_trouble(e.to_string(), true);
                return Err(self.unavailable());
            }
        };
        if let Ok(mut file) = self.file.lock() {
            *file = crate::file_stamp::identity(&self.path);
        }
        self.db.store(Some(db.clone()));
        // Not over yet: the trouble ends when a write commits.
        tracing::debug!(path = %self.path.display(), "store reopened");
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
