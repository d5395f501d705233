//! The server's `max_connections` places: one per accepted connection,
//! from its accept to its close, counted in `swan_connections_open`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use super::watchdog::ConnState;
use crate::app::App;

/// The server's `max_connections` places. When they are all taken, an
/// accepted connection asks an idle keep-alive connection to make room,
/// as NGINX closes idle keep-alive connections when it runs short, rather
/// than new clients waiting out a whole `keepalive_timeout`: in turn, the
/// parked ones (HTTP/1 on plain TCP, the one parked longest), then the
/// supervised ones (HTTP/1 over TLS, HTTP/2), the one idle longest.
pub(crate) struct Places {
    free: Arc<Semaphore>,
    wanted: Notify,
    /// Connections waiting for a place now: a notification left over
    /// from a wait that ended must not close an idle connection later.
    waiting: std::sync::atomic::AtomicUsize,
    /// The connections hyper serves without parking, each with how to
    /// ask it to close: looked through only while a connection waits, so
    /// an idle one costs nothing per request (a shared notification
    /// would be polled at each of their wakes, and taken by busy ones).
    supervised: Mutex<HashMap<u64, Supervised>>,
    next_id: AtomicU64,
    /// Supervised connections asked and not yet closed (an HTTP/2 one
    /// takes a round trip): their places are on their way, so no more are
    /// asked while they cover the connections waiting.
    closing: AtomicUsize,
    /// When the supervised connections were last looked through: at most
    /// once per [`ASK_AGAIN`] whatever the number of waiters.
    last_scan_ms: AtomicU64,
}

/// A connection served without parking, as its place knows it.
struct Supervised {
    state: Weak<ConnState>,
    signal: Arc<RoomSignal>,
}

/// How a supervised connection is asked to close: a flag and the waker of
/// its task, registered at each of its wakes without a lock (a `Notify`
/// takes its lock at every poll).
#[derive(Default)]
struct RoomSignal {
    /// Asked, and the connection has not looked yet.
    asked: AtomicBool,
    /// Asked, and not yet found busy: it is closing (counted in
    /// `Places::closing`), and not asked again.
    pending: AtomicBool,
    waker: futures_util::task::AtomicWaker,
}

/// How often a connection waiting for a place asks again for room.
const ASK_AGAIN: std::time::Duration = std::time::Duration::from_millis(50);

impl Places {
    pub(crate) fn new(max_connections: usize) -> Arc<Places> {
        Arc::new(Places {
            free: Arc::new(Semaphore::new(max_connections)),
            wanted: Notify::new(),
            waiting: std::sync::atomic::AtomicUsize::new(0),
            supervised: Mutex::default(),
            next_id: AtomicU64::new(0),
            closing: AtomicUsize::new(0),
            last_scan_ms: AtomicU64::new(0),
        })
    }

    /// Asks the supervised connection idle longest (see
    /// `ConnState::idle_for_room`) to close; false when none is idle.
    fn ask_supervised(&self) -> bool {
        let now = crate::clock::now_ms();
        let last = self.last_scan_ms.load(Ordering::Relaxed);
        let every = ASK_AGAIN.as_millis() as u64;
        if last != 0 && now < last + every
            || self
                .last_scan_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return false;
        }
        let Ok(supervised) = self.supervised.lock() else {
            return false;
        };
        let idlest = supervised
            .values()
            .filter(|s| !s.signal.pending.load(Ordering::Relaxed))
            .filter_map(|s| Some((s.state.upgrade()?.idle_for_room(now)?, &s.signal)))
            .min_by_key(|(since, _)| *since);
        let Some((_, signal)) = idlest else {
            return false;
        };
        signal.pending.store(true, Ordering::Relaxed);
        self.closing.fetch_add(1, Ordering::Relaxed);
        signal.asked.store(true, Ordering::Release);
        signal.waker.wake();
        true
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

    /// A place for a connection just accepted; waits (asking idle
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
                let mut round = 0u32;
                loop {
                    // Parked and supervised connections in turn: one
                    // asked a round, not one of each; none while those
                    // already asked will free enough places.
                    let coming = self.closing.load(Relaxed) >= self.waiting.load(Relaxed);
                    if !coming && (round % 2 == 1 || !self.ask_supervised()) {
                        self.wanted.notify_one();
                    }
                    round = round.wrapping_add(1);
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
    /// Enters a connection served without parking among those asked for
    /// room (see [`Places`]); it leaves when the returned value drops.
    pub(crate) fn supervised(&self, state: &Arc<ConnState>) -> RoomAsk {
        let id = self.places.next_id.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(RoomSignal::default());
        if let Ok(mut supervised) = self.places.supervised.lock() {
            supervised.insert(
                id,
                Supervised {
                    state: Arc::downgrade(state),
                    signal: signal.clone(),
                },
            );
        }
        RoomAsk {
            places: self.places.clone(),
            id,
            signal,
        }
    }

    /// Resolves when a new connection needs this one's place, if this one
    /// is idle: for a parked connection to wait on.
    pub(crate) async fn room_wanted(&self) {
        loop {
            self.places.wanted.notified().await;
            if self.places.waiting.load(Ordering::Relaxed) > 0 {
                return;
            }
        }
    }
}

/// A supervised connection's entry among those asked for room.
pub(crate) struct RoomAsk {
    places: Arc<Places>,
    id: u64,
    signal: Arc<RoomSignal>,
}

impl RoomAsk {
    /// Completes when a connection waiting for a place asks this one to
    /// close (it checks it is still idle first).
    pub(crate) async fn asked(&self) {
        let asked = || self.signal.asked.swap(false, Ordering::Acquire);
        std::future::poll_fn(|cx| {
            if asked() {
                return std::task::Poll::Ready(());
            }
            self.signal.waker.register(cx.waker());
            // Asked between the check and the registration.
            if asked() {
                return std::task::Poll::Ready(());
            }
            std::task::Poll::Pending
        })
        .await;
    }

    /// Asked, but not idle after all (a request came): no longer counted
    /// among the connections closing for room, and it may be asked again
    /// later.
    pub(crate) fn not_now(&self) {
        if self.signal.pending.swap(false, Ordering::Relaxed) {
            self.places.closing.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for RoomAsk {
    fn drop(&mut self) {
        if let Ok(mut supervised) = self.places.supervised.lock() {
            supervised.remove(&self.id);
        }
        self.not_now();
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
