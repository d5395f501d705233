//! wasi:http 0.3 (p3) components, opt-in per route: refused without
//! `wasi_http_p3`, and with it served like a p2 component: the request as
//! the guest sees it, fresh instances, faults and deadlines, streamed
//! bodies both ways (an abort mid-stream included), settings, hot reload
//! and outbound HTTP under the route's rules. The guest is
//! `tests/guests/p3-component` (Rust, wasip3, built from source).

use std::convert::Infallible;
use std::time::Duration;

use anyhow::Result;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use swan_tests::{TestServer, TestSite, eventually};

use crate::component_checks;

const WAIT: Duration = Duration::from_secs(60);

fn p3_guest() -> Result<Vec<u8>> {
    Ok(std::fs::read(swan_tests::guest(
        "p3-component",
        "wasm32-wasip2",
    )?)?)
}

/// A site whose servlets folder holds the p3 guest as `p.wasm`, with
/// `servlet_toml` in `[site.servlet]` (p3 on unless it says otherwise).
async fn start(servlet_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("servlets/p.wasm", p3_guest()?)?;
    let p3 = if servlet_toml.contains("wasi_http_p3") {
        ""
    } else {
        "wasi_http_p3 = true\n"
    };
    let config = site.config(&format!(
        "[server]\nmax_instances = 64\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\n{p3}{servlet_toml}"
    ))?;
    let server = TestServer::start_watching(config).await?;
    Ok((site, server))
}

/// Whether `file` was refused with an error containing `expect`.
fn refused(server: &TestServer, file: &str, expect: &str) -> bool {
    server.app().sites.load().iter().any(|s| {
        s.servlets
            .refused
            .iter()
            .any(|r| r.file.ends_with(file) && r.error.to_string().contains(expect))
    })
}

