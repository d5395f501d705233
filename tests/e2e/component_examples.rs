//! The example components (Rust, JavaScript, Python), built from source by
//! `examples/build-components.sh`, served unmodified beside each other:
//! query, headers, a JSON body, settings as environment.

use anyhow::Result;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use swan_tests::{TestServer, TestSite};

#[tokio::test]
async fn rust_javascript_and_python_components_answer_real_requests() -> Result<()> {
    swan_tests::init_logs();
    let built = swan_tests::example_components(&["rust", "js", "python"])?;
    let site = TestSite::new()?;
    site.file("www/index.html", "home")?;
    let mut routes = String::new();
    for lang in ["rust", "js", "python"] {
        let file = site.file(
            &format!("hello-{lang}.wasm"),
            std::fs::read(built.join(format!("hello-{lang}.wasm")))?,
        )?;
        routes.push_str(&format!(
            "[[site.route]]\npath = \"/{lang}/*\"\nservlet = {:?}\n[site.route.settings]\nGREETING = \"hi from {lang}\"\n",
            file.display().to_string()
        ));
    }
    // The interpreters' components are large: give them room and time.
    let config = site.config(&format!(
        "[server]\nmax_instances = 32\n[[site]]\nroot = \"www\"\n[site.servlet]\nprewarm = 1\nmax_memory = \"256 MiB\"\ntimeout = \"10s\"\n{routes}"
    ))?;
    let server = TestServer::start(config).await?;
    for lang in ["rust", "js", "python"] {
        let r = server.get(&format!("/{lang}/greet?name=Ada%20L")).await?;
        assert_eq!(r.status, StatusCode::OK, "{lang}: {}", r.text());
        assert_eq!(r.text(), format!("Hello, Ada L! ({lang})"));
        assert_eq!(r.header("x-guest-lang"), lang);
        assert!(r.header("content-type").starts_with("text/plain"), "{lang}");

        let r = server
            .send(
                Request::post(server.url(&format!("/{lang}/sum")))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(r#"{"a": 2, "b": 40}"#)))?,
            )
            .await?;
        assert_eq!(r.status, StatusCode::OK, "{lang}");
        assert_eq!(r.text(), r#"{"sum":42}"#, "{lang}");

        let r = server
            .send(
                Request::post(server.url(&format!("/{lang}/sum")))
                    .body(Full::new(Bytes::from(r#"{"a": 2,"#)))?,
            )
            .await?;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{lang}");
        // Bytes that are not UTF-8 are not JSON either.
        let r = server
            .send(
                Request::post(server.url(&format!("/{lang}/sum")))
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from_static(b"\xff\xfe{}")))?,
            )
            .await?;
        assert_eq!(r.status, StatusCode::BAD_REQUEST, "{lang}: {}", r.text());

        let r = server
            .get_with(&format!("/{lang}/headers"), &[("x-test", "abc 123")])
            .await?;
        assert_eq!(r.text(), "x-test=abc 123", "{lang}");

        let r = server.get(&format!("/{lang}/env")).await?;
        assert_eq!(r.text(), format!("hi from {lang}"), "{lang}");
    }
    Ok(())
}
