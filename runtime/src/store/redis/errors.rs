//! Redis errors as the store's: what is "unavailable" (for now) and what
//! is not.

use redis::{ErrorKind, RedisError};

use crate::store::StoreError;

/// Whether `e` says Redis refused the connection's handshake (AUTH,
/// SELECT), which a manager keeps answering without trying again.
pub(super) fn refused_handshake(e: &RedisError) -> bool {
    e.kind() == ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
        || e.to_string().contains("refused to switch database")
}

/// The store's error for a failed Redis call.
pub(super) fn classify(e: RedisError) -> StoreError {
    if e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || refused_handshake(&e)
        // Refused for now, not for good: Redis at its `maxmemory`, loading
        // its data, a replica after a failover, a script running.
        || matches!(e.code(), Some("OOM" | "LOADING" | "READONLY" | "MASTERDOWN" | "BUSY"))
    {
        return StoreError::Unavailable(e.to_string());
    }
    let text = e.to_string();
    if text.contains("not an integer") || text.contains("overflow") {
        return StoreError::NotANumber;
    }
    StoreError::Other(text)
}
