//! HTTPS through the real binary with real clients: curl (HTTP/2 and
//! HTTP/1.1 over ALPN) and a Rust client (rustls + hyper) that checks which
//! certificate it was given; the certificate reloaded when its files
//! change; the redirect from plain HTTP; HSTS. Certificates are made at
//! run time. Loopback only.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{CertificateDer, ServerName};

mod support;
use support::{raw, site, start, status_of, stop, stop_with_code};

/// A CA and a certificate it signed for `localhost` and 127.0.0.1.
struct Certs {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    leaf_pem: String,
    key_pem: String,
    leaf_der: CertificateDer<'static>,
}

fn make_certs(serial: u64) -> Certs {
    make_certs_valid(serial, false)
}

/// [`make_certs`], with a leaf that expired years ago when `expired`.
fn make_certs_valid(serial: u64, expired: bool) -> Certs {
    let dates = expired.then(|| {
        (
            rcgen::date_time_ymd(2020, 1, 1),
            rcgen::date_time_ymd(2021, 1, 1),
        )
    });
    make_certs_dated(serial, dates)
}

/// [`make_certs`], with the leaf valid from and until the given dates.
fn make_certs_dated(
    serial: u64,
    dates: Option<(time::OffsetDateTime, time::OffsetDateTime)>,
) -> Certs {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, format!("swan test CA {serial}"));
    let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
    let key = KeyPair::generate().expect("key");
    let mut leaf = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("leaf params");
    leaf.serial_number = Some(rcgen::SerialNumber::from(serial));
    if let Some((not_before, not_after)) = dates {
        leaf.not_before = not_before;
        leaf.not_after = not_after;
    }
    let issuer = rcgen::Issuer::from_params(&ca, &ca_key);
    let leaf_cert = leaf.signed_by(&key, &issuer).expect("leaf cert");
    Certs {
        ca_pem: ca_cert.pem(),
        ca_der: ca_cert.der().clone(),
        leaf_pem: leaf_cert.pem(),
        key_pem: key.serialize_pem(),
        leaf_der: leaf_cert.der().clone(),
    }
}

fn write_certs(dir: &Path, certs: &Certs) {
    // Written aside and renamed, as a certificate manager does.
    std::fs::write(dir.join("cert.pem.new"), &certs.leaf_pem).expect("cert");
    std::fs::write(dir.join("key.pem.new"), &certs.key_pem).expect("key");
    std::fs::rename(dir.join("key.pem.new"), dir.join("key.pem")).expect("key");
    std::fs::rename(dir.join("cert.pem.new"), dir.join("cert.pem")).expect("cert");
    std::fs::write(dir.join("ca.pem"), &certs.ca_pem).expect("ca");
}

/// A site whose one listener is TLS, with a certificate of `serial`:
/// `server` and `site` are more keys for `[server]` and `[[site]]`.
fn tls_site(serial: u64, server: &str, site: &str) -> (tempfile::TempDir, Certs) {
    let dir = self::site();
    let certs = make_certs(serial);
    write_certs(dir.path(), &certs);
    std::fs::write(
        dir.path().join("swan.toml"),
        format!(
            "[server]\nlisten = [{{ addr = \"127.0.0.1:0\", tls = true }}]\n{server}\
             [server.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\n\
             [[site]]\nroot = \"www\"\n{site}"
        ),
    )
    .expect("config");
    (dir, certs)
}

