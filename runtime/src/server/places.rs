//! The server's `max_connections` places: one per accepted connection,
//! from its accept to its close, counted in `swan_connections_open`.

use std::sync::Arc;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::app::App;

/// The server's `max_connections` places. When they are all taken, an
/// accepted connection asks the parked ones (idle HTTP/1 keep-alive
/// connections) to make room: the one parked longest closes, as NGINX
/// closes idle keep-alive connections when it runs short, rather than
/// new clients waiting out a whole `keepalive_timeout`.
pub(crate) struct Places {
    free: Arc<Semaphore>,
    wanted: Notify,
    /// Connections waiting for a place now: a notification left over
    /// from a wait that ended must not close an idle connection later.
    waiting: std::sync::atomic::AtomicUsize,
}

/// How often a connection waiting for a place asks again for room.
const ASK_AGAIN: std::time::Duration = std::time::Duration::from_millis(50);

impl Places {
    pub(crate) fn new(max_connections: usize) -> Arc<Places> {
        Arc::new(Places {
            free: Arc::new(Semaphore::new(max_connections)),
            wanted: Notify::new(),
            waiting: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// A place for a connection just accepted, if one is free.
    pub(crate) fn try_take(self: &Arc<Self>, app: &App) -> Option<Slot> {
        let permit = self.free.clone().try_acquire_owned().ok()?;
        Some(self.slot(permit, app))
    }

    fn slot(self: &Arc<Self>, permit: OwnedSemaphorePermit, app: &App) -> Slot {
        Slot {
            _permit: permit,
            _open: OpenConnection::new(app),
            places: self.clone(),
        }
    }

    /// A place for a connection just accepted; waits (asking the parked
    /// connections for room) while there is none.
    pub(crate) async fn take(self: &Arc<Self>, app: &App) -> Slot {
        let permit = match self.free.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                use std::sync::atomic::Ordering::Relaxed;
                self.waiting.fetch_add(1, Relaxed);
                // Counted out however the wait ends (a drain drops it).
                scopeguard::defer! {
                    self.waiting.fetch_sub(1, Relaxed);
                }
                loop {
                    self.wanted.notify_one();
                    let wait = tokio::time::timeout(ASK_AGAIN, self.free.clone().acquire_owned());
                    if let Ok(Ok(p)) = wait.await {
                        break p;
                    }
                }
            }
        };
        self.slot(permit, app)
    }
}

/// An accepted connection's place, from its accept to its close (PROXY
/// header and TLS handshake included): its share of `max_connections`,
/// and its count in `swan_connections_open`.
pub(crate) struct Slot {
    _permit: OwnedSemaphorePermit,
    _open: OpenConnection,
    places: Arc<Places>,
}

impl Slot {
    /// Resolves when a new connection needs this one's place, if this one
    /// is idle: for a parked connection to wait on.
    pub(crate) async fn room_wanted(&self) {
        loop {
            self.places.wanted.notified().await;
            if self
                .places
                .waiting
                .load(std::sync::atomic::Ordering::Relaxed)
                > 0
            {
                return;
            }
        }
    }
}

/// Counts a connection open for as long as it lives.
struct OpenConnection(Arc<crate::observe::Observe>);

impl OpenConnection {
    fn new(app: &App) -> OpenConnection {
        let o = app.observe.clone();
        o.connections_total.add(1);
        o.connections_open
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        OpenConnection(o)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0
            .connections_open
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}
