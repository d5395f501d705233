//! Static files: headers, conditional requests, ranges, compression,
//! folders, 404s and path safety.

use std::io::Read;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use swan_tests::{TestServer, TestSite};

const BODY: &str = "0123456789abcdefghijklmnopqrstuvwxyz";

async fn server() -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "<h1>home</h1>")?;
    site.file("www/plain.txt", BODY)?;
    site.file("www/docs/index.html", "<h1>docs</h1>")?;
    site.file("www/docs/page.css", "body { color: red }")?;
    site.file(
        "www/big.html",
        "<p>compress me, compress me, compress me</p>\n".repeat(200),
    )?;
    site.file("www/pre.js", "console.log('identity');\n".repeat(40))?;
    site.file("www/pre.js.gz", "precompressed-gzip-marker")?;
    site.file("www/.env", "SECRET=1")?;
    site.file("www/.git/config", "[core]")?;
    site.file("www/.well-known/acme-challenge/tok3n", "tok3n.key")?;
    site.file("www/.well-known/.secret", "SECRET=2")?;
    site.file("www/docs/.well-known/x", "SECRET=3")?;
    site.file("www/data.bin", vec![7u8; 3000])?;
    site.file(
        "www/large.dat",
        (0..200_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    )?;
    site.file("outside.txt", "outside the root")?;
    std::os::unix::fs::symlink(
        site.path().join("outside.txt"),
        site.path().join("www/escape.txt"),
    )?;
    std::os::unix::fs::symlink(
        site.path().join("www/plain.txt"),
        site.path().join("www/alias.txt"),
    )?;
    let config = site.config(
        "[[site]]\nroot = \"www\"\ncache_control = \"public, max-age=60\"\n[site.cache]\nmax_file_size = \"64 KiB\"\n",
    )?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

#[tokio::test]
async fn serves_files_with_complete_precomputed_headers() -> Result<()> {
    let (_site, server) = server().await?;
    let r = server.get("/plain.txt").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), BODY);
    assert_eq!(r.header("content-type"), "text/plain; charset=utf-8");
    assert_eq!(r.header("content-length"), BODY.len().to_string());
    assert_eq!(r.header("accept-ranges"), "bytes");
    assert_eq!(r.header("cache-control"), "public, max-age=60");
    assert_eq!(r.header("server"), "swan");
    assert!(r.header("etag").starts_with('"'), "{:?}", r.headers);
    assert!(httpdate::parse_http_date(r.header("last-modified")).is_ok());
    assert!(httpdate::parse_http_date(r.header("date")).is_ok());
    let css = server.get("/docs/page.css").await?;
    assert_eq!(css.header("content-type"), "text/css; charset=utf-8");
    let bin = server.get("/data.bin").await?;
    assert_eq!(bin.header("content-type"), "application/octet-stream");
    assert_eq!(bin.body.len(), 3000);
    Ok(())
}

#[tokio::test]
async fn head_answers_headers_without_a_body() -> Result<()> {
    let (_site, server) = server().await?;
    let r = server
        .send(Request::head(server.url("/plain.txt")).body(Full::default())?)
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-length"), BODY.len().to_string());
    assert!(r.body.is_empty());
    Ok(())
}

#[tokio::test]
async fn other_methods_get_405_with_allow() -> Result<()> {
    let (_site, server) = server().await?;
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"] {
        let r = server
            .send(
                Request::builder()
                    .method(method)
                    .uri(server.url("/plain.txt"))
                    .body(Full::new(Bytes::from_static(b"x")))?,
            )
            .await?;
        assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(r.header("allow"), "GET, HEAD");
    }
    Ok(())
}