/// curl's answer: (HTTP version, status, headers + body).
fn curl(dir: &Path, args: &[&str], url: &str) -> (String, u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(dir.join("ca.pem"))
        .args(["-D", "-", "-w", "\n%{http_version} %{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl (scripts/setup installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "curl failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (rest, last) = text.rsplit_once('\n').unwrap_or(("", ""));
    let mut words = last.split_whitespace();
    let version = words.next().unwrap_or("").to_owned();
    let status = words.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (version, status, rest.to_owned())
}

/// A TLS connection to `addr` as `localhost`, trusting `cas`, offering
/// `alpn` (nothing when empty).
async fn connect(
    addr: &str,
    cas: &[&CertificateDer<'static>],
    alpn: &[&[u8]],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for ca in cas {
        roots.add((*ca).clone()).expect("root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    connector
        .connect(ServerName::try_from("localhost").expect("name"), tcp)
        .await
        .expect("handshake")
}

/// A Rust client's view: the leaf certificate the server presented, the
/// ALPN protocol, and the answer to GET `path` over it.
async fn rust_client(
    addr: &str,
    cas: &[&CertificateDer<'static>],
    path: &str,
) -> (CertificateDer<'static>, Vec<u8>, u16, String) {
    let tls = connect(addr, cas, &[b"h2", b"http/1.1"]).await;
    let (_, session) = tls.get_ref();
    let leaf = session.peer_certificates().expect("certificates")[0].clone();
    let alpn = session.alpn_protocol().unwrap_or_default().to_vec();
    let io = hyper_util::rt::TokioIo::new(tls);
    let request = http::Request::get(format!("https://localhost{path}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .expect("request");
    let response = if alpn == b"h2" {
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), io)
                .await
                .expect("h2");
        tokio::spawn(conn);
        send.send_request(request).await.expect("response")
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await.expect("h1");
        tokio::spawn(conn);
        send.send_request(request).await.expect("response")
    };
    let status = response.status().as_u16();
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("body")
        .to_bytes();
    (
        leaf,
        alpn,
        status,
        String::from_utf8_lossy(&body).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_h2_and_http1_reloads_its_certificate_and_redirects_plain_http() {
    let dir = site();
    let first = make_certs(1);
    write_certs(dir.path(), &first);
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true }]\n\
         [server.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\nredirect_http = true\nhsts = \"max-age=600\"\n\
         [server.proxy]\ntrusted = [\"127.0.0.1\"]\n[[site]]\nroot = \"www\"\n",
    )
    .expect("config");
    let s = start(dir.path(), &[], false);
    let (plain, tls) = (s.urls[0].clone(), s.urls[1].clone());
    let port = tls.rsplit(':').next().unwrap_or("").to_owned();
    let url = format!("https://localhost:{port}/");
    let resolve = format!("localhost:{port}:127.0.0.1");

    // curl, HTTP/2 and HTTP/1.1 over ALPN.
    let (version, status, text) = curl(dir.path(), &["--http2", "--resolve", &resolve], &url);
    assert_eq!((version.as_str(), status), ("2", 200), "{text}");
    assert!(text.contains("cli hello"));
    assert!(
        text.to_ascii_lowercase()
            .contains("strict-transport-security: max-age=600"),
        "{text}"
    );
    let (version, status, _) = curl(dir.path(), &["--http1.1", "--resolve", &resolve], &url);
    assert_eq!((version.as_str(), status), ("1.1", 200));

    // A Rust client sees the first certificate and negotiates h2.
    let (leaf, alpn, status, body) = rust_client(&tls, &[&first.ca_der], "/").await;
    assert_eq!(leaf, first.leaf_der);
    assert_eq!(alpn, b"h2");
    assert_eq!((status, body.as_str()), (200, "cli hello"));

    // Plain HTTP redirects to the TLS listener, path and query kept; no HSTS
    // on plain HTTP.
    let reply = raw(
        &plain,
        b"GET /a/b?c=d HTTP/1.1\r\nHost: localhost:8080\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&reply), 308, "{reply}");
    assert!(
        reply.contains(&format!("location: https://localhost:{port}/a/b?c=d")),
        "{reply}"
    );
    assert!(
        !reply
            .to_ascii_lowercase()
            .contains("strict-transport-security")
    );
    // Raw bytes past ASCII in the target (hyper lets them in) go into the
    // Location percent-encoded: a URI is ASCII.
    let reply = raw(
        &plain,
        b"GET /caf\xc3\xa9?q=\xc3\xa9 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&reply), 308, "{reply}");
    assert!(
        reply.contains(&format!(
            "location: https://localhost:{port}/caf%C3%A9?q=%C3%A9\r\n"
        )),
        "{reply}"
    );
    // `OPTIONS *` has no path: its Location is the site's root.
    let reply = raw(
        &plain,
        b"OPTIONS * HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(status_of(&reply), 308, "{reply}");
    assert!(
        reply.contains(&format!("location: https://localhost:{port}/\r\n")),
        "{reply}"
    );
    // A request that came over TLS is never redirected, even when a
    // trusted proxy says its client used plain HTTP (it would loop).
    let (_, reply, _) = raw_tls(
        &tls,
        &first.ca_der,
        &[b"http/1.1"],
        b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-Proto: http\r\nConnection: close\r\n\r\n",
        usize::MAX,
    )
    .await;
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    // A Host that would be refused without the redirect is refused with
    // it too (never reflected into a Location), and a request without a
    // Host cannot be redirected: 400, not served over plain HTTP.
    for request in [
        &b"GET /p HTTP/1.1\r\nHost: evil.com/x\r\nConnection: close\r\n\r\n"[..],
        b"GET /p HTTP/1.1\r\nHost: ::1\r\nConnection: close\r\n\r\n",
        b"GET /p HTTP/1.1\r\nHost: a.com\r\nHost: b.com\r\nConnection: close\r\n\r\n",
        b"GET http://evil.com/p HTTP/1.1\r\nHost: good.com\r\nConnection: close\r\n\r\n",
        b"GET /p HTTP/1.0\r\n\r\n",
    ] {
        let reply = raw(&plain, request);
        assert_eq!(status_of(&reply), 400, "{reply}");
        assert!(!reply.to_ascii_lowercase().contains("location:"), "{reply}");
    }

    // New files: new handshakes get the new certificate within seconds,
    // and connections never fail meanwhile.
    let second = make_certs(2);
    write_certs(dir.path(), &second);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reloaded = false;
    while Instant::now() < deadline {
        let (leaf, _, status, _) = rust_client(&tls, &[&first.ca_der, &second.ca_der], "/").await;
        assert_eq!(status, 200);
        if leaf == second.leaf_der {
            reloaded = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reloaded, "the new certificate was never served");

    // Plain HTTP sent to the TLS port gets a 400 that says why.
    let plain_to_tls = raw(&tls, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(status_of(&plain_to_tls), 400);
    // An expired pair is refused too: clients would refuse it.
    let expired = make_certs_valid(3, true);
    write_certs(dir.path(), &expired);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (leaf, _, status, _) = rust_client(&tls, &[&second.ca_der], "/").await;
    assert_eq!((leaf, status), (second.leaf_der.clone(), 200));
    // A broken pair is refused; the working certificate keeps serving.
    std::fs::write(dir.path().join("key.pem"), "not a key").expect("break");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (leaf, _, status, _) = rust_client(&tls, &[&second.ca_der], "/").await;
    assert_eq!((leaf, status), (second.leaf_der.clone(), 200));
    // A renewal written a few seconds before its start is refused, then
    // served once its start has passed, with no further change to its files.
    let now = time::OffsetDateTime::now_utc();
    let early = make_certs_dated(
        4,
        Some((
            now + time::Duration::seconds(3),
            now + time::Duration::days(30),
        )),
    );
    write_certs(dir.path(), &early);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (leaf, _, status, _) = rust_client(&tls, &[&second.ca_der], "/").await;
    assert_eq!((leaf, status), (second.leaf_der.clone(), 200));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut renewed = false;
    while Instant::now() < deadline && !renewed {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (leaf, _, _, _) = rust_client(&tls, &[&second.ca_der, &early.ca_der], "/").await;
        renewed = leaf == early.leaf_der;
    }
    assert!(renewed, "the renewal was never served once valid");
    // A renewal written before its start, then rolled back before it: the
    // files changed, so the pair waiting for its start never serves.
    let now = time::OffsetDateTime::now_utc();
    let late = make_certs_dated(
        5,
        Some((
            now + time::Duration::seconds(4),
            now + time::Duration::days(30),
        )),
    );
    write_certs(dir.path(), &late);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    write_certs(dir.path(), &second);
    let cas = [&second.ca_der, &early.ca_der, &late.ca_der];
    let deadline = Instant::now() + Duration::from_secs(10);
    while rust_client(&tls, &cas, "/").await.0 != second.leaf_der {
        assert!(Instant::now() < deadline, "the rollback was never served");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Past the late pair's start, with time for the watcher to look.
    let start = now + time::Duration::seconds(4);
    let wait = (start - time::OffsetDateTime::now_utc())
        .whole_milliseconds()
        .max(0) as u64;
    tokio::time::sleep(Duration::from_millis(wait + 2500)).await;
    let (leaf, _, status, _) = rust_client(&tls, &cas, "/").await;
    assert_eq!(
        (leaf, status),
        (second.leaf_der.clone(), 200),
        "a pair no longer on disk was swapped in"
    );
    let log = stop(s.child);
    assert!(log.contains("TLS certificate reloaded"), "{log}");
    assert!(log.contains("TLS certificate change refused"), "{log}");
    assert!(log.contains("the new certificate expired on"), "{log}");
    assert!(log.contains("is not valid before"), "{log}");
    // `swan check` says when a valid certificate expires, and warns about
    // an expired one.
    write_certs(dir.path(), &second);
    let out = support::swan()
        .current_dir(dir.path())
        .arg("check")
        .output()
        .expect("check");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("(expires "),
        "{out:?}"
    );
    write_certs(dir.path(), &expired);
    let out = support::swan()
        .current_dir(dir.path())
        .arg("check")
        .output()
        .expect("check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("warning: the TLS certificate") && err.contains("expired on"),
        "{err}"
    );
}

/// Sends `request` over TLS offering `alpn` (none when empty), in two
/// writes split at `split` with a pause between them, and reads the reply
/// until the server closes or sends nothing for 2 s: (the negotiated
/// protocol, the reply, whether the server closed).
async fn raw_tls(
    addr: &str,
    ca: &CertificateDer<'static>,
    alpn: &[&[u8]],
    request: &[u8],
    split: usize,
) -> (Vec<u8>, Vec<u8>, bool) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = connect(addr, &[ca], alpn).await;
    let negotiated = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    let (first, rest) = request.split_at(split.min(request.len()));
    let mut reply = Vec::new();
    // The server may refuse (and close) after the first part.
    if tls.write_all(first).await.is_ok() {
        tls.flush().await.ok();
        tokio::time::sleep(Duration::from_millis(100)).await;
        if tls.write_all(rest).await.is_ok() {
            tls.flush().await.ok();
        }
    }
    let mut buf = [0u8; 16384];
    loop {
        match tokio::time::timeout(Duration::from_secs(2), tls.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return (negotiated, reply, true),
            Ok(Ok(n)) => reply.extend_from_slice(&buf[..n]),
            Err(_) => return (negotiated, reply, false),
        }
    }
}

/// HTTP/1.1 negotiated by ALPN holds `max_header_bytes` exactly, however
/// the head arrives; a client without ALPN is still served either
/// protocol, told apart by its first bytes; one that chose `h2` is held
/// to it. Plain HTTP sent to the port gets a 400 that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_http1_holds_the_head_limit_and_clients_without_alpn_are_served() {
    let (dir, certs) = tls_site(7, "max_header_bytes = 131072\n", "");
    let s = start(dir.path(), &[], false);
    let tls = s.urls[0].clone();
    let head = |filler: usize| {
        format!(
            "GET / HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\nConnection: close\r\n\r\n",
            "b".repeat(filler)
        )
        .into_bytes()
    };
    // The head's fixed part is 63 bytes: 131,009 filler bytes make 131,072.
    for (filler, split, status) in [
        (131_009, 131_000, "200"),
        (131_010, 131_000, "431"),
        (131_010, 65_536, "431"),
        (131_020, 131_071, "431"),
        (140_000, 131_000, "431"),
    ] {
        let request = head(filler);
        for alpn in [&[&b"http/1.1"[..]][..], &[][..]] {
            let (negotiated, reply, closed) =
                raw_tls(&tls, &certs.ca_der, alpn, &request, split).await;
            assert!(closed, "{filler} bytes: the connection stayed open");
            if !alpn.is_empty() {
                assert_eq!(negotiated, b"http/1.1");
            }
            let reply = String::from_utf8_lossy(&reply);
            assert!(
                reply.starts_with(&format!("HTTP/1.1 {status} ")),
                "{filler} bytes, split at {split}, ALPN {alpn:?}: {}",
                &reply[..reply.len().min(80)]
            );
        }
    }
    // A client offering only `http/1.0` by ALPN (`curl -0`) is served.
    let (negotiated, reply, _) = raw_tls(
        &tls,
        &certs.ca_der,
        &[b"http/1.0"],
        b"GET / HTTP/1.0\r\nHost: localhost\r\n\r\n",
        usize::MAX,
    )
    .await;
    assert_eq!(negotiated, b"http/1.0");
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.0 200 "), "{reply}");
    // HTTP/2 with prior knowledge and no ALPN: the server's SETTINGS
    // come back.
    let (negotiated, reply, _) = raw_tls(
        &tls,
        &certs.ca_der,
        &[],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0",
        usize::MAX,
    )
    .await;
    assert!(negotiated.is_empty());
    assert_eq!(reply.get(3), Some(&4), "a SETTINGS frame: {reply:?}");
    // A client that chose `h2` by ALPN and then sends HTTP/1.1 gets no
    // HTTP/1 answer: the connection is closed as an HTTP/2 protocol error.
    let (negotiated, reply, closed) = raw_tls(
        &tls,
        &certs.ca_der,
        &[b"h2"],
        b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        usize::MAX,
    )
    .await;
    assert_eq!(negotiated, b"h2");
    assert!(closed, "the connection stayed open");
    assert!(
        !String::from_utf8_lossy(&reply).contains("HTTP/1"),
        "an HTTP/1 answer after ALPN h2: {reply:?}"
    );
    // The same client speaking HTTP/2 is served.
    let (negotiated, reply, _) = raw_tls(
        &tls,
        &certs.ca_der,
        &[b"h2"],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0",
        usize::MAX,
    )
    .await;
    assert_eq!(negotiated, b"h2");
    assert_eq!(reply.get(3), Some(&4), "a SETTINGS frame: {reply:?}");
    // Plain HTTP to the HTTPS port (`http://` by mistake) gets a 400 that
    // says so, not a TLS alert; also with a body it does not wait for,
    // and from curl. TLS clients are served on as before.
    let tls_addr = tls.clone();
    let plain_replies = tokio::task::spawn_blocking(move || {
        let mut replies = vec![
            raw(&tls_addr, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n"),
            raw(&tls_addr, b"HEAD / HTTP/1.0\r\n\r\n"),
        ];
        let mut upload =
            b"POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 300000\r\n\r\n".to_vec();
        upload.extend(std::iter::repeat_n(b'u', 300_000));
        replies.push(raw(&tls_addr, &upload));
        let curl = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .arg(format!("http://{tls_addr}/"))
            .output()
            .expect("curl");
        (replies, String::from_utf8_lossy(&curl.stdout).into_owned())
    })
    .await
    .expect("plain clients");
    for reply in &plain_replies.0 {
        assert_eq!(status_of(reply), 400, "{reply}");
        assert!(
            reply.contains("plain HTTP request was sent to an HTTPS port"),
            "{reply}"
        );
        assert!(
            reply.to_ascii_lowercase().contains("server: swan"),
            "{reply}"
        );
    }
    assert_eq!(plain_replies.1, "400");
    let (_, reply, _) = raw_tls(
        &tls,
        &certs.ca_der,
        &[b"http/1.1"],
        b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        usize::MAX,
    )
    .await;
    assert!(reply.starts_with(b"HTTP/1.1 200 "), "{reply:?}");
    stop(s.child);
}

/// A TLS client that stops reading a large download is dropped after
/// `send_timeout`, as on plain TCP: progress is what the socket takes, not
/// what rustls buffers (counted there, it took twice `send_timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_client_that_stops_reading_is_dropped_after_send_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (dir, certs) = tls_site(9, "send_timeout = \"2s\"\n", "");
    std::fs::write(dir.path().join("www/big.bin"), vec![b'b'; 48 << 20]).expect("big");
    let s = start(dir.path(), &[], false);
    let mut tls = connect(&s.urls[0], &[&certs.ca_der], &[b"http/1.1"]).await;
    tls.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("request");
    let mut first = [0u8; 100];
    tls.read_exact(&mut first).await.expect("first bytes");
    assert!(first.starts_with(b"HTTP/1.1 200"));
    // Stop reading until the server gives up: then what is left in the
    // socket's buffers drains, and the stream ends.
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let mut sink = vec![0u8; 1 << 20];
    let mut drained = 0usize;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match tls.read(&mut sink).await {
                Ok(0) => break Ok(()),
                Err(e) => break Err(e.kind()),
                Ok(n) => drained += n,
            }
        }
    })
    .await;
    // Cut off: a reset, as on plain TCP, never an end that looks whole.
    assert_eq!(
        ended.expect("the connection was never dropped"),
        Err(std::io::ErrorKind::ConnectionReset)
    );
    assert!(
        drained < 40 << 20,
        "{drained} bytes after a stop of {:?}: the download went on",
        stopped.elapsed()
    );
    stop(s.child);
}

/// A loop: the request runs until its servlet's `timeout`.
const SPIN: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (loop $l (br $l)) i32.const 0))"#;

/// HTTPS with HTTP/1.1: a client that leaves while its servlet runs (a
/// TLS close, a close without one, a reset) is noticed without a write,
/// as on a plain listener: the servlet stops long before its `timeout`,
/// its only `max_concurrency` place goes to the next client, and the
/// line says 499.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_client_that_leaves_while_its_servlet_runs_is_a_499() {
    use tokio::io::AsyncWriteExt;
    let dir = site();
    let certs = make_certs(7);
    write_certs(dir.path(), &certs);
    std::fs::create_dir(dir.path().join("servlets")).expect("servlets");
    std::fs::create_dir(dir.path().join("logs")).expect("logs");
    std::fs::write(
        dir.path().join("servlets/spin.wasm"),
        wat::parse_str(SPIN).expect("spin"),
    )
    .expect("spin");
    std::fs::write(
        dir.path().join("swan.toml"),
        "[server]\nlisten = [{ addr = \"127.0.0.1:0\", tls = true }]\n\
         [server.tls]\ncert = \"cert.pem\"\nkey = \"key.pem\"\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [log]\naccess = \"logs/access.log\"\nformat = \"json\"\n\
         [[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
         [site.servlet]\ntimeout = \"5s\"\nmax_concurrency = 1\nqueue_timeout = \"4s\"\n",
    )
    .expect("config");
    let s = start(dir.path(), &[], true);
    let (addr, admin) = (s.urls[0].clone(), s.admin.clone().expect("admin"));
    let log = dir.path().join("logs/access.log");
    for (n, how) in ["close_notify", "close", "reset"].iter().enumerate() {
        let mut tls = connect(&addr, &[&certs.ca_der], &[b"http/1.1"]).await;
        tls.write_all(b"GET /spin HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .expect("request");
        tokio::time::sleep(Duration::from_millis(300)).await;
        match *how {
            "close_notify" => tls.shutdown().await.expect("close_notify"),
            "reset" => socket2::SockRef::from(tls.get_ref().0)
                .set_linger(Some(Duration::ZERO))
                .expect("linger"),
            _ => {}
        }
        drop(tls);
        let lines = log_lines(&log, n + 1).await;
        let line: serde_json::Value = serde_json::from_str(&lines[n]).expect("a JSON line");
        assert_eq!(line["status"], 499, "{how}: {lines:?}");
        let ms = line["duration_ms"].as_f64().expect("duration");
        assert!(
            ms < 2500.0,
            "{how}: stopped after {ms} ms, its timeout is 5 s"
        );
        // Its place is free: nothing of the spin servlet runs any more.
        let metrics = support::get(&admin, "/metrics");
        let running = support::sample(
            &metrics,
            "swan_servlet_requests_in_flight",
            &["route=\"/spin/*\""],
        );
        assert_eq!(running, Some(0.0), "{how}: {metrics}");
    }
    // Plain HTTP to the HTTPS port: its 400 gets a line too, as every head
    // refused before a site saw it does (it had none).
    let plain_addr = addr.clone();
    let reply = tokio::task::spawn_blocking(move || {
        raw(
            &plain_addr,
            b"GET /plain HTTP/1.1\r\nHost: localhost\r\n\r\n",
        )
    })
    .await
    .expect("plain client");
    assert_eq!(status_of(&reply), 400, "{reply}");
    let lines = log_lines(&log, 4).await;
    let line: serde_json::Value =
        serde_json::from_str(lines.get(3).map_or("", String::as_str)).expect("a JSON line");
    assert_eq!(line["status"], 400, "{lines:?}");
    assert_eq!(line["site"], "-", "{lines:?}");
    stop(s.child);
}

/// The access log's lines once it has `n` (or what it has after 10 s).
async fn log_lines(log: &Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_owned).collect();
        if lines.len() >= n || Instant::now() > deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A response cut off part-way (here: a file streamed from disk truncated
/// during its download) over TLS and HTTP/1.0, whose body ends where the
/// connection does: the connection ends with a reset, as on plain TCP, so
/// every client sees the body is incomplete. Before, it ended with a FIN
/// (no close_notify), which curl takes for a complete body. With and
/// without ALPN (which take different paths).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_cut_off_over_tls_does_not_end_cleanly() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (dir, certs) = tls_site(11, "", "[site.cache]\nmax_file_size = \"64 KiB\"\n");
    // Sparse: 256 MiB of zeros each, streamed (past max_file_size).
    let size: u64 = 256 << 20;
    for n in 0..2 {
        std::fs::File::create(dir.path().join(format!("www/big{n}.bin")))
            .and_then(|f| f.set_len(size))
            .expect("big file");
    }
    let s = start(dir.path(), &[], false);
    let tls_addr = s.urls[0].clone();
    for (n, alpn) in [&[&b"http/1.1"[..]][..], &[][..]].into_iter().enumerate() {
        let big = dir.path().join(format!("www/big{n}.bin"));
        let mut tls = connect(&tls_addr, &[&certs.ca_der], alpn).await;
        tls.write_all(format!("GET /big{n}.bin HTTP/1.0\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .expect("request");
        let mut got = 0u64;
        let mut buf = vec![0u8; 64 << 10];
        // Some of the body, then the file shrinks under the download.
        while got < 1 << 20 {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => panic!("ended early, after {got} bytes"),
                Ok(n) => got += n as u64,
            }
        }
        std::fs::File::options()
            .write(true)
            .open(&big)
            .and_then(|f| f.set_len(2 << 20))
            .expect("truncate");
        let ended = loop {
            match tokio::time::timeout(Duration::from_secs(10), tls.read(&mut buf)).await {
                Ok(Ok(0)) => break Ok(()),
                Ok(Ok(n)) => got += n as u64,
                Ok(Err(e)) => break Err(e),
                Err(_) => panic!("no end within 10 s (ALPN {alpn:?})"),
            }
        };
        assert!(got < size, "the whole file came (ALPN {alpn:?})");
        // A reset, as on plain TCP: curl forgives a missing close_notify
        // after a close-delimited body, not a reset.
        assert_eq!(
            ended.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::ConnectionReset),
            "a cut-off body ended cleanly after {got} bytes (ALPN {alpn:?})"
        );
    }
    stop(s.child);
}

/// An upload over the body limit gets its 413 over HTTPS as over plain
/// TCP: after the answer swan reads on and throws the rest away (a
/// lingering close) instead of closing on unread bytes, which makes the
/// kernel send a reset that can destroy the answer before curl reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_upload_over_the_limit_gets_its_413() {
    let (dir, _certs) = tls_site(11, "max_body_bytes = \"64 KiB\"\n", "");
    let s = start(dir.path(), &[], false);
    let port = s.urls[0].rsplit(':').next().unwrap_or("").to_owned();
    let url = format!("https://localhost:{port}/");
    let resolve = format!("localhost:{port}:127.0.0.1");
    for size in [100_000, 1 << 20, 5 << 20] {
        let body = dir.path().join(format!("upload-{size}"));
        std::fs::write(&body, vec![b'u'; size]).expect("body");
        let data = format!("@{}", body.display());
        for protocol in ["--http1.1", "--http2"] {
            // No `Expect: 100-continue`: the body follows the head at once.
            let args = [
                protocol,
                "-H",
                "Expect:",
                "--data-binary",
                &data,
                "--resolve",
                &resolve,
            ];
            for _ in 0..3 {
                let (_, status, text) = curl(dir.path(), &args, &url);
                assert_eq!(status, 413, "{size} bytes, {protocol}: {text}");
            }
        }
    }
    let (code, log) = stop_with_code(s.child);
    assert_eq!(code, Some(0), "{log}");
}

/// At `max_connections`, an HTTP/1.1 connection over TLS idle between
/// requests (for half a second, as a plain one before it parks) closes to
/// make room for a new client, who would otherwise wait out the idle one's
/// `keepalive_timeout`; only one closes for one new client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_limit_an_idle_tls_keep_alive_connection_makes_room() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (dir, certs) = tls_site(9, "max_connections = 2\nkeepalive_timeout = \"60s\"\n", "");
    let s = start(dir.path(), &[], false);
    let addr = s.urls[0].clone();
    let alpn: &[&[u8]] = &[b"http/1.1"];
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut tls = connect(&addr, &[&certs.ca_der], alpn).await;
        tls.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .await
            .expect("write");
        let mut buf = vec![0u8; 4096];
        let n = tls.read(&mut buf).await.expect("read");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        idle.push(tls);
    }
    let started = std::time::Instant::now();
    let (_, reply, _) = raw_tls(
        &addr,
        &certs.ca_der,
        alpn,
        b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
        usize::MAX,
    )
    .await;
    assert!(
        reply.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let mut closed = 0;
    for tls in &mut idle {
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(500), tls.read(&mut buf)).await
        {
            closed += 1;
        }
    }
    assert_eq!(closed, 1, "one idle connection closes for the new one");
    stop(s.child);
}

/// Ciphertext trickled a byte at a time never makes a whole record: it is
/// not a request on its way, and keeps no connection past
/// `header_read_timeout` (raw reads count only when picking an idle
/// connection to close for room, never for the timeouts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_ciphertext_does_not_keep_a_connection_open() {
    use std::io::Write;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (dir, certs) = tls_site(10, "header_read_timeout = \"2s\"\n", "");
    let s = start(dir.path(), &[], false);
    let tls = connect(&s.urls[0], &[&certs.ca_der], &[b"http/1.1"]).await;
    let (mut tcp, mut client) = tls.into_inner();
    client
        .writer()
        .write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .expect("plaintext");
    let mut record = Vec::new();
    client.write_tls(&mut record).expect("record");
    let started = Instant::now();
    let mut closed_after = None;
    // One byte every 300 ms, never the whole record (at most 6 s).
    for byte in record.iter().take(20) {
        if tcp.write_all(&[*byte]).await.is_err() {
            closed_after = Some(started.elapsed());
            break;
        }
        let mut buf = [0u8; 64];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(300), tcp.read(&mut buf)).await
        {
            closed_after = Some(started.elapsed());
            break;
        }
    }
    let closed_after = closed_after.expect("the trickling connection stayed open");
    assert!(closed_after < Duration::from_secs(4), "{closed_after:?}");
    stop(s.child);
}
