//! The HTTP front end: protocols, limits, timeouts and graceful shutdown.

use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode, Version};
use http_body_util::Full;
use swan_tests::{TestServer, TestSite, closed_within, read_until_close};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) async fn server_with(server_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "hello")?;
    site.file("www/big.bin", vec![b'x'; 4 << 20])?;
    let config = site.config(&format!("[server]\n{server_toml}\n[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"8 MiB\"\n"))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

#[tokio::test]
async fn http2_with_prior_knowledge_is_served_on_the_same_port() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let r = server
        .send_h2(Request::get(server.url("/")).body(Full::default())?)
        .await?;
    assert_eq!(r.version, Version::HTTP_2);
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), "hello");
    assert_eq!(r.header("server"), "swan");
    let r = server.get("/").await?;
    assert_eq!(r.version, Version::HTTP_11);
    // RFC 9113 §8.2.1: a field value with whitespace at an end is
    // malformed (HTTP/1's parser trims it).
    for value in [" lead", "trail\t"] {
        let r = server
            .send_h2(
                Request::get(server.url("/"))
                    .header("x-padded", value)
                    .body(Full::default())?,
            )
            .await?;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{value:?}");
    }
    Ok(())
}

#[tokio::test]
async fn http10_requests_are_answered_and_closed() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let r = server
        .raw(b"GET / HTTP/1.0\r\n\r\n", Duration::from_secs(5))
        .await?;
    assert!(r.starts_with("HTTP/1.0 200 OK\r\n"), "{r}");
    assert!(r.ends_with("hello"), "{r}");
    Ok(())
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let r = server
        .raw(
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET /missing HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .await?;
    let statuses: Vec<&str> = r
        .match_indices("HTTP/1.1 ")
        .map(|(i, _)| &r[i + 9..i + 12])
        .collect();
    assert_eq!(statuses, ["200", "404", "200"], "{r}");
    Ok(())
}

#[tokio::test]
async fn keep_alive_reuses_one_connection() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    for _ in 0..3 {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            .await?;
        let mut buf = vec![0u8; 1024];
        let n = stream.read(&mut buf).await?;
        let text = String::from_utf8_lossy(&buf[..n]);
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with("hello"),
            "{text}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn malformed_requests_get_400_and_the_connection_closes() -> Result<()> {
    let (_site, server) = server_with("").await?;
    for bad in [
        &b"GARBAGE\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nBad Header\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
    ] {
        let r = server.raw(bad, Duration::from_secs(5)).await?;
        assert!(
            r.starts_with("HTTP/1.1 400") || r.starts_with("HTTP/1.1 505"),
            "{r}"
        );
    }
    // The server keeps serving everyone else.
    assert_eq!(server.get("/").await?.status, StatusCode::OK);
    Ok(())
}