#[tokio::test]
async fn if_none_match_gives_304_with_weak_comparison_lists_and_star() -> Result<()> {
    let (_site, server) = server().await?;
    let etag = server.get("/plain.txt").await?.header("etag").to_owned();
    let weak = format!("W/{etag}");
    let list = format!("\"nope\", {etag}");
    for value in [etag.as_str(), weak.as_str(), list.as_str(), "*"] {
        let r = server
            .get_with("/plain.txt", &[("if-none-match", value)])
            .await?;
        assert_eq!(r.status, StatusCode::NOT_MODIFIED, "{value}");
        assert!(r.body.is_empty());
        assert_eq!(r.header("etag"), etag);
        assert_eq!(r.header("cache-control"), "public, max-age=60");
    }
    let r = server
        .get_with("/plain.txt", &[("if-none-match", "\"other\"")])
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn if_modified_since_gives_304_and_if_none_match_wins() -> Result<()> {
    let (_site, server) = server().await?;
    let first = server.get("/plain.txt").await?;
    let lm = first.header("last-modified").to_owned();
    let r = server
        .get_with("/plain.txt", &[("if-modified-since", &lm)])
        .await?;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    let old = "Mon, 01 Jan 2001 00:00:00 GMT";
    let r = server
        .get_with("/plain.txt", &[("if-modified-since", old)])
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    // A mismatching If-None-Match wins over a matching If-Modified-Since.
    let r = server
        .get_with(
            "/plain.txt",
            &[("if-none-match", "\"other\""), ("if-modified-since", &lm)],
        )
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn single_ranges_give_206_with_content_range() -> Result<()> {
    let (_site, server) = server().await?;
    let len = BODY.len();
    for (range, want, content_range) in [
        ("bytes=0-3", &BODY[0..4], format!("bytes 0-3/{len}")),
        (
            "bytes=30-",
            &BODY[30..],
            format!("bytes 30-{}/{len}", len - 1),
        ),
        (
            "bytes=-5",
            &BODY[len - 5..],
            format!("bytes {}-{}/{len}", len - 5, len - 1),
        ),
        (
            "bytes=10-1000",
            &BODY[10..],
            format!("bytes 10-{}/{len}", len - 1),
        ),
    ] {
        let r = server.get_with("/plain.txt", &[("range", range)]).await?;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(r.text(), want, "{range}");
        assert_eq!(r.header("content-range"), content_range);
        assert_eq!(r.header("content-length"), want.len().to_string());
    }
    Ok(())
}

#[tokio::test]
async fn unsatisfiable_ranges_give_416_and_odd_ones_the_full_body() -> Result<()> {
    let (_site, server) = server().await?;
    let len = BODY.len();
    for range in [
        format!("bytes={len}-"),
        "bytes=-0".to_owned(),
        "bytes=9999-10000".to_owned(),
    ] {
        let r = server.get_with("/plain.txt", &[("range", &range)]).await?;
        assert_eq!(r.status, StatusCode::RANGE_NOT_SATISFIABLE, "{range}");
        assert_eq!(r.header("content-range"), format!("bytes */{len}"));
        assert_eq!(r.header("content-length"), r.body.len().to_string());
        // HEAD gets the same head, with the length a GET's page has.
        let head = || {
            Request::head(server.url("/plain.txt"))
                .header("range", &range)
                .body(Full::new(Bytes::new()))
        };
        for h in [server.send(head()?).await?, server.send_h2(head()?).await?] {
            assert_eq!(h.status, StatusCode::RANGE_NOT_SATISFIABLE, "HEAD {range}");
            assert_eq!(h.header("content-range"), format!("bytes */{len}"));
            assert_eq!(h.header("content-length"), r.body.len().to_string());
            assert!(h.body.is_empty(), "HEAD {range}");
        }
    }
    // Multiple ranges, other units and malformed specs: the whole body.
    for range in [
        "bytes=0-1,4-5",
        "bytes=0-1, ,4-5",
        "items=0-1",
        "bytes=5-2",
        "bytes=x-y",
        "bytes=,",
    ] {
        let r = server.get_with("/plain.txt", &[("range", range)]).await?;
        assert_eq!(r.status, StatusCode::OK, "{range}");
        assert_eq!(r.text(), BODY);
    }
    // Range on two lines: no valid value joins them, so the whole body.
    let r = server
        .get_with(
            "/plain.txt",
            &[("range", "bytes=0-1"), ("range", "bytes=2-3")],
        )
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), BODY);
    // Empty list elements count for nothing (RFC 9110 §5.6.1).
    for range in ["bytes=1-2,", "bytes=, 1-2", "bytes=1-2 , "] {
        let r = server.get_with("/plain.txt", &[("range", range)]).await?;
        assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(r.text(), &BODY[1..=2], "{range}");
    }
    Ok(())
}

