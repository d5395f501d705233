//! Test support: a real swan server on 127.0.0.1:0 and real HTTP clients.
//!
//! [`TestSite`] lays out a site in a temporary folder; [`TestServer`] starts
//! swan on it through the same `swan::serve` entry point the binary uses, and
//! stops it (gracefully) when asked or dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub mod h2raw;
pub mod redis;

/// A folder holding a swan.toml and site roots, removed when dropped.
pub struct TestSite {
    dir: tempfile::TempDir,
}

impl TestSite {
    /// An empty folder.
    pub fn new() -> Result<TestSite> {
        Ok(TestSite {
            dir: tempfile::tempdir().context("temp dir")?,
        })
    }

    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `contents` at `rel` (creating folders), returning the path.
    pub fn file(&self, rel: &str, contents: impl AsRef<[u8]>) -> Result<PathBuf> {
        let path = self.dir.path().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, contents).with_context(|| format!("write {}", path.display()))?;
        Ok(path)
    }

    /// Creates a folder at `rel`.
    pub fn dir(&self, rel: &str) -> Result<PathBuf> {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(&path)?;
        Ok(path)
    }

    /// Parses `toml` as if it were `swan.toml` in this folder.
    pub fn config(&self, toml: &str) -> Result<swan::Config> {
        let file = self.dir.path().join("swan.toml");
        std::fs::write(&file, toml)?;
        swan::Config::parse(toml, &file, self.dir.path()).map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// A running server.
pub struct TestServer {
    reloader: Option<swan::reload::Reloader>,
    addr: SocketAddr,
    app: Arc<swan::App>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), swan::ServeError>>>,
    client: Client<HttpConnector, Full<Bytes>>,
}

/// A response read whole.
#[derive(Debug)]
pub struct Reply {
    /// Status.
    pub status: StatusCode,
    /// Headers.
    pub headers: HeaderMap,
    /// Body.
    pub body: Bytes,
    /// HTTP version.
    pub version: http::Version,
}

impl Reply {
    /// A header as text ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

impl TestServer {
    /// Loads `config` and serves it on 127.0.0.1:0.
    pub async fn start(mut config: swan::Config) -> Result<TestServer> {
        config.server.listen = vec![swan::config::ListenerConfig::plain(SocketAddr::from((
            [127, 0, 0, 1],
            0,
        )))];
        let app = Arc::new(swan::App::load(&config).context("load app")?);
        let listeners = swan::bind(&[config.server.listen[0].addr], 1).context("bind")?;
        let addr = listeners[0][0].local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(swan::serve(app.clone(), listeners, async move {
            let _ = stopped.await;
        }));
        Ok(TestServer {
            reloader: None,
            addr,
            app,
            stop: Some(stop),
            task: Some(task),
            client: Client::builder(TokioExecutor::new()).build_http(),
        })
    }

    /// Loads `config` (read from `file`), serves it on 127.0.0.1:0 and
    /// hot-reloads it as swan serve does.
    pub async fn start_watching(config: swan::Config) -> Result<TestServer> {
        let file = config.file.clone();
        let mut server = TestServer::start(config).await?;
        server.reloader = Some(swan::reload::Reloader::start(
            server.app.clone(),
            swan::reload::ConfigSource {
                file,
                overrides: swan::Overrides::default(),
            },
        )?);
        Ok(server)
    }

    /// Asks the reloader to read the configuration again (as SIGHUP does).
    pub fn reload_config(&self) {
        if let Some(r) = &self.reloader {
            r.reload_config();
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The app, for inspecting state.
    pub fn app(&self) -> &Arc<swan::App> {
        &self.app
    }

    /// Every servlet refusal of every site, as the status page lists them.
    pub fn refusals(&self) -> Vec<String> {
        self.app
            .sites
            .load()
            .iter()
            .flat_map(|s| s.servlets.refused.iter().map(|r| r.error.to_string()))
            .collect()
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// GET `path`.
    pub async fn get(&self, path: &str) -> Result<Reply> {
        self.send(Request::get(self.url(path)).body(Full::default())?)
            .await
    }

    /// Whether GET `path` answers 200 within `limit` (asked again until
    /// it does).
    pub async fn answers_ok_within(&self, path: &str, limit: Duration) -> bool {
        eventually(limit, || async {
            self.get(path)
                .await
                .is_ok_and(|r| r.status == StatusCode::OK)
        })
        .await
    }

    /// GET `path` with extra headers.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Result<Reply> {
        let mut req = Request::get(self.url(path));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Full::default())?).await
    }

