//! Checks that p2 (`components`) and p3 (`components_p3`) components must
//! pass alike, each run against a server and the guest's paths. Both test
//! guests answer the same fault paths under their own prefix.

use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use swan_tests::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Each fault path answers `status` within 4 s, with no trap or wasm
/// detail for the client, and `{prefix}/ok` and `/` still answer after it.
pub(crate) async fn faults_answer_and_the_server_stays_up(
    server: &TestServer,
    prefix: &str,
    faults: &[(&str, StatusCode)],
) -> Result<()> {
    for &(fault, status) in faults {
        let path = format!("{prefix}{fault}");
        let started = Instant::now();
        let r = server.get(&path).await?;
        assert_eq!(r.status, status, "{path}");
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "{path}: {:?}",
            started.elapsed()
        );
        let text = r.text().to_lowercase();
        assert!(
            !text.contains("trap") && !text.contains("wasm"),
            "{path}: {text}"
        );
        assert_eq!(
            server.get(&format!("{prefix}/ok")).await?.text(),
            "ok",
            "after {path}"
        );
        assert_eq!(server.get("/").await?.text(), "home", "after {path}");
    }
    Ok(())
}

/// What the servlet at `path` counted: traps, timeouts, and its recent
/// errors.
pub(crate) fn failures_at(server: &TestServer, path: &str) -> (u64, u64, Vec<String>) {
    let sites = server.app().sites.load();
    let servlet = sites
        .iter()
        .next()
        .and_then(|s| s.servlets.servlet_at(path));
    servlet.map_or((0, 0, Vec::new()), |s| {
        let recent = s.stats().recent_errors().into_iter().map(|e| e.what);
        let stats = s.stats();
        (stats.traps.get(), stats.timeouts.get(), recent.collect())
    })
}

/// `{prefix}/stream-then-trap?n=64` aborts its response: over HTTP/1.1 the
/// connection closes without the terminating chunk; over HTTP/1.0 (even
/// asked to keep alive: it says `close`) it is reset; over h2 the stream is reset, so the client sees an error, not a
/// short 200. Each abort counts
/// as the servlet's trap (`swan_servlet_traps_total`), as a 500 would.
pub(crate) async fn failing_mid_stream_aborts_the_response(
    server: &TestServer,
    prefix: &str,
) -> Result<()> {
    let path = format!("{prefix}/stream-then-trap?n=64");
    let (traps_before, _, _) = failures_at(server, &path);
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
        .await?;
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(text.contains("transfer-encoding: chunked"), "not chunked");
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "a truncated response ended cleanly"
    );
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let res = client
        .request(Request::get(server.url(&path)).body(Full::default())?)
        .await?;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.into_body().collect().await.is_err(),
        "h2 body ended cleanly"
    );
    // HTTP/1.0 has no chunks: the body ends where the connection does, so
    // only a reset, never a plain close, tells the client it is cut off.
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.0\r\nHost: a\r\nConnection: keep-alive\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut got)).await;
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.starts_with("HTTP/1.0 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    // Its body ends with the connection: not offered for reuse, though
    // the client asked for keep-alive.
    let head = text.split("\r\n\r\n").next().unwrap_or_default();
    assert!(head.contains("connection: close\r\n"), "{head}");
    assert!(!head.contains("keep-alive"), "{head}");
    assert!(
        matches!(read, Ok(Err(ref e)) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "HTTP/1.0: {read:?} after {} bytes; a reset was expected",
        got.len()
    );
    assert_eq!(server.get(&format!("{prefix}/ok")).await?.text(), "ok");
    let (traps, _, recent) = failures_at(server, &path);
    assert_eq!(traps, traps_before + 3, "{recent:?}");
    let last = recent.last().map_or("", String::as_str);
    assert!(
        last.starts_with("failed mid-stream: trap") && !last.contains('\n'),
        "{recent:?}"
    );
    Ok(())
}

/// `path` streams `kib` KiB, read at about 6 MiB/s: all of it arrives,
/// and reading takes more than `longer_than` (past the guest's deadline in
/// wall time, not in guest time).
pub(crate) async fn a_slow_reader_gets_the_whole_stream(
    server: &TestServer,
    path: &str,
    kib: usize,
    longer_than: Duration,
) -> Result<()> {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let res = client
        .request(Request::get(server.url(path)).body(Full::default())?)
        .await?;
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let (mut total, mut unpaced) = (0usize, 0usize);
    let started = Instant::now();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            total += data.len();
            unpaced += data.len();
            // Paced every 256 KiB.
            if unpaced >= 256 << 10 {
                tokio::time::sleep(Duration::from_secs_f64(unpaced as f64 / (6 << 20) as f64))
                    .await;
                unpaced = 0;
            }
        }
    }
    assert!(started.elapsed() > longer_than, "{:?}", started.elapsed());
    assert_eq!(total, kib * 1024, "after {:?}", started.elapsed());
    Ok(())
}

/// `{prefix}/upload` on a route whose bodies may be 1 MiB: 900 KiB reach
/// the guest; a body declared too large gets 413 before it is sent, and
/// also when the client sends it anyway (five times: the server reads and
/// discards the rest rather than resetting the connection under its
/// answer); a chunked body found too large while streaming gets 413.
pub(crate) async fn uploads_follow_the_size_rules(server: &TestServer, prefix: &str) -> Result<()> {
    let path = format!("{prefix}/upload");
    let r = server
        .send(Request::post(server.url(&path)).body(Full::new(Bytes::from(vec![b'u'; 900 << 10])))?)
        .await?;
    assert_eq!(r.text(), (900 << 10).to_string());
    let answer = server
        .raw(
            format!("POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: 2097152\r\n\r\n")
                .as_bytes(),
            Duration::from_secs(5),
        )
        .await?;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    for _ in 0..5 {
        let r = server
            .send(
                Request::post(server.url(&path))
                    .body(Full::new(Bytes::from(vec![0u8; 2 << 20])))?,
            )
            .await?;
        assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    }
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(
            format!("POST {path} HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let chunk = format!("{:x}\r\n{}\r\n", 64 << 10, "c".repeat(64 << 10));
    for _ in 0..20 {
        if stream.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let answer = swan_tests::read_until_close(&mut stream, Duration::from_secs(5)).await;
    assert!(
        answer.starts_with("HTTP/1.1 413"),
        "{}",
        &answer[..answer.len().min(200)]
    );
    assert_eq!(server.get(&format!("{prefix}/ok")).await?.text(), "ok");
    Ok(())
}