#[tokio::test]
async fn if_range_with_a_stale_validator_gives_the_full_body() -> Result<()> {
    let (_site, server) = server().await?;
    let first = server.get("/plain.txt").await?;
    let etag = first.header("etag").to_owned();
    let lm = first.header("last-modified").to_owned();
    let r = server
        .get_with("/plain.txt", &[("range", "bytes=0-1"), ("if-range", &etag)])
        .await?;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    let r = server
        .get_with("/plain.txt", &[("range", "bytes=0-1"), ("if-range", &lm)])
        .await?;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    for stale in [
        "\"stale\"",
        "Mon, 01 Jan 2001 00:00:00 GMT",
        &format!("W/{etag}"),
    ] {
        let r = server
            .get_with("/plain.txt", &[("range", "bytes=0-1"), ("if-range", stale)])
            .await?;
        assert_eq!(r.status, StatusCode::OK, "{stale}");
        assert_eq!(r.text(), BODY);
    }
    Ok(())
}

#[tokio::test]
async fn compressible_files_are_served_compressed_to_clients_that_accept_it() -> Result<()> {
    let (_site, server) = server().await?;
    let plain = server.get("/big.html").await?;
    assert_eq!(plain.header("content-encoding"), "");
    assert_eq!(plain.header("vary"), "accept-encoding");

    let br = server
        .get_with("/big.html", &[("accept-encoding", "gzip, br")])
        .await?;
    assert_eq!(br.header("content-encoding"), "br");
    assert_eq!(br.header("vary"), "accept-encoding");
    assert_ne!(br.header("etag"), plain.header("etag"));
    let mut out = Vec::new();
    brotli::BrotliDecompress(&mut &br.body[..], &mut out)?;
    assert_eq!(out, plain.body);

    let gz = server
        .get_with("/big.html", &[("accept-encoding", "gzip")])
        .await?;
    assert_eq!(gz.header("content-encoding"), "gzip");
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz.body[..]).read_to_string(&mut text)?;
    assert_eq!(text.as_bytes(), &plain.body[..]);
    assert!(gz.body.len() < plain.body.len() / 4);

    // q=0 refuses a coding.
    let r = server
        .get_with("/big.html", &[("accept-encoding", "br;q=0, gzip;q=0")])
        .await?;
    assert_eq!(r.header("content-encoding"), "");
    // Small files are not compressed and carry no Vary.
    let small = server
        .get_with("/plain.txt", &[("accept-encoding", "br, gzip")])
        .await?;
    assert_eq!(small.header("content-encoding"), "");
    assert_eq!(small.header("vary"), "");
    // 304 for a compressed variant carries its own ETag.
    let r = server
        .get_with(
            "/big.html",
            &[
                ("accept-encoding", "br"),
                ("if-none-match", br.header("etag")),
            ],
        )
        .await?;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    Ok(())
}

