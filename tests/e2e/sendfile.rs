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

#[tokio::test]
async fn a_file_that_shrinks_while_it_is_sent_ends_the_connection_short() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    let len = HUGE;
    let (server, mut stream, path) = downloading(&site, 3, "").await?;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    while got.len() < 100_000 {
        let n = stream.read(&mut buf).await?;
        ensure!(n > 0, "closed early");
        got.extend_from_slice(&buf[..n]);
    }
    ensure!(sent_by_kernel(&server) == 1, "not sent by sendfile");
    // Cut in place (the same inode): the kernel has no more to send.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)?
        .set_len(1 << 20)?;
    got.extend(read_until_ended(&mut stream, Duration::from_secs(20)).await?);
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("head")?;
    let body = got.len() - head_end - 4;
    ensure!(body < len, "a shrunk file was sent whole ({body} bytes)");
    // What did arrive is the file's start.
    let want = contents(body.min(1 << 20), 3);
    ensure!(got[head_end + 4..head_end + 4 + want.len()] == want[..]);
    // The server is fine.
    assert_eq!(server.get("/huge.bin").await?.body.len(), 1 << 20);
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
