//! wasi:http components beside native servlets: the same routes, limits,
//! faults, reloads and isolation, with streamed bodies both ways and
//! outbound HTTP under the route's rules. The guest that misbehaves on
//! request is `tests/guests/faults-component` (Rust, built from source).

use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use swan_tests::{TestServer, TestSite, eventually};

use crate::component_checks;

const WAIT: Duration = Duration::from_secs(60);

fn faults() -> Result<Vec<u8>> {
    Ok(std::fs::read(swan_tests::guest(
        "faults-component",
        "wasm32-wasip2",
    )?)?)
}

/// A site whose servlets folder holds the faults component as `f.wasm`
/// and `servlet_toml` as its `[site.servlet]` table.
async fn start(servlet_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("servlets/f.wasm", faults()?)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 64\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\n{servlet_toml}"
    ))?;
    let server = TestServer::start_watching(config).await?;
    Ok((site, server))
}

#[tokio::test]
async fn a_component_answers_at_its_name_and_below_over_both_protocols() -> Result<()> {
    let (_site, server) = start("").await?;
    let r = server.get("/f/ok").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), "ok");
    assert_eq!(r.header("server"), "swan");
    assert_eq!(r.header("x-request-id").len(), 16);
    let r = server
        .send_h2(Request::get(server.url("/f/ok")).body(Full::default())?)
        .await?;
    assert_eq!(r.text(), "ok");
    assert_eq!(
        server.get("/f/unknown").await?.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(server.get("/").await?.text(), "home");
    // The guest sees the servlet's settings as environment.
    Ok(())
}

#[tokio::test]
async fn every_request_gets_a_fresh_component_instance_unless_reuse_is_set() -> Result<()> {
    let (site, server) = start("").await?;
    for _ in 0..4 {
        assert_eq!(server.get("/f/count").await?.text(), "1");
    }
    drop(server);
    let config = site.config(
        "[server]\nmax_instances = 16\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\nreuse = 3\nmax_concurrency = 1\n",
    )?;
    let server = TestServer::start(config).await?;
    // An instance serves at most three requests, and does serve several
    // (it comes back to the pool once its response is sent, so the exact
    // order depends on timing).
    let mut seen = Vec::new();
    for _ in 0..12 {
        seen.push(server.get("/f/count").await?.text().parse::<u32>()?);
    }
    assert!(seen.iter().all(|&n| (1..=3).contains(&n)), "{seen:?}");
    assert!(seen.iter().filter(|&&n| n > 1).count() >= 4, "{seen:?}");
    Ok(())
}

#[tokio::test]
async fn component_faults_answer_like_native_ones_and_leak_nothing() -> Result<()> {
    let (_site, server) =
        start("timeout = \"500ms\"\nmax_memory = \"16 MiB\"\nmax_response_bytes = \"64 KiB\"\n")
            .await?;
    component_checks::faults_answer_and_the_server_stays_up(
        &server,
        "/f",
        &[
            ("/trap", StatusCode::INTERNAL_SERVER_ERROR),
            ("/oom", StatusCode::INTERNAL_SERVER_ERROR),
            ("/no-response", StatusCode::INTERNAL_SERVER_ERROR),
            ("/loop", StatusCode::GATEWAY_TIMEOUT),
            ("/sleep?ms=5000", StatusCode::GATEWAY_TIMEOUT),
        ],
    )
    .await?;
    // Output past the per-request cap is dropped, not an error, and a
    // file outside the sandbox cannot be read.
    assert_eq!(server.get("/f/print?n=200").await?.text(), "printed");
    assert_eq!(server.get("/f/files").await?.text(), "denied");
    Ok(())
}

#[tokio::test]
async fn a_component_failing_mid_stream_aborts_its_response() -> Result<()> {
    let (_site, server) = start("").await?;
    component_checks::failing_mid_stream_aborts_the_response(&server, "/f").await
}

