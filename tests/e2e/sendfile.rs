//! Streamed files on plain HTTP/1 go out with `sendfile(2)`: every size
//! and range arrives byte for byte, pipelined responses stay in order, and
//! a file that shrinks or a client that stops reading ends the connection,
//! never with a response that looks complete.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use swan_tests::{TestServer, TestSite, read_response, read_until_ended};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One placeholder chunk (`body::PLACEHOLDER_BYTES`): sizes and ranges
/// around it cross the chunk edges.
const CHUNK: usize = 1 << 20;

/// Bytes that differ at every offset (a shifted copy would show).
fn contents(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

const SIZES: [usize; 8] = [
    16 * 1024 + 1,
    128 << 10,
    CHUNK - 1,
    CHUNK,
    CHUNK + 1,
    2_000_003,
    3 * CHUNK + 7,
    5 << 20,
];

fn sent_by_kernel(server: &TestServer) -> u64 {
    server.app().observe.sendfile_responses.get()
}

/// A server whose cache holds files up to 16 KiB: larger ones stream
/// from disk (with `sendfile` on plain HTTP/1).
pub(crate) async fn server(site: &TestSite, extra: &str) -> Result<TestServer> {
    let config = site.config(&format!(
        "[server]\n{extra}\n[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"16 KiB\"\n"
    ))?;
    TestServer::start(config).await
}

/// `(first, last)` byte ranges that start, end and cross chunk edges,
/// and the `Range` header for each.
fn ranges(len: usize) -> Vec<(String, usize, usize)> {
    let mut out = vec![
        ("bytes=0-0".to_owned(), 0, 0),
        (format!("bytes={}-{}", len - 1, len - 1), len - 1, len - 1),
        ("bytes=-1000".to_owned(), len - 1000, len - 1),
        ("bytes=1000-".to_owned(), 1000, len - 1),
    ];
    if len > CHUNK + 5 {
        out.push((
            format!("bytes={}-{}", CHUNK - 3, CHUNK + 5),
            CHUNK - 3,
            CHUNK + 5,
        ));
    }
    out
}

#[tokio::test]
async fn every_size_and_range_arrives_whole_through_sendfile() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/small.txt", "cached")?;
    for (i, len) in SIZES.iter().enumerate() {
        site.file(&format!("www/f{i}.bin"), contents(*len, i as u32))?;
    }
    let server = server(&site, "").await?;
    let mut expected_sends = 0;
    for (i, len) in SIZES.iter().enumerate() {
        let want = contents(*len, i as u32);
        let path = format!("/f{i}.bin");
        let r = server.get(&path).await?;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert_eq!(r.header("content-length"), len.to_string());
        assert!(r.body[..] == want[..], "{path}: body differs");
        expected_sends += 1;
        for (range, first, last) in ranges(*len) {
            let r = server.get_with(&path, &[("range", &range)]).await?;
            assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "{path} {range}");
            assert_eq!(
                r.header("content-range"),
                format!("bytes {first}-{last}/{len}")
            );
            assert!(r.body[..] == want[first..=last], "{path} {range}");
            expected_sends += 1;
        }
        // No body: nothing for sendfile.
        let head = server
            .send(Request::head(server.url(&path)).body(Full::default())?)
            .await?;
        assert_eq!(head.header("content-length"), len.to_string());
        assert!(head.body.is_empty());
        let etag = r.header("etag").to_owned();
        let r = server.get_with(&path, &[("if-none-match", &etag)]).await?;
        assert_eq!(r.status, StatusCode::NOT_MODIFIED);
        assert!(r.body.is_empty());
        // A cached file between two streamed ones on the same connection.
        assert_eq!(server.get("/small.txt").await?.text(), "cached");
    }
    assert_eq!(sent_by_kernel(&server), expected_sends);
    // HTTP/2 is framed by hyper: the file is read (after a seek, for a
    // range) and copied as before; the same bytes.
    for (i, len) in SIZES.iter().enumerate() {
        let want = contents(*len, i as u32);
        let path = server.url(&format!("/f{i}.bin"));
        let r = server
            .send_h2(Request::get(&path).body(Full::<Bytes>::default())?)
            .await?;
        assert!(r.body[..] == want[..], "h2 f{i}");
        for (range, first, last) in ranges(*len) {
            let r = server
                .send_h2(
                    Request::get(&path)
                        .header("range", &range)
                        .body(Full::<Bytes>::default())?,
                )
                .await?;
            assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "h2 f{i} {range}");
            assert!(r.body[..] == want[first..=last], "h2 f{i} {range}");
        }
    }
    assert_eq!(sent_by_kernel(&server), expected_sends);
    Ok(())
}

