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
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

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
    for (path, status) in [
        ("/f/trap", StatusCode::INTERNAL_SERVER_ERROR),
        ("/f/oom", StatusCode::INTERNAL_SERVER_ERROR),
        ("/f/no-response", StatusCode::INTERNAL_SERVER_ERROR),
        ("/f/loop", StatusCode::GATEWAY_TIMEOUT),
        ("/f/sleep?ms=5000", StatusCode::GATEWAY_TIMEOUT),
    ] {
        let started = Instant::now();
        let r = server.get(path).await?;
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
        assert_eq!(server.get("/f/ok").await?.text(), "ok", "after {path}");
        assert_eq!(server.get("/").await?.text(), "home", "after {path}");
    }
    // Output past the per-request cap is dropped, not an error, and a
    // file outside the sandbox cannot be read.
    assert_eq!(server.get("/f/print?n=200").await?.text(), "printed");
    assert_eq!(server.get("/f/files").await?.text(), "denied");
    Ok(())
}

#[tokio::test]
async fn a_component_failing_mid_stream_aborts_its_response() -> Result<()> {
    let (_site, server) = start("").await?;
    // HTTP/1.1: the connection closes without the terminating chunk.
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(b"GET /f/stream-then-trap?n=64 HTTP/1.1\r\nHost: a\r\n\r\n")
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
    // HTTP/2: the stream is reset, the client sees an error, not a short 200.
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let res = client
        .request(Request::get(server.url("/f/stream-then-trap?n=64")).body(Full::default())?)
        .await?;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(
        res.into_body().collect().await.is_err(),
        "h2 body ended cleanly"
    );
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    Ok(())
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
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let res = client
        .request(Request::get(server.url("/hello/stream?n=16384")).body(Full::default())?)
        .await?;
    assert_eq!(res.status(), StatusCode::OK);
    let mut body = res.into_body();
    let mut total = 0usize;
    let mut unpaced = 0usize;
    let started = Instant::now();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            total += data.len();
            unpaced += data.len();
            // About 6 MiB/s, paced every 256 KiB: 16 MiB take nearly three
            // seconds, past the guest's deadline in wall time, not in
            // guest time.
            if unpaced >= 256 << 10 {
                tokio::time::sleep(Duration::from_secs_f64(unpaced as f64 / (6 << 20) as f64))
                    .await;
                unpaced = 0;
            }
        }
    }
    assert!(
        started.elapsed() > Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(total, 16384 * 1024, "after {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn request_bodies_stream_into_the_guest_under_the_size_and_rate_rules() -> Result<()> {
    let (_site, server) = start("max_body_bytes = \"1 MiB\"\n").await?;
    let body = vec![b'u'; 900 << 10];
    let r = server
        .send(Request::post(server.url("/f/upload")).body(Full::new(Bytes::from(body)))?)
        .await?;
    assert_eq!(r.text(), (900 << 10).to_string());
    // Declared too large: 413 before the guest runs.
    let r = server
        .send(
            Request::post(server.url("/f/upload"))
                .body(Full::new(Bytes::from(vec![0u8; 2 << 20])))?,
        )
        .await?;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    // Chunked and too large: found while streaming, still 413.
    let mut stream = TcpStream::connect(server.addr()).await?;
    stream
        .write_all(b"POST /f/upload HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n")
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
    Ok(())
}

#[tokio::test]
async fn concurrency_and_queue_limits_answer_503_for_components_too() -> Result<()> {
    let (_site, server) =
        start("timeout = \"800ms\"\nmax_concurrency = 1\nqueue_timeout = \"100ms\"\n").await?;
    let url = server.url("/f/loop");
    let slow = tokio::spawn(async move {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        client
            .request(Request::get(url).body(Full::default())?)
            .await
            .map(|r| r.status())
            .map_err(anyhow::Error::from)
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let r = server.get("/f/ok").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), "1");
    assert_eq!(slow.await??, StatusCode::GATEWAY_TIMEOUT);
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
    let no_handler = wat_component("(component)")?;
    for (name, bytes, expect) in [
        ("imports.wasm", unknown_import.clone(), "acme:evil/thing"),
        (
            "nohandler.wasm",
            no_handler.clone(),
            "wasi:http/incoming-handler",
        ),
        ("f.wasm", unknown_import, "acme:evil/thing"),
    ] {
        site.file(&format!("servlets/{name}"), bytes)?;
        let seen = eventually(WAIT, || async {
            server.app().sites.load().iter().any(|s| {
                s.servlets
                    .refused
                    .iter()
                    .any(|r| r.file.ends_with(name) && r.error.to_string().contains(expect))
            })
        })
        .await;
        assert!(seen, "{name} not refused with {expect}");
    }
    // f.wasm was working: it still is.
    assert_eq!(server.get("/f/ok").await?.text(), "ok");
    assert_eq!(server.get("/imports").await?.status, StatusCode::NOT_FOUND);
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
