//! Wasm servlets written in WAT: routing, the ABI, isolation between
//! requests, limits and faults, load-time refusals.

use std::time::{Duration, Instant};

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use swan_tests::{TestServer, TestSite};

/// Imports and exports every test servlet shares; `$body` is the body of
/// `swan_handle`, which has a scratch area at 4096 and text at 16.
fn servlet(data: &str, body: &str, extra: &str) -> Vec<u8> {
    let text = format!(
        r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "request_header" (func $header_in (param i32 i32 i32 i32) (result i32)))
  (import "swan" "setting" (func $setting (param i32 i32 i32 i32) (result i32)))
  (import "swan" "response_status" (func $status (param i32) (result i32)))
  (import "swan" "response_header" (func $header (param i32 i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (global $count (mut i32) (i32.const 0))
  {data}
  (func (export "swan_abi_version") (result i32) i32.const 1)
  {extra}
  (func (export "swan_handle") (result i32) (local i32)
    {body})

)"#
    );
    wat::parse_str(&text).unwrap_or_else(|e| panic!("bad test WAT: {e}\n{text}"))
}

fn hello() -> Vec<u8> {
    servlet(
        r#"(data (i32.const 16) "hello from wat") (data (i32.const 64) "content-type") (data (i32.const 96) "text/x-wat")"#,
        "(drop (call $header (i32.const 64) (i32.const 12) (i32.const 96) (i32.const 10)))
         (drop (call $write (i32.const 16) (i32.const 14)))
         i32.const 0",
        "",
    )
}

/// Writes request part `n` followed by '|'.
fn echo() -> Vec<u8> {
    servlet(
        r#"(data (i32.const 16) "|") (data (i32.const 32) "x-test") (data (i32.const 48) "greeting")"#,
        "(call $part (i32.const 0)) (call $part (i32.const 1)) (call $part (i32.const 2))
         (call $part (i32.const 3)) (call $part (i32.const 5))
         (local.set 0 (call $header_in (i32.const 32) (i32.const 6) (i32.const 4096) (i32.const 1024)))
         (if (i32.ge_s (local.get 0) (i32.const 0))
           (then (drop (call $write (i32.const 4096) (local.get 0)))))
         (drop (call $write (i32.const 16) (i32.const 1)))

         (local.set 0 (call $setting (i32.const 48) (i32.const 8) (i32.const 4096) (i32.const 1024)))
         (if (i32.ge_s (local.get 0) (i32.const 0))
           (then (drop (call $write (i32.const 4096) (local.get 0)))))
         i32.const 0",
        "(func $part (param $p i32)
           (drop (call $write (i32.const 4096) (call $get (local.get $p) (i32.const 4096) (i32.const 4096))))
           (drop (call $write (i32.const 16) (i32.const 1))))",
    )
    .into_iter()
    .collect()
}

/// Counts its own requests in a global and answers the count.
fn counter() -> Vec<u8> {
    servlet(
        "",
        "(global.set $count (i32.add (global.get $count) (i32.const 1)))
         (i32.store8 (i32.const 4096) (i32.add (i32.const 48) (global.get $count)))
         (drop (call $write (i32.const 4096) (i32.const 1)))
         i32.const 0",
        "",
    )
}