#[tokio::test]
async fn pipelined_and_parked_connections_keep_every_response_in_order() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let big = contents(3 * CHUNK + 7, 7);
    let other = contents(2_000_003, 8);
    site.file("www/big.bin", &big)?;
    site.file("www/other.bin", &other)?;
    site.file("www/small.txt", "cached")?;
    let server = server(&site, "").await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    let requests: Vec<(&str, &str, Vec<u8>)> = vec![
        ("/big.bin", "", big.clone()),
        ("/small.txt", "", b"cached".to_vec()),
        (
            "/other.bin",
            "Range: bytes=5-100004\r\n",
            other[5..100_005].to_vec(),
        ),
        ("/big.bin", "", big.clone()),
        ("/other.bin", "", other.clone()),
        ("/small.txt", "", b"cached".to_vec()),
    ];
    for round in 0..3 {
        let mut all = Vec::new();
        for (path, extra, _) in &requests {
            all.extend_from_slice(
                format!("GET {path} HTTP/1.1\r\nHost: a\r\n{extra}\r\n").as_bytes(),
            );
        }
        // Sent whole (pipelined), or one by one.
        if round == 1 {
            let mut buffered = Vec::new();
            for (path, extra, want) in &requests {
                stream
                    .write_all(format!("GET {path} HTTP/1.1\r\nHost: a\r\n{extra}\r\n").as_bytes())
                    .await?;
                let r = read_response(&mut stream, &mut buffered).await?;
                assert!(r.body == *want, "round {round} {path}: {}", r.head);
            }
        } else {
            stream.write_all(&all).await?;
            let mut buffered = Vec::new();
            for (path, _, want) in &requests {
                let r = read_response(&mut stream, &mut buffered).await?;
                assert!(r.body == *want, "round {round} {path}: {}", r.head);
            }
            assert!(buffered.is_empty());
        }
        // Parked between rounds: the next round resumes it.
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    ensure!(sent_by_kernel(&server) > 0, "no response went by sendfile");
    // A client slow to start reading pipelined requests: the socket is
    // full while later requests are answered. Cached bodies holding a
    // blank line (what ends a head) sit between the files.
    let huge = contents(24 << 20, 9);
    site.file("www/huge.bin", &huge)?;
    site.file("www/blank.txt", "a\r\n\r\nb")?;
    let server = crate::sendfile::server(&site, "").await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    let mut all = Vec::new();
    for path in [
        "/huge.bin",
        "/blank.txt",
        "/big.bin",
        "/blank.txt",
        "/huge.bin",
    ] {
        all.extend_from_slice(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    }
    stream.write_all(&all).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut buffered = Vec::new();
    for (path, want) in [
        ("/huge.bin", &huge[..]),
        ("/blank.txt", b"a\r\n\r\nb"),
        ("/big.bin", &big[..]),
        ("/blank.txt", b"a\r\n\r\nb"),
        ("/huge.bin", &huge[..]),
    ] {
        let r = read_response(&mut stream, &mut buffered).await?;
        assert!(r.body == want, "slow start {path}: {}", r.head);
    }
    Ok(())
}

/// Size of the file the fault tests download: more than the socket
/// buffers hold, so the server is still sending when the fault comes.
const HUGE: usize = 64 << 20;

/// A server (`[server]` lines in `extra`) with `www/huge.bin` (contents
/// from `seed`), and a connection that has asked for it.
async fn downloading(
    site: &TestSite,
    seed: u32,
    extra: &str,
) -> Result<(TestServer, TcpStream, std::path::PathBuf)> {
    let path = site.file("www/huge.bin", contents(HUGE, seed))?;
    let server = server(site, extra).await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(b"GET /huge.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .await?;
    Ok((server, stream, path))
}

/// The first 100,000 bytes or more of a download under way: its head and
/// the start of its body, while the server is still sending.
async fn started(stream: &mut TcpStream) -> Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while got.len() < 100_000 {
        let n = stream.read(&mut buf).await?;
        ensure!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    Ok(got)
}

/// Where a response's head ends in `got` (its blank line).
fn head_end(got: &[u8]) -> Result<usize> {
    got.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("head")
}

#[tokio::test]
async fn a_file_that_shrinks_while_it_is_sent_ends_the_connection_short() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let len = HUGE;
    let (server, mut stream, path) = downloading(&site, 3, "").await?;
    let mut got = started(&mut stream).await?;
    ensure!(sent_by_kernel(&server) == 1, "not sent by sendfile");
    // Cut in place (the same inode): the kernel has no more to send.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)?
        .set_len(1 << 20)?;
    got.extend(read_until_ended(&mut stream, Duration::from_secs(20)).await?);
    let head_end = head_end(&got)?;
    let body = got.len() - head_end - 4;
    ensure!(body < len, "a shrunk file was sent whole ({body} bytes)");
    // What did arrive is the file's start.
    let want = contents(body.min(1 << 20), 3);
    ensure!(got[head_end + 4..head_end + 4 + want.len()] == want[..]);
    // The server is fine.
    assert_eq!(server.get("/huge.bin").await?.body.len(), 1 << 20);
    Ok(())
}

/// Writes other contents (from `seed`) over the file at `path`, in place:
/// the same inode and size, as `cp` over an existing file or an editor
/// that rewrites does.
fn rewrite_in_place(path: &std::path::Path, len: usize, seed: u32) -> Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.write_all(&contents(len, seed))?;
    Ok(())
}

