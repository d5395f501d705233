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
    /// A call waited [`WAIT`] in vain: the old process is not letting go
    /// soon, so later calls fail at once and health says so.
    gave_up: AtomicBool,
    /// Set when the store is dropped: the thread stops trying.
    stop: AtomicBool,
    /// `true` once the file is open (or failed to open for another
    /// reason): until then, it is pending.
    opened: watch::Receiver<bool>,
    since: Instant,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Handoff {
    /// Starts a thread that opens `shared`'s file as soon as its lock is
    /// let go, and puts the database in place. It stops when the store is
    /// dropped first.
    pub(super) fn start(shared: &Arc<Shared>) -> Result<Arc<Handoff>, StoreError> {
        let (done, opened) = watch::channel(false);
        let handoff = Arc::new(Handoff {
            gave_up: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            opened,
            since: Instant::now(),
            thread: std::sync::Mutex::new(None),
        });
        let (store, mine) = (Arc::downgrade(shared), Arc::downgrade(&handoff));
        let path = shared.path.clone();
        tracing::info!(path = %path.display(), "store open in the process this one replaces: taken over once it lets go; operations wait for it meanwhile");
        let thread = std::thread::Builder::new()
            .name("swan-store-handoff".to_owned())
            .spawn(move || take_over(&path, &store, &mine, &done))
            .map_err(|e| StoreError::Other(format!("cannot wait for the store's file: {e}")))?;
        if let Ok(mut slot) = handoff.thread.lock() {
            *slot = Some(thread);
        }
        Ok(handoff)
    }

    /// The store is dropped: stops the thread and waits for it, so that no
    /// database it opened outlives the store (holding the file's lock).
    pub(super) fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        let thread = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }

    /// Whether the file is still held by the other process.
    pub(super) fn pending(&self) -> bool {
        !*self.opened.borrow()
    }

    /// Waits until the file is taken over (or [`WAIT`] passes: then, the
    /// store is unavailable).
    pub(super) async fn wait(&self, path: &Path) -> Result<(), StoreError> {
        if !self.pending() {
            return Ok(());
        }
        if self.gave_up.load(Ordering::Acquire) {
            return Err(self.still_held(path));
        }
        let mut opened = self.opened.clone();
        match tokio::time::timeout(WAIT, opened.wait_for(|open| *open)).await {
            Ok(Ok(_)) => Ok(()),
            _ if !self.pending() => Ok(()),
            _ => {
                self.gave_up.store(true, Ordering::Release);
                Err(self.still_held(path))
            }
        }
    }

    /// Health: fine while calls wait for the file (the old process is
    /// draining), not once one waited in vain.
    pub(super) fn health(&self, path: &Path) -> Result<(), StoreError> {
        if self.pending() && self.gave_up.load(Ordering::Acquire) {
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
        if handoff.stop.load(Ordering::Acquire) {
            return;
        }
        // A panic opening the file (redb repairing a damaged one) must not
        // leave the store waiting for good: it fails as a file that cannot
        // be opened, which the writer tries again every second.
        let opened = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| open_file(path)))
            .unwrap_or_else(|_| {
                Err(StoreError::Other(format!(
                    "{}: opening it panicked",
                    path.display()
                )))
            });
        match opened {
            Err(StoreError::InUse(_)) => continue,
            Ok(db) => {
                shared.install(db.0);
                tracing::info!(path = %path.display(), waited_ms = handoff.since.elapsed().as_millis() as u64, "store taken over from the process this one replaced");
            }
            Err(e) => shared.cannot_open(&e),
        }
        done.send_replace(true);
        return;
    }
}