#[tokio::test]
async fn precompressed_siblings_are_preferred_and_ranges_use_identity() -> Result<()> {
    let (_site, server) = server().await?;
    let gz = server
        .get_with("/pre.js", &[("accept-encoding", "gzip")])
        .await?;
    assert_eq!(gz.header("content-encoding"), "gzip");
    assert_eq!(gz.text(), "precompressed-gzip-marker");
    let ranged = server
        .get_with(
            "/pre.js",
            &[("accept-encoding", "gzip"), ("range", "bytes=0-6")],
        )
        .await?;
    assert_eq!(ranged.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(ranged.header("content-encoding"), "");
    assert_eq!(ranged.text(), "console");
    Ok(())
}

/// A file too large to cache is streamed, but its precompressed siblings
/// that fit are held in memory and served to clients that accept them,
/// with their own validators; ranges, clients that accept neither, and a
/// file changed since load get the file itself.
#[tokio::test]
async fn a_streamed_file_serves_its_precompressed_siblings() -> Result<()> {
    let site = TestSite::new()?;
    let big: Vec<u8> = (0..40_000u32).flat_map(|i| i.to_le_bytes()).collect();
    site.file("www/app.js", big.clone())?;
    site.file("www/app.js.br", "brotli-bytes")?;
    site.file("www/app.js.gz", "gzip-bytes")?;
    let config =
        site.config("[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"64 KiB\"\n")?;
    let server = TestServer::start(config).await?;
    let plain = server.get("/app.js").await?;
    assert_eq!(plain.body.len(), big.len());
    assert_eq!(plain.header("vary"), "accept-encoding");
    assert_eq!(plain.header("content-encoding"), "");
    for (accept, encoding, body) in [
        ("gzip, br", "br", "brotli-bytes"),
        ("gzip", "gzip", "gzip-bytes"),
    ] {
        for h2 in [false, true] {
            let req = Request::get(server.url("/app.js"))
                .header("accept-encoding", accept)
                .body(Full::new(Bytes::new()))?;
            let r = if h2 {
                server.send_h2(req).await?
            } else {
                server.send(req).await?
            };
            assert_eq!(r.status, StatusCode::OK);
            assert_eq!(r.header("content-encoding"), encoding);
            assert_eq!(r.header("vary"), "accept-encoding");
            assert_eq!(r.text(), body);
            assert_ne!(r.header("etag"), plain.header("etag"));
            // Its own tag revalidates it.
            let again = server
                .get_with(
                    "/app.js",
                    &[
                        ("accept-encoding", accept),
                        ("if-none-match", r.header("etag")),
                    ],
                )
                .await?;
            assert_eq!(again.status, StatusCode::NOT_MODIFIED);
        }
    }
    let ranged = server
        .get_with(
            "/app.js",
            &[("accept-encoding", "br"), ("range", "bytes=4-7")],
        )
        .await?;
    assert_eq!(ranged.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(ranged.header("content-encoding"), "");
    assert_eq!(&ranged.body[..], &big[4..8]);
    let identity = server
        .get_with("/app.js", &[("accept-encoding", "deflate")])
        .await?;
    assert_eq!(identity.body.len(), big.len());
    // Changed on disk since load (before any reload): the new file itself,
    // never the old file's sibling. Asked on a connection of its own: the
    // one the last answer went out on may be reset by that answer's check
    // after its last `sendfile`, which cannot tell this rewrite, right
    // after the client read the whole body, from one during the send
    // (README, "Static files"; seen under load).
    let newer = vec![b'n'; 70_000];
    site.file("www/app.js", newer.clone())?;
    let r = server
        .raw(
            b"GET /app.js HTTP/1.1\r\nHost: t\r\nAccept-Encoding: br\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
        .await?;
    let (head, body) = r.split_once("\r\n\r\n").context("a head")?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head.to_ascii_lowercase().contains("content-encoding"),
        "{head}"
    );
    assert_eq!(body.as_bytes(), &newer[..]);
    Ok(())
}

#[tokio::test]
async fn folders_serve_index_and_redirect_without_slash() -> Result<()> {
    let (_site, server) = server().await?;
    assert_eq!(server.get("/").await?.text(), "<h1>home</h1>");
    assert_eq!(server.get("/docs/").await?.text(), "<h1>docs</h1>");
    let r = server.get("/docs?x=1&y=2").await?;
    assert_eq!(r.status, StatusCode::MOVED_PERMANENTLY);
    assert_eq!(r.header("location"), "/docs/?x=1&y=2");
    let r = server.get("/docs").await?;
    assert_eq!(r.header("location"), "/docs/");
    Ok(())
}

#[tokio::test]
async fn missing_files_get_404_and_the_sites_own_page_when_present() -> Result<()> {
    let (site, server) = server().await?;
    let r = server.get("/nope.html").await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert!(r.text().contains("404 Not Found"));
    assert_eq!(r.header("content-type"), "text/html; charset=utf-8");
    drop(server);
    site.file("www/404.html", "<h1>custom missing page</h1>")?;
    let config = site.config("[[site]]\nroot = \"www\"\n")?;
    let server = TestServer::start(config).await?;
    let r = server.get("/nope").await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    assert_eq!(r.text(), "<h1>custom missing page</h1>");
    assert_eq!(r.header("etag"), "");
    Ok(())
}

/// `GET path` as sent, whatever it holds, and the whole reply.
async fn raw_get(server: &TestServer, path: &str) -> Result<String> {
    server
        .raw(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
            Duration::from_secs(5),
        )
        .await
}

#[tokio::test]
async fn dotfiles_and_dot_folders_are_never_served_but_well_known() -> Result<()> {
    let (_site, server) = server().await?;
    for path in [
        "/.env",
        "/.git/config",
        "/%2eenv",
        "/docs/../.env",
        "/.well-known/.secret",
        "/docs/.well-known/x",
    ] {
        let r = raw_get(&server, path).await?;
        assert!(r.starts_with("HTTP/1.1 404"), "{path}: {r}");
        assert!(!r.contains("SECRET") && !r.contains("[core]"), "{path}");
    }
    // `/.well-known/` at the root is served (RFC 8615), as an ACME
    // http-01 challenge written by `certbot --webroot` needs.
    let r = server.get("/.well-known/acme-challenge/tok3n").await?;
    assert_eq!(
        (r.status, r.text()),
        (StatusCode::OK, "tok3n.key".to_owned())
    );
    Ok(())
}

/// A root mounted from a Kubernetes ConfigMap: the kubelet writes the
/// files into `..<timestamp>/`, points `..data` at it and links every
/// name through `..data`. Those `..` folders are not dot-folders: the
/// files are served (before, none was), the folders themselves are not.
#[tokio::test]
async fn a_root_laid_out_by_the_kubelet_is_served() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file(
        "www/..2026_12_02_06_00_00.123/index.html",
        "from a ConfigMap",
    )?;
    site.file("www/..2026_12_02_06_00_00.123/.env", "SECRET=1")?;
    let www = site.path().join("www");
    std::os::unix::fs::symlink("..2026_12_02_06_00_00.123", www.join("..data"))?;
    std::os::unix::fs::symlink("..data/index.html", www.join("index.html"))?;
    std::os::unix::fs::symlink("..data/.env", www.join("env"))?;
    let server = TestServer::start(site.config("[[site]]\nroot = \"www\"\n")?).await?;
    assert_eq!(server.get("/").await?.text(), "from a ConfigMap");
    for path in [
        "/..data/index.html",
        "/env",
        "/..2026_12_02_06_00_00.123/index.html",
    ] {
        let r = raw_get(&server, path).await?;
        assert!(r.starts_with("HTTP/1.1 404"), "{path}: {r}");
    }
    Ok(())
}

#[tokio::test]
async fn paths_that_leave_the_root_never_serve_anything_outside_it() -> Result<()> {
    let (_site, server) = server().await?;
    for (path, status) in [
        ("/../outside.txt", "400"),
        ("/docs/../../outside.txt", "400"),
        ("/%2e%2e/outside.txt", "400"),
        ("/docs%2f..%2f..%2foutside.txt", "400"),
        ("/..%5coutside.txt", "400"),
        ("/a\\..\\outside.txt", "400"),
        ("/plain.txt%00.html", "400"),
        // Not percent-encoding at all.
        ("/%", "400"),
        ("/%zz", "400"),
        ("/plain%2", "400"),
        ("/escape.txt", "404"),
    ] {
        let r = server
            .raw(
                format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
                Duration::from_secs(5),
            )
            .await?;
        assert!(r.starts_with(&format!("HTTP/1.1 {status}")), "{path}: {r}");
        assert!(!r.contains("outside the root"), "{path}");
    }
    // A link that stays inside the root is followed.
    assert_eq!(server.get("/alias.txt").await?.text(), BODY);
    Ok(())
}

#[tokio::test]
async fn large_files_stream_from_disk_with_ranges() -> Result<()> {
    let (_site, server) = server().await?;
    let want: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let r = server.get("/large.dat").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-length"), "200000");
    assert_eq!(&r.body[..], &want[..]);
    let r = server
        .get_with("/large.dat", &[("range", "bytes=100000-100009")])
        .await?;
    assert_eq!(r.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(&r.body[..], &want[100_000..100_010]);
    let etag = r.header("etag").to_owned();
    let r = server
        .get_with("/large.dat", &[("if-none-match", &etag)])
        .await?;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    let stats = server
        .app()
        .sites
        .load()
        .iter()
        .next()
        .map(|s| s.cache.stats())
        .unwrap_or_default();
    assert_eq!(stats.streamed_files, 1);
    Ok(())
}

/// RFC 9110 §13.2.2's order: If-Match (strong) or If-Unmodified-Since
/// fails with 412 before anything else; If-None-Match on several lines is
/// one list; a future If-Modified-Since is ignored.
#[tokio::test]
async fn preconditions_fail_with_412_and_odd_validators_are_read_right() -> Result<()> {
    let (_site, server) = server().await?;
    let r = server.get("/plain.txt").await?;
    let etag = r.header("etag").to_owned();
    let modified = r.header("last-modified").to_owned();
    let status = |r: swan_tests::Reply| r.status;
    for (headers, expect) in [
        (
            vec![("if-match", "\"nope\"")],
            StatusCode::PRECONDITION_FAILED,
        ),
        (
            vec![("if-match", "\"nope\""), ("range", "bytes=0-3")],
            StatusCode::PRECONDITION_FAILED,
        ),
        (vec![("if-match", "*")], StatusCode::OK),
        (
            vec![("if-match", &format!("\"x\", {etag}"))],
            StatusCode::OK,
        ),
        (
            vec![("if-unmodified-since", "Thu, 01 Jan 1970 00:00:00 GMT")],
            StatusCode::PRECONDITION_FAILED,
        ),
        (vec![("if-unmodified-since", &modified)], StatusCode::OK),
        (vec![("if-unmodified-since", "not a date")], StatusCode::OK),
        // If-Match wins over If-Unmodified-Since.
        (
            vec![
                ("if-match", &etag),
                ("if-unmodified-since", "Thu, 01 Jan 1970 00:00:00 GMT"),
            ],
            StatusCode::OK,
        ),
        (
            vec![("if-none-match", "\"x\""), ("if-none-match", &etag)],
            StatusCode::NOT_MODIFIED,
        ),
        (
            vec![("if-modified-since", "Fri, 01 Jan 2100 00:00:00 GMT")],
            StatusCode::OK,
        ),
        // A date on several lines is a list, not a date: ignored.
        (
            vec![
                ("if-modified-since", &modified),
                ("if-modified-since", "Mon, 01 Jan 2001 00:00:00 GMT"),
            ],
            StatusCode::OK,
        ),
        (
            vec![
                ("if-unmodified-since", "Thu, 01 Jan 1970 00:00:00 GMT"),
                ("if-unmodified-since", "Thu, 01 Jan 1970 00:00:00 GMT"),
            ],
            StatusCode::OK,
        ),
        // Two If-Range validators, the first one current: no range.
        (
            vec![
                ("range", "bytes=0-3"),
                ("if-range", &etag),
                ("if-range", "\"z\""),
            ],
            StatusCode::OK,
        ),
        (
            vec![("range", "bytes=0-3"), ("if-range", &etag)],
            StatusCode::PARTIAL_CONTENT,
        ),
        (
            vec![("if-modified-since", &modified)],
            StatusCode::NOT_MODIFIED,
        ),
        // Range units are case-insensitive; signs are not digits.
        (vec![("range", "BYTES=0-1")], StatusCode::PARTIAL_CONTENT),
        (vec![("range", "bytes=+1-+3")], StatusCode::OK),
        (
            vec![("range", "bytes=0-99999999999999999999999")],
            StatusCode::PARTIAL_CONTENT,
        ),
    ] {
        assert_eq!(
            status(server.get_with("/plain.txt", &headers).await?),
            expect,
            "{headers:?}"
        );
    }
    Ok(())
}

/// A replaced precompressed sibling changes its variant's strong ETag, so
/// caches holding the old bytes revalidate to the new ones.
#[tokio::test]
async fn a_replaced_precompressed_sibling_gets_a_new_etag() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/app.js", "console.log('identity');\n".repeat(40))?;
    site.file("www/app.js.gz", "first-gzip-bytes")?;
    let config = site.config("[[site]]\nroot = \"www\"\n")?;
    let server = TestServer::start_watching(config).await?;
    let gz = [("accept-encoding", "gzip")];
    let first = server.get_with("/app.js", &gz).await?;
    assert_eq!(first.text(), "first-gzip-bytes");
    let old_etag = first.header("etag").to_owned();
    site.file("www/app.js.gz", "second-gzip-bytes-longer")?;
    assert!(
        swan_tests::eventually(Duration::from_secs(10), || async {
            server
                .get_with("/app.js", &gz)
                .await
                .is_ok_and(|r| r.text() == "second-gzip-bytes-longer")
        })
        .await,
        "the new sibling was never served"
    );
    let second = server.get_with("/app.js", &gz).await?;
    assert_ne!(second.header("etag"), old_etag);
    let revalidated = server
        .get_with(
            "/app.js",
            &[("accept-encoding", "gzip"), ("if-none-match", &old_etag)],
        )
        .await?;
    assert_eq!(revalidated.status, StatusCode::OK);
    Ok(())
}

/// Two readings of one body are refused: different Content-Lengths or
/// several Transfer-Encoding lines get 400 and the connection closes.
/// With both headers, Transfer-Encoding wins and the connection closes
/// after the answer (RFC 9112 §6.3): nothing behind it is read as a
/// request.
#[tokio::test]
async fn ambiguous_body_framing_is_refused_and_the_connection_closed() -> Result<()> {
    let (_site, server) = server().await?;
    let next = "GET /plain.txt HTTP/1.1\r\nHost: a\r\n\r\n";
    for (request, refused) in [
        // Two equal lengths are one (RFC 9110 §8.6 allows that reading).
        ("Content-Length: 0\r\nContent-Length: 5\r\n\r\n", true),
        (
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            true,
        ),
        (
            "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            false,
        ),
    ] {
        let raw = format!("GET /plain.txt HTTP/1.1\r\nHost: a\r\n{request}{next}");
        let reply = server.raw(raw.as_bytes(), Duration::from_secs(5)).await?;
        if refused {
            assert!(reply.starts_with("HTTP/1.1 400"), "{reply}");
        }
        assert_eq!(
            reply.matches("HTTP/1.1 ").count(),
            1,
            "{request:?}: {reply}"
        );
    }
    Ok(())
}

/// Edge cases of RFC 9110 a review found: a range of a zero-length file
/// is ignored (200, as NGINX answers; a media player asks `bytes=0-`),
/// `Accept-Encoding` sent on several field lines is one list and its
/// q-values choose the coding, and a file modified "in the future" gets
/// a Last-Modified no later than now, which revalidates.
#[tokio::test]
async fn empty_ranges_split_accept_encoding_and_future_dates() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/empty.txt", "")?;
    site.file("www/app.js", "let x = 'identity';\n".repeat(40))?;
    site.file("www/app.js.br", "brotli-marker")?;
    site.file("www/app.js.gz", "gzip-marker")?;
    let future = site.file("www/future.txt", "from the future")?;
    let in_a_year = std::time::SystemTime::now() + Duration::from_secs(365 * 24 * 3600);
    std::fs::File::options()
        .write(true)
        .open(&future)?
        .set_modified(in_a_year)?;
    let server = TestServer::start(site.config("[[site]]\nroot = \"www\"\n")?).await?;
    for range in ["bytes=0-", "bytes=-5", "bytes=0-0"] {
        let r = server.get_with("/empty.txt", &[("range", range)]).await?;
        assert_eq!(r.status, StatusCode::OK, "{range}");
        assert_eq!(r.header("content-length"), "0", "{range}");
        assert!(r.body.is_empty());
    }
    let encoded = |lines: &'static [&'static str]| {
        let server = &server;
        async move {
            let mut req = Request::get(server.url("/app.js"));
            for line in lines {
                req = req.header("accept-encoding", *line);
            }
            let r = server.send(req.body(Full::new(Bytes::new()))?).await?;
            anyhow::Ok(r.text())
        }
    };
    assert_eq!(encoded(&["*", "br;q=0"]).await?, "gzip-marker");
    assert_eq!(encoded(&["gzip;q=1.0, br;q=0.5"]).await?, "gzip-marker");
    assert_eq!(encoded(&["gzip", "br"]).await?, "brotli-marker");
    assert_eq!(encoded(&["gzip;q=0", "br;q=0"]).await?.len(), 20 * 40);
    let r = server.get("/future.txt").await?;
    let last_modified = httpdate::parse_http_date(r.header("last-modified"))?;
    assert!(
        last_modified <= std::time::SystemTime::now(),
        "{}",
        r.header("last-modified")
    );
    let again = server
        .get_with(
            "/future.txt",
            &[("if-modified-since", r.header("last-modified"))],
        )
        .await?;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    Ok(())
}