async fn start(files: &[(&str, Vec<u8>)], toml_extra: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "static home")?;
    site.file("www/hello/shadowed.txt", "shadowed")?;
    site.dir("servlets")?;
    for (name, bytes) in files {
        site.file(&format!("servlets/{name}"), bytes)?;
    }
    let config = site.config(&format!(
        "[server]\nmax_instances = 64\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\n{toml_extra}"
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

#[tokio::test]
async fn a_wasm_file_answers_at_its_name_and_below() -> Result<()> {
    let (_site, server) = start(&[("hello.wasm", hello())], "").await?;
    for path in [
        "/hello",
        "/hello/",
        "/hello/deeper/path?x=1",
        "/hello/shadowed.txt",
    ] {
        let r = server.get(path).await?;
        assert_eq!(r.status, StatusCode::OK, "{path}");
        assert_eq!(r.text(), "hello from wat", "{path}");
        assert_eq!(r.header("content-type"), "text/x-wat");
        assert_eq!(r.header("server"), "swan");
    }
    assert_eq!(server.get("/hellox").await?.status, StatusCode::NOT_FOUND);
    assert_eq!(server.get("/").await?.text(), "static home");
    let r = server
        .send_h2(Request::get(server.url("/hello")).body(Full::default())?)
        .await?;
    assert_eq!(r.text(), "hello from wat");
    Ok(())
}

#[tokio::test]
async fn header_values_lose_outer_spaces_and_a_second_content_type_replaces_the_first() -> Result<()>
{
    let module = servlet(
        r#"(data (i32.const 64) "content-type") (data (i32.const 96) "text/a") (data (i32.const 112) "text/b")
           (data (i32.const 128) "x-ok") (data (i32.const 144) " \t v w \t ")"#,
        "(drop (call $header (i32.const 64) (i32.const 12) (i32.const 96) (i32.const 6)))
         (drop (call $header (i32.const 64) (i32.const 12) (i32.const 112) (i32.const 6)))
         (drop (call $header (i32.const 128) (i32.const 4) (i32.const 144) (i32.const 9)))
         i32.const 0",
        "",
    );
    let (_site, server) = start(&[("h.wasm", module)], "").await?;
    let r = server
        .raw(
            b"GET /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            Duration::from_secs(10),
        )
        .await?;
    let head = r.to_ascii_lowercase();
    assert_eq!(head.matches("content-type:").count(), 1, "{r}");
    assert!(head.contains("content-type: text/b\r\n"), "{r}");
    assert!(head.contains("x-ok: v w\r\n"), "{r}");
    Ok(())
}

#[tokio::test]
async fn the_servlet_sees_method_path_query_path_info_headers_and_body() -> Result<()> {
    let (_site, server) = start(&[("echo.wasm", echo())], "").await?;
    let r = server
        .send(
            Request::post(server.url("/echo/a/b?q=1&r=two"))
                .header("x-test", "header-value")
                .body(Full::new(Bytes::from_static(b"the body")))?,
        )
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.text(),
        "POST|/echo/a/b|q=1&r=two|/a/b|the body|header-value|"
    );
    assert_eq!(r.header("content-type"), "text/plain; charset=utf-8");
    Ok(())
}

/// Answers the request's header `name` (`request_header`), or "none".
fn header_echo(name: &str) -> Vec<u8> {
    servlet(
        &format!(r#"(data (i32.const 16) "{name}") (data (i32.const 256) "none")"#),
        &format!(
            "(local.set 0 (call $header_in (i32.const 16) (i32.const {}) (i32.const 4096) (i32.const 1024)))
             (if (i32.ge_s (local.get 0) (i32.const 0))
               (then (drop (call $write (i32.const 4096) (local.get 0))))
               (else (drop (call $write (i32.const 256) (i32.const 4)))))
             i32.const 0",
            name.len()
        ),
        "",
    )
}

/// A native servlet sees a Host whatever the protocol, as a component
/// does: HTTP/2's `:authority`, an HTTP/1.0 absolute-form target's
/// authority, else the server's name. Before, only HTTP/1.1 carried one.
/// And it sees swan's X-Forwarded-For and X-Forwarded-Proto, not the
/// client's.
#[tokio::test]
async fn a_native_servlet_sees_a_host_over_every_protocol() -> Result<()> {
    let (_site, server) = start(
        &[
            ("host.wasm", header_echo("host")),
            ("xff.wasm", header_echo("x-forwarded-for")),
            ("proto.wasm", header_echo("x-forwarded-proto")),
        ],
        "",
    )
    .await?;
    let authority = server.addr().to_string();
    assert_eq!(server.get("/host").await?.text(), authority);
    let r = server
        .send_h2(Request::get(server.url("/host")).body(Full::default())?)
        .await?;
    assert_eq!(r.text(), authority, "HTTP/2");
    let r = server
        .raw(
            b"GET http://b.example/host HTTP/1.0\r\n\r\n",
            Duration::from_secs(5),
        )
        .await?;
    assert!(r.ends_with("\r\n\r\nb.example"), "{r}");
    let r = server
        .raw(b"GET /host HTTP/1.0\r\n\r\n", Duration::from_secs(5))
        .await?;
    assert!(r.ends_with("\r\n\r\nlocalhost"), "{r}");
    // A client's own X-Forwarded-For is replaced by the address swan
    // found (no trusted proxy here: the peer).
    let r = server
        .get_with("/xff", &[("x-forwarded-for", "5.5.5.5")])
        .await?;
    assert_eq!(r.text(), "127.0.0.1");
    // And X-Forwarded-Proto by the connection's scheme.
    let r = server
        .get_with("/proto", &[("x-forwarded-proto", "https")])
        .await?;
    assert_eq!(r.text(), "http");
    Ok(())
}

#[tokio::test]
async fn explicit_routes_override_the_folder_and_carry_settings() -> Result<()> {
    let (_site, server) = start(
        &[("echo.wasm", echo()), ("hello.wasm", hello())],
        "[[site.route]]\npath = \"/api/*\"\nservlet = \"servlets/echo.wasm\"\n[site.route.settings]\ngreeting = \"hi there\"\n\n\
         [[site.route]]\npath = \"/exact\"\nservlet = \"servlets/hello.wasm\"\n",
    )
    .await?;
    let r = server.get("/api/v1?k=v").await?;
    assert_eq!(r.text(), "GET|/api/v1|k=v|/v1|||hi there");
    assert_eq!(server.get("/exact").await?.text(), "hello from wat");
    assert_eq!(
        server.get("/exact/more").await?.status,
        StatusCode::NOT_FOUND
    );
    // A module a route names is served at that route only: never again
    // at its folder path, with the folder's limits and none of the
    // route's settings or stores.
    for path in ["/echo", "/echo/x"] {
        assert_eq!(
            server.get(path).await?.status,
            StatusCode::NOT_FOUND,
            "{path}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn every_request_gets_a_fresh_instance_by_default() -> Result<()> {
    let (_site, server) = start(&[("counter.wasm", counter())], "").await?;
    for _ in 0..5 {
        assert_eq!(
            server.get("/counter").await?.text(),
            "1",
            "state leaked between requests"
        );
    }
    Ok(())
}

#[tokio::test]
async fn spent_instances_give_their_slots_back_for_the_next_requests() -> Result<()> {
    // Two instance slots in all: one prewarmed, one in use. A spent
    // instance is dropped after its response is out; until then it holds
    // its slot, which the next instantiation must not find taken.
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "static home")?;
    site.file("servlets/counter.wasm", counter())?;
    let config = site.config(
        "[server]\nmax_instances = 2\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\nmax_concurrency = 2\nqueue_timeout = \"5s\"\n",
    )?;
    let server = TestServer::start(config).await?;
    for round in 0..30 {
        let (a, b) = tokio::join!(server.get("/counter"), server.get("/counter"));
        for r in [a?, b?] {
            assert_eq!(r.status, StatusCode::OK, "round {round}: {}", r.text());
            assert_eq!(r.text(), "1");
        }
        let r = server.get("/counter").await?;
        assert_eq!(
            (r.status, r.text()),
            (StatusCode::OK, "1".to_owned()),
            "round {round}"
        );
    }
    Ok(())
}

/// Four servlets that each want four instances ready, in a process
/// allowed four in all: every one loads (none refused after waiting for a
/// slot another's idle instances held) and every one answers, taking the
/// place of another's idle instance when it needs one. Before, the first
/// to fill held every slot: the others were refused at load or answered
/// 503 for good.
#[tokio::test]
async fn servlets_whose_prewarm_fills_max_instances_all_load_and_answer() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "static home")?;
    let names = ["a", "b", "c", "d"];
    for name in names {
        site.file(&format!("servlets/{name}.wasm"), counter())?;
    }
    let config = site.config(
        "[server]\nmax_instances = 4\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 4\nqueue_timeout = \"2s\"\n",
    )?;
    let started = Instant::now();
    let server = TestServer::start(config).await?;
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "loading waited for slots: {:?}",
        started.elapsed()
    );
    for round in 0..10 {
        for name in names {
            let r = server.get(&format!("/{name}")).await?;
            assert_eq!(
                (r.status, r.text()),
                (StatusCode::OK, "1".to_owned()),
                "round {round}, /{name}"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn reuse_lets_one_instance_serve_several_requests() -> Result<()> {
    let (_site, server) = start(
        &[("counter.wasm", counter())],
        "[[site.route]]\npath = \"/reused\"\nservlet = \"servlets/counter.wasm\"\nreuse = 3\nprewarm = 0\n",
    )
    .await?;
    let mut seen = Vec::new();
    for _ in 0..6 {
        seen.push(server.get("/reused").await?.text());
    }
    assert_eq!(seen, ["1", "2", "3", "1", "2", "3"]);
    Ok(())
}

#[tokio::test]
async fn faults_answer_500_and_the_server_keeps_serving() -> Result<()> {
    let faults: Vec<(&str, Vec<u8>)> = vec![
        ("unreachable.wasm", servlet("", "unreachable", "")),
        (
            "oob.wasm",
            servlet("", "(drop (i32.load (i32.const 70000))) i32.const 0", ""),
        ),
        (
            "divzero.wasm",
            servlet(
                "",
                "(drop (i32.div_s (i32.const 1) (global.get $count))) i32.const 0",
                "",
            ),
        ),
        (
            "recursion.wasm",
            servlet(
                "",
                "(call $deep (i32.const 0)) i32.const 0",
                "(func $deep (param i32) (call $deep (i32.add (local.get 0) (i32.const 1))))",
            ),
        ),
        (
            "grow.wasm",
            servlet("", "(drop (memory.grow (i32.const 100))) i32.const 0", ""),
        ),
        (
            "big.wasm",
            servlet(
                "",
                "(drop (call $write (i32.const 0) (i32.const 4096))) i32.const 0",
                "",
            ),
        ),
        (
            "badptr.wasm",
            servlet(
                "",
                "(drop (call $get (i32.const 1) (i32.const 65530) (i32.const 100))) i32.const 0",
                "",
            ),
        ),
        (
            "negptr.wasm",
            servlet(
                "",
                "(drop (call $write (i32.const -8) (i32.const 16))) i32.const 0",
                "",
            ),
        ),
        (
            "badpart.wasm",
            servlet(
                "",
                "(drop (call $get (i32.const 99) (i32.const 0) (i32.const 0))) i32.const 0",
                "",
            ),
        ),
        ("errcode.wasm", servlet("", "i32.const 7", "")),
        ("hello.wasm", hello()),
    ];
    let (_site, server) = start(
        &faults,
        "max_memory = \"1 MiB\"\nmax_response_bytes = 1000\n",
    )
    .await?;
    for (file, _) in &faults[..faults.len() - 1] {
        let name = file.trim_end_matches(".wasm");
        let r = server.get(&format!("/{name}")).await?;
        assert_eq!(r.status, StatusCode::INTERNAL_SERVER_ERROR, "{name}");
        assert!(r.text().contains("500 Internal Server Error"), "{name}");
        assert!(
            !r.text().to_lowercase().contains("trap") && !r.text().contains(name),
            "{name} leaked details"
        );
        // Everyone else is still served.
        assert_eq!(
            server.get("/hello").await?.text(),
            "hello from wat",
            "after {name}"
        );
        assert_eq!(server.get("/").await?.text(), "static home", "after {name}");
    }
    Ok(())
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_at_the_deadline_without_stalling_others() -> Result<()> {
    let looping = servlet("", "(loop $l (br $l)) i32.const 0", "");
    let (_site, server) = start(&[("loop.wasm", looping)], "timeout = \"600ms\"\n").await?;
    let url = server.url("/loop");
    let started = Instant::now();
    let slow = tokio::spawn({
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<Full<Bytes>>();
        async move {
            client
                .request(Request::get(url).body(Full::default())?)
                .await
                .map_err(anyhow::Error::from)
        }
    });
    // While it spins, the server still answers static files promptly (the
    // spinning servlet yields to the reactor at every epoch tick).
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(server.get("/").await?.status, StatusCode::OK);
        assert!(
            t.elapsed() < Duration::from_millis(300),
            "static request stalled: {:?}",
            t.elapsed()
        );
    }
    let res = slow.await??;
    let elapsed = started.elapsed();
    assert_eq!(res.status(), StatusCode::GATEWAY_TIMEOUT);
    assert!(
        elapsed >= Duration::from_millis(550) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    Ok(())
}

/// More spinning requests than worker threads: each still ends at its own
/// deadline, not later (the epoch ticker is starved on a busy machine, so
/// counting ticks alone let a 2 s deadline stretch to 3 s).
#[tokio::test]
async fn deadlines_hold_when_more_servlets_spin_than_there_are_workers() -> Result<()> {
    let looping = servlet("", "(loop $l (br $l)) i32.const 0", "");
    let timeout = Duration::from_millis(1500);
    let (_site, server) = start(
        &[("loop.wasm", looping)],
        "timeout = \"1500ms\"\nmax_concurrency = 16\n",
    )
    .await?;
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let spinning = workers * 3;
    let mut tasks = Vec::new();
    for _ in 0..spinning {
        let url = server.url("/loop");
        tasks.push(tokio::spawn(async move {
            let client =
                hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                    .build_http::<Full<Bytes>>();
            let started = Instant::now();
            let res = client
                .request(Request::get(url).body(Full::default())?)
                .await?;
            anyhow::Ok((res.status(), started.elapsed()))
        }));
    }
    for task in tasks {
        let (status, elapsed) = task.await??;
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
        assert!(
            elapsed >= timeout - Duration::from_millis(50)
                && elapsed < timeout + Duration::from_millis(400),
            "{spinning} spinning on {workers} workers: 504 after {elapsed:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_full_pool_answers_503_with_retry_after() -> Result<()> {
    let looping = servlet("", "(loop $l (br $l)) i32.const 0", "");
    let (_site, server) = start(
        &[("loop.wasm", looping)],
        "timeout = \"800ms\"\nmax_concurrency = 1\nqueue_timeout = \"100ms\"\n",
    )
    .await?;
    let first = server.spawn_get("/loop");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = server.get("/loop").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), "1");
    assert_eq!(first.await??.status, StatusCode::GATEWAY_TIMEOUT);
    Ok(())
}

#[tokio::test]
async fn request_bodies_over_the_servlet_limit_get_413() -> Result<()> {
    let (_site, server) = start(&[("echo.wasm", echo())], "max_body_bytes = 10\n").await?;
    let r = server
        .send(Request::post(server.url("/echo")).body(Full::new(Bytes::from(vec![b'a'; 100])))?)
        .await?;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
    // Chunked (no Content-Length) is counted as it arrives.
    let r = server
        .raw(
            b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n40\r\naaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n0\r\n\r\n",
            Duration::from_secs(5),
        )
        .await?;
    assert!(r.starts_with("HTTP/1.1 413"), "{r}");
    let r = server
        .send(Request::post(server.url("/echo")).body(Full::new(Bytes::from_static(b"small")))?)
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    Ok(())
}

#[tokio::test]
async fn modules_that_break_the_contract_are_refused_at_load_with_the_reason() -> Result<()> {
    let wrong_version = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "swan_abi_version") (result i32) i32.const 2)
            (func (export "swan_handle") (result i32) i32.const 0))"#,
    )?;
    let no_handle = wat::parse_str(
        r#"(module (memory (export "memory") 1) (func (export "swan_abi_version") (result i32) i32.const 1))"#,
    )?;
    let no_memory = wat::parse_str(
        r#"(module (func (export "swan_abi_version") (result i32) i32.const 1) (func (export "swan_handle") (result i32) i32.const 0))"#,
    )?;
    let foreign_import = wat::parse_str(
        r#"(module (import "env" "open_socket" (func (param i32)))
            (memory (export "memory") 1)
            (func (export "swan_abi_version") (result i32) i32.const 1)
            (func (export "swan_handle") (result i32) i32.const 0))"#,
    )?;
    let wrong_signature = wat::parse_str(
        r#"(module (import "swan" "response_write" (func (param i32) (result i32)))
            (memory (export "memory") 1)
            (func (export "swan_abi_version") (result i32) i32.const 1)
            (func (export "swan_handle") (result i32) i32.const 0))"#,
    )?;
    // A reactor's `_initialize` of another type would be skipped.
    let mistyped_init = wat::parse_str(
        r#"(module (memory (export "memory") 1)
            (func (export "_initialize") (param i32))
            (func (export "swan_abi_version") (result i32) i32.const 1)
            (func (export "swan_handle") (result i32) i32.const 0))"#,
    )?;
    let mut truncated = hello();
    truncated.truncate(truncated.len() / 2);
    let files = vec![
        ("version.wasm", wrong_version),
        ("nohandle.wasm", no_handle),
        ("nomemory.wasm", no_memory),
        ("foreign.wasm", foreign_import),
        ("signature.wasm", wrong_signature),
        ("init.wasm", mistyped_init),
        ("truncated.wasm", truncated),
        ("not-wasm.wasm", b"this is not wasm".to_vec()),
        ("hello.wasm", hello()),
        ("bad name.wasm", hello()),
    ];
    let (_site, server) = start(&files, "").await?;
    let sites = server.app().sites.load();
    let site = sites.iter().next().expect("site");
    let reasons: Vec<String> = site
        .servlets
        .refused
        .iter()
        .map(|r| r.error.to_string())
        .collect();
    for (file, want) in [
        (
            "version.wasm",
            "built for swan ABI version 2, this swan speaks version 1",
        ),
        ("nohandle.wasm", "does not export `swan_handle`"),
        ("nomemory.wasm", "does not export its memory"),
        (
            "foreign.wasm",
            "imports `env::open_socket`, which swan does not provide",
        ),
        ("signature.wasm", "cannot be instantiated"),
        (
            "init.wasm",
            "export `_initialize` must be a function () -> (), found",
        ),
        ("truncated.wasm", "not a valid WebAssembly module"),
        ("not-wasm.wasm", "not a valid WebAssembly module"),
    ] {
        assert!(
            reasons.iter().any(|r| r.contains(file) && r.contains(want)),
            "{file}: {want:?} not in {reasons:#?}"
        );
        let name = file.trim_end_matches(".wasm");
        assert_eq!(
            server.get(&format!("/{name}")).await?.status,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    assert_eq!(server.get("/hello").await?.text(), "hello from wat");
    assert_eq!(
        server.get("/bad%20name").await?.status,
        StatusCode::NOT_FOUND
    );
    Ok(())
}

#[tokio::test]
async fn an_exhausted_instance_pool_answers_503_not_500() -> Result<()> {
    swan_tests::init_logs();
    let looping = servlet("", "(loop $l (br $l)) i32.const 0", "");
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("servlets/loop.wasm", &looping)?;
    // Two slots in the whole process: one running request, one left...
    let config = site.config(
        "[server]\nmax_instances = 2\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 0\ntimeout = \"800ms\"\n",
    )?;
    let server = TestServer::start(config).await?;
    let url = server.url("/loop");
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let running: Vec<_> = (0..2)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                client
                    .request(Request::get(url).body(Full::default())?)
                    .await
                    .map_err(anyhow::Error::from)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // ...and a third request finds no slot.
    let r = server.get("/loop").await?;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.header("retry-after"), "1");
    for t in running {
        assert_eq!(t.await??.status(), StatusCode::GATEWAY_TIMEOUT);
    }
    assert_eq!(server.get("/").await?.text(), "home");
    Ok(())
}

