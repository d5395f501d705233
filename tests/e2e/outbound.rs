//! Outbound HTTP from servlets: denied by default, allowed per route by
//! scheme, host and port, never to a private address by name, with
//! timeouts and a cap on requests in flight. The upstream is a hyper server
//! the test starts on 127.0.0.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use swan_tests::{TestServer, TestSite};

/// An upstream on 127.0.0.1: `/slow` waits 3 s before answering,
/// `/dribble` sends `first`, waits 2 s, then `second`; anything else
/// answers at once.
async fn upstream() -> Result<SocketAddr> {
    upstream_on("127.0.0.1:0").await
}

async fn upstream_on(addr: &str) -> Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let svc = service_fn(|req: Request<hyper::body::Incoming>| async move {
                    if req.uri().path() == "/slow" {
                        tokio::time::sleep(Duration::from_secs(3)).await;
                    }
                    if req.uri().path() == "/slower" {
                        tokio::time::sleep(Duration::from_secs(6)).await;
                    }
                    if req.uri().path() == "/echo-host"
                        || req.uri().path() == "/" && req.uri().query().is_some()
                    {
                        let host = req
                            .headers()
                            .get_all(http::header::HOST)
                            .iter()
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                            .collect::<Vec<_>>()
                            .join(",");
                        let seen = format!("host={host} target={}", req.uri());
                        return Ok(Response::new(http_body_util::Either::Right(Full::new(
                            Bytes::from(seen),
                        ))));
                    }
                    if req.uri().path() == "/dribble" {
                        let (tx, rx) = tokio::sync::mpsc::channel::<
                            Result<hyper::body::Frame<Bytes>, Infallible>,
                        >(2);
                        tokio::spawn(async move {
                            let _ = tx
                                .send(Ok(hyper::body::Frame::data(Bytes::from("first "))))
                                .await;
                            tokio::time::sleep(Duration::from_secs(2)).await;
                            let _ = tx
                                .send(Ok(hyper::body::Frame::data(Bytes::from("second"))))
                                .await;
                        });
                        return Ok::<_, Infallible>(Response::new(http_body_util::Either::Left(
                            Channel(rx),
                        )));
                    }
                    Ok(Response::new(http_body_util::Either::Right(Full::new(
                        Bytes::from("upstream says hi"),
                    ))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

/// A body whose frames come from a channel.
struct Channel(tokio::sync::mpsc::Receiver<Result<hyper::body::Frame<Bytes>, Infallible>>);

impl http_body::Body for Channel {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.0.poll_recv(cx)
    }
}

/// A site routing `/f/*` to the faults component with `route_toml` keys.
async fn start(route_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    let file = site.file(
        "faults.wasm",
        std::fs::read(swan_tests::guest("faults-component", "wasm32-wasip2")?)?,
    )?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 32\n[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/f/*\"\nservlet = {:?}\nprewarm = 2\ntimeout = \"5s\"\n{route_toml}\n",
        file.display().to_string()
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

/// Fetching `url` (which answers after 3 s) ends in an error well before.
async fn fails_quickly(server: &TestServer, url: &str) -> Result<()> {
    let started = std::time::Instant::now();
    let answer = fetch(server, url).await?;
    assert!(answer.starts_with("error:"), "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

async fn fetch(server: &TestServer, url: &str) -> Result<String> {
    Ok(server.get(&format!("/f/fetch?url={url}")).await?.text())
}

#[tokio::test]
async fn outbound_requests_are_denied_unless_the_route_allows_them() -> Result<()> {
    let up = upstream().await?;
    let (_site, server) = start("").await?;
    let answer = fetch(&server, &format!("http://{up}/")).await?;
    assert!(answer.contains("HttpRequestDenied"), "{answer}");
    Ok(())
}

#[tokio::test]
async fn an_allowed_address_is_reached_and_others_are_not() -> Result<()> {
    let up = upstream().await?;
    let (_site, server) = start(&format!("allowed_outbound_hosts = [\"http://{up}\"]")).await?;
    assert_eq!(
        fetch(&server, &format!("http://{up}/")).await?,
        "200 upstream says hi"
    );
    // Another port, another scheme: denied.
    let other = format!("http://127.0.0.1:{}/", up.port() + 1);
    assert!(fetch(&server, &other).await?.contains("HttpRequestDenied"));
    let tls = format!("https://{up}/");
    assert!(fetch(&server, &tls).await?.contains("HttpRequestDenied"));
    drop(server);
    // An IPv6 address is one rule however it is written, on either side.
    let up6 = upstream_on("[::1]:0").await?;
    let (_site, server) = start(&format!(
        "allowed_outbound_hosts = [\"http://[0:0:0:0:0:0:0:1]:{}\"]",
        up6.port()
    ))
    .await?;
    for written in ["[::1]", "[0:0::1]"] {
        assert_eq!(
            fetch(&server, &format!("http://{written}:{}/", up6.port())).await?,
            "200 upstream says hi",
            "{written}"
        );
    }
    Ok(())
}

/// The guest's own between-bytes timeout cuts a body that stalls; without
/// one the body arrives whole.
#[tokio::test]
async fn a_between_bytes_timeout_the_guest_sets_holds() -> Result<()> {
    let up = upstream().await?;
    let (_site, server) = start(&format!("allowed_outbound_hosts = [\"http://{up}\"]")).await?;
    let url = format!("http://{up}/dribble");
    assert_eq!(fetch(&server, &url).await?, "200 first second");
    let started = std::time::Instant::now();
    let cut = fetch(&server, &format!("{url}&bb=500")).await?;
    assert_eq!(cut, "200 first  (body failed)");
    assert!(
        started.elapsed() < Duration::from_millis(1800),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn a_name_resolving_to_a_private_address_is_refused_unless_allowed() -> Result<()> {
    let up = upstream().await?;
    let name = format!("http://localhost:{}", up.port());
    // Allowed by name, but the name resolves to loopback.
    let (_site, server) = start(&format!("allowed_outbound_hosts = [\"{name}\"]")).await?;
    let answer = fetch(&server, &format!("{name}/")).await?;
    assert!(answer.contains("DestinationIpProhibited"), "{answer}");
    drop(server);
    // A wildcard does not name an address either.
    let (_site, server) = start("allowed_outbound_hosts = [\"http://*:*\"]").await?;
    let answer = fetch(&server, &format!("http://{up}/")).await?;
    assert!(answer.contains("DestinationIpProhibited"), "{answer}");
    drop(server);
    // Explicitly allowed.
    let (_site, server) = start(&format!(
        "allowed_outbound_hosts = [\"{name}\"]\noutbound_private = true"
    ))
    .await?;
    assert_eq!(
        fetch(&server, &format!("{name}/")).await?,
        "200 upstream says hi"
    );
    Ok(())
}

#[tokio::test]
async fn outbound_timeouts_and_the_in_flight_cap_hold() -> Result<()> {
    let up = upstream().await?;
    let (_site, server) = start(&format!(
        "allowed_outbound_hosts = [\"http://{up}\"]\noutbound_first_byte_timeout = \"300ms\"\nmax_outbound_concurrency = 1"
    ))
    .await?;
    fails_quickly(&server, &format!("http://{up}/slow")).await?;
    // One slow request in flight: a second one is refused at once.
    let slow = server.spawn_get(&format!("/f/fetch?url=http://{up}/slow"));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = fetch(&server, &format!("http://{up}/")).await?;
    assert!(answer.contains("ConnectionLimitReached"), "{answer}");
    let _ = slow.await?;
    assert_eq!(
        fetch(&server, &format!("http://{up}/")).await?,
        "200 upstream says hi"
    );
    Ok(())
}

/// A hot reload does not hand the new version a cap of its own: a request
/// the old version still has in flight counts against the new one's
/// `max_outbound_concurrency` too.
#[tokio::test]
async fn the_in_flight_cap_holds_across_a_hot_reload() -> Result<()> {
    swan_tests::init_logs();
    let up = upstream().await?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    let module = std::fs::read(swan_tests::guest("faults-component", "wasm32-wasip2")?)?;
    site.file("servlets/f.wasm", &module)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 32\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n\
         [site.servlet]\nprewarm = 1\ntimeout = \"20s\"\nallowed_outbound_hosts = [\"http://{up}\"]\nmax_outbound_concurrency = 1\n"
    ))?;
    let server = TestServer::start_watching(config).await?;
    let serving = |server: &TestServer| {
        server
            .app()
            .sites
            .load()
            .iter()
            .next()
            .and_then(|s| s.servlets.servlet_at("/f").cloned())
    };
    let first = serving(&server).expect("route");
    let slow = server.spawn_get(&format!("/f/fetch?url=http://{up}/slower"));
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A new version of the file goes live while the slow one is in flight.
    site.file("servlets/f.wasm", &module)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while serving(&server).is_some_and(|s| Arc::ptr_eq(&s, &first)) {
        anyhow::ensure!(std::time::Instant::now() < deadline, "never reloaded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !slow.is_finished(),
        "the slow request ended before the reload"
    );
    let answer = server
        .get(&format!("/f/fetch?url=http://{up}/"))
        .await?
        .text();
    assert!(answer.contains("ConnectionLimitReached"), "{answer}");
    let _ = slow.await?;
    assert_eq!(
        server
            .get(&format!("/f/fetch?url=http://{up}/"))
            .await?
            .text(),
        "200 upstream says hi"
    );
    Ok(())
}

#[test]
fn malformed_outbound_rules_are_configuration_errors() -> Result<()> {
    let site = TestSite::new()?;
    site.dir("www")?;
    site.file("x.wasm", b"")?;
    for (rule, expect) in [
        ("api.example.com", "has no scheme"),
        ("ftp://api.example.com", "scheme must be"),
        ("https://api.example.com/path", "only scheme://host[:port]"),
        ("https://a.*.example.com", "`*` may only be"),
        ("https://api.example.com:99999", "is not a port"),
        ("https://api.example.com:0", "is not a port"),
        ("http://exa mple.com", "is not a host name"),
        ("http://a..com", "is not a host name"),
        ("https://*.", "is not a host name"),
        ("http://[zz]", "is not an IPv6 address"),
    ] {
        let err = match site.config(&format!(
            "[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/x\"\nservlet = \"x.wasm\"\nallowed_outbound_hosts = [\"{rule}\"]\n"
        )) {
            Ok(_) => anyhow::bail!("{rule} accepted"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("allowed_outbound_hosts[0]"), "{rule}: {err}");
        assert!(err.contains(expect), "{rule}: {err}");
    }
    Ok(())
}

/// A native servlet that GETs the URL in its `URL` setting with the ABI's
/// `http_send` and answers `STATUS BODY` (STATUS negative on an error).
const NATIVE_FETCH: &str = r#"(module
  (import "swan" "setting" (func $setting (param i32 i32 i32 i32) (result i32)))
  (import "swan" "http_send" (func $send (param i32 i32) (result i32)))
  (import "swan" "http_response_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 2)
  (data (i32.const 900) "URL")
  (data (i32.const 1000) "GET ")
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func $number (param $v i32) (local $p i32) (local $neg i32)
    (if (i32.lt_s (local.get $v) (i32.const 0))
      (then (local.set $neg (i32.const 1)) (local.set $v (i32.sub (i32.const 0) (local.get $v)))))
    (local.set $p (i32.const 600))
    (loop $d
      (local.set $p (i32.sub (local.get $p) (i32.const 1)))
      (i32.store8 (local.get $p) (i32.add (i32.const 48) (i32.rem_u (local.get $v) (i32.const 10))))
      (local.set $v (i32.div_u (local.get $v) (i32.const 10)))
      (br_if $d (i32.ne (local.get $v) (i32.const 0))))
    (if (local.get $neg)
      (then (local.set $p (i32.sub (local.get $p) (i32.const 1))) (i32.store8 (local.get $p) (i32.const 45))))
    (drop (call $write (local.get $p) (i32.sub (i32.const 600) (local.get $p)))))
  (func (export "swan_handle") (result i32) (local $n i32) (local $status i32) (local $len i32)
    (local.set $n (call $setting (i32.const 900) (i32.const 3) (i32.const 1004) (i32.const 2000)))
    (i32.store8 (i32.add (i32.const 1004) (local.get $n)) (i32.const 10))
    (i32.store8 (i32.add (i32.const 1005) (local.get $n)) (i32.const 10))
    (local.set $status (call $send (i32.const 1000) (i32.add (local.get $n) (i32.const 6))))
    (call $number (local.get $status))
    (i32.store8 (i32.const 700) (i32.const 32))
    (drop (call $write (i32.const 700) (i32.const 1)))
    (local.set $len (call $get (i32.const 1) (i32.const 8192) (i32.const 8192)))
    (if (i32.gt_s (local.get $len) (i32.const 0))
      (then (drop (call $write (i32.const 8192) (local.get $len)))))
    i32.const 0))"#;

async fn native(url: &str, rules: &str) -> Result<String> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    let file = site.file("fetch.wasm", wat::parse_str(NATIVE_FETCH)?)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 8\n[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/n\"\nservlet = {:?}\nprewarm = 0\n{rules}\n[site.route.settings]\nURL = {url:?}\n",
        file.display().to_string()
    ))?;
    let server = TestServer::start(config).await?;
    Ok(server.get("/n").await?.text())
}

#[tokio::test]
async fn native_servlets_send_outbound_requests_under_the_same_rules() -> Result<()> {
    let up = upstream().await?;
    let url = format!("http://{up}/");
    assert_eq!(native(&url, "").await?, "-1 ");
    assert_eq!(
        native(&url, &format!("allowed_outbound_hosts = [\"http://{up}\"]")).await?,
        "200 upstream says hi"
    );
    let name = format!("http://localhost:{}/", up.port());
    let rule = format!(
        "allowed_outbound_hosts = [\"http://localhost:{}\"]",
        up.port()
    );
    assert_eq!(native(&name, &rule).await?, "-2 ");
    assert_eq!(
        native(&name, &format!("{rule}\noutbound_private = true")).await?,
        "200 upstream says hi"
    );
    assert_eq!(native("not a url", &rule).await?, "-6 ");
    Ok(())
}

/// `outbound_timeout` holds the whole exchange, the wait for the head
/// included (it held only the body: a slow head took the first-byte
/// timeout); and a rule naming an address literally allows it wherever
/// it stands among the rules that match.
#[tokio::test]
async fn the_total_timeout_holds_the_head_and_a_literal_rule_counts_anywhere() -> Result<()> {
    let up = upstream().await?;
    let (_site, server) = start(&format!(
        "allowed_outbound_hosts = [\"http://{up}\"]\noutbound_timeout = \"500ms\""
    ))
    .await?;
    fails_quickly(&server, &format!("http://{up}/slow")).await?;
    drop(server);
    // A wildcard first (which alone refuses loopback), the literal second.
    let (_site, server) = start(&format!(
        "allowed_outbound_hosts = [\"http://*:*\", \"http://{up}\"]"
    ))
    .await?;
    assert_eq!(
        fetch(&server, &format!("http://{up}/")).await?,
        "200 upstream says hi"
    );
    let other = format!("http://127.0.0.1:{}/", up.port() + 1);
    assert!(
        fetch(&server, &other)
            .await?
            .contains("DestinationIpProhibited")
    );
    Ok(())
}

/// An HTTPS upstream whose certificate no root vouches for (self-signed,
/// for 127.0.0.1): the guest gets `TLS-certificate-error`, the precise
/// code, not `TLS-protocol-error`; a plain-HTTP port spoken to over TLS
/// still fails (as a protocol error or a timeout, never a response).
#[tokio::test]
async fn an_upstream_certificate_no_root_vouches_for_is_a_certificate_error() -> Result<()> {
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.self_signed(&key)?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let tls_up = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(stream).await;
            });
        }
    });
    let up = upstream().await?;
    let (_site, server) = start(&format!(
        "allowed_outbound_hosts = [\"https://{tls_up}\", \"https://{up}\"]\noutbound_connect_timeout = \"1s\""
    ))
    .await?;
    let answer = fetch(&server, &format!("https://{tls_up}/")).await?;
    assert!(answer.contains("TlsCertificateError"), "{answer}");
    let answer = fetch(&server, &format!("https://{up}/")).await?;
    assert!(answer.starts_with("error: "), "{answer}");
    Ok(())
}

/// What goes on the wire is the destination as checked: a Host header in
/// canonical form however the URL spelt the authority (`:0PORT` is the
/// port the rules matched; an upstream must not see a spelling the rules
/// would refuse), and `http://host?q` as the target `/?q`.
#[tokio::test]
async fn the_upstream_sees_the_checked_destination_in_canonical_form() -> Result<()> {
    let up = upstream().await?;
    let rules = format!("allowed_outbound_hosts = [\"http://{up}\"]");
    let port = up.port();
    assert_eq!(
        native(&format!("http://127.0.0.1:0{port}/echo-host"), &rules).await?,
        format!("200 host=127.0.0.1:{port} target=/echo-host")
    );
    assert_eq!(
        native(&format!("http://127.0.0.1:{port}?x=1"), &rules).await?,
        format!("200 host=127.0.0.1:{port} target=/?x=1")
    );
    let (_site, server) = start(&rules).await?;
    assert_eq!(
        fetch(&server, &format!("http://127.0.0.1:0{port}/echo-host")).await?,
        format!("200 host=127.0.0.1:{port} target=/echo-host")
    );
    Ok(())
}

/// Refused outbound requests are counted per route and reason (what
/// `swan_servlet_outbound_refused_total` shows), every one, however few
/// of them the log's throttle lets through; failures apart.
#[tokio::test]
async fn refused_outbound_requests_are_counted_by_reason() -> Result<()> {
    let up = upstream().await?;
    let (_site, server) = start(&format!(
        "allowed_outbound_hosts = [\"http://{up}\", \"http://localhost:{}\"]",
        up.port()
    ))
    .await?;
    for _ in 0..5 {
        let answer = fetch(&server, &format!("http://127.0.0.1:{}/", up.port() + 1)).await?;
        assert!(answer.contains("HttpRequestDenied"), "{answer}");
    }
    let answer = fetch(&server, &format!("http://localhost:{}/", up.port())).await?;
    assert!(answer.contains("DestinationIpProhibited"), "{answer}");
    let sites = server.app().sites.load();
    let servlet = sites
        .iter()
        .next()
        .and_then(|s| s.servlets.servlet_at("/f/fetch"))
        .expect("the servlet");
    let refused: Vec<u64> = servlet
        .stats()
        .outbound_refused
        .iter()
        .map(|c| c.get())
        .collect();
    assert_eq!(
        swan::servlet::stats::OUTBOUND_REFUSALS,
        ["invalid_url", "denied", "private_address", "concurrency"]
    );
    assert_eq!(refused, [0, 5, 1, 0]);
    assert_eq!(servlet.stats().outbound_failed.get(), 0);
    Ok(())
}