#[tokio::test]
async fn a_file_rewritten_in_place_while_it_is_sent_is_cut_off() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let len = HUGE;
    let (server, mut stream, path) = downloading(&site, 7, "").await?;
    let mut got = started(&mut stream).await?;
    let mut buf = vec![0u8; 64 << 10];
    ensure!(sent_by_kernel(&server) == 1, "not sent by sendfile");
    rewrite_in_place(&path, len, 8)?;
    // A reset, not a clean end: the client must not take what came for
    // the whole answer.
    let ended = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) => return Err(e.kind()),
            }
        }
    })
    .await
    .context("the connection stayed open")?;
    ensure!(
        ended == Err(std::io::ErrorKind::ConnectionReset),
        "the cut-off answer ended with {ended:?}, not a reset"
    );
    let head_end = head_end(&got)?;
    let body = &got[head_end + 4..];
    ensure!(
        body.len() < len,
        "a file rewritten in place arrived whole ({} bytes, {} of them the old version's)",
        body.len(),
        body.iter()
            .zip(contents(len, 7))
            .take_while(|(a, b)| **a == *b)
            .count()
    );
    // The next answer is the new version, whole.
    let r = server.get("/huge.bin").await?;
    ensure!(r.body[..] == contents(len, 8)[..], "the new version");
    Ok(())
}

/// A new version renamed over the path, as a deploy should do it, leaves
/// the download under way whole: it goes on with the file it opened (whose
/// change time a rename moves), and the next request gets the new one.
#[tokio::test]
async fn a_file_renamed_over_while_it_is_sent_is_sent_whole() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let len = HUGE;
    let (server, mut stream, path) = downloading(&site, 11, "").await?;
    let mut got = started(&mut stream).await?;
    let mut buf = vec![0u8; 64 << 10];
    let new = site.file("www/huge.bin.new", contents(len, 12))?;
    std::fs::rename(&new, &path)?;
    let head_end = head_end(&got)?;
    let want = head_end + 4 + len;
    let read_all = tokio::time::timeout(Duration::from_secs(30), async {
        while got.len() < want {
            let n = stream.read(&mut buf).await?;
            ensure!(n > 0, "ended after {} of {want} bytes", got.len());
            got.extend_from_slice(&buf[..n]);
        }
        Ok(())
    });
    read_all.await.context("the download stalled")??;
    ensure!(
        got[head_end + 4..] == contents(len, 11)[..],
        "not the old version whole"
    );
    // Kept alive, and the next answer is the new version.
    stream
        .write_all(b"GET /huge.bin HTTP/1.1\r\nHost: a\r\n\r\n")
        .await?;
    let mut next = Vec::new();
    let r = read_response(&mut stream, &mut next).await?;
    ensure!(r.body[..] == contents(len, 12)[..], "the new version");
    drop(server);
    Ok(())
}

