//! The configuration reader: any text gives a configuration or a list of
//! problems, never a panic, and every problem names a place.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|source: &str| {
    let base = std::env::temp_dir();
    if let Err(e) = swan::Config::parse(source, Path::new("fuzz.toml"), &base) {
        assert!(!e.problems().is_empty());
        for p in e.problems() {
            assert!(!p.key.is_empty() && !p.message.is_empty(), "{p}");
        }
    }
});