#[tokio::test]
async fn a_streamed_response_of_many_megabytes_arrives_whole_to_a_slow_reader() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file(
        "servlets/hello.wasm",
        std::fs::read(swan_tests::example_components(&["rust"])?.join("hello-rust.wasm"))?,
    )?;
    let config = site.config(
        "[server]\nmax_instances = 16\nsend_timeout = \"2s\"\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\ntimeout = \"2s\"\n",
    )?;
    let server = TestServer::start(config).await?;
    // 16 MiB at about 6 MiB/s take nearly three seconds.
    component_checks::a_slow_reader_gets_the_whole_stream(
        &server,
        "/hello/stream?n=16384",
        16384,
        Duration::from_secs(2),
    )
    .await
}

#[tokio::test]
async fn request_bodies_stream_into_the_guest_under_the_size_and_rate_rules() -> Result<()> {
    let (_site, server) = start("max_body_bytes = \"1 MiB\"\n").await?;
    component_checks::uploads_follow_the_size_rules(&server, "/f").await
}

#[tokio::test]
async fn concurrency_and_queue_limits_answer_503_for_components_too() -> Result<()> {
    let (_site, server) =
        start("timeout = \"800ms\"\nmax_concurrency = 1\nqueue_timeout = \"100ms\"\n").await?;
    let slow = server.spawn_get("/f/loop");
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = server.get("/f/ok").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), "1");
    assert_eq!(slow.await??.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
}