/// `date`, `server` and `x-request-id` are swan's on every response: a
/// guest's is refused (-2), never sent beside swan's; a 304 gets no
/// made-up `content-type` (its headers update a stored response's).
#[tokio::test]
async fn swans_own_headers_are_refused_and_a_304_gets_no_made_up_type() -> Result<()> {
    // Answers, as digits, what setting `date`, `server` and `x-request-id`
    // returned, then 304.
    let headers = servlet(
        r#"(data (i32.const 16) "date") (data (i32.const 32) "server") (data (i32.const 48) "x-request-id") (data (i32.const 80) "forged")"#,
        "(call $try (i32.const 16) (i32.const 4))
         (call $try (i32.const 32) (i32.const 6))
         (call $try (i32.const 48) (i32.const 12))
         (drop (call $status (i32.const 304)))
         i32.const 0",
        "(func $try (param $name i32) (param $len i32)
           (i32.store8 (i32.const 4096)
             (i32.sub (i32.const 48) (call $header (local.get $name) (local.get $len) (i32.const 80) (i32.const 6))))
           (drop (call $write (i32.const 4096) (i32.const 1))))",
    );
    let (_site, server) = start(&[("h.wasm", headers)], "").await?;
    let r = server.get("/h").await?;
    assert_eq!(r.status, StatusCode::NOT_MODIFIED);
    assert!(r.headers.get("content-type").is_none(), "{:?}", r.headers);
    for name in ["date", "server", "x-request-id"] {
        let values: Vec<_> = r.headers.get_all(name).iter().collect();
        assert!(values.len() <= 1, "{name}: {values:?}");
        assert!(
            values.iter().all(|v| v.as_bytes() != b"forged"),
            "{name}: {values:?}"
        );
    }
    // The codes, in a 200 this time: each call was refused with -2.
    let codes = servlet(
        r#"(data (i32.const 16) "date") (data (i32.const 32) "server") (data (i32.const 48) "x-request-id") (data (i32.const 80) "forged")"#,
        "(call $try (i32.const 16) (i32.const 4))
         (call $try (i32.const 32) (i32.const 6))
         (call $try (i32.const 48) (i32.const 12))
         i32.const 0",
        "(func $try (param $name i32) (param $len i32)
           (i32.store8 (i32.const 4096)
             (i32.sub (i32.const 48) (call $header (local.get $name) (local.get $len) (i32.const 80) (i32.const 6))))
           (drop (call $write (i32.const 4096) (i32.const 1))))",
    );
    drop(server);
    let (_site, server) = start(&[("c.wasm", codes)], "").await?;
    assert_eq!(server.get("/c").await?.text(), "222");
    Ok(())
}