/// The same over HTTP/2, whose file bodies are read in chunks: the stream
/// is reset, never ended as if complete.
#[tokio::test]
async fn an_http2_download_of_a_file_rewritten_in_place_is_reset() -> Result<()> {
    use swan_tests::h2raw::{self, H2Conn, flag, kind};
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let len = 8 << 20;
    let path = site.file("www/big.bin", contents(len, 9))?;
    let server = server(&site, "").await?;
    let mut conn = H2Conn::open(server.addr()).await?;
    conn.send(&h2raw::frame(
        kind::HEADERS,
        flag::END_HEADERS | flag::END_STREAM,
        1,
        &h2raw::get_headers("/big.bin", "a"),
    ))
    .await;
    // The first window's worth (64 KiB), then the file changes.
    let mut data = 0usize;
    while data < 60_000 {
        let f = conn
            .wait_for(Duration::from_secs(5), |f| f.kind == kind::DATA)
            .await
            .context("no data")?;
        data += f.payload.len();
    }
    rewrite_in_place(&path, len, 10)?;
    // All the window the rest needs, for the stream and the connection.
    let more = 0x7fff_0000u32.to_be_bytes();
    conn.send(&h2raw::frame(kind::WINDOW_UPDATE, 0, 0, &more))
        .await;
    conn.send(&h2raw::frame(kind::WINDOW_UPDATE, 0, 1, &more))
        .await;
    let end = loop {
        let f = conn
            .wait_for(Duration::from_secs(10), |f| {
                f.stream == 1 && (f.kind == kind::DATA || f.kind == kind::RST_STREAM)
            })
            .await
            .context("neither the end nor a reset")?;
        if f.kind == kind::RST_STREAM {
            break f;
        }
        data += f.payload.len();
        ensure!(
            f.flags & flag::END_STREAM == 0,
            "the stream ended as if complete after {data} bytes"
        );
    };
    ensure!(end.kind == kind::RST_STREAM && data < len, "{data} bytes");
    // The connection and the server carry on.
    let r = server.get("/big.bin").await?;
    ensure!(r.body[..] == contents(len, 10)[..], "the new version");
    Ok(())
}

#[tokio::test]
async fn a_client_that_stops_reading_a_sendfile_response_is_dropped() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let len = HUGE;
    let (server, mut stream, _) = downloading(&site, 4, "send_timeout = \"1s\"").await?;
    // Read nothing for a while: the socket fills, sendfile waits, and the
    // send timeout passes.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let got = read_until_ended(&mut stream, Duration::from_secs(20))
        .await
        .context("the stalled connection was not dropped")?
        .len();
    ensure!(got < len, "the whole file arrived ({got} bytes)");
    ensure!(sent_by_kernel(&server) == 1, "not sent by sendfile");
    assert_eq!(server.get("/huge.bin").await?.body.len(), len);
    Ok(())
}

