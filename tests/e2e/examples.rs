//! The example servlets, built from source, over real HTTP: Rust (SDK),
//! C (swan.h) and AssemblyScript (raw ABI, no WASI).

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use swan_tests::{TestServer, TestSite};

async fn start() -> Result<(TestSite, TestServer)> {
    swan_tests::init_logs();
    let servlets = swan_tests::example_servlets()?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    // The same module again, outside the servlets folder, behind a route
    // with settings (a module a route names is served at that route only).
    let greet = site.file("greet.wasm", std::fs::read(servlets.join("hello.wasm"))?)?;
    let config = site.config(&format!(
        "[[site]]\nroot = \"www\"\nservlets = {:?}\n\n[[site.route]]\npath = \"/greet\"\nservlet = {:?}\n[site.route.settings]\nGREETING = \"Bonjour\"\n",
        servlets.display().to_string(),
        greet.display().to_string(),
    ))?;
    let server = TestServer::start(config).await?;
    Ok((site, server))
}

#[tokio::test]
async fn rust_hello_greets_and_reads_settings_through_wasi_env() -> Result<()> {
    let (_site, server) = start().await?;
    let r = server.get("/hello/there?name=swan").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), "text/plain; charset=utf-8");
    let text = r.text();
    assert!(
        text.starts_with("Hello, swan! (from a Rust servlet)"),
        "{text}"
    );
    assert!(
        text.contains("path: /hello/there\npath info: /there\n"),
        "{text}"
    );
    let r = server.get("/greet?name=ami").await?;
    assert!(r.text().starts_with("Bonjour, ami!"), "{}", r.text());
    Ok(())
}

#[tokio::test]
async fn json_api_handles_queries_json_bodies_and_bad_input() -> Result<()> {
    let (_site, server) = start().await?;
    let r = server.get("/json-api?name=swan&times=2").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(
        r.text(),
        r#"{"greeting":"Hello, swan! Hello, swan!","times":2}"#
    );

    let post = |body: &'static str, ct: &str| {
        Request::post(server.url("/json-api/sum"))
            .header("content-type", ct)
            .body(Full::new(Bytes::from_static(body.as_bytes())))
    };
    let r = server
        .send(post(r#"{"numbers":[1,2,3.5]}"#, "application/json")?)
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.text(), r#"{"sum":6.5,"count":3}"#);

    let r = server
        .send(post(r#"{"numbers":[1,"two"]}"#, "application/json")?)
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    assert!(r.text().contains("invalid JSON"), "{}", r.text());
    let r = server.send(post("{", "application/json")?).await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = server
        .send(post("numbers=1", "application/x-www-form-urlencoded")?)
        .await?;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let r = server.get("/json-api?times=99").await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = server.get("/json-api/sum").await?;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(r.header("allow"), "POST");
    let r = server.get("/json-api/nope").await?;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    // Odd input: a media type in capitals with a parameter is JSON, a
    // look-alike is not; an empty sum is 0 and an infinite one a 400,
    // not `null`; names count characters, not bytes; HEAD is GET's head.
    let r = server
        .send(post(
            r#"{"numbers":[]}"#,
            "Application/JSON; charset=utf-8",
        )?)
        .await?;
    assert_eq!(r.text(), r#"{"sum":0.0,"count":0}"#);
    let r = server
        .send(post(r#"{"numbers":[1e308,1e308]}"#, "application/json")?)
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST, "{}", r.text());
    let r = server
        .send(post(r#"{"numbers":[1]}"#, "application/jsonp")?)
        .await?;
    assert_eq!(r.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let r = server
        .get(&format!("/json-api?name={}", "%C3%A9".repeat(60)))
        .await?;
    assert_eq!(r.status, StatusCode::OK, "{}", r.text());
    let r = server
        .get(&format!("/json-api?name={}", "e".repeat(101)))
        .await?;
    assert_eq!(r.status, StatusCode::BAD_REQUEST);
    let r = server
        .send(Request::head(server.url("/json-api?name=x")).body(Full::default())?)
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert!(r.body.is_empty());
    Ok(())
}

#[tokio::test]
async fn c_hello_answers_through_swan_h() -> Result<()> {
    let (_site, server) = start().await?;
    let r = server
        .get_with("/hello-c/x?a=1", &[("user-agent", "swan-test")])
        .await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.text(),
        "Hello from C!\nmethod: GET\npath: /hello-c/x\nquery: a=1\nuser-agent: swan-test\n"
    );
    Ok(())
}

#[tokio::test]
async fn assemblyscript_hello_answers_without_wasi() -> Result<()> {
    let (_site, server) = start().await?;
    let r = server.get("/hello-as/y?b=2").await?;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.text(),
        "Hello from AssemblyScript!\npath: /hello-as/y\nquery: b=2\n"
    );
    Ok(())
}