#[tokio::test]
async fn a_p3_component_is_refused_unless_its_route_opts_in() -> Result<()> {
    let (site, server) = start("wasi_http_p3 = false\n").await?;
    assert!(
        refused(&server, "p.wasm", "wasi_http_p3 = true"),
        "not refused with the key named"
    );
    assert_eq!(
        server.get("/p/ok").await?.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    assert_eq!(server.get("/").await?.text(), "home");
    drop(server);
    // The same file at a route of its own, opted in there.
    let file = site.file("p3.wasm", p3_guest()?)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 16\n[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/app/*\"\nservlet = {:?}\nwasi_http_p3 = true\nprewarm = 1\n[site.route.settings]\nGREETING = \"Bonjour\"\n",
        file.display().to_string()
    ))?;
    let server = TestServer::start(config).await?;
    assert_eq!(server.get("/app/ok").await?.text(), "ok");
    // The route's settings reach the guest as environment.
    assert_eq!(server.get("/app/env").await?.text(), "Bonjour");
    // `swan check`'s description names the world.
    let kinds: Vec<String> = server
        .app()
        .sites
        .load()
        .iter()
        .flat_map(|s| {
            s.servlets
                .routes
                .iter()
                .filter_map(|r| match &r.target {
                    swan::servlet::Target::Servlet(s) => Some(s.kind().to_string()),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        kinds
            .iter()
            .any(|k| k.contains("wasi:http/service") && k.contains("wasi:http/handler@0.3")),
        "{kinds:?}"
    );
    Ok(())
}

/// Turning the opt-in off by a configuration reload (say after an
/// advisory) takes effect as a restart would: the p3 component stops
/// serving. The previous version keeps serving for a broken file, not
/// for settings the operator withdrew.
#[tokio::test]
async fn turning_wasi_http_p3_off_by_reload_stops_the_p3_component() -> Result<()> {
    let (site, server) = start("").await?;
    assert_eq!(server.get("/p/ok").await?.text(), "ok");
    site.config(
        "[server]\nmax_instances = 64\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\nwasi_http_p3 = false\n",
    )?;
    let stopped = eventually(WAIT, || async {
        server
            .get("/p/ok")
            .await
            .is_ok_and(|r| r.status == StatusCode::INTERNAL_SERVER_ERROR)
    })
    .await;
    assert!(
        stopped,
        "the p3 component still serves with wasi_http_p3 off"
    );
    assert!(refused(&server, "p.wasm", "wasi_http_p3 = true"));
    assert_eq!(server.get("/").await?.text(), "home");
    Ok(())
}

/// A request body that fails on the client's side (cut short by a
/// half-close, or a malformed chunk) is the client's fault: 400, whatever
/// the guest made of the error it read, never a 500 that blames the
/// servlet.
#[tokio::test]
async fn a_request_body_the_client_breaks_is_a_400_not_a_500() -> Result<()> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_site, server) = start("").await?;
    let mut short = tokio::net::TcpStream::connect(server.addr()).await?;
    short
        .write_all(b"POST /p/upload HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc")
        .await?;
    short.shutdown().await?;
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), short.read_to_end(&mut reply)).await;
    let reply = String::from_utf8_lossy(&reply);
    // (A client that ended its sending side counts as gone once a servlet
    // has had its request for a quarter of a second: on a slow machine it
    // may get no answer at all, never a 500.)
    assert!(
        reply.starts_with("HTTP/1.1 400") || reply.is_empty(),
        "cut short: {reply}"
    );
    let bad_chunk = server
        .raw(
            b"POST /p/upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\nzz\r\n",
            Duration::from_secs(10),
        )
        .await?;
    assert!(
        bad_chunk.starts_with("HTTP/1.1 400"),
        "bad chunk: {bad_chunk}"
    );
    let (traps, _, recent) = component_checks::failures_at(&server, "/p/upload");
    assert_eq!(traps, 0, "counted as the servlet's fault: {recent:?}");
    assert_eq!(server.get("/p/ok").await?.text(), "ok");
    Ok(())
}

#[tokio::test]
async fn a_component_using_the_async_abi_needs_the_opt_in_too() -> Result<()> {
    // No wasi:http export at all, but an async lift: refused for what it
    // uses before anything else.
    let with_async = wat::parse_str(include_str!("../guests/async-lift.wat"))?;
    let (site, server) = start("wasi_http_p3 = false\n").await?;
    site.file("servlets/a.wasm", with_async)?;
    let seen = eventually(WAIT, || async { refused(&server, "a.wasm", "async ABI") }).await;
    assert!(seen, "a.wasm not refused for its async ABI");
    Ok(())
}

#[tokio::test]
async fn the_guest_sees_the_request_over_both_protocols() -> Result<()> {
    let (_site, server) = start("").await?;
    let r = server
        .send(
            Request::post(server.url("/p/echo?a=1&b=%C3%A9"))
                .header("x-echo", "bonjour")
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(r#"{"name":"swan","n":3}"#)))?,
        )
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.header("server"), "swan");
    assert_eq!(r.header("x-request-id").len(), 16);
    let json: serde_json::Value = serde_json::from_str(&r.text())?;
    assert_eq!(json["method"], "POST");
    assert_eq!(json["path"], "/p/echo?a=1&b=%C3%A9");
    assert_eq!(json["authority"], server.addr().to_string());
    assert_eq!(json["x-echo"], "bonjour");
    assert_eq!(json["body"], r#"{"name":"swan","n":3}"#);
    assert_eq!(json["body_len"], 21);
    let r = server
        .send_h2(
            Request::get(server.url("/p/echo?h2=yes"))
                .header("x-echo", "over h2")
                .body(Full::default())?,
        )
        .await?;
    let json: serde_json::Value = serde_json::from_str(&r.text())?;
    assert_eq!(json["method"], "GET");
    assert_eq!(json["path"], "/p/echo?h2=yes");
    assert_eq!(json["x-echo"], "over h2");
    assert_eq!(json["body_len"], 0);
    // An HTTP/1.0 request without Host still gets an authority.
    let answer = server
        .raw(b"GET /p/echo HTTP/1.0\r\n\r\n", Duration::from_secs(5))
        .await?;
    assert!(answer.starts_with("HTTP/1.0 200"), "{answer}");
    assert!(answer.contains(r#""authority":"localhost""#), "{answer}");
    assert_eq!(
        server.get("/p/unknown").await?.status,
        StatusCode::NOT_FOUND
    );
    Ok(())
}

#[tokio::test]
async fn every_request_gets_a_fresh_p3_instance_unless_reuse_is_set() -> Result<()> {
    let (site, server) = start("").await?;
    for _ in 0..4 {
        assert_eq!(server.get("/p/count").await?.text(), "1");
    }
    drop(server);
    let config = site.config(
        "[server]\nmax_instances = 16\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nwasi_http_p3 = true\nprewarm = 1\nreuse = 3\nmax_concurrency = 1\n",
    )?;
    let server = TestServer::start(config).await?;
    let mut seen = Vec::new();
    for _ in 0..12 {
        seen.push(server.get("/p/count").await?.text().parse::<u32>()?);
    }
    assert!(seen.iter().all(|&n| (1..=3).contains(&n)), "{seen:?}");
    assert!(seen.iter().filter(|&&n| n > 1).count() >= 4, "{seen:?}");
    Ok(())
}

#[tokio::test]
async fn p3_faults_answer_like_p2_ones_and_the_server_stays_up() -> Result<()> {
    let (_site, server) = start("timeout = \"500ms\"\nmax_memory = \"16 MiB\"\n").await?;
    component_checks::faults_answer_and_the_server_stays_up(
        &server,
        "/p",
        &[
            ("/trap", StatusCode::INTERNAL_SERVER_ERROR),
            ("/oom", StatusCode::INTERNAL_SERVER_ERROR),
            ("/error", StatusCode::INTERNAL_SERVER_ERROR),
            ("/loop", StatusCode::GATEWAY_TIMEOUT),
            ("/sleep?ms=5000", StatusCode::GATEWAY_TIMEOUT),
        ],
    )
    .await?;
    assert_eq!(server.get("/p/sleep?ms=50").await?.text(), "slept");
    assert_eq!(server.get("/p/print").await?.text(), "printed");
    Ok(())
}

#[tokio::test]
async fn a_p3_component_failing_mid_stream_aborts_its_response() -> Result<()> {
    let (_site, server) = start("").await?;
    component_checks::failing_mid_stream_aborts_the_response(&server, "/p").await
}

#[tokio::test]
async fn a_p3_response_of_many_megabytes_streams_whole_to_a_slow_reader() -> Result<()> {
    let (_site, server) = start("timeout = \"2s\"\n").await?;
    // 16 MiB at about 6 MiB/s take nearly three seconds.
    component_checks::a_slow_reader_gets_the_whole_stream(
        &server,
        "/p/stream?n=16384",
        16384,
        Duration::from_secs(2),
    )
    .await
}

#[tokio::test]
async fn p3_request_bodies_stream_in_under_the_size_rules() -> Result<()> {
    let (_site, server) = start("max_body_bytes = \"1 MiB\"\n").await?;
    component_checks::uploads_follow_the_size_rules(&server, "/p").await
}

#[tokio::test]
async fn p3_concurrency_limits_and_reload_hold() -> Result<()> {
    let (site, server) =
        start("timeout = \"3s\"\nmax_concurrency = 1\nqueue_timeout = \"100ms\"\n").await?;
    // One request at a time: a second one waits, then gets 503.
    let url = server.url("/p/sleep?ms=800");
    let slow = tokio::spawn(async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        let res = client
            .request(Request::get(url).body(Full::default())?)
            .await?;
        let status = res.status();
        let body = res.into_body().collect().await?.to_bytes();
        Ok::<_, anyhow::Error>((status, body))
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = server.get("/p/ok").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), "1");
    // Replaced while that request runs: it finishes on the old version.
    let faults = std::fs::read(swan_tests::guest("faults-component", "wasm32-wasip2")?)?;
    site.file("servlets/p.wasm", faults)?;
    let (status, body) = slow.await??;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"slept");
    // The p2 guest answers /p/no-response with 500; the p3 one has no such
    // path (404): once it does, the new version is live.
    assert!(
        eventually(WAIT, || async {
            server
                .get("/p/no-response")
                .await
                .is_ok_and(|r| r.status == StatusCode::INTERNAL_SERVER_ERROR)
        })
        .await
    );
    Ok(())
}

/// An upstream on 127.0.0.1 answering every request.
async fn upstream() -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("upstream says hi"))))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    Ok(addr)
}

#[tokio::test]
async fn p3_outbound_requests_follow_the_route_rules() -> Result<()> {
    let up = upstream().await?;
    let (_site, server) = start("").await?;
    let answer = server
        .get(&format!("/p/fetch?url=http://{up}/"))
        .await?
        .text();
    assert!(answer.contains("HttpRequestDenied"), "{answer}");
    drop(server);
    let (_site, server) = start(&format!("allowed_outbound_hosts = [\"http://{up}\"]\n")).await?;
    assert_eq!(
        server
            .get(&format!("/p/fetch?url=http://{up}/"))
            .await?
            .text(),
        "200 upstream says hi"
    );
    let other = format!("/p/fetch?url=http://127.0.0.1:{}/", up.port() + 1);
    assert!(
        server
            .get(&other)
            .await?
            .text()
            .contains("HttpRequestDenied")
    );
    // A name that resolves to loopback is refused unless private
    // addresses are allowed.
    let name = format!("localhost:{}", up.port());
    drop(server);
    let (_site, server) = start(&format!("allowed_outbound_hosts = [\"http://{name}\"]\n")).await?;
    let answer = server
        .get(&format!("/p/fetch?url=http://{name}/"))
        .await?
        .text();
    assert!(answer.contains("DestinationIpProhibited"), "{answer}");
    Ok(())
}

/// With `reuse`, a p3 instance that kept its request or its body stream,
/// or whose tasks still ran once its answer was sent, is not reused: the
/// next client never reads that request, and never waits behind (or pays
/// for) that work. One that read its body whole is reused.
#[tokio::test]
async fn p3_instances_that_kept_a_request_or_left_work_running_are_not_reused() -> Result<()> {
    let (_site, server) =
        start("reuse = 10\nmax_concurrency = 1\ntimeout = \"3s\"\nqueue_timeout = \"500ms\"\n")
            .await?;
    // A quiet guest is reused.
    let first: u32 = server.get("/p/count").await?.text().parse()?;
    let second: u32 = server.get("/p/count").await?.text().parse()?;
    assert_eq!(second, first + 1, "a quiet instance was not reused");
    let stash = server
        .send(
            Request::post(server.url("/p/stash"))
                .header("x-secret", "alice-token")
                .body(Full::new(Bytes::from_static(b"alice-private-body")))?,
        )
        .await?;
    assert_eq!(stash.text(), "stashed");
    assert_eq!(server.get("/p/peek").await?.text(), "nothing");
    // The same for a body stream kept without its request.
    let stash = server
        .send(
            Request::post(server.url("/p/stash-body"))
                .body(Full::new(Bytes::from_static(b"alice-private-body")))?,
        )
        .await?;
    assert_eq!(stash.text(), "stashed");
    assert_eq!(server.get("/p/peek-body").await?.text(), "nothing");
    // A body read whole leaves the instance reusable.
    let before: u32 = server.get("/p/count").await?.text().parse()?;
    let upload = server
        .send(Request::post(server.url("/p/upload")).body(Full::new(Bytes::from_static(b"12345")))?)
        .await?;
    assert_eq!(upload.status, StatusCode::OK);
    let after: u32 = server.get("/p/count").await?.text().parse()?;
    assert_eq!(
        after,
        before + 1,
        "an instance that read its body whole was not reused"
    );
    // An answer whose task spins on after it: the client has it whole,
    // and the next request (one at a time here) is served at once, not
    // refused while that task runs out its timeout.
    let done = server.get("/p/bg-loop").await?;
    assert_eq!(
        (done.status, done.text()),
        (StatusCode::OK, "done".to_owned())
    );
    for _ in 0..3 {
        let next = server.get("/p/ok").await?;
        assert_eq!(
            (next.status, next.text()),
            (StatusCode::OK, "ok".to_owned())
        );
    }
    Ok(())
}
