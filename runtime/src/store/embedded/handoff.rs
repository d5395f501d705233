//! An embedded store's file taken over from the process this one replaces
//! (a SIGUSR2 upgrade). redb locks its file to one process, and the old
//! process keeps it until it has drained and exited: the new one starts
//! without it, opens it the moment it is let go, and meanwhile holds each
//! operation until then (at most [`WAIT`]) instead of failing it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::file::{Shared, open_file};
use crate::store::StoreError;

/// How long an operation waits for the file; past it, it fails as
/// unavailable (a 503), as it would in any other outage.
pub(super) const WAIT: Duration = Duration::from_secs(10);
/// How often the file is tried while the old process holds it.
const POLL: Duration = Duration::from_millis(20);

/// The file is being taken over.
pub(super) struct Handoff {
    /// Set until the file is open (or failed to open for another reason).
    pending: AtomicBool,
    opened: watch::Receiver<bool>,
    since: Instant,
}

impl Handoff {
    /// Starts a thread that opens `shared`'s file as soon as its lock is
    /// let go, and puts the database in place. It stops when the store is
    /// dropped first.
    pub(super) fn start(shared: &Arc<Shared>) -> Result<Arc<Handoff>, StoreError> {
        let (done, opened) = watch::channel(false);
        let handoff = Arc::new(Handoff {
            pending: AtomicBool::new(true),
            opened,
            since: Instant::now(),
        });
        let (store, mine) = (Arc::downgrade(shared), Arc::downgrade(&handoff));
        let path = shared.path.clone();
        tracing::info!(path = %path.display(), "store open in the process this one replaces: taken over once it lets go; operations wait for it meanwhile");
        std::thread::Builder::new()
            .name("swan-store-handoff".to_owned())
            .spawn(move || take_over(&path, &store, &mine, &done))
            .map_err(|e| StoreError::Other(format!("cannot wait for the store's file: {e}")))?;
        Ok(handoff)
    }

    /// Whether the file is still held by the other process.
    pub(super) fn pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// Waits until the file is taken over (or [`WAIT`] passes: then, the
    /// store is unavailable).
    pub(super) async fn wait(&self, path: &Path) -> Result<(), StoreError> {
        if !self.pending() {
            return Ok(());
        }
        let mut opened = self.opened.clone();
        match tokio::time::timeout(WAIT, opened.wait_for(|open| *open)).await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(self.still_held(path)),
        }
    }

    /// Health: fine while an operation would still wait for the file, not
    /// once they fail.
    pub(super) fn health(&self, path: &Path) -> Result<(), StoreError> {
        if self.pending() && self.since.elapsed() >= WAIT {
            return Err(self.still_held(path));
        }
        Ok(())
    }

    fn still_held(&self, path: &Path) -> StoreError {
        StoreError::Unavailable(format!(
            "{} is still open in the process this one replaced ({} s): it is taken over once that process exits",
            path.display(),
            self.since.elapsed().as_secs()
        ))
    }
}

fn take_over(
    path: &Path,
    store: &Weak<Shared>,
    handoff: &Weak<Handoff>,
    done: &watch::Sender<bool>,
) {
    loop {
        std::thread::sleep(POLL);
        let (Some(shared), Some(handoff)) = (store.upgrade(), handoff.upgrade()) else {
            return;
        };
        match open_file(path) {
            Err(StoreError::InUse(_)) => continue,
            Ok(db) => {
                shared.install(db.0);
                tracing::info!(path = %path.display(), waited_ms = handoff.since.elapsed().as_millis() as u64, "store taken over from the process this one replaced");
            }
            Err(e) => shared.cannot_open(&e),
        }
        handoff.pending.store(false, Ordering::Release);
        let _ = done.send(true);
        return;
    }
}
