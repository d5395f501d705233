//! Where a Redis listing continues, as the one number a servlet is given.

use crate::store::StoreError;

/// Where a listing continues: a SCAN cursor, or keys a SCAN step returned
/// beyond a page, kept in Redis under an id. As one number: 0 the start,
/// odd `(scan << 21 | check) << 1 | 1`, even `(id << 22 | offset) << 1`.
/// A SCAN cursor carries a check of the store, the prefix and the
/// position, so one made up, or taken from another store or listing, is
/// refused (as the embedded store refuses one it never gave) instead of
/// listing from wherever it points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ListCursor {
    Scan(u64),
    Leftover { id: u64, offset: usize },
}

/// The listing a cursor belongs to: the store's name and the prefix.
pub(super) type Listing<'a> = (&'a str, &'a str);

impl ListCursor {
    /// Ids are 1..MAX_ID, so every cursor fits an i64 above 0.
    pub(super) const MAX_ID: u64 = 1 << 39;
    const MAX_OFFSET: usize = 1 << 22;
    const CHECK_BITS: u32 = 21;
    /// SCAN positions below this fit (a table of 2^41 slots is far past
    /// any Redis's memory).
    const MAX_SCAN: u64 = 1 << 41;

    pub(super) fn encode(self, listing: Listing<'_>) -> Result<u64, StoreError> {
        let too_large = || StoreError::Other("the listing is too large to continue".to_owned());
        match self {
            ListCursor::Scan(0) => Ok(0),
            ListCursor::Scan(scan) if scan < Self::MAX_SCAN => {
                Ok((scan << Self::CHECK_BITS | check(listing, scan)) << 1 | 1)
            }
            ListCursor::Leftover { id, offset }
                if (1..Self::MAX_ID).contains(&id) && offset < Self::MAX_OFFSET =>
            {
                Ok((id << 22 | offset as u64) << 1)
            }
            _ => Err(too_large()),
        }
    }

    pub(super) fn decode(
        cursor: Option<u64>,
        listing: Listing<'_>,
    ) -> Result<ListCursor, StoreError> {
        Ok(match cursor {
            None | Some(0) => ListCursor::Scan(0),
            Some(c) if c & 1 == 1 => {
                let scan = c >> (Self::CHECK_BITS + 1);
                if (c >> 1) & ((1 << Self::CHECK_BITS) - 1) != check(listing, scan) {
                    return Err(StoreError::Other(
                        "not a cursor of this store's listing of this prefix: list again from the start"
                            .to_owned(),
                    ));
                }
                ListCursor::Scan(scan)
            }
            Some(c) => ListCursor::Leftover {
                id: c >> 23,
                offset: ((c >> 1) as usize) & (Self::MAX_OFFSET - 1),
            },
        })
    }
}

/// A check of a SCAN position for its listing: FNV-1a, the same in every
/// swan process sharing the Redis (each may continue another's listing).
/// Not a secret: it tells a cursor of this listing from any other number,
/// it does not stop a servlet forging one (which gains it nothing its own
/// store access does not give).
fn check((store, prefix): Listing<'_>, scan: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let parts: [&[u8]; 4] = [
        store.as_bytes(),
        &[0],
        prefix.as_bytes(),
        &scan.to_le_bytes(),
    ];
    for byte in parts.into_iter().flatten() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash & ((1 << ListCursor::CHECK_BITS) - 1)
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
        let listing = ("red", "p/");
        for c in [
            ListCursor::Scan(0),
            ListCursor::Scan(1),
            ListCursor::Scan(123_456_789),
            ListCursor::Scan(ListCursor::MAX_SCAN - 1),
            ListCursor::Leftover { id: 1, offset: 0 },
            ListCursor::Leftover { id: 7, offset: 3 },
            ListCursor::Leftover {
                id: ListCursor::MAX_ID - 1,
                offset: ListCursor::MAX_OFFSET - 1,
            },
        ] {
            let n = c.encode(listing).expect("encodes");
            assert!(
                i64::try_from(n).is_ok(),
                "{c:?} does not fit the native ABI"
            );
            assert_eq!(
                ListCursor::decode(Some(n), listing).expect("decodes"),
                c,
                "{n}"
            );
        }
        assert!(
            ListCursor::Leftover {
                id: ListCursor::MAX_ID,
                offset: 0
            }
            .encode(listing)
            .is_err()
        );
        assert!(
            ListCursor::Scan(ListCursor::MAX_SCAN)
                .encode(listing)
                .is_err()
        );
    }

    /// A SCAN cursor of another store or prefix, or a number made up, is
    /// refused.
    #[test]
    fn scan_cursors_belong_to_their_listing() {
        let n = ListCursor::Scan(4242)
            .encode(("red", "p/"))
            .expect("encodes");
        assert!(ListCursor::decode(Some(n), ("red", "q/")).is_err());
        assert!(ListCursor::decode(Some(n), ("red2", "p/")).is_err());
        let refused = [7_u64, 99_999, 2_361_949_294_990_777]
            .into_iter()
            .filter(|&c| ListCursor::decode(Some(c), ("red", "p/")).is_err())
            .count();
        assert_eq!(refused, 3);
    }
}
