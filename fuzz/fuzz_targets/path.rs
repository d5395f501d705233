//! Request paths: normalisation never panics, never yields a path that
//! climbs out of the root or names a hidden file, and the re-encoded form
//! (used in redirects) normalises back to the same path and is never
//! protocol-relative.
#![no_main]

use libfuzzer_sys::fuzz_target;
use swan::request::path::{encode, normalize};

fuzz_target!(|raw: &str| {
    let Ok(norm) = normalize(raw) else { return };
    assert!(norm.starts_with('/'), "{raw:?} -> {norm:?}");
    for segment in norm.split('/') {
        assert!(segment != ".." && segment != ".", "{raw:?} -> {norm:?}");
        assert!(!segment.starts_with('.'), "{raw:?} -> {norm:?}");
        assert!(!segment.contains('\\') && !segment.contains('\0'), "{raw:?} -> {norm:?}");
    }
    let encoded = encode(&norm);
    assert!(!encoded.starts_with("//"), "{raw:?} -> {encoded:?}");
    assert!(encoded.bytes().all(|b| b.is_ascii_graphic()), "{encoded:?}");
    let again = normalize(&encoded).expect("an encoded normal path normalises");
    assert_eq!(again, norm, "{raw:?}");
});
