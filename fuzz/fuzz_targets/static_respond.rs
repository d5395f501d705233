//! Conditional, Range and Accept-Encoding headers against real cached and
//! streamed files: never a panic, and every answer is consistent (a 206's
//! Content-Range and Content-Length agree with its body, a 304 has no
//! body, a 416 names the length).
#![no_main]

use std::sync::OnceLock;

use arbitrary::Arbitrary;
use http::{HeaderValue, Request};
use libfuzzer_sys::fuzz_target;
use swan::static_files::{SiteCache, respond};

#[derive(Debug, Arbitrary)]
struct Input {
    path: u8,
    head: bool,
    range: Option<Vec<u8>>,
    if_range: Option<Vec<u8>>,
    if_none_match: Option<Vec<u8>>,
    if_modified_since: Option<Vec<u8>>,
    accept_encoding: Option<Vec<u8>>,
}

fn cache() -> &'static (tempfile::TempDir, SiteCache) {
    static CACHE: OnceLock<(tempfile::TempDir, SiteCache)> = OnceLock::new();
    CACHE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("small.txt"), "0123456789").expect("write");
        std::fs::write(dir.path().join("page.html"), "<p>fuzz</p>".repeat(200)).expect("write");
        std::fs::write(dir.path().join("big.bin"), vec![7u8; 300_000]).expect("write");
        std::fs::write(dir.path().join("empty.txt"), "").expect("write");
        let mut site = swan::config::SiteConfig::new("fuzz", dir.path().to_path_buf());
        site.cache.max_file_size = 100_000;
        let cache = SiteCache::load(&site).expect("load");
        (dir, cache)
    })
}

fuzz_target!(|input: Input| {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let (_, cache) = cache();
    let path = ["/small.txt", "/page.html", "/big.bin", "/empty.txt", "/missing"]
        [input.path as usize % 5];
    let mut req = Request::builder()
        .method(if input.head { "HEAD" } else { "GET" })
        .uri(path);
    for (name, value) in [
        ("range", &input.range),
        ("if-range", &input.if_range),
        ("if-none-match", &input.if_none_match),
        ("if-modified-since", &input.if_modified_since),
        ("accept-encoding", &input.accept_encoding),
    ] {
        if let Some(v) = value.as_ref().and_then(|v| HeaderValue::from_bytes(v).ok()) {
            req = req.header(name, v);
        }
    }
    let Ok(req) = req.body(()) else { return };
    // Inside the runtime: files streamed from disk are opened with tokio::fs.
    let Ok(res) = rt.block_on(respond(cache, &req, path)) else { return };
    let status = res.status().as_u16();
    let headers = res.headers().clone();
    let len: Option<u64> = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let body = rt.block_on(http_body_util::BodyExt::collect(res.into_body()));
    let body = body.expect("a body that reads").to_bytes();
    match status {
        304 => assert!(body.is_empty()),
        206 => {
            let range = headers["content-range"].to_str().expect("ascii");
            let (span, total) = range
                .strip_prefix("bytes ")
                .and_then(|r| r.split_once('/'))
                .expect("bytes a-b/len");
            let (a, b) = span.split_once('-').expect("a-b");
            let (a, b): (u64, u64) = (a.parse().expect("a"), b.parse().expect("b"));
            let total: u64 = total.parse().expect("len");
            assert!(a <= b && b < total, "{range}");
            assert_eq!(len, Some(b - a + 1));
            if !input.head {
                assert_eq!(body.len() as u64, b - a + 1);
            }
        }
        200 if !input.head => assert_eq!(Some(body.len() as u64), len),
        200 | 301 => {}
        other => panic!("unexpected status {other}"),
    }
});
