//! The headers a cached file's answers are built from: its type, its
//! validators (content hash, or size and time for a streamed file) and
//! its dates; and the stamps that tell whether a file changed.

use std::hash::{Hash, Hasher};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::HeaderValue;

use crate::file_stamp::FileStamp;

/// The validator of a file streamed from disk: size, modification time and
/// which file it is (its content is not read at load).
pub(super) fn disk_etag(stamp: FileStamp) -> HeaderValue {
    quoted_etag(&disk_tag(stamp))
}

/// [`disk_etag`] unquoted: what a streamed file's variants' tags start with.
/// Which file it is counts too: a copy of the same size and date (`cp -p`)
/// must not pass the old one's validator (a 304, or an `If-Range` that
/// splices two versions).
pub(super) fn disk_tag(stamp: FileStamp) -> String {
    format!(
        "{:x}-{:x}-{:x}",
        stamp.len,
        stamp.mtime_ns,
        stamp.identity_bits()
    )
}

/// Extensions whose type `mime_guess` gets other than browsers and
/// NGINX expect: modules and source maps are JavaScript and JSON, `.ts`
/// is an MPEG transport stream (HLS), as NGINX's `mime.types` says.
const OVERRIDES: [(&str, &str); 4] = [
    ("mjs", "text/javascript; charset=utf-8"),
    ("cjs", "text/javascript; charset=utf-8"),
    ("map", "application/json; charset=utf-8"),
    ("ts", "video/mp2t"),
];

/// Content-Type from the extension, with a charset for text.
pub(crate) fn content_type_for(path: &Path) -> HeaderValue {
    if let Some(ext) = path.extension().and_then(|e| e.to_str())
        && let Some((_, value)) = OVERRIDES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(ext))
    {
        return HeaderValue::from_static(value);
    }
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let essence = mime.essence_str();
    let text = mime.type_() == mime_guess::mime::TEXT
        || matches!(
            essence,
            "application/javascript" | "application/json" | "image/svg+xml" | "application/xml"
        );
    let value = if text && mime.get_param("charset").is_none() {
        format!("{essence}; charset=utf-8")
    } else {
        mime.to_string()
    };
    HeaderValue::from_str(&value).unwrap_or(HeaderValue::from_static("application/octet-stream"))
}

pub(super) fn content_hash(data: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut hasher);
    hasher.finish()
}

pub(super) fn quoted_etag(tag: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{tag}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

/// Truncates a time to whole seconds, as HTTP dates carry no more.
pub(crate) fn whole_seconds(t: SystemTime) -> SystemTime {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// A file's Last-Modified: its modification time in whole seconds, or
/// now if that is in the future (RFC 9110 §8.8.2.1: a server replaces a
/// future date with the message's).
pub(crate) fn last_modified(meta: &std::fs::Metadata) -> SystemTime {
    let modified = meta.modified().unwrap_or(UNIX_EPOCH);
    whole_seconds(modified.min(SystemTime::now()))
}

pub(super) fn http_date(t: SystemTime) -> HeaderValue {
    HeaderValue::from_str(&httpdate::fmt_http_date(t))
        .unwrap_or(HeaderValue::from_static("Thu, 01 Jan 1970 00:00:00 GMT"))
}

/// The stamps of a file and of its `.br` and `.gz` siblings: a reload
/// reuses an entry whose fingerprint has not changed instead of reading and
/// compressing the file again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Fingerprint(pub(super) [Option<FileStamp>; 3]);

impl Fingerprint {
    pub(super) fn of(path: &Path, meta: &std::fs::Metadata) -> Fingerprint {
        let sibling =
            |suffix: &str| FileStamp::of(Path::new(&format!("{}.{suffix}", path.display())));
        Fingerprint([
            Some(FileStamp::from_meta(meta)),
            sibling("br"),
            sibling("gz"),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::content_type_for;

    #[test]
    fn types_are_those_browsers_expect() {
        for (file, want) in [
            ("a.js", "text/javascript; charset=utf-8"),
            ("a.mjs", "text/javascript; charset=utf-8"),
            ("a.MJS", "text/javascript; charset=utf-8"),
            ("a.js.map", "application/json; charset=utf-8"),
            ("seg.ts", "video/mp2t"),
            ("a.html", "text/html; charset=utf-8"),
            ("a.wasm", "application/wasm"),
            ("a.unknownext", "application/octet-stream"),
        ] {
            assert_eq!(content_type_for(std::path::Path::new(file)), want, "{file}");
        }
    }
}