    /// Sends a request over HTTP/1.1 (pooled keep-alive connections).
    pub async fn send(&self, req: Request<Full<Bytes>>) -> Result<Reply> {
        send_with(&self.client, req).await
    }

    /// GET `path` on a task of its own, for requests at once; this
    /// server's client is shared.
    pub fn spawn_get(&self, path: &str) -> JoinHandle<Result<Reply>> {
        let (client, url) = (self.client.clone(), self.url(path));
        tokio::spawn(
            async move { send_with(&client, Request::get(url).body(Full::default())?).await },
        )
    }

    /// Sends a request over HTTP/2 with prior knowledge.
    pub async fn send_h2(&self, req: Request<Full<Bytes>>) -> Result<Reply> {
        let client: Client<HttpConnector, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build_http();
        let res = tokio::time::timeout(Duration::from_secs(30), client.request(req))
            .await
            .context("request timed out")??;
        read_reply(res).await
    }

    /// One HTTP/2 connection (prior knowledge) to send requests on, and
    /// what resolves when the server has closed it.
    pub async fn h2_connection(
        &self,
    ) -> Result<(
        hyper::client::conn::http2::SendRequest<Full<Bytes>>,
        oneshot::Receiver<()>,
    )> {
        let stream = TcpStream::connect(self.addr).await?;
        let (sender, conn) = hyper::client::conn::http2::handshake(
            TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await?;
        let (closed, on_close) = oneshot::channel();
        tokio::spawn(async move {
            let _ = conn.await;
            let _ = closed.send(());
        });
        Ok((sender, on_close))
    }

    /// Writes raw bytes on a new connection and reads until the server
    /// closes it or `wait` passes.
    pub async fn raw(&self, request: &[u8], wait: Duration) -> Result<String> {
        let mut stream = TcpStream::connect(self.addr).await?;
        stream.write_all(request).await?;
        Ok(read_until_close(&mut stream, wait).await)
    }

    /// Stops the server gracefully and waits for it.
    pub async fn stop(mut self) -> Result<()> {
        self.shutdown().await
    }

    async fn shutdown(&mut self) -> Result<()> {
        self.reloader.take();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(30), task)
                .await
                .context("server did not stop")???;
        }
        Ok(())
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Sends `req` on `client`, within 30 s, and reads the reply whole.
async fn send_with(
    client: &Client<HttpConnector, Full<Bytes>>,
    req: Request<Full<Bytes>>,
) -> Result<Reply> {
    let res = tokio::time::timeout(Duration::from_secs(30), client.request(req))
        .await
        .context("request timed out")??;
    read_reply(res).await
}

/// Reads from `stream` until EOF or `wait` passes; returns what came.
pub async fn read_until_close(stream: &mut TcpStream, wait: Duration) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// One HTTP/1.1 response read off a raw connection.
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// The head, status line included, without its blank line.
    pub head: String,
    /// The body (empty for a 304).
    pub body: Vec<u8>,
}

/// Reads the next response (with a Content-Length, or a 304) from
/// `stream`; `buffered` holds bytes read past the previous one and keeps
/// those read past this one.
pub async fn read_response(stream: &mut TcpStream, buffered: &mut Vec<u8>) -> Result<RawResponse> {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        if let Some(end) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffered[..end]).into_owned();
            let status: u16 = head
                .get(9..12)
                .and_then(|s| s.parse().ok())
                .context("status line")?;
            let length: usize = if status == 304 {
                0
            } else {
                head.lines()
                    .find_map(|l| {
                        let (name, value) = l.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .context("content-length")?
            };
            if buffered.len() >= end + 4 + length {
                let body = buffered[end + 4..end + 4 + length].to_vec();
                buffered.drain(..end + 4 + length);
                return Ok(RawResponse { status, head, body });
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
            .await
            .context("response timed out")??;
        anyhow::ensure!(n > 0, "closed after {} bytes of a response", buffered.len());
        buffered.extend_from_slice(&buf[..n]);
    }
}

/// Reads until the server ends `stream` (EOF or reset), within `wait`;
/// the bytes that came, or an error if it stayed open.
pub async fn read_until_ended(stream: &mut TcpStream, wait: Duration) -> Result<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = vec![0u8; 256 << 10];
    tokio::time::timeout(wait, async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .context("the connection stayed open")?;
    Ok(got)
}

/// Whether the server closed `stream` within `wait` (EOF or reset).
pub async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

async fn read_reply(res: http::Response<hyper::body::Incoming>) -> Result<Reply> {
    let (parts, body) = res.into_parts();
    let body = body.collect().await?.to_bytes();
    Ok(Reply {
        status: parts.status,
        headers: parts.headers,
        body,
        version: parts.version,
    })
}

/// Installs a test log subscriber once (RUST_LOG controls it).
pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_test_writer()
        .try_init();
}

/// Builds the example servlets from source (once per test process) and
/// returns the folder holding `hello.wasm`, `json-api.wasm`,
/// `hello-c.wasm` and `hello-as.wasm`.
pub fn example_servlets() -> Result<PathBuf> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let out = root.join("target").join("example-servlets");
            let status = std::process::Command::new(root.join("examples/build.sh"))
                .arg(&out)
                .status()
                .map_err(|e| format!("cannot run examples/build.sh: {e}"))?;
            if !status.success() {
                return Err(
                    "examples/build.sh failed; run scripts/setup to install the wasm toolchains"
                        .to_owned(),
                );
            }
            Ok(out)
        })
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// Builds a test guest crate `tests/guests/NAME` for `target` (once per
/// test process and crate) and returns the `.wasm` it made.
pub fn guest(name: &str, target: &str) -> Result<PathBuf> {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().map_err(|_| anyhow::anyhow!("lock"))?;
    if let Some((_, path)) = built.iter().find(|(n, _)| n == name) {
        return Ok(path.clone());
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let manifest = root.join("tests/guests").join(name).join("Cargo.toml");
    let status =
        std::process::Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .current_dir(&root)
            .args([
                "build",
                "--quiet",
                "--release",
                "--target",
                target,
                "--manifest-path",
            ])
            .arg(&manifest)
            .status()
            .context("run cargo")?;
    anyhow::ensure!(
        status.success(),
        "building tests/guests/{name} failed; run scripts/setup to install the {target} target"
    );
    let file = root
        .join("tests/guests")
        .join(name)
        .join("target")
        .join(target)
        .join("release")
        .join(format!("{}.wasm", name.replace('-', "_")));
    built.push((name.to_owned(), file.clone()));
    Ok(file)
}

/// Builds the example components (Rust, JavaScript, Python) from source
/// (once per test process) and returns the folder holding
/// `hello-rust.wasm`, `hello-js.wasm` and `hello-python.wasm`; `which`
/// limits the build to some of them.
pub fn example_components(which: &[&str]) -> Result<PathBuf> {
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = root.join("target").join("example-components");
    let mut built = BUILT.lock().map_err(|_| anyhow::anyhow!("lock"))?;
    let missing: Vec<&str> = which
        .iter()
        .copied()
        .filter(|w| !built.iter().any(|b| b == w))
        .collect();
    if !missing.is_empty() {
        let status = std::process::Command::new(root.join("examples/build-components.sh"))
            .arg(&out)
            .args(&missing)
            .status()
            .context("run examples/build-components.sh")?;
        anyhow::ensure!(
            status.success(),
            "examples/build-components.sh failed; run scripts/setup to install the toolchains"
        );
        built.extend(missing.iter().map(|m| (*m).to_owned()));
    }
    Ok(out)
}

/// Polls `check` every 10 ms until it returns true or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
