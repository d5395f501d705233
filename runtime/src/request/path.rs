//! Request path normalisation: the one place a URL path becomes a cache key.
//!
//! The path is percent-decoded exactly once, then split and rebuilt with
//! `.` dropped and `..` applied. Anything that could name a file outside the
//! site root, or that has two meanings on some filesystem, is refused here:
//! encoded separators (`%2f`, `%5c`), backslashes, NUL bytes, and `..` that
//! climbs above the root. Hidden names (a segment starting with `.`, but
//! `/.well-known/`) are reported separately so they answer 404 like a
//! missing file.

use std::borrow::Cow;

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

/// Bytes escaped when a normalised path goes back into a URL: controls,
/// space, non-ASCII (by `utf8_percent_encode`), and the characters that
/// would change what the path means (`?`, `#`, `%`) or are not allowed in
/// a path (`"`, `<`, `>`, backquote, braces, `\`, `^`, `|`).
const PATH_ESCAPES: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}')
    .add(b'\\')
    .add(b'^')
    .add(b'|');

/// The one folder at the root whose name starts with `.` that is served
/// and routed like any other (RFC 8615: ACME challenges, `security.txt`,
/// OpenID discovery).
pub const WELL_KNOWN: &str = ".well-known";

/// Whether a path segment (a file or folder name) is hidden: it starts
/// with `.`, and is not `.well-known` at the root (`first`).
pub fn is_hidden(segment: &str, first: bool) -> bool {
    segment.starts_with('.') && !(first && segment == WELL_KNOWN)
}

/// Whether a file at `inside` (relative to a site's root) is hidden: one
/// of its names is (see [`is_hidden`]). The folders of a Kubernetes
/// volume's atomic writer, which every file of a ConfigMap mounted as a
/// root links through, do not count (no request path can name them:
/// they start with `.`), and `.well-known` just inside one is at the root
/// of what it mounts.
pub fn hidden_below(inside: &std::path::Path) -> bool {
    let mut depth = 0;
    inside.components().any(|c| {
        let name = c.as_os_str().to_string_lossy();
        if kubelet_folder(&name) {
            return false;
        }
        depth += 1;
        is_hidden(&name, depth == 1)
    })
}

/// A folder of a Kubernetes volume's atomic writer: `..data`, or
/// `..2026_12_02_06_00_00.123456789`.
fn kubelet_folder(name: &str) -> bool {
    name == "..data"
        || name
            .strip_prefix("..")
            .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// Why a path was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not an origin-form path (must start with `/`), or bad percent-encoding.
    #[error("malformed path")]
    Malformed,
    /// `%2f` or `%5c`: a separator hidden from the router.
    #[error("encoded path separator")]
    EncodedSeparator,
    /// A backslash, which some filesystems treat as a separator.
    #[error("backslash in path")]
    Backslash,
    /// A NUL byte.
    #[error("NUL byte in path")]
    Nul,
    /// `..` climbing above the root.
    #[error("path escapes the site root")]
    EscapesRoot,
    /// A segment starting with `.` (dotfile or dot-folder), other than
    /// [`WELL_KNOWN`] at the root.
    #[error("a name starting with `.` is hidden (only `/.well-known/` at the root is served)")]
    Hidden,
}

impl PathError {
    /// Whether the client should see 404 (rather than 400).
    pub fn is_not_found(self) -> bool {
        matches!(self, PathError::Hidden)
    }
}

