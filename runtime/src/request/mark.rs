//! Whether a request went to a servlet. The connection watches for a
//! client that leaves only then (HTTP/1 on a plain listener, see
//! `server::client_gone`): a static answer comes at once, and a client
//! that only ended its sending side still gets it.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set when the request being handled is handed to a servlet.
#[derive(Debug, Default)]
pub struct ServletMark(AtomicBool);

impl ServletMark {
    /// The request goes to a servlet.
    pub fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// A new request starts.
    pub fn clear(&self) {
        if self.0.load(Ordering::Relaxed) {
            self.0.store(false, Ordering::Relaxed);
        }
    }

    /// Whether the request went to a servlet.
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}
