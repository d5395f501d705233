//! Hostile and careless clients: Host tricks, over-long request lines,
//! smuggling attempts, slow uploads and downloads, clients that stop
//! reading, and HTTP/2 floods. Expected: the right status or a clean close,
//! every well-behaved client still served, nothing truncated that the
//! client kept reading.

use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use swan_tests::h2raw::{self, H2Conn, flag, kind};
use swan_tests::{TestServer, TestSite, read_until_close};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Answers the length of the request body it read, as text.
const BODY_LEN: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local $n i32) (local $p i32)
    (local.set $n (call $get (i32.const 5) (i32.const 0) (i32.const 0)))
    ;; decimal digits of $n, written backwards from 100
    (local.set $p (i32.const 100))
    (loop $d
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $n) (i32.const 10))))
      (local.set $n (i32.div_u (local.get $n) (i32.const 10)))
      (br_if $d (i32.ne (local.get $n) (i32.const 0))))
    (drop (call $write (local.get $p) (i32.sub (i32.const 100) (local.get $p))))
    i32.const 0))"#;

async fn server_with(server_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "hello")?;
    site.file("www/evil.com/index.html", "a folder named like a host")?;
    site.file("www/big.bin", vec![b'x'; 8 << 20])?;
    site.file("servlets/len.wasm", wat::parse_str(BODY_LEN)?)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 16\n{server_toml}\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.cache]\nmax_file_size = \"64 KiB\"\n[site.servlet]\nprewarm = 1\n"
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

async fn status_of(server: &TestServer, raw: &[u8]) -> Result<String> {
    let r = server.raw(raw, Duration::from_secs(5)).await?;
    Ok(r.get(9..12).unwrap_or("").to_owned())
}

#[tokio::test]
async fn http11_needs_exactly_one_well_formed_host_that_agrees_with_the_target() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let cases: &[(&[u8], &str)] = &[
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: a/b\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: user@a\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: a\\b\r\nConnection: close\r\n\r\n", "400"),
        (
            b"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n",
            "400",
        ),
        (
            b"GET http://a.example:8080/ HTTP/1.1\r\nHost: a.example:9090\r\nConnection: close\r\n\r\n",
            "400",
        ),
        (
            b"GET http://a.example/ HTTP/1.1\r\nHost: A.Example\r\nConnection: close\r\n\r\n",
            "200",
        ),
        // User information in the target: refused, whatever the Host.
        (
            b"GET http://b.example:80@a.example/ HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
            "400",
        ),
        (b"GET http://user@a.example/ HTTP/1.0\r\n\r\n", "400"),
        // A port of digits, one colon outside an IPv6 literal.
        (b"GET / HTTP/1.1\r\nHost: a.example:abc\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: a.example:99999\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: a:b:c\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: ::1\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: [::1\r\nConnection: close\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nHost: a.example:80\r\nConnection: close\r\n\r\n", "200"),
        (b"GET / HTTP/1.1\r\nHost: [::1]:80\r\nConnection: close\r\n\r\n", "200"),
        (b"GET / HTTP/1.1\r\nHost: \r\nConnection: close\r\n\r\n", "200"),
        (b"GET / HTTP/1.0\r\n\r\n", "200"),
    ];
    for (raw, want) in cases {
        assert_eq!(
            status_of(&server, raw).await?,
            *want,
            "{}",
            String::from_utf8_lossy(raw)
        );
    }
    Ok(())
}

#[tokio::test]
async fn http2_authority_and_host_must_agree() -> Result<()> {
    let (_site, server) = server_with("").await?;
    // :status 200 is static index 8 (0x88), 400 is 12 (0x8c).
    for (authority, host, want) in [
        ("a.example", "a.example", 0x88),
        ("a.example", "b.example", 0x8c),
        // User information in :authority (RFC 9113 §8.3.1).
        ("b.example:80@a.example", "a.example", 0x8c),
    ] {
        let mut block = h2raw::get_headers("/", authority);
        // host: literal without indexing, name index 38.
        block.extend_from_slice(&[0x0f, 0x17, host.len() as u8]);
        block.extend_from_slice(host.as_bytes());
        let status = h2_status(&server, &block).await?;
        assert_eq!(status, want, "{authority} / {host}");
    }
    // Neither :authority nor Host: 400.
    let mut block = vec![0x82, 0x86, 0x04, 1];
    block.extend_from_slice(b"/");
    assert_eq!(h2_status(&server, &block).await?, 0x8c);
    Ok(())
}