/// A request whose body never arrives whole, for a file larger than the
/// client's socket takes at once: hyper cannot read the body, so it closes
/// the connection after the answer, and the whole answer goes out first.
/// The last bytes were lost with hyper's buffer, from files streamed and
/// cached alike.
#[tokio::test]
async fn an_unread_request_body_does_not_cut_a_large_answer_short() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/streamed.bin", contents(3_000_000, 5))?;
    site.file("www/cached.bin", contents(900_000, 6))?;
    let config =
        site.config("[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"1 MiB\"\n")?;
    let server = TestServer::start(config).await?;
    for (path, len, seed) in [("/streamed.bin", 3_000_000, 5), ("/cached.bin", 900_000, 6)] {
        for _ in 0..3 {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_recv_buffer_size(4096)?;
            let mut stream = socket.connect(server.addr()).await?;
            let request =
                format!("GET {path} HTTP/1.1\r\nHost: a\r\nContent-Length: 45\r\n\r\naaaaaaaa");
            stream.write_all(request.as_bytes()).await?;
            // The server answers and fills the socket meanwhile.
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let got = read_until_ended(&mut stream, Duration::from_secs(20)).await?;
            let head_end = got
                .windows(4)
                .position(|w| w == b"\r\n\r\n")
                .context("head")?;
            let body = &got[head_end + 4..];
            ensure!(body.len() == len, "{path}: {} of {len} bytes", body.len());
            ensure!(body == contents(len, seed), "{path}: other bytes");
        }
    }
    ensure!(sent_by_kernel(&server) >= 3, "not sent by sendfile");
    Ok(())
}

/// Cached bodies of 64 KiB and more on plain HTTP/1 are written by the
/// connection's stream from the cache itself (no copy into hyper's
/// buffer), paced like files: every size and range whole, pipelined in
/// order among small cached and streamed files, over HTTP/2 as before.
#[tokio::test]
async fn large_cached_bodies_are_written_from_the_cache_whole() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let sizes = [
        (64 << 10) - 1,
        64 << 10,
        (64 << 10) + 1,
        CHUNK - 1,
        CHUNK,
        CHUNK + 1,
        3 * CHUNK + 7,
    ];
    for (i, len) in sizes.iter().enumerate() {
        site.file(&format!("www/c{i}.bin"), contents(*len, 20 + i as u32))?;
    }
    let streamed = contents(5 * CHUNK + 3, 30);
    site.file("www/streamed.bin", &streamed)?;
    site.file("www/small.txt", "cached")?;
    let config = site.config(
        "[[site]]\nroot = \"www\"\n[site.cache]\nmax_file_size = \"4 MiB\"\ncompress = false\n",
    )?;
    let server = TestServer::start(config).await?;
    for (i, len) in sizes.iter().enumerate() {
        let want = contents(*len, 20 + i as u32);
        let path = format!("/c{i}.bin");
        let r = server.get(&path).await?;
        assert_eq!(r.header("content-length"), len.to_string());
        assert!(r.body[..] == want[..], "{path}: body differs");
        for (range, first, last) in ranges(*len) {
            let r = server.get_with(&path, &[("range", &range)]).await?;
            assert_eq!(r.status, StatusCode::PARTIAL_CONTENT, "{path} {range}");
            assert!(r.body[..] == want[first..=last], "{path} {range}");
        }
        let r = server
            .send_h2(Request::get(server.url(&path)).body(Full::<Bytes>::default())?)
            .await?;
        assert!(r.body[..] == want[..], "h2 {path}");
    }
    // Pipelined: large cached, small, streamed, ranged, HEAD, in one write.
    let big = contents(3 * CHUNK + 7, 26);
    let mid = contents(CHUNK, 24);
    let requests: Vec<(&str, &str, Vec<u8>)> = vec![
        ("GET /c6.bin", "", big.clone()),
        ("GET /small.txt", "", b"cached".to_vec()),
        ("GET /streamed.bin", "", streamed.clone()),
        (
            "GET /c4.bin",
            "Range: bytes=65530-70000\r\n",
            mid[65_530..=70_000].to_vec(),
        ),
        ("HEAD /c6.bin", "", Vec::new()),
        ("GET /c4.bin", "", mid.clone()),
        ("GET /c6.bin", "", big.clone()),
    ];
    let mut stream = TcpStream::connect(server.addr()).await?;
    for round in 0..2 {
        let mut all = Vec::new();
        for (line, extra, _) in &requests {
            all.extend_from_slice(format!("{line} HTTP/1.1\r\nHost: a\r\n{extra}\r\n").as_bytes());
        }
        stream.write_all(&all).await?;
        // The second round starts reading late: the socket fills first.
        if round == 1 {
            tokio::time::sleep(Duration::from_millis(800)).await;
        }
        let mut buffered = Vec::new();
        for (line, _, want) in &requests {
            if line.starts_with("HEAD") {
                let head = read_head_only(&mut stream, &mut buffered).await?;
                assert!(
                    head.contains(&format!("content-length: {}", big.len())),
                    "{head}"
                );
            } else {
                let r = read_response(&mut stream, &mut buffered).await?;
                assert!(r.body == *want, "round {round} {line}: {}", r.head);
            }
        }
        assert!(buffered.is_empty());
    }
    Ok(())
}

