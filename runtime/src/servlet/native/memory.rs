//! Guest memory as the native ABI reads and writes it: every pointer and
//! length from a guest is checked against its memory, and a bad one is an
//! [`AbiFault`] (the request fails with 500), never a host memory access.

use wasmtime::Caller;

use super::host::Host;

/// A servlet broke the ABI's contract; its request fails with 500.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AbiFault {
    /// A pointer/length pair outside the guest's memory.
    #[error("servlet passed a buffer outside its memory ({ptr:#x}+{len})")]
    BadPointer {
        /// The pointer.
        ptr: i32,
        /// The length.
        len: i32,
    },
    /// The module has no exported memory.
    #[error("servlet has no exported memory")]
    NoMemory,
    /// `request_get` with an unknown part.
    #[error("servlet asked for unknown request part {0}")]
    UnknownPart(i32),
    /// The response body grew past the servlet's `max_response_bytes`.
    #[error("response larger than the limit of {limit} bytes")]
    ResponseTooLarge {
        /// The limit.
        limit: u64,
    },
    /// The response's headers grew past what a response may carry.
    #[error("response headers larger than {limit} bytes (names, values and 32 bytes per field)")]
    HeadersTooLarge {
        /// The limit.
        limit: usize,
    },
}

/// The guest range `ptr..ptr+len`, checked against `mem_len`.
pub(crate) fn range(
    ptr: i32,
    len: i32,
    mem_len: usize,
) -> Result<std::ops::Range<usize>, AbiFault> {
    let bad = AbiFault::BadPointer { ptr, len };
    if ptr < 0 || len < 0 {
        return Err(bad);
    }
    let start = ptr as usize;
    let end = start
        .checked_add(len as usize)
        .ok_or(AbiFault::BadPointer { ptr, len })?;
    if end > mem_len {
        return Err(bad);
    }
    Ok(start..end)
}

pub(crate) fn memory(caller: &mut Caller<'_, Host>) -> Result<wasmtime::Memory, AbiFault> {
    if let Some(m) = caller.data().memory {
        return Ok(m);
    }
    let m = caller
        .get_export("memory")
        .and_then(|e| e.into_memory())
        .ok_or(AbiFault::NoMemory)?;
    caller.data_mut().memory = Some(m);
    Ok(m)
}

/// Copies as much of `src` as fits into guest `buf_ptr..+buf_len`; returns
/// the full length of `src` so the guest can retry with a larger buffer.
pub(crate) fn copy_out(
    mem: &mut [u8],
    src: &[u8],
    buf_ptr: i32,
    buf_len: i32,
) -> Result<i32, AbiFault> {
    let dst = range(buf_ptr, buf_len, mem.len())?;
    let n = src.len().min(dst.len());
    mem[dst.start..dst.start + n].copy_from_slice(&src[..n]);
    Ok(i32::try_from(src.len()).unwrap_or(i32::MAX))
}

/// Reads a guest string (lossy: names are ASCII by contract).
pub(crate) fn read_bytes(mem: &[u8], ptr: i32, len: i32) -> Result<&[u8], AbiFault> {
    Ok(&mem[range(ptr, len, mem.len())?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked_against_memory() {
        assert_eq!(range(0, 10, 10).ok(), Some(0..10));
        assert!(range(1, 10, 10).is_err());
        assert!(range(-1, 1, 10).is_err());
        assert!(range(5, -1, 10).is_err());
        assert!(range(i32::MAX, i32::MAX, usize::MAX).is_ok());
        assert!(range(i32::MAX, 1, 100).is_err());
    }
}
