//! Virtual hosts by Host header: port ignored, case-insensitive, default.

use anyhow::Result;
use http::{Request, StatusCode};
use http_body_util::Full;
use swan_tests::{TestServer, TestSite};

#[tokio::test]
async fn the_host_header_picks_the_site() -> Result<()> {
    swan_tests::init_logs();
    let site = TestSite::new()?;
    site.file("a/index.html", "site a")?;
    site.file("b/index.html", "site b")?;
    let config = site.config(
        "[[site]]\nhosts = [\"a.test\", \"www.a.test\"]\nroot = \"a\"\ndefault = true\n\n[[site]]\nhosts = [\"b.test\"]\nroot = \"b\"\n",
    )?;
    let server = TestServer::start(config).await?;
    for (host, want) in [
        ("a.test", "site a"),
        ("www.a.test:8080", "site a"),
        ("b.test", "site b"),
        ("B.TEST:1234", "site b"),
        ("b.test.", "site b"),
        ("unknown.test", "site a"),
    ] {
        let r = server.get_with("/", &[("host", host)]).await?;
        assert_eq!(r.status, StatusCode::OK);
        assert_eq!(r.text(), want, "{host}");
    }
    // HTTP/1.0 without Host goes to the default site.
    let r = server
        .raw(b"GET / HTTP/1.0\r\n\r\n", std::time::Duration::from_secs(5))
        .await?;
    assert!(r.ends_with("site a"), "{r}");
    // HTTP/2 uses :authority.
    let (mut sender, _closed) = server.h2_connection().await?;
    let res = sender
        .send_request(Request::get("http://b.test/").body(Full::<bytes::Bytes>::default())?)
        .await?;
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await?
        .to_bytes();
    assert_eq!(&body[..], b"site b");
    Ok(())
}
