//! HTTPS: rustls with ALPN (`h2`, `http/1.1`), session resumption (tickets
//! and a session cache), and the certificate reloaded when its files
//! change: a watcher thread checks the files' size and modification time
//! every second and swaps a new certificate in for new handshakes; a pair
//! that fails to load is logged and the previous one keeps serving.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio_rustls::TlsAcceptor;

use crate::certs;
use crate::config::TlsConfig;
use crate::file_stamp::FileStamp;

/// How often the certificate files are checked for changes.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// TLS sessions remembered for resumption by session id.
const SESSION_CACHE: usize = 4096;

/// Why TLS cannot start.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The certificate or key.
    #[error(transparent)]
    Cert(#[from] certs::CertError),
    /// rustls refused the configuration.
    #[error("TLS setup: {0}")]
    Setup(#[from] rustls::Error),
}

/// The certificate handshakes use now.
#[derive(Debug)]
struct Current(ArcSwap<CertifiedKey>);

impl ResolvesServerCert for Current {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// Loads the certificate, builds the acceptor every TLS listener shares,
/// and starts watching the files.
pub(crate) fn acceptor(config: &TlsConfig) -> Result<TlsAcceptor, TlsError> {
    let key = certs::load(&config.cert, &config.key)?;
    if let Some(problem) = certs::validity_problem(&key) {
        tracing::warn!(
            cert = %config.cert.display(),
            "the TLS certificate {problem}: clients will refuse it until it is replaced (swan reloads it when the files change)"
        );
    }
    let current = Arc::new(Current(ArcSwap::from_pointee(key)));
    let mut server = rustls::ServerConfig::builder_with_provider(certs::provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(current.clone());
    // `http/1.0` too: a client offering only that (`curl -0`) would
    // otherwise fail the handshake, where NGINX serves it.
    server.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec(), b"http/1.0".to_vec()];
    server.session_storage = rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE);
    server.ticketer = rustls::crypto::ring::Ticketer::new()?;
    watch(config.clone(), current);
    Ok(TlsAcceptor::from(Arc::new(server)))
}

/// Reloads the certificate when either file changes, for as long as the
/// process runs.
fn watch(config: TlsConfig, current: Arc<Current>) {
    let (cert, key) = (config.cert.clone(), config.key.clone());
    let stamps = move || (FileStamp::of(&cert), FileStamp::of(&key));
    let mut seen = stamps();
    // A pair on disk refused for its dates (a renewal written before its
    // start, or the serving one still good while the new one expired) is
    // kept, and its dates looked at again every time (not its files, which
    // have not changed): a renewal becomes good by itself, and the serving
    // certificate may expire meanwhile.
    let mut dated: Option<CertifiedKey> = None;
    let spawned = std::thread::Builder::new()
        .name("swan-tls-watch".to_owned())
        .spawn(move || {
            loop {
                std::thread::sleep(WATCH_EVERY);
                let now = stamps();
                let changed = now != seen;
                let key = if changed {
                    seen = now;
                    // The files changed again: a pair waiting for its
                    // dates is no longer on disk, and must never serve.
                    dated = None;
                    match certs::load(&config.cert, &config.key) {
                        Ok(key) => key,
                        Err(e) => {
                            tracing::error!(
                                error = %e,
                                "TLS certificate change refused; the previous certificate keeps serving"
                            );
                            continue;
                        }
                    }
                } else {
                    match dated.take() {
                        Some(key) => key,
                        None => continue,
                    }
                };
                match certs::validity_problem(&key) {
                    // Out of date, where the one serving is not: it would
                    // fail every handshake.
                    Some(problem) if certs::validity_problem(&current.0.load()).is_none() => {
                        if changed {
                            tracing::error!(
                                cert = %config.cert.display(),
                                "TLS certificate change refused: the new certificate {problem}; the previous certificate keeps serving (the new one is looked at again until its dates allow it, or the previous one expires)"
                            );
                        }
                        dated = Some(key);
                    }
                    _ => {
                        current.0.store(Arc::new(key));
                        tracing::info!(cert = %config.cert.display(), "TLS certificate reloaded");
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot watch the TLS certificate; changes need a restart");
    }
}

/// The answer to plain HTTP sent to an HTTPS listener (NGINX's, in words):
/// a client that left out `https://` learns why, instead of reading a TLS
/// alert as garbage.
const PLAIN_HTTP_BODY: &str = "The plain HTTP request was sent to an HTTPS port.\n";

/// Whether a connection's first byte is plain HTTP, not a TLS record: a
/// TLS handshake starts with 0x16, a request line with a method's
/// uppercase letter. Waits for the byte (bounded by the caller).
pub(super) async fn starts_plain_http(stream: &tokio::net::TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(stream.peek(&mut first).await, Ok(1) if first[0].is_ascii_uppercase())
}

/// Answers plain HTTP on an HTTPS listener with 400 and closes, reading
/// what the client sends meanwhile (as `linger_close` does) so that the
/// answer is not lost to a reset.
pub(super) async fn answer_plain_http(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt;
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\nserver: swan\r\ndate: {}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{PLAIN_HTTP_BODY}",
        httpdate::fmt_http_date(crate::clock::wall()),
        PLAIN_HTTP_BODY.len()
    );
    let written = tokio::time::timeout(
        super::conn::LINGER_TIME,
        stream.write_all(answer.as_bytes()),
    )
    .await;
    if matches!(written, Ok(Ok(()))) {
        super::conn::linger_close(stream).await;
    }
}