/// Sends one HTTP/2 request (`block`, its header block) on a new
/// connection; the first byte of its response's header block, which is
/// the status when it is in HPACK's static table.
async fn h2_status(server: &TestServer, block: &[u8]) -> Result<u8> {
    let mut conn = H2Conn::open(server.addr()).await?;
    conn.send(&h2raw::frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        block,
    ))
    .await;
    let headers = conn
        .wait_for(Duration::from_secs(5), |f| {
            f.kind == kind::HEADERS && f.stream == 1
        })
        .await
        .ok_or_else(|| anyhow::anyhow!("no response"))?;
    headers
        .payload
        .first()
        .copied()
        .ok_or_else(|| anyhow::anyhow!("an empty header block"))
}

#[tokio::test]
async fn an_over_long_request_line_gets_414_and_over_long_headers_431() -> Result<()> {
    let (_site, server) = server_with("max_header_bytes = \"8 KiB\"").await?;
    let long_path = format!("/{}", "a".repeat(20 << 10));
    let line = format!("GET {long_path} HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = server.raw(line.as_bytes(), Duration::from_secs(5)).await?;
    // hyper's own answer, with a plain reason phrase and swan's `Server`.
    assert!(
        r.starts_with("HTTP/1.1 414 URI Too Long\r\nserver: swan\r\n"),
        "{}",
        &r[..r.len().min(200)]
    );
    // The same line pipelined behind a request in one write: the first is
    // answered, the second is still a 414, not a 431.
    let pipelined = format!("GET / HTTP/1.1\r\nHost: a\r\n\r\n{line}");
    let r = server
        .raw(pipelined.as_bytes(), Duration::from_secs(5))
        .await?;
    assert!(r.starts_with("HTTP/1.1 200 "), "{}", &r[..r.len().min(200)]);
    assert!(r.contains("HTTP/1.1 414 "), "{}", &r[..r.len().min(400)]);
    let header = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(20 << 10)
    );
    let r = server
        .raw(header.as_bytes(), Duration::from_secs(5))
        .await?;
    assert!(r.starts_with("HTTP/1.1 431 "), "{}", &r[..r.len().min(200)]);
    assert_eq!(r.matches("\r\nserver: swan\r\n").count(), 1, "{r}");
    // More than 100 fields in a small head, sent whole: 431 too, not 414.
    let fields: String = (0..101).map(|i| format!("X-{i}: v\r\n")).collect();
    let many = format!("GET / HTTP/1.1\r\nHost: a\r\n{fields}\r\n");
    let r = server.raw(many.as_bytes(), Duration::from_secs(5)).await?;
    assert!(r.starts_with("HTTP/1.1 431 "), "{}", &r[..r.len().min(200)]);
    // A malformed head: hyper's 400, also with `Server`.
    let r = server
        .raw(
            b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
            Duration::from_secs(5),
        )
        .await?;
    assert!(
        r.starts_with("HTTP/1.1 400 Bad Request\r\nserver: swan\r\n"),
        "{r}"
    );
    // A long line that fits is fine.
    let ok = format!(
        "GET /?q={} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        "c".repeat(4000)
    );
    assert!(
        server
            .raw(ok.as_bytes(), Duration::from_secs(5))
            .await?
            .starts_with("HTTP/1.1 200")
    );
    assert_eq!(server.get("/").await?.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn smuggling_attempts_get_400_or_one_answer_and_a_close() -> Result<()> {
    let (_site, server) = server_with("").await?;
    // Content-Length and Transfer-Encoding together: never two answers.
    let r = server
        .raw(
            b"POST /len HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /index.html HTTP/1.1\r\nHost: a\r\n\r\n",
            Duration::from_secs(3),
        )
        .await?;
    assert!(
        r.matches("HTTP/1.1 ").count() <= 1 || r.starts_with("HTTP/1.1 400"),
        "{r}"
    );
    let bad: &[&[u8]] = &[
        b"POST /len HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST /len HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip\r\n\r\nabcd",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Folded: a\r\n b\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Nul: a\0b\r\n\r\n",
        b"GET /\0 HTTP/1.1\r\nHost: a\r\n\r\n",
    ];
    for raw in bad {
        let r = server.raw(raw, Duration::from_secs(3)).await?;
        assert!(
            r.starts_with("HTTP/1.1 400") || r.starts_with("HTTP/1.1 501"),
            "{:?} -> {r}",
            String::from_utf8_lossy(raw)
        );
    }
    // One Transfer-Encoding line: `chunked` once and alone, or refused
    // (and the connection closed) before the servlet reads a byte.
    for (coding, want) in [
        ("chunked, chunked", "400"),
        ("gzip, chunked", "501"),
        ("identity, chunked", "501"),
        ("Chunked", "200"),
    ] {
        let raw = format!(
            "POST /len HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {coding}\r\n\r\n4\r\nabcd\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
        );
        let r = server.raw(raw.as_bytes(), Duration::from_secs(3)).await?;
        assert_eq!(r.get(9..12), Some(want), "{coding} -> {r}");
        let answers = r.matches("HTTP/1.1 ").count();
        assert_eq!(
            answers,
            if want == "200" { 2 } else { 1 },
            "{coding} -> {r}"
        );
    }
    assert_eq!(server.get("/").await?.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn a_folder_redirect_is_never_protocol_relative() -> Result<()> {
    let (_site, server) = server_with("").await?;
    for (path, want) in [
        ("//evil.com", "/evil.com/"),
        ("///evil.com", "/evil.com/"),
        ("/./evil.com", "/evil.com/"),
        ("//evil.com?x=1", "/evil.com/?x=1"),
    ] {
        let raw = format!("GET {path} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let r = server.raw(raw.as_bytes(), Duration::from_secs(5)).await?;
        assert!(r.starts_with("HTTP/1.1 301"), "{path}: {r}");
        let location = r
            .lines()
            .find_map(|l| l.strip_prefix("location: "))
            .unwrap_or("");
        assert_eq!(location, want, "{path}");
    }
    Ok(())
}

/// Reads a whole response body at about `rate` bytes per second.
async fn slow_read<B>(mut body: B, rate: f64) -> Result<usize>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let mut total = 0;
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            total += data.len();
            tokio::time::sleep(Duration::from_secs_f64(data.len() as f64 / rate)).await;
        }
    }
    Ok(total)
}

#[tokio::test]
async fn slow_downloads_complete_over_both_protocols() -> Result<()> {
    // Every timeout is far shorter than the download, which takes about
    // 3 s: a client that keeps reading gets everything.
    let (_site, server) = server_with(
        "header_read_timeout = \"300ms\"\nkeepalive_timeout = \"500ms\"\nsend_timeout = \"1s\"",
    )
    .await?;
    for h2 in [false, true] {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(h2)
                .build_http::<Full<Bytes>>();
        let started = Instant::now();
        let res = client
            .request(Request::get(server.url("/big.bin")).body(Full::default())?)
            .await?;
        assert_eq!(res.status(), StatusCode::OK);
        let total = slow_read(res.into_body(), 3.0 * (1 << 20) as f64).await?;
        assert_eq!(
            total,
            8 << 20,
            "h2={h2}: truncated after {:?}",
            started.elapsed()
        );
        assert!(
            started.elapsed() > Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    Ok(())
}

#[tokio::test]
async fn an_idle_http2_connection_gets_a_goaway_even_while_it_pings() -> Result<()> {
    let (_site, server) = server_with("keepalive_timeout = \"600ms\"").await?;
    let mut conn = H2Conn::open(server.addr()).await?;
    conn.send(&h2raw::frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &h2raw::get_headers("/", "a"),
    ))
    .await;
    assert!(
        conn.wait_for(Duration::from_secs(5), |f| f.kind == kind::DATA
            && f.flags & flag::END_STREAM != 0)
            .await
            .is_some()
    );
    let started = Instant::now();
    let mut goaway = None;
    while started.elapsed() < Duration::from_secs(5) && goaway.is_none() {
        conn.send(&h2raw::frame(kind::PING, 0, 0, &[0; 8])).await;
        goaway = conn
            .wait_for(Duration::from_millis(100), |f| f.kind == kind::GOAWAY)
            .await;
    }
    assert!(goaway.is_some(), "no GOAWAY");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn a_client_that_stops_reading_is_dropped_after_send_timeout() -> Result<()> {
    let (site, server) = server_with("send_timeout = \"1s\"").await?;
    site.file("www/huge.bin", vec![b'z'; 64 << 20])?;
    // The new file needs a reload; start a fresh server instead.
    drop(server);
    let config = site.config(
        "[server]\nsend_timeout = \"1s\"\n[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"64 KiB\"\n",
    )?;
    let server = TestServer::start(config).await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(b"GET /huge.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .await?;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Others are served meanwhile.
    assert_eq!(server.get("/").await?.status, StatusCode::OK);
    // What the kernel buffered arrives, then the server's close.
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "the connection was not closed");
    assert!(got.len() < 64 << 20, "everything arrived: {}", got.len());
    Ok(())
}

/// One HTTP/2 client that opens many streams for a large file and never
/// opens its window: its connection holds at most 32 of them open (the
/// rest get 503 before a file is opened; 165 such clients used up the
/// process's descriptors), and answering its PINGs is not progress: the
/// stalled streams are dropped at `send_timeout`.
#[tokio::test]
async fn an_http2_client_holds_few_files_and_pings_do_not_keep_it_past_send_timeout() -> Result<()>
{
    let (_site, server) = server_with("send_timeout = \"1s\"").await?;
    let mut conn = H2Conn::open(server.addr()).await?;
    // SETTINGS_INITIAL_WINDOW_SIZE (4) = 0.
    conn.send(&h2raw::frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]))
        .await;
    let streams: Vec<u32> = (0..40).map(|i| 1 + 2 * i).collect();
    for &id in &streams {
        conn.send(&h2raw::frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            id,
            &h2raw::get_headers("/big.bin", "a"),
        ))
        .await;
    }
    let (mut ok, mut refused, mut saw_503) = (0, 0, false);
    while ok + refused < streams.len() {
        let Some(f) = conn
            .wait_for(Duration::from_secs(5), |f| f.kind == kind::HEADERS)
            .await
        else {
            break;
        };
        // :status 200 is static index 8 (0x88). The first 503 is a literal
        // value, plain or Huffman-coded (RFC 7541 Appendix B: 011011 00000
        // 011001 and padding); the encoder indexes it, and the others
        // name it by that index.
        if f.payload.first() == Some(&0x88) {
            ok += 1;
        } else {
            refused += 1;
            saw_503 |= f
                .payload
                .windows(3)
                .any(|w| w == b"503" || w == [0x6c, 0x0c, 0xff]);
        }
    }
    assert_eq!((ok, refused, saw_503), (32, 8, true));
    // Others are served meanwhile.
    assert_eq!(server.get("/big.bin").await?.status, StatusCode::OK);
    // PINGs and cheap requests (HEAD /, answered at once) every 200 ms:
    // the connection is still dropped, within the send timeout and the
    // watchdog's rechecks.
    let mut head = vec![0x02, 4];
    head.extend_from_slice(b"HEAD");
    head.extend_from_slice(&[0x86, 0x04, 1, b'/', 0x01, 1, b'a']);
    let started = Instant::now();
    let mut closed = false;
    let mut buf = [0u8; 4096];
    let mut id = 101;
    while !closed && started.elapsed() < Duration::from_secs(8) {
        let mut frames = h2raw::frame(kind::PING, 0, 0, &[0; 8]);
        frames.extend(h2raw::frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            id,
            &head,
        ));
        id += 2;
        if !conn.send(&frames).await {
            closed = true;
            break;
        }
        let read = tokio::time::timeout(Duration::from_millis(200), conn.stream.read(&mut buf));
        closed = matches!(read.await, Ok(Ok(0) | Err(_)));
    }
    assert!(closed, "still open after {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn a_slow_steady_upload_completes_and_a_trickle_is_cut_off() -> Result<()> {
    let (_site, server) = server_with(
        "header_read_timeout = \"500ms\"\nbody_timeout = \"1s\"\nbody_min_rate = \"1 KiB\"",
    )
    .await?;
    // 16 KiB at about 4 KiB/s: four times the minimum rate, for 4 s.
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(
            b"POST /len HTTP/1.1\r\nHost: a\r\nContent-Length: 16384\r\nConnection: close\r\n\r\n",
        )
        .await?;
    for _ in 0..16 {
        stream.write_all(&[b'u'; 1024]).await?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let r = read_until_close(&mut stream, Duration::from_secs(5)).await;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.ends_with("16384"), "{r}");
    // 100 bytes a second falls behind the minimum rate: 408 within a few s.
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(b"POST /len HTTP/1.1\r\nHost: a\r\nContent-Length: 16384\r\n\r\n")
        .await?;
    let started = Instant::now();
    let mut answer = String::new();
    while started.elapsed() < Duration::from_secs(8) {
        if stream.write_all(&[b't'; 10]).await.is_err() {
            break;
        }
        let mut buf = [0u8; 512];
        if let Ok(Ok(n)) =
            tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf)).await
        {
            answer.push_str(&String::from_utf8_lossy(&buf[..n]));
            if n == 0 || answer.contains("\r\n\r\n") {
                break;
            }
        }
    }
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "{answer:?} after {:?}",
        started.elapsed()
    );
    Ok(())
}