/// `OPTIONS *` is a ping (RFC 9110 §9.3.7): 200 with no content, over
/// both protocols. `*` with any other method names no resource: 400.
#[tokio::test]
async fn options_asterisk_is_answered_as_a_ping() -> Result<()> {
    let (_site, server) = server_with("").await?;
    let r = server
        .raw(
            b"OPTIONS * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .await?;
    assert!(r.starts_with("HTTP/1.1 200"), "{r}");
    assert!(r.contains("content-length: 0\r\n"), "{r}");
    let r = server
        .raw(
            b"GET * HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            Duration::from_secs(5),
        )
        .await?;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    // HTTP/2: `:path` `*` beside its scheme and authority.
    use swan_tests::h2raw::{self, H2Conn, flag, kind};
    let authority = server.addr().to_string();
    let mut block = vec![0x02, 7];
    block.extend_from_slice(b"OPTIONS");
    block.extend_from_slice(&[0x86, 0x04, 1, b'*', 0x01, authority.len() as u8]);
    block.extend_from_slice(authority.as_bytes());
    let mut conn = H2Conn::open(server.addr()).await?;
    conn.send(&h2raw::frame(
        kind::HEADERS,
        flag::END_STREAM | flag::END_HEADERS,
        1,
        &block,
    ))
    .await;
    let head = conn
        .wait_for(Duration::from_secs(5), |f| {
            f.kind == kind::HEADERS && f.stream == 1
        })
        .await
        .expect("an answer");
    // HPACK static index 8: `:status 200`.
    assert_eq!(head.payload.first(), Some(&0x88), "{head:?}");
    Ok(())
}

#[tokio::test]
async fn oversize_headers_get_431() -> Result<()> {
    let (_site, server) = server_with("max_header_bytes = \"8 KiB\"").await?;
    let big = "a".repeat(20_000);
    let r = server
        .raw(
            format!("GET / HTTP/1.1\r\nHost: a\r\nX-Big: {big}\r\n\r\n").as_bytes(),
            Duration::from_secs(5),
        )
        .await?;
    assert!(r.starts_with("HTTP/1.1 431"), "{r}");
    assert_eq!(server.get("/").await?.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn bodies_over_the_limit_get_413() -> Result<()> {
    let (_site, server) = server_with("max_body_bytes = 1000").await?;
    let r = server
        .send(Request::post(server.url("/")).body(Full::new(Bytes::from(vec![0u8; 5000])))?)
        .await?;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    let r = server
        .raw(
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: nope\r\n\r\n",
            Duration::from_secs(5),
        )
        .await?;
    assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    Ok(())
}

#[tokio::test]
async fn clients_sending_headers_too_slowly_are_cut_off() -> Result<()> {
    let (_site, server) =
        server_with("header_read_timeout = \"300ms\"\nkeepalive_timeout = \"10s\"").await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    let started = Instant::now();
    // A slowloris: a byte every 100 ms, never finishing the head.
    let mut closed = false;
    for b in b"GET / HTTP/1.1\r\nHost: a\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
    {
        if stream.write_all(&[*b]).await.is_err() {
            closed = true;
            break;
        }
        if closed_within(&mut stream, Duration::from_millis(100)).await {
            closed = true;
            break;
        }
    }
    assert!(closed, "slow client was not cut off");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(250) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    assert_eq!(server.get("/").await?.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed_after_the_timeout() -> Result<()> {
    let (_site, server) =
        server_with("keepalive_timeout = \"400ms\"\nheader_read_timeout = \"5s\"").await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await?;
    let mut buf = vec![0u8; 1024];
    let n = stream.read(&mut buf).await?;
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let started = Instant::now();
    assert!(closed_within(&mut stream, Duration::from_secs(5)).await);
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_millis(300) && idle < Duration::from_secs(3),
        "{idle:?}"
    );
    Ok(())
}

#[tokio::test]
async fn connections_over_the_limit_wait_for_a_free_slot() -> Result<()> {
    let (_site, server) = server_with("max_connections = 1\nkeepalive_timeout = \"30s\"").await?;
    // A connection in the middle of its first request head keeps its place.
    let mut first = TcpStream::connect(server.addr()).await?;
    first.write_all(b"GET / HTTP/1.1\r\n").await?;
    // Each worker accepts from its own socket (SO_REUSEPORT): let the
    // first connection's worker take it before the second one comes, or
    // the second may take the place first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The second connection is accepted by the kernel but not served yet.
    let mut second = TcpStream::connect(server.addr()).await?;
    second
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await?;
    let early = read_until_close(&mut second, Duration::from_millis(1500)).await;
    assert_eq!(early, "");
    drop(first);
    let later = read_until_close(&mut second, Duration::from_secs(5)).await;
    assert!(later.starts_with("HTTP/1.1 200"), "{later}");
    Ok(())
}

/// A new client at `max_connections` is answered within 5 s: a place was
/// made for it, it did not wait out an idle connection's timeout.
async fn served_soon(server: &TestServer) -> Result<()> {
    let started = Instant::now();
    let mut client = TcpStream::connect(server.addr()).await?;
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await?;
    let answer = read_until_close(&mut client, Duration::from_secs(10)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

/// At `max_connections`, an idle keep-alive connection closes to make
/// room, as NGINX's do: a new client does not wait out a
/// `keepalive_timeout` behind clients that made one request each.
#[tokio::test]
async fn at_the_limit_an_idle_keep_alive_connection_makes_room() -> Result<()> {
    let (_site, server) = server_with("max_connections = 2\nkeepalive_timeout = \"30s\"").await?;
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(server.addr()).await?;
        c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await?;
        let mut buf = vec![0u8; 1024];
        let n = c.read(&mut buf).await?;
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        idle.push(c);
    }
    served_soon(&server).await?;
    // One of the idle ones was closed for it, the other kept.
    let mut closed = 0;
    for c in &mut idle {
        let mut buf = [0u8; 16];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(300), c.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 1);
    Ok(())
}

/// HTTP/2 connections idle between requests make room too: a GOAWAY,
/// then the close.
#[tokio::test]
async fn at_the_limit_an_idle_http2_connection_makes_room() -> Result<()> {
    let (_site, server) = server_with("max_connections = 2\nkeepalive_timeout = \"30s\"").await?;
    let mut closed = Vec::new();
    let mut senders = Vec::new();
    for _ in 0..2 {
        let (mut sender, rx) = server.h2_connection().await?;
        let res = sender
            .send_request(Request::get(server.url("/")).body(Full::<Bytes>::default())?)
            .await?;
        assert_eq!(res.status(), StatusCode::OK);
        http_body_util::BodyExt::collect(res.into_body()).await?;
        senders.push(sender);
        closed.push(rx);
    }
    served_soon(&server).await?;
    let mut ended = 0;
    for rx in closed {
        if tokio::time::timeout(Duration::from_millis(500), rx)
            .await
            .is_ok()
        {
            ended += 1;
        }
    }
    assert_eq!(ended, 1, "one idle HTTP/2 connection closes for the third");
    Ok(())
}

/// An idle HTTP/2 client that never reads again (so never answers the
/// GOAWAY's PING) still makes room within a second or so, not a whole
/// `header_read_timeout`.
#[tokio::test]
async fn at_the_limit_an_http2_client_that_stopped_reading_makes_room() -> Result<()> {
    // Served, its answer unread in the socket's buffer.
    deaf_client_makes_room("60s", Duration::from_millis(300)).await
}

/// The same client, already closing at its `keepalive_timeout` (a GOAWAY
/// it never reads) when a newcomer arrives: asked for room all the same,
/// it too has a second left, not the rest of `header_read_timeout`.
#[tokio::test]
async fn at_the_limit_a_connection_already_closing_makes_room_soon() -> Result<()> {
    // Past its keepalive_timeout: closing, its GOAWAY's PING unanswered.
    deaf_client_makes_room("1s", Duration::from_millis(1800)).await
}

/// With `max_connections = 1` and `header_read_timeout` at 30 s, an HTTP/2
/// client sends one request and reads nothing more; `wait` later, a new
/// client is served soon.
async fn deaf_client_makes_room(keepalive: &str, wait: Duration) -> Result<()> {
    let (_site, server) = server_with(&format!(
        "max_connections = 1\nkeepalive_timeout = \"{keepalive}\"\nheader_read_timeout = \"30s\""
    ))
    .await?;
    let mut deaf = TcpStream::connect(server.addr()).await?;
    deaf.write_all(&deaf_h2_get()).await?;
    tokio::time::sleep(wait).await;
    served_soon(&server).await?;
    drop(deaf);
    Ok(())
}

/// An HTTP/2 client's first bytes: the preface, an empty SETTINGS, and one
/// GET / (HPACK: :method GET, :scheme http, :path /, :authority "a").
fn deaf_h2_get() -> Vec<u8> {
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    hello.extend_from_slice(&[0, 0, 6, 1, 5, 0, 0, 0, 1, 0x82, 0x86, 0x84, 0x41, 1, b'a']);
    hello
}

/// An HTTP/2 connection with a response still being sent is not idle: it
/// keeps its place at `max_connections`, and a new connection waits.
#[tokio::test]
async fn at_the_limit_a_busy_http2_connection_keeps_its_place() -> Result<()> {
    let (_site, server) = server_with("max_connections = 1\nkeepalive_timeout = \"30s\"").await?;
    let (mut sender, _closed) = server.h2_connection().await?;
    // A served request first (so it is a keep-alive connection), then a
    // 4 MiB body left unread: its stream stays open, the window full.
    let res = sender
        .send_request(Request::get(server.url("/")).body(Full::<Bytes>::default())?)
        .await?;
    http_body_util::BodyExt::collect(res.into_body()).await?;
    let big = sender
        .send_request(Request::get(server.url("/big.bin")).body(Full::<Bytes>::default())?)
        .await?;
    assert_eq!(big.status(), StatusCode::OK);
    let mut second = TcpStream::connect(server.addr()).await?;
    second
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await?;
    assert_eq!(
        read_until_close(&mut second, Duration::from_millis(1500)).await,
        ""
    );
    // The busy one still answers its stream in full.
    let body = http_body_util::BodyExt::collect(big.into_body())
        .await?
        .to_bytes();
    assert_eq!(body.len(), 4 << 20);
    Ok(())
}

/// Exactly `max_connections` are served, however many accept loops there
/// are (one per listener and worker): none keeps a place idle while a
/// connection waits.
#[tokio::test]
async fn max_connections_places_are_all_used_with_many_workers() -> Result<()> {
    let (_site, server) =
        server_with("workers = 4\nmax_connections = 4\nkeepalive_timeout = \"30s\"").await?;
    let mut open = Vec::new();
    for n in 0..4 {
        let mut c = TcpStream::connect(server.addr()).await?;
        c.write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await?;
        let mut buf = vec![0u8; 1024];
        let read = tokio::time::timeout(Duration::from_secs(3), c.read(&mut buf)).await;
        let got = match read {
            Ok(Ok(len)) => String::from_utf8_lossy(&buf[..len]).into_owned(),
            _ => String::new(),
        };
        assert!(
            got.starts_with("HTTP/1.1 200"),
            "connection {n} of 4 unserved: {got:?}"
        );
        // Then a second request begun: not idle, so it keeps its place.
        c.write_all(b"GET / HTTP/1.1\r\n").await?;
        open.push(c);
    }
    // The fifth waits, and gets the first place that frees.
    let mut fifth = TcpStream::connect(server.addr()).await?;
    fifth
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
        .await?;
    assert_eq!(
        read_until_close(&mut fifth, Duration::from_millis(1500)).await,
        ""
    );
    drop(open.pop());
    let later = read_until_close(&mut fifth, Duration::from_secs(5)).await;
    assert!(later.starts_with("HTTP/1.1 200"), "{later}");
    Ok(())
}

#[tokio::test]
async fn shutdown_lets_in_flight_responses_finish_and_stops_accepting() -> Result<()> {
    let (_site, server) = server_with("drain_timeout = \"10s\"").await?;
    let addr = server.addr();
    let mut stream = TcpStream::connect(addr).await?;
    stream
        .write_all(b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .await?;
    // Read a little so the response is in flight, then stop the server.
    let mut head = vec![0u8; 1024];
    let n = stream.read(&mut head).await?;
    assert!(String::from_utf8_lossy(&head[..n]).starts_with("HTTP/1.1 200"));
    let reader = tokio::spawn(async move {
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
        n + rest.len()
    });
    let stopping = tokio::spawn(server.stop());
    let total = tokio::time::timeout(Duration::from_secs(20), reader).await??;
    assert!(total > 4 << 20, "response was cut short: {total} bytes");
    tokio::time::timeout(Duration::from_secs(20), stopping).await???;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "still accepting after shutdown"
    );
    Ok(())
}
