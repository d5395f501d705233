//! Where a Redis listing continues, as the one number a servlet is given.

use crate::store::StoreError;

/// Where a listing continues: a SCAN cursor, or keys a SCAN step returned
/// beyond a page, kept in Redis under an id. As one number: 0 the start,
/// odd `scan << 1 | 1`, even `(id << 22 | offset) << 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListCursor {
    Scan(u64),
    Leftover { id: u64, offset: usize },
}

impl ListCursor {
    /// Ids are 1..MAX_ID, so every cursor fits an i64 above 0.
    pub(super) const MAX_ID: u64 = 1 << 39;
    const MAX_OFFSET: usize = 1 << 22;

    pub(super) fn encode(self) -> Result<u64, StoreError> {
        let too_large = || StoreError::Other("the listing is too large to continue".to_owned());
        match self {
            ListCursor::Scan(0) => Ok(0),
            ListCursor::Scan(scan) if scan < 1 << 62 => Ok(scan << 1 | 1),
            ListCursor::Leftover { id, offset }
                if (1..Self::MAX_ID).contains(&id) && offset < Self::MAX_OFFSET =>
            {
                Ok((id << 22 | offset as u64) << 1)
            }
            _ => Err(too_large()),
        }
    }

    pub(super) fn decode(cursor: Option<u64>) -> ListCursor {
        match cursor {
            None | Some(0) => ListCursor::Scan(0),
            Some(c) if c & 1 == 1 => ListCursor::Scan(c >> 1),
            Some(c) => ListCursor::Leftover {
                id: c >> 23,
                offset: ((c >> 1) as usize) & (Self::MAX_OFFSET - 1),
            },
        }
    }
}

/// `s` with Redis glob specials escaped.
pub(super) fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::ListCursor;

    #[test]
    fn list_cursors_round_trip() {
        for c in [
            ListCursor::Scan(0),
            ListCursor::Scan(1),
            ListCursor::Scan(123_456_789),
            ListCursor::Leftover { id: 1, offset: 0 },
            ListCursor::Leftover { id: 7, offset: 3 },
            ListCursor::Leftover {
                id: ListCursor::MAX_ID - 1,
                offset: ListCursor::MAX_OFFSET - 1,
            },
        ] {
            let n = c.encode().expect("encodes");
            assert!(
                i64::try_from(n).is_ok(),
                "{c:?} does not fit the native ABI"
            );
            assert_eq!(ListCursor::decode(Some(n)), c, "{n}");
        }
        assert!(
            ListCursor::Leftover {
                id: ListCursor::MAX_ID,
                offset: 0
            }
            .encode()
            .is_err()
        );
    }
}