/// Floods one HTTP/2 connection with `frames` (sent in batches while the
/// server lets us), then checks that another client is served at once.
async fn flood(server: &TestServer, frames: impl Fn(u32) -> Vec<u8>, count: u32) -> Result<bool> {
    let mut conn = H2Conn::open(server.addr()).await?;
    let started = Instant::now();
    let mut batch = Vec::new();
    let mut closed = false;
    for i in 0..count {
        batch.extend(frames(i));
        if batch.len() > 64 << 10 {
            if !conn.send(&batch).await {
                closed = true;
                break;
            }
            batch.clear();
        }
        if started.elapsed() > Duration::from_secs(10) {
            break;
        }
    }
    if !closed {
        closed = !conn.send(&batch).await;
    }
    let t = Instant::now();
    let r = server.get("/").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "others stalled: {:?}",
        t.elapsed()
    );
    // Did the server end the flooding connection (GOAWAY or close)?
    let ended = closed
        || conn
            .wait_for(Duration::from_secs(3), |f| f.kind == kind::GOAWAY)
            .await
            .is_some();
    Ok(ended)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn http2_floods_are_cut_off_and_others_are_served() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let before = rss_kib();
    // Rapid reset: open a stream and cancel it, over and over.
    let headers = h2raw::get_headers("/", "a");
    let ended = flood(
        &server,
        |i| {
            let id = 2 * i + 1;
            let mut f = h2raw::frame(
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                id,
                &headers,
            );
            f.extend(h2raw::frame(kind::RST_STREAM, 0, id, &8u32.to_be_bytes()));
            f
        },
        100_000,
    )
    .await?;
    assert!(ended, "rapid reset was not cut off");
    // CONTINUATION without end: headers that never finish.
    let ended = flood(
        &server,
        |i| {
            if i == 0 {
                h2raw::frame(kind::HEADERS, 0, 1, &headers)
            } else {
                h2raw::frame(kind::CONTINUATION, 0, 1, &[0x40, 0x01, b'x', 0x7f, 0x7f])
            }
        },
        200_000,
    )
    .await?;
    assert!(ended, "CONTINUATION flood was not cut off");
    // PING, SETTINGS and empty DATA floods: the server may answer or cut
    // them off, but must stay responsive to others.
    flood(
        &server,
        |_| h2raw::frame(kind::PING, 0, 0, &[1; 8]),
        200_000,
    )
    .await?;
    flood(
        &server,
        |_| h2raw::frame(kind::SETTINGS, 0, 0, &[]),
        200_000,
    )
    .await?;
    flood(
        &server,
        |i| {
            if i == 0 {
                h2raw::frame(
                    kind::HEADERS,
                    flag::END_HEADERS,
                    1,
                    &h2raw::get_headers("/len", "a"),
                )
            } else {
                h2raw::frame(kind::DATA, 0, 1, &[])
            }
        },
        200_000,
    )
    .await?;
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 100 << 10, "memory grew by {grown} KiB");
    assert_eq!(server.get("/").await?.status, StatusCode::OK);
    Ok(())
}