/// Reads one response head (for HEAD: no body follows), leaving what comes
/// after it in `buffered`.
async fn read_head_only(stream: &mut TcpStream, buffered: &mut Vec<u8>) -> Result<String> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if let Some(end) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffered[..end]).to_ascii_lowercase();
            buffered.drain(..end + 4);
            return Ok(head);
        }
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf)).await??;
        ensure!(n > 0, "closed before a head");
        buffered.extend_from_slice(&buf[..n]);
    }
}

/// A servlet that writes 128 KiB (zeros) after setting `status`.
fn large_answer(status: u32) -> Vec<u8> {
    let text = format!(
        r#"(module
  (import "swan" "response_status" (func $status (param i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 3)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32)
    (drop (call $status (i32.const {status})))
    (drop (call $write (i32.const 0) (i32.const 131072)))
    i32.const 0))"#
    );
    wat::parse_str(&text).unwrap_or_else(|e| panic!("bad test WAT: {e}"))
}

/// Large in-memory answers hyper sends no body for (to HEAD, a 204 or a
/// 304 from a servlet) are never handed to the stream: the connection's
/// next answers are whole and in order.
#[tokio::test]
async fn large_answers_without_a_body_leave_the_connection_whole() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "static home")?;
    site.file("servlets/big.wasm", large_answer(200))?;
    site.file("servlets/none.wasm", large_answer(204))?;
    site.file("servlets/same.wasm", large_answer(304))?;
    let config = site.config("[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n")?;
    let server = TestServer::start(config).await?;
    let mut stream = TcpStream::connect(server.addr()).await?;
    let mut all = Vec::new();
    for line in [
        "HEAD /big",
        "GET /none",
        "GET /same",
        "GET /big",
        "GET /index.html",
    ] {
        all.extend_from_slice(format!("{line} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes());
    }
    for round in 0..2 {
        stream.write_all(&all).await?;
        let mut buffered = Vec::new();
        for status in ["200", "204", "304"] {
            let head = read_head_only(&mut stream, &mut buffered).await?;
            ensure!(
                head.starts_with(&format!("http/1.1 {status}")),
                "{round}: {head}"
            );
        }
        large_then_home(&mut stream, &mut buffered).await?;
        ensure!(buffered.is_empty(), "{round}: bytes after the last answer");
    }
    // `Expect: 100-continue` with the body in the same packet: hyper's 100
    // is still in its buffer when the answer is handed to the stream, which
    // lets it through ahead of the answer's own head; both heads, then the
    // body, whole.
    stream
        .write_all(
            b"POST /big HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx\
              GET /index.html HTTP/1.1\r\nHost: a\r\n\r\n",
        )
        .await?;
    let mut buffered = Vec::new();
    let head = read_head_only(&mut stream, &mut buffered).await?;
    ensure!(head.starts_with("http/1.1 100"), "{head}");
    large_then_home(&mut stream, &mut buffered).await
}

/// Reads `/big`'s 128 KiB of zeros, then the static home page.
async fn large_then_home(stream: &mut TcpStream, buffered: &mut Vec<u8>) -> Result<()> {
    let r = read_response(stream, buffered).await?;
    ensure!(
        r.status == 200 && r.body == vec![0u8; 131_072],
        "{}",
        r.head
    );
    let r = read_response(stream, buffered).await?;
    ensure!(r.body == b"static home", "{}", r.head);
    Ok(())
}
