//! The request layer: every request gets an id, sent back as
//! `x-request-id` (unless turned off) and seen by servlets; every failure
//! becomes its response in one place.

use anyhow::Result;
use http::StatusCode;
use swan_tests::{Reply, TestServer, TestSite};

/// Answers its own request id (ABI part 7), or traps on `/ids/trap`.
const ID_SERVLET: &str = r#"(module
  (import "swan" "request_get" (func $get (param i32 i32 i32) (result i32)))
  (import "swan" "response_write" (func $write (param i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "swan_abi_version") (result i32) i32.const 1)
  (func (export "swan_handle") (result i32) (local i32)
    ;; path info (part 3) "/trap" traps
    (local.set 0 (call $get (i32.const 3) (i32.const 512) (i32.const 64)))
    (if (i32.eq (local.get 0) (i32.const 5)) (then unreachable))
    (drop (call $write (i32.const 1024)
      (call $get (i32.const 7) (i32.const 1024) (i32.const 256))))
    i32.const 0))"#;

async fn start(server_toml: &str) -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    site.file("servlets/ids.wasm", wat::parse_str(ID_SERVLET)?)?;
    let config = site.config(&format!(
        "[server]\nmax_instances = 16\n{server_toml}\n[[site]]\nroot = \"www\"\nservlets = \"servlets\"\n[site.servlet]\nprewarm = 1\n"
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

fn id_of(r: &Reply) -> String {
    r.header("x-request-id").to_owned()
}

#[tokio::test]
async fn every_response_carries_a_distinct_request_id() -> Result<()> {
    let (_site, server) = start("").await?;
    let mut seen = std::collections::HashSet::new();
    let cases = [
        ("/", StatusCode::OK),
        ("/missing", StatusCode::NOT_FOUND),
        ("/.env", StatusCode::NOT_FOUND),
        ("/a%2fb", StatusCode::BAD_REQUEST),
        ("/ids", StatusCode::OK),
        ("/ids/trap", StatusCode::INTERNAL_SERVER_ERROR),
    ];
    for (path, status) in cases {
        let r = server.get(path).await?;
        assert_eq!(r.status, status, "{path}");
        let id = id_of(&r);
        assert_eq!(id.len(), 16, "{path}: {id:?}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{path}: {id:?}");
        assert!(seen.insert(id), "{path}: id repeated");
        assert_eq!(r.header("server"), "swan");
    }
    let r = server
        .send(
            http::Request::post(server.url("/"))
                .body(http_body_util::Full::new(bytes::Bytes::from("x")))?,
        )
        .await?;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.header("allow"), "GET, HEAD");
    assert_eq!(id_of(&r).len(), 16);
    Ok(())
}

#[tokio::test]
async fn the_servlet_sees_the_id_the_client_gets() -> Result<()> {
    let (_site, server) = start("").await?;
    for _ in 0..3 {
        let r = server.get("/ids").await?;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.text(), id_of(&r));
    }
    Ok(())
}

#[tokio::test]
async fn the_id_header_can_be_turned_off() -> Result<()> {
    let (_site, server) = start("request_id_header = false").await?;
    let r = server.get("/ids").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text().len(), 16, "the servlet still gets an id");
    assert!(r.headers.get("x-request-id").is_none());
    assert!(server.get("/").await?.headers.get("x-request-id").is_none());
    Ok(())
}
