//! Idle HTTP/1 keep-alive connections are parked (no HTTP state, no
//! buffers) and answer again as soon as the client sends; a request is
//! never lost or cut at the park.

use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use swan_tests::{TestServer, closed_within, eventually, read_response};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::http::server_with;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";

/// Longer than the park delay (500 ms) with room for a busy machine.
const PAST_PARK: Duration = Duration::from_millis(1500);

fn parked(server: &TestServer) -> i64 {
    server
        .app()
        .observe
        .connections_parked
        .load(Ordering::Relaxed)
}

/// Whether `n` connections are parked within a few seconds.
async fn parks(server: &TestServer, n: i64) -> bool {
    eventually(Duration::from_secs(5), || async { parked(server) == n }).await
}

/// Reads `count` complete responses (all with a Content-Length) and
/// returns their status codes and body lengths.
async fn responses(stream: &mut TcpStream, count: usize) -> Result<Vec<(u16, usize)>> {
    let mut buffered = Vec::new();
    let mut out = Vec::new();
    while out.len() < count {
        let r = read_response(stream, &mut buffered)
            .await
            .with_context(|| format!("after {} responses of {count}", out.len()))?;
        out.push((r.status, r.body.len()));
    }
    ensure!(buffered.is_empty(), "unexpected bytes after the responses");
    Ok(out)
}

#[tokio::test]
async fn idle_keep_alive_connections_are_parked_and_answer_again() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut conns = Vec::new();
    for _ in 0..20 {
        let mut c = TcpStream::connect(server.addr()).await?;
        c.write_all(GET).await?;
        assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
        conns.push(c);
    }
    assert!(parks(&server, 20).await, "parked: {}", parked(&server));
    // Each parked connection answers its next request, and its next
    // pipelined three, then parks again.
    for c in &mut conns {
        c.write_all(GET).await?;
        assert_eq!(responses(c, 1).await?, [(200, 5)]);
        c.write_all(&GET.repeat(3)).await?;
        assert_eq!(responses(c, 3).await?, [(200, 5); 3]);
    }
    assert!(parks(&server, 20).await);
    drop(conns);
    assert!(parks(&server, 0).await);
    Ok(())
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_parked_from_the_start() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut c = TcpStream::connect(server.addr()).await?;
    assert!(parks(&server, 1).await);
    c.write_all(GET).await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    Ok(())
}

#[tokio::test]
async fn a_request_split_across_the_park_delay_is_answered_whole() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut c = TcpStream::connect(server.addr()).await?;
    // One whole request and the start of a second: the connection holds a
    // partial request, so it must not be parked and lose it.
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHo")
        .await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    tokio::time::sleep(PAST_PARK).await;
    c.write_all(b"st: a\r\n\r\n").await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    // Split byte by byte around the head's end.
    for piece in [&b"GET / HTTP/1.1\r\nHost: a\r\n\r"[..], b"\n"] {
        tokio::time::sleep(Duration::from_millis(700)).await;
        c.write_all(piece).await?;
    }
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    Ok(())
}

#[tokio::test]
async fn a_request_with_a_body_keeps_its_connection_working() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut c = TcpStream::connect(server.addr()).await?;
    c.write_all(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\n{\"a\":1}")
        .await?;
    let first = responses(&mut c, 1).await?;
    assert_eq!(first[0].0, 405);
    // Not parked (hyper's buffer cannot be known empty after a body that
    // does not end like a head)...
    tokio::time::sleep(PAST_PARK).await;
    assert_eq!(parked(&server), 0);
    c.write_all(GET).await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    // ...but parked right after the next request that does.
    assert!(parks(&server, 1).await);
    // Chunked, ending with the last chunk's empty line.
    c.write_all(
        b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
    )
    .await?;
    assert_eq!(responses(&mut c, 1).await?[0].0, 405);
    tokio::time::sleep(PAST_PARK).await;
    c.write_all(GET).await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    Ok(())
}

#[tokio::test]
async fn a_response_still_being_sent_is_never_cut_by_a_park() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut c = TcpStream::connect(server.addr()).await?;
    c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .await?;
    // Read slowly: the 4 MiB stay queued in the server well past the
    // park delay.
    let mut got = 0usize;
    let mut buf = vec![0u8; 256 << 10];
    let mut head_len = None;
    let mut head = Vec::new();
    let mut pauses = 0;
    while head_len.is_none_or(|h| got < h + (4 << 20)) {
        if pauses < 4 {
            tokio::time::sleep(Duration::from_millis(400)).await;
            pauses += 1;
        }
        let n = tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf)).await??;
        ensure!(n > 0, "closed after {got} bytes");
        if head_len.is_none() {
            head.extend_from_slice(&buf[..n]);
            head_len = head
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .map(|p| p + 4);
        }
        got += n;
    }
    assert_eq!(got, head_len.unwrap_or(0) + (4 << 20));
    c.write_all(GET).await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    Ok(())
}