/// The header block of an HTTP/2 `POST path` declaring `len` body bytes.
fn h2_post_headers(path: &str, authority: &str, len: u64) -> Vec<u8> {
    let mut block = h2raw::get_headers(path, authority);
    block[0] = 0x83; // :method POST
    // content-length, literal without indexing, name index 28 (15 + 13).
    let len = len.to_string();
    block.extend_from_slice(&[0x0f, 0x0d, len.len() as u8]);
    block.extend_from_slice(len.as_bytes());
    block
}

#[tokio::test]
async fn an_http2_upload_answered_early_is_read_on_not_reset() -> Result<()> {
    let (site, server) = server_with("max_body_bytes = \"1 KiB\"").await?;
    // A real client: curl reports a reset stream (exit 92) instead of the
    // 413 it was sent, when the server resets the stream it is still
    // uploading on. Bodies inside and past the first flow-control window,
    // to a servlet and to a static file.
    for size in [2_000usize, 70_000, 2 << 20] {
        let file = site.file(&format!("upload-{size}"), vec![b'u'; size])?;
        for path in ["/len", "/index.html", "/len", "/len"] {
            let mut curl = std::process::Command::new("curl");
            curl.args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "20",
            ])
            .args(["--http2-prior-knowledge", "--data-binary"])
            .arg(format!("@{}", file.display()))
            .arg(server.url(path));
            // Off the test's runtime, which also runs the server.
            let out = tokio::task::spawn_blocking(move || curl.output()).await??;
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                "413",
                "{size} bytes to {path}: curl exit {:?}",
                out.status.code()
            );
            assert!(
                out.status.success(),
                "{size} bytes to {path}: {:?}",
                out.status
            );
        }
    }

    // Frame by frame: the 413 comes before the body, the body is read on,
    // and the stream ends as the client ends it, with no RST_STREAM.
    let mut conn = H2Conn::open(server.addr()).await?;
    let head = h2_post_headers("/len", "localhost", 30_000);
    let answered = conn.request(1, &head, false, Duration::from_secs(5)).await;
    assert!(answered.is_some(), "no early answer");
    assert!(
        conn.send(&h2raw::frame(kind::DATA, 0, 1, &[b'u'; 16_384]))
            .await
    );
    let last = h2raw::frame(kind::DATA, flag::END_STREAM, 1, &[b'u'; 30_000 - 16_384]);
    assert!(conn.send(&last).await);
    let reset = conn
        .wait_for(Duration::from_secs(1), |f| {
            f.kind == kind::RST_STREAM && f.stream == 1
        })
        .await;
    assert!(reset.is_none(), "stream reset: {reset:?}");

    // A body that never comes is waited for a while, not reset with the
    // answer; then given up: the stream is reset with NO_ERROR, and the
    // connection serves on.
    let head = h2_post_headers("/len", "localhost", 10_000_000);
    let answered = conn.request(3, &head, false, Duration::from_secs(5)).await;
    assert!(answered.is_some(), "no early answer");
    let at_once = conn
        .wait_for(Duration::from_millis(500), |f| {
            f.kind == kind::RST_STREAM && f.stream == 3
        })
        .await;
    assert!(at_once.is_none(), "reset with its answer: {at_once:?}");
    let reset = conn
        .wait_for(Duration::from_secs(10), |f| {
            f.kind == kind::RST_STREAM && f.stream == 3
        })
        .await
        .ok_or_else(|| anyhow::anyhow!("the unread upload was never reset"))?;
    assert_eq!(reset.payload, [0, 0, 0, 0], "RST_STREAM(NO_ERROR)");
    let get = h2raw::get_headers("/index.html", "localhost");
    let served = conn.request(5, &get, true, Duration::from_secs(5)).await;
    assert!(served.is_some(), "the connection no longer serves");
    Ok(())
}