/// Normalises a raw (still percent-encoded) request path.
///
/// The result starts with `/`, has no empty, `.` or `..` segments, and ends
/// with `/` exactly when the request named a folder. Paths that are already
/// normal (the common case) are returned borrowed, without allocating.
pub fn normalize(raw: &str) -> Result<Cow<'_, str>, PathError> {
    if !raw.starts_with('/') {
        return Err(PathError::Malformed);
    }
    if is_plain(raw) {
        return Ok(Cow::Borrowed(raw));
    }
    if contains_encoded_separator(raw) {
        return Err(PathError::EncodedSeparator);
    }
    // A `%` not followed by two hex digits (`/%`, `/%zz`) is no encoding
    // at all: 400, as NGINX answers, not a name with a `%` in it.
    let bytes = raw.as_bytes();
    let bad_escape = bytes.iter().enumerate().any(|(i, &b)| {
        b == b'%'
            && !bytes
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if bad_escape {
        return Err(PathError::Malformed);
    }
    let decoded = percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| PathError::Malformed)?;
    if decoded.contains('\0') {
        return Err(PathError::Nul);
    }
    if decoded.contains('\\') {
        return Err(PathError::Backslash);
    }
    let mut segments: Vec<&str> = Vec::new();
    let mut trailing_slash = decoded.ends_with('/');
    for segment in decoded.split('/') {
        match segment {
            "" => {}
            "." => trailing_slash = true,
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::EscapesRoot);
                }
                trailing_slash = true;
            }
            s if is_hidden(s, segments.is_empty()) => return Err(PathError::Hidden),
            s => {
                segments.push(s);
                trailing_slash = false;
            }
        }
    }
    if decoded.ends_with('/') {
        trailing_slash = true;
    }
    let mut out = String::with_capacity(decoded.len() + 1);
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if trailing_slash || segments.is_empty() {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

/// A normalised path made safe to put back into a URL (a `Location`).
/// A normalised path never starts with `//`, so neither does the result.
pub fn encode(normalized: &str) -> String {
    utf8_percent_encode(normalized, PATH_ESCAPES).to_string()
}

/// True when `raw` needs no decoding and no segment rewriting: no `%`, no
/// `\`, no `//`, and no segment starting with `.`.
fn is_plain(raw: &str) -> bool {
    let bytes = raw.as_bytes();
    let mut prev = 0u8;
    for &b in bytes {
        match b {
            b'%' | b'\\' | 0 => return false,
            b'/' if prev == b'/' => return false,
            b'.' if prev == b'/' => return false,
            _ => {}
        }
        prev = b;
    }
    true
}

fn contains_encoded_separator(raw: &str) -> bool {
    raw.as_bytes().windows(3).any(|w| {
        w[0] == b'%'
            && (w[1] == b'2' && w[2].eq_ignore_ascii_case(&b'f')
                || w[1] == b'5' && w[2].eq_ignore_ascii_case(&b'c'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(raw: &str) -> String {
        normalize(raw).expect(raw).into_owned()
    }

    #[test]
    fn plain_paths_are_borrowed() {
        assert!(matches!(
            normalize("/a/b.html"),
            Ok(Cow::Borrowed("/a/b.html"))
        ));
        assert!(matches!(normalize("/"), Ok(Cow::Borrowed("/"))));
    }

    #[test]
    fn dot_segments_are_resolved_inside_the_root() {
        assert_eq!(ok("/a/./b"), "/a/b");
        assert_eq!(ok("/a/b/../c"), "/a/c");
        assert_eq!(ok("/a/.."), "/");
        assert_eq!(ok("/a//b"), "/a/b");
        assert_eq!(ok("/a/b/"), "/a/b/");
        assert_eq!(ok("/a/b/."), "/a/b/");
    }

    #[test]
    fn climbing_above_the_root_is_refused() {
        assert_eq!(normalize("/.."), Err(PathError::EscapesRoot));
        assert_eq!(
            normalize("/a/../../etc/passwd"),
            Err(PathError::EscapesRoot)
        );
        assert_eq!(normalize("/%2e%2e/etc/passwd"), Err(PathError::EscapesRoot));
        assert_eq!(normalize("/a/%2E%2E/%2e%2e/x"), Err(PathError::EscapesRoot));
    }

    #[test]
    fn encoded_separators_backslashes_and_nul_are_refused() {
        assert_eq!(normalize("/a%2fb"), Err(PathError::EncodedSeparator));
        assert_eq!(normalize("/a%2Fb"), Err(PathError::EncodedSeparator));
        assert_eq!(
            normalize("/..%5c..%5cwindows"),
            Err(PathError::EncodedSeparator)
        );
        assert_eq!(normalize("/a\\..\\b"), Err(PathError::Backslash));
        assert_eq!(normalize("/a%00.html"), Err(PathError::Nul));
        assert_eq!(normalize("/%ff"), Err(PathError::Malformed));
        for bad in ["/%", "/%zz", "/a%2", "/a%2g/b", "/%%41"] {
            assert_eq!(normalize(bad), Err(PathError::Malformed), "{bad}");
        }
        assert_eq!(normalize("/a%20b").as_deref(), Ok("/a b"));
        assert_eq!(normalize("a/b"), Err(PathError::Malformed));
    }

    #[test]
    fn hidden_names_are_not_found() {
        assert_eq!(normalize("/.env"), Err(PathError::Hidden));
        assert_eq!(normalize("/.git/config"), Err(PathError::Hidden));
        assert_eq!(normalize("/a/%2egit/x"), Err(PathError::Hidden));
        assert!(PathError::Hidden.is_not_found());
        // `.well-known` at the root only, and nothing hidden below it.
        assert_eq!(
            ok("/.well-known/acme-challenge/t"),
            "/.well-known/acme-challenge/t"
        );
        assert_eq!(ok("/a/../.well-known/x"), "/.well-known/x");
        assert_eq!(normalize("/a/.well-known/x"), Err(PathError::Hidden));
        assert_eq!(normalize("/.well-known/.git"), Err(PathError::Hidden));
    }

    #[test]
    fn encoded_paths_round_trip_and_stay_paths() {
        for raw in [
            "/caf%C3%A9/a%20b",
            "/a%3Fb/%23x",
            "/%25",
            "//evil.com",
            "/a/b/",
        ] {
            let norm = ok(raw);
            let enc = encode(&norm);
            assert!(
                enc.starts_with('/') && !enc.starts_with("//"),
                "{raw} -> {enc}"
            );
            assert!(enc.bytes().all(|b| b.is_ascii_graphic()), "{raw} -> {enc}");
            assert_eq!(ok(&enc), norm, "{raw} -> {enc}");
        }
        assert_eq!(encode("/caf\u{e9}"), "/caf%C3%A9");
    }

    #[test]
    fn decoding_happens_once() {
        // %252e is "%2e" after one decoding: a literal name, not "..".
        assert_eq!(ok("/%252e%252e/x"), "/%2e%2e/x");
        assert_eq!(ok("/caf%C3%A9.html"), "/café.html");
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("..".to_owned()),
            Just(".".to_owned()),
            Just("%2e%2e".to_owned()),
            Just("%2E.".to_owned()),
            Just("%2f".to_owned()),
            Just("%5C".to_owned()),
            Just("\\".to_owned()),
            Just("%00".to_owned()),
            Just("".to_owned()),
            Just("%252e".to_owned()),
            "[a-z]{1,4}",
            "[a-z%.\\\\]{1,6}",
        ]
    }

    proptest! {
        #[test]
        fn no_generated_path_escapes_the_root(segs in proptest::collection::vec(segment(), 0..8)) {
            let raw = format!("/{}", segs.join("/"));
            if let Ok(norm) = normalize(&raw) {
                prop_assert!(norm.starts_with('/'));
                for s in norm.split('/') {
                    prop_assert!(s != ".." && s != ".", "{raw} -> {norm}");
                    prop_assert!(!s.starts_with('.'), "{raw} -> {norm}");
                    prop_assert!(!s.contains('\\') && !s.contains('\0'), "{raw} -> {norm}");
                }
                let root = std::path::Path::new("/srv/www");
                let joined = root.join(norm.trim_start_matches('/'));
                prop_assert!(joined.components().all(|c| !matches!(c, std::path::Component::ParentDir)));
                prop_assert!(joined.starts_with(root));
            }
        }
    }
}