#[tokio::test]
async fn a_parked_connection_still_times_out() -> Result<()> {
    let (_site, server) = server_with("keepalive_timeout = \"2s\"").await?;
    let mut c = TcpStream::connect(server.addr()).await?;
    c.write_all(GET).await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    assert!(parks(&server, 1).await);
    assert!(closed_within(&mut c, Duration::from_secs(6)).await);
    assert!(parks(&server, 0).await);
    Ok(())
}

#[tokio::test]
async fn a_parked_connection_is_closed_on_shutdown_and_a_busy_one_finishes() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut idle = TcpStream::connect(server.addr()).await?;
    idle.write_all(GET).await?;
    assert_eq!(responses(&mut idle, 1).await?, [(200, 5)]);
    let mut busy = TcpStream::connect(server.addr()).await?;
    busy.write_all(GET).await?;
    assert_eq!(responses(&mut busy, 1).await?, [(200, 5)]);
    assert!(parks(&server, 2).await);
    let stopping = tokio::spawn(server.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Within the drain's linger a parked connection still gets its
    // answer, told to close.
    busy.write_all(GET).await?;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), busy.read_to_end(&mut reply)).await??;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("connection: close"),
        "{reply}"
    );
    assert!(closed_within(&mut idle, Duration::from_secs(10)).await);
    stopping.await??;
    Ok(())
}

/// A request read together with the start of the next head (one write,
/// pipelined) starts that head's `header_read_timeout` when the first
/// answer is sent: a slow next head cannot hold the connection for the
/// keep-alive time as well.
#[tokio::test]
async fn a_partial_head_behind_a_request_times_out_like_any_head() -> Result<()> {
    let (_site, server) =
        server_with("header_read_timeout = \"1s\"\nkeepalive_timeout = \"20s\"").await?;
    let mut c = TcpStream::connect(server.addr()).await?;
    let started = std::time::Instant::now();
    c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHo")
        .await?;
    assert_eq!(responses(&mut c, 1).await?, [(200, 5)]);
    assert!(closed_within(&mut c, Duration::from_secs(8)).await);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

/// A connection is parked half a second after its last answer whatever
/// that answer was: a file streamed from disk too (its handler waits on a
/// blocking thread, which once left the watchdog asleep for 10 s).
#[tokio::test]
async fn a_connection_parks_soon_after_a_streamed_file() -> Result<()> {
    let (_site, server) = streaming(64 << 10).await?;
    let mut conns = Vec::new();
    for _ in 0..10 {
        let mut c = TcpStream::connect(server.addr()).await?;
        c.write_all(b"GET /big.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=0-16000\r\n\r\n")
            .await?;
        assert_eq!(responses(&mut c, 1).await?, [(206, 16001)]);
        conns.push(c);
    }
    assert!(parks(&server, 10).await, "parked: {}", parked(&server));
    Ok(())
}

/// Heads that end with bare line feeds (hyper accepts them) and a first
/// segment that is a lone `P` (POST, not HTTP/2) are served and parked
/// like any other.
#[tokio::test]
async fn bare_lf_heads_and_a_lone_first_p_are_parked_too() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut lf = TcpStream::connect(server.addr()).await?;
    lf.write_all(b"GET / HTTP/1.1\nHost: a\n\n").await?;
    assert_eq!(responses(&mut lf, 1).await?, [(200, 5)]);
    let mut p = TcpStream::connect(server.addr()).await?;
    p.write_all(b"P").await?;
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.write_all(b"OST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n\r\n")
        .await?;
    // Answered as HTTP/1 (a POST to a file: 405), not taken for HTTP/2.
    assert_eq!(responses(&mut p, 1).await?[0].0, 405);
    assert!(parks(&server, 2).await, "parked: {}", parked(&server));
    Ok(())
}

/// A client that ends its side right after its request still gets the
/// answer, cached or streamed from disk (whose handler waits on a blocking
/// thread while hyper reads the end of stream), then the connection closes.
#[tokio::test]
async fn a_client_that_half_closes_gets_its_answer() -> Result<()> {
    let (_site, server) = streaming(4 << 20).await?;
    for (path, len) in [("/", 5), ("/big.bin", 4 << 20)] {
        let mut c = TcpStream::connect(server.addr()).await?;
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .await?;
        c.shutdown().await?;
        assert_eq!(responses(&mut c, 1).await?, [(200, len)], "{path}");
        assert!(
            closed_within(&mut c, Duration::from_secs(5)).await,
            "{path}"
        );
    }
    Ok(())
}

/// A site with `index.html` (cached) and `big.bin` of `len` bytes,
/// streamed from disk.
async fn streaming(len: usize) -> Result<(swan_tests::TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = swan_tests::TestSite::new()?;
    site.file("www/index.html", "hello")?;
    site.file("www/big.bin", vec![b'x'; len])?;
    let server = crate::sendfile::server(&site, "").await?;
    Ok((site, server))
}