#[tokio::test]
async fn settings_reach_components_as_environment() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    let file = site.file("faults.wasm", faults()?)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 16\n[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/app/*\"\nservlet = {:?}\nprewarm = 1\n[site.route.settings]\nGREETING = \"Bonjour\"\n",
        file.display().to_string()
    ))?;
    let server = TestServer::start(config).await?;
    assert_eq!(server.get("/app/env").await?.text(), "Bonjour");
    Ok(())
}

/// `method path` over HTTP/1.1, then over HTTP/2.
async fn over_both(
    server: &TestServer,
    method: http::Method,
    path: &str,
) -> Result<[swan_tests::Reply; 2]> {
    let req = || {
        Request::builder()
            .method(method.clone())
            .uri(server.url(path))
            .body(Full::default())
    };
    Ok([server.send(req()?).await?, server.send_h2(req()?).await?])
}

/// A component written in the component text format.
fn wat_component(text: &str) -> Result<Vec<u8>> {
    Ok(wat::parse_str(text)?)
}

#[tokio::test]
async fn components_that_cannot_serve_are_refused_with_the_reason_and_the_old_version_stays()
-> Result<()> {
    let (site, server) = start("").await?;
    let unknown_import = wat_component(
        r#"(component
             (import "acme:evil/thing" (instance (export "f" (func))))
           )"#,
    )?;
    // An interface swan has, asked for a function it lacks.
    let wrong_function = wat_component(
        r#"(component
             (import "wasi:random/random@0.2.0" (instance (export "get-random-u128" (func (result u64)))))
           )"#,
    )?;
    let no_handler = wat_component("(component)")?;
    for (name, bytes, expect) in [
        (
            "wrongfn.wasm",
            wrong_function,
            "imports `wasi:random/random@0.2.0`, which does not match what swan provides",
        ),
        ("wrongfn.wasm", Vec::new(), "get-random-u128"),
        (
            "imports.wasm",
            unknown_import.clone(),
            "imports `acme:evil/thing`, which swan does not provide to components",
        ),
        (
            "nohandler.wasm",
            no_handler.clone(),
            "wasi:http/incoming-handler",
        ),
        ("f.wasm", unknown_import, "acme:evil/thing"),
    ] {
        if !bytes.is_empty() {
            site.file(&format!("servlets/{name}"), bytes)?;
        }
        let seen = eventually(WAIT, || async {
            server.app().sites.load().iter().any(|s| {
                s.servlets
                    .refused
                    .iter()
                    .any(|r| r.file.ends_with(name) && r.error.to_string().contains(expect))
            })
        })
        .await;
        let refused: Vec<String> = server
            .app()
            .sites
            .load()
            .iter()
            .flat_map(|s| s.servlets.refused.iter().map(|r| r.error.to_string()))
            .collect();
        assert!(seen, "{name} not refused with {expect}: {refused:?}");
    }
    // f.wasm was working: it still is.
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    // Refused with no earlier version: 500, as a refused route.
    assert_eq!(
        server.get("/imports").await?.status,
        StatusCode::INTERNAL_SERVER_ERROR
    );
    Ok(())
}

#[tokio::test]
async fn a_replaced_component_goes_live_and_requests_in_flight_finish_on_the_old_one() -> Result<()>
{
    let (site, server) = start("timeout = \"3s\"\n").await?;
    let url = server.url("/f/sleep?ms=800");
    let in_flight = tokio::spawn(async move {
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
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The hello example replaces the faults component at the same route.
    let hello = std::fs::read(swan_tests::example_components(&["rust"])?.join("hello-rust.wasm"))?;
    site.file("servlets/f.wasm", hello)?;
    assert!(
        eventually(WAIT, || async {
            server
                .get("/f?name=new")
                .await
                .is_ok_and(|r| r.text() == "Hello, new! (rust)")
        })
        .await
    );
    let (status, body) = in_flight.await??;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(&body[..], b"slept");
    Ok(())
}

#[tokio::test]
async fn native_servlets_and_components_share_a_folder() -> Result<()> {
    let (site, server) = start("").await?;
    site.file(
        "servlets/native.wasm",
        wat::parse_str(
            r#"(module (import "swan" "response_write" (func $w (param i32 i32) (result i32)))
               (memory (export "memory") 1) (data (i32.const 0) "native")
               (func (export "swan_abi_version") (result i32) i32.const 1)
               (func (export "swan_handle") (result i32) (drop (call $w (i32.const 0) (i32.const 6))) i32.const 0))"#,
        )?,
    )?;
    assert!(
        eventually(WAIT, || async {
            server
                .get("/native")
                .await
                .is_ok_and(|r| r.text() == "native")
        })
        .await
    );
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
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
    assert!(kinds.iter().any(|k| k.starts_with("native")), "{kinds:?}");
    assert!(
        kinds
            .iter()
            .any(|k| k.contains("wasi:http/incoming-handler@0.2")),
        "{kinds:?}"
    );
    Ok(())
}

/// The guest sees the request as the client sent it: the authority over
/// HTTP/1.1 and HTTP/2 (its `:authority`), `https` when a trusted proxy
/// says the client used it, and none of the headers `Connection` names
/// (hop-by-hop, RFC 9110 §7.6.1).
#[tokio::test]
async fn a_component_sees_the_authority_and_scheme_the_client_used() -> Result<()> {
    let (_site, server) = start("[server.proxy]\ntrusted = [\"127.0.0.1\"]\n").await?;
    let addr = server.addr();
    assert_eq!(
        server.get_with("/f/seen", &[("x-hop", "1")]).await?.text(),
        format!("http {addr} 1")
    );
    assert_eq!(
        server
            .get_with("/f/seen", &[("x-hop", "1"), ("connection", "x-hop")])
            .await?
            .text(),
        format!("http {addr} -")
    );
    assert_eq!(
        server
            .get_with("/f/seen", &[("x-forwarded-proto", "https")])
            .await?
            .text(),
        format!("https {addr} -")
    );
    let h2 = server
        .send_h2(Request::get(server.url("/f/seen")).body(Full::default())?)
        .await?;
    assert_eq!(h2.version, http::Version::HTTP_2);
    assert_eq!(h2.text(), format!("http {addr} -"));
    // The client's address as swan found it (here: a trusted proxy's
    // X-Forwarded-For) and swan's request id, in place of what the client
    // says, as native servlets get them.
    let r = server
        .get_with(
            "/f/header?name=x-forwarded-for",
            &[("x-forwarded-for", "9.9.9.9")],
        )
        .await?;
    assert_eq!(r.text(), "9.9.9.9");
    let r = server
        .get_with(
            "/f/header?name=x-forwarded-for",
            &[("x-forwarded-for", "203.0.113.7, 127.0.0.1")],
        )
        .await?;
    assert_eq!(r.text(), "203.0.113.7");
    // The scheme likewise: the trusted proxy's word, set by swan.
    for (told, seen) in [
        ("https", "https"),
        ("http, https", "https"),
        ("http", "http"),
    ] {
        let r = server
            .get_with(
                "/f/header?name=x-forwarded-proto",
                &[("x-forwarded-proto", told)],
            )
            .await?;
        assert_eq!(r.text(), seen, "told {told}");
    }
    let r = server
        .get_with("/f/header?name=x-forwarded-proto", &[])
        .await?;
    assert_eq!(r.text(), "http");
    let r = server
        .get_with(
            "/f/header?name=x-request-id",
            &[("x-request-id", "client-chosen")],
        )
        .await?;
    assert_eq!(r.text(), r.header("x-request-id"));
    assert_ne!(r.text(), "client-chosen");
    Ok(())
}

/// Without a trusted proxy, a component sees the peer's address and the
/// connection's scheme, not what the client wrote in `X-Forwarded-For`
/// and `X-Forwarded-Proto`.
#[tokio::test]
async fn a_component_sees_the_peer_not_a_forwarded_for_it_was_told() -> Result<()> {
    let (_site, server) = start("").await?;
    let r = server
        .get_with(
            "/f/header?name=x-forwarded-for",
            &[("x-forwarded-for", "9.9.9.9")],
        )
        .await?;
    assert_eq!(r.text(), "127.0.0.1");
    let r = server
        .get_with(
            "/f/header?name=x-forwarded-proto",
            &[("x-forwarded-proto", "https")],
        )
        .await?;
    assert_eq!(r.text(), "http");
    Ok(())
}

/// A servlet's answer to HEAD, and a 204, carry no body over HTTP/2 (a
/// body there is a protocol error for the client); a status that is not a
/// final one (1xx, or past 599) is a 500, never sent as the answer.
#[tokio::test]
async fn bodiless_answers_and_odd_statuses_from_a_component() -> Result<()> {
    let (_site, server) = start("").await?;
    for path in ["/f/ok", "/f/big?n=10000"] {
        for head in over_both(&server, http::Method::HEAD, path).await? {
            assert_eq!(head.status, StatusCode::OK, "{path}");
            assert!(head.body.is_empty(), "{path} over {:?}", head.version);
        }
    }
    let [_, no_content] = over_both(&server, http::Method::GET, "/f/status?n=204").await?;
    assert_eq!(no_content.status, StatusCode::NO_CONTENT);
    assert!(no_content.body.is_empty());
    // 205 carries no content either (RFC 9110 §15.3.6): the guest's body
    // is dropped.
    for reset in over_both(&server, http::Method::GET, "/f/status?n=205").await? {
        assert_eq!(reset.status, StatusCode::RESET_CONTENT);
        assert!(reset.body.is_empty(), "{:?}", reset.version);
    }
    for status in ["100", "101", "103", "600", "999"] {
        let path = format!("/f/status?n={status}");
        for r in over_both(&server, http::Method::GET, &path).await? {
            assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{status}");
        }
    }
    assert_eq!(server.get("/f/status?n=299").await?.status.as_u16(), 299);
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
}

/// `max_response_bytes`, when a route sets it, holds components too: a
/// body up to it arrives whole, one past it is cut off as an abort (no
/// clean end), over both protocols. Unset, a component streams as much as
/// it likes (its body never sits in memory).
#[tokio::test]
async fn a_set_max_response_bytes_cuts_a_component_body_off_as_an_abort() -> Result<()> {
    let (_site, server) = start("max_response_bytes = \"64 KiB\"\n").await?;
    let whole = server.get("/f/stream?n=64").await?;
    assert_eq!(whole.body.len(), 64 << 10);
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await?;
    tokio::io::AsyncWriteExt::write_all(
        &mut stream,
        b"GET /f/stream?n=1024 HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await?;
    let text = swan_tests::read_until_close(&mut stream, Duration::from_secs(10)).await;
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(text.len() < (256 << 10), "{} bytes sent", text.len());
    assert!(
        !text.ends_with("0\r\n\r\n"),
        "a cut-off response ended cleanly"
    );
    assert!(
        server
            .send_h2(Request::get(server.url("/f/big?n=100000")).body(Full::default())?)
            .await
            .is_err(),
        "h2 body past the limit ended cleanly"
    );
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    let (_site, unset) = start("").await?;
    assert_eq!(unset.get("/f/stream?n=20480").await?.body.len(), 20 << 20);
    Ok(())
}

/// Time the guest spends waiting for a slow client's upload is governed
/// by the body's own rules (size, `body_timeout`, `body_min_rate`), not by
/// the guest's run-time deadline: a valid upload that takes longer than
/// `timeout` reaches the guest whole, as it does a native servlet.
#[tokio::test]
async fn a_slow_upload_within_the_body_rules_is_not_a_timeout() -> Result<()> {
    let (_site, server) = start("timeout = \"1s\"\nmax_body_bytes = \"1 MiB\"\n").await?;
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await?;
    let chunk = vec![b'u'; 10_000];
    tokio::io::AsyncWriteExt::write_all(
        &mut stream,
        b"POST /f/upload HTTP/1.1\r\nHost: a\r\nContent-Length: 250000\r\nConnection: close\r\n\r\n",
    )
    .await?;
    let started = std::time::Instant::now();
    for _ in 0..25 {
        tokio::io::AsyncWriteExt::write_all(&mut stream, &chunk).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let text = swan_tests::read_until_close(&mut stream, Duration::from_secs(10)).await;
    assert!(started.elapsed() > Duration::from_secs(2));
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(300)]
    );
    assert!(
        text.contains("\r\n250000\r\n"),
        "{}",
        &text[..text.len().min(300)]
    );
    // The deadline still holds a guest that runs too long.
    assert_eq!(
        server.get("/f/loop").await?.status,
        StatusCode::GATEWAY_TIMEOUT
    );
    Ok(())
}

/// A guest that sets its response and then fails before any of its body
/// is sent gives the client a 500 (it got an empty reply before), over
/// both protocols.
#[tokio::test]
async fn a_guest_failing_before_its_first_body_byte_is_a_500() -> Result<()> {
    let (_site, server) = start("").await?;
    for _ in 0..3 {
        for r in over_both(&server, http::Method::GET, "/f/stream-then-trap?n=0").await? {
            assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
        }
    }
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
}

/// A guest that returns still holding its answer (an outparam it never
/// set, a body it never finished) gets a 500 or an aborted body at once,
/// never a hang or a clean end, with a fresh instance or a reused one.
#[tokio::test]
async fn a_guest_returning_without_finishing_its_answer_fails_at_once() -> Result<()> {
    for reuse in ["", "reuse = 5\n"] {
        let (_site, server) = start(reuse).await?;
        for _ in 0..3 {
            let r = tokio::time::timeout(Duration::from_secs(10), server.get("/f/leak-out"))
                .await
                .map_err(|_| anyhow::anyhow!("leak-out hung ({reuse:?})"))??;
            assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{reuse:?}");
            // Over HTTP/1.1: no clean chunked end after the 4 KiB.
            let (text, took) = raw_get(&server, "/f/leak-body?n=4").await?;
            assert!(took < WAIT_RAW, "leak-body hung ({reuse:?})");
            assert!(text.starts_with("HTTP/1.1 200"), "{text}");
            assert!(!text.ends_with("0\r\n\r\n"), "ended cleanly ({reuse:?})");
        }
        assert_eq!(server.get("/f/ok").await?.text(), "ok");
    }
    Ok(())
}

/// A servlet deployed while every instance slot is taken by a request in
/// flight is tried once a slot frees, not refused: a busy server is not a
/// broken servlet.
#[tokio::test]
async fn a_servlet_deployed_while_the_instance_slots_are_busy_goes_live_after() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("servlets/f.wasm", faults()?)?;
    let config = site.config(
        "[server]\nmax_instances = 1\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 0\ntimeout = \"5s\"\n",
    )?;
    let server = TestServer::start_watching(config).await?;
    let url = server.url("/f/sleep?ms=1500");
    let busy = tokio::spawn(async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        client
            .request(Request::get(url).body(Full::default())?)
            .await
            .map(|r| r.status())
            .map_err(anyhow::Error::from)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    site.file("servlets/g.wasm", faults()?)?;
    assert_eq!(busy.await??, StatusCode::OK);
    assert!(
        server.answers_ok_within("/g/ok", WAIT).await,
        "the servlet deployed while busy never went live"
    );
    Ok(())
}

/// CPU a guest spends inside host calls counts against its `timeout`
/// once its body streams (where the wall clock no longer applies): a
/// guest asking for megabytes of random bytes in a loop is stopped, its
/// response aborted.
#[tokio::test]
async fn cpu_spent_in_host_calls_counts_against_the_timeout() -> Result<()> {
    let (_site, server) = start("timeout = \"500ms\"\n").await?;
    stopped_near_its_timeout(&server, "/f/host-spin?n=8").await
}

/// One WASI random call fills its buffer without yielding: past 1 MiB it
/// traps (500) rather than stall the worker's other connections (64 MiB,
/// wasmtime's own cap, took 400 ms); up to it, the bytes come.
#[tokio::test]
async fn a_random_call_past_one_mib_traps() -> Result<()> {
    let (_site, server) = start("").await?;
    assert_eq!(server.get("/f/random?n=1048576").await?.text(), "1048576");
    for n in [1_048_577, 8_000_000, 64 << 20] {
        let r = server.get(&format!("/f/random?n={n}")).await?;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{n}");
    }
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
}

/// Many small writes are run time too: a guest writing one byte at a time
/// after its head is stopped near its timeout, not run to its end.
#[tokio::test]
async fn cpu_spent_in_many_small_writes_counts_against_the_timeout() -> Result<()> {
    let (_site, server) = start("timeout = \"500ms\"\n").await?;
    stopped_near_its_timeout(&server, "/f/tiny?n=8").await
}

/// `path` (a guest that streams for 8 s under `timeout = 500ms`) starts a
/// 200 and is aborted well before its end, counted as the servlet's
/// timeout; the server goes on.
async fn stopped_near_its_timeout(server: &TestServer, path: &str) -> Result<()> {
    let (_, timeouts_before, _) = component_checks::failures_at(server, path);
    let (text, took) = raw_get(server, path).await?;
    assert!(
        text.starts_with("HTTP/1.1 200"),
        "{}",
        &text[..text.len().min(200)]
    );
    assert!(!text.ends_with("0\r\n\r\n"), "ran to its end");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    let (_, timeouts, recent) = component_checks::failures_at(server, path);
    assert_eq!(timeouts, timeouts_before + 1, "{recent:?}");
    Ok(())
}

/// How long [`raw_get`] waits for the server to close the connection.
const WAIT_RAW: Duration = Duration::from_secs(20);

/// GETs `path` on a raw HTTP/1.1 connection: what arrived until the server
/// closed it (or [`WAIT_RAW`] passed), and how long that took.
async fn raw_get(server: &TestServer, path: &str) -> Result<(String, Duration)> {
    let started = std::time::Instant::now();
    let request = format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n");
    let text = server.raw(request.as_bytes(), WAIT_RAW).await?;
    Ok((text, started.elapsed()))
}

/// A client that goes away before the response head (an HTTP/2 reset)
/// stops the guest: its place under `max_concurrency` comes back at once,
/// not at its timeout. (HTTP/1.1 cannot tell a client that closed from one
/// that only ended its side, which `half_close` serves, until a write.)
#[tokio::test]
async fn a_client_leaving_before_the_head_stops_the_guest() -> Result<()> {
    let (_site, server) =
        start("timeout = \"10s\"\nmax_concurrency = 1\nqueue_timeout = \"300ms\"\n").await?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    for _ in 0..2 {
        let request = Request::get(server.url("/f/loop")).body(Full::default())?;
        // Given up after 200 ms: the stream is reset.
        let gave_up =
            tokio::time::timeout(Duration::from_millis(200), client.request(request)).await;
        assert!(gave_up.is_err(), "the loop answered");
        assert!(
            server
                .answers_ok_within("/f/ok", Duration::from_secs(3))
                .await,
            "the guest kept its place after its client left"
        );
    }
    Ok(())
}

/// With `reuse`, an instance whose guest left the request body unread
/// (forgotten, not dropped) is not given back: the client's next request
/// on the same connection no longer hangs (hyper closes a connection
/// whose body went unread), and the servlet goes on serving.
#[tokio::test]
async fn an_instance_holding_its_request_body_is_not_reused() -> Result<()> {
    let (_site, server) = start("reuse = 5\nmax_concurrency = 1\n").await?;
    let mut stream = tokio::net::TcpStream::connect(server.addr()).await?;
    let body = vec![b'u'; 200_000];
    let mut request = format!(
        "POST /f/leak-in HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(&body);
    tokio::io::AsyncWriteExt::write_all(&mut stream, &request).await?;
    let mut reply = vec![0u8; 4096];
    let n = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read(&mut stream, &mut reply),
    )
    .await??;
    assert!(
        reply[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&reply[..n])
    );
    // The next request on this connection, and on another, is answered.
    tokio::io::AsyncWriteExt::write_all(&mut stream, b"GET /f/count HTTP/1.1\r\nHost: a\r\n\r\n")
        .await?;
    let mut next = Vec::new();
    let answered = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let n = tokio::io::AsyncReadExt::read(&mut stream, &mut reply).await?;
            if n == 0 {
                return anyhow::Ok(());
            }
            next.extend_from_slice(&reply[..n]);
            if String::from_utf8_lossy(&next).contains("HTTP/1.1 200") {
                return Ok(());
            }
        }
    })
    .await;
    let text = String::from_utf8_lossy(&next);
    // Never left hanging: the connection goes on or (the body was never
    // read) closes, so the client retries on another.
    assert!(answered.is_ok(), "the next request hung: {text}");
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
}

/// What a guest declares of its body holds: more bytes than its
/// `Content-Length` abort the response (never cut to a clean, complete
/// one), and a 204 goes out without a `Content-Length`, over both
/// protocols.
#[tokio::test]
async fn a_component_body_longer_than_declared_aborts_and_204_carries_no_length() -> Result<()> {
    let (_site, server) = start("").await?;
    let text = server
        .raw(
            b"GET /f/cl-long HTTP/1.1\r\nHost: a\r\n\r\nGET /f/ok HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
        .await?;
    // The body never went out cut to look whole. Its first write is
    // already past its length: nothing has gone out, so the client gets a
    // 500 rather than a head and a reset, and the connection goes on.
    assert!(
        !text.contains("cccccccccc"),
        "a cut body looked whole: {text}"
    );
    assert!(text.starts_with("HTTP/1.1 500"), "{text}");
    assert!(text.contains("HTTP/1.1 200"), "{text}");
    for r in over_both(&server, http::Method::GET, "/f/cl-long").await? {
        assert_eq!(
            r.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{:?}",
            r.version
        );
    }
    for r in over_both(&server, http::Method::GET, "/f/no-content").await? {
        assert_eq!(r.status, StatusCode::NO_CONTENT);
        assert_eq!(r.header("content-length"), "");
    }
    Ok(())
}

/// What a guest builds on the host counts too: a thousand header sets of
/// 60 KB would hold 60 MB outside its memory cap. It is stopped at the
/// resource limit (500), and the server goes on.
#[tokio::test]
async fn host_resources_a_guest_builds_are_bounded() -> Result<()> {
    let (_site, server) = start("").await?;
    let r = server.get("/f/headers-bomb?n=100").await?;
    assert_eq!(r.text(), "100");
    let r = server.get("/f/headers-bomb?n=5000").await?;
    assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
}

/// A `[[site.route]]` whose servlet is refused at load answers 500: its
/// paths do not fall through to the site's files.
#[tokio::test]
async fn a_route_whose_servlet_is_refused_does_not_fall_open_to_files() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/x/secret.txt", "not for you")?;
    site.file(
        "bad.wasm",
        wat_component(r#"(component (import "acme:evil/thing" (instance (export "f" (func)))))"#)?,
    )?;
    let config = site.config(
        "[[site]]\nroot = \"www\"\n[[site.route]]\npath = \"/x/*\"\nservlet = \"bad.wasm\"\n",
    )?;
    let server = TestServer::start(config).await?;
    for path in ["/x/secret.txt", "/x", "/x/other"] {
        let r = server.get(path).await?;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
        assert!(!r.text().contains("not for you"), "{path}");
    }
    Ok(())
}

/// `max_memory` holds for all of a component's memories together: here
/// four core modules of one component each grow a memory of their own by
/// 12 MiB (under a 32 MiB cap each would fit), then the handler spins. The
/// third growth traps (500 at once); before, every growth succeeded and
/// the request ran to its timeout (504), the instance holding 48 MiB.
#[tokio::test]
async fn max_memory_holds_for_all_of_a_components_memories_together() -> Result<()> {
    let grower = wat_component(
        r#"(component
  (import "wasi:http/types@0.2.0" (instance $types
     (export "incoming-request" (type (sub resource)))
     (export "response-outparam" (type (sub resource)))))
  (alias export $types "incoming-request" (type $req))
  (alias export $types "response-outparam" (type $out))
  (core module $filler
     (memory 1)
     (func (export "fill") (result i32)
        (if (i32.lt_s (memory.grow (i32.const 192)) (i32.const 0)) (then unreachable))
        (memory.fill (i32.const 0) (i32.const 7) (i32.const 12582912))
        (i32.load8_u (i32.const 12582911))))
  (core instance $f1 (instantiate $filler))
  (core instance $f2 (instantiate $filler))
  (core instance $f3 (instantiate $filler))
  (core instance $f4 (instantiate $filler))
  (core module $main
     (import "f1" "fill" (func $a (result i32)))
     (import "f2" "fill" (func $b (result i32)))
     (import "f3" "fill" (func $c (result i32)))
     (import "f4" "fill" (func $d (result i32)))
     (memory (export "memory") 1)
     (func (export "handle") (param i32 i32)
        (drop (call $a)) (drop (call $b)) (drop (call $c)) (drop (call $d))
        (loop $l (br $l))))
  (core instance $m (instantiate $main
     (with "f1" (instance $f1)) (with "f2" (instance $f2))
     (with "f3" (instance $f3)) (with "f4" (instance $f4))))
  (func $h (param "request" (own $req)) (param "response-out" (own $out))
     (canon lift (core func $m "handle")))
  (instance $inst (export "handle" (func $h)))
  (export "wasi:http/incoming-handler@0.2.0" (instance $inst)))"#,
    )?;
    let (site, server) = start("max_memory = \"32 MiB\"\ntimeout = \"3s\"\n").await?;
    site.file("servlets/grow.wasm", grower)?;
    assert!(
        eventually(WAIT, || async {
            server
                .get("/grow")
                .await
                .is_ok_and(|r| r.status != StatusCode::NOT_FOUND)
        })
        .await,
        "never loaded"
    );
    for _ in 0..3 {
        let started = Instant::now();
        let r = server.get("/grow").await?;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{}", r.text());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    let (traps, timeouts, _) = component_checks::failures_at(&server, "/grow");
    assert!(
        traps >= 3 && timeouts == 0,
        "traps {traps}, timeouts {timeouts}"
    );
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
}
