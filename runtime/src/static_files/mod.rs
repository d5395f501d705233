//! Static files: a site's root held in memory with prebuilt headers.
//!
//! - `cache`: loading a root into memory, precomputing headers and variants;
//! - `compress`: load-time gzip/brotli and `Accept-Encoding` parsing;
//! - `entry`: what the cache holds for a file, in memory or on disk;
//! - `headers`: content types, validators and dates;
//! - `open`: opening files that may have changed since they were loaded;
//! - `respond`: conditional requests, ranges, folders.
//!
//! Request paths arrive normalised (`request::path`).

mod cache;
mod compress;
mod entry;
mod headers;
mod open;
mod progress;
mod respond;

pub use cache::{CacheError, CacheStats, SiteCache};
pub use respond::{FILE_BUDGET, INDEX_FILE, not_found_page, respond};
