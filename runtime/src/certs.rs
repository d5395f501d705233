//! A PEM certificate chain and private key, loaded into what rustls serves.
//! PEM parsing is rustls-pki-types' own (no separate, unmaintained PEM
//! crate); the key is checked to belong to the leaf certificate, so a
//! mismatched pair is refused at load instead of failing every handshake.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read or holds no PEM object of the right kind.
    #[error("{file}: {reason}")]
    File {
        /// The file.
        file: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The key is not usable, or does not belong to the certificate.
    #[error("{0}")]
    Key(String),
}

/// The crypto provider swan's TLS uses (ring, like the outbound client).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Loads `cert` (a PEM chain, leaf first) and `key` (PKCS#8, PKCS#1 or
/// SEC1 PEM).
pub fn load(cert: &Path, key: &Path) -> Result<CertifiedKey, CertError> {
    let chain = load_chain(cert)?;
    let signing = load_key(key)?;
    pair(chain, signing, cert, key)
}

/// What is wrong with `cert` and `key` (`swan check`, configuration
/// errors): each file's own problem, else whether they belong together.
pub fn problems(cert: &Path, key: &Path) -> CertProblems {
    match (load_chain(cert), load_key(key)) {
        (Ok(chain), Ok(signing)) => match pair(chain, signing, cert, key) {
            Ok(_) => CertProblems::default(),
            Err(e @ CertError::File { .. }) => CertProblems {
                cert: Some(e),
                ..CertProblems::default()
            },
            Err(e) => CertProblems {
                pair: Some(e),
                ..CertProblems::default()
            },
        },
        (chain, signing) => CertProblems {
            cert: chain.err(),
            key: signing.err(),
            pair: None,
        },
    }
}

/// [`problems`]' answer.
#[derive(Debug, Default)]
pub struct CertProblems {
    /// The certificate file's own problem.
    pub cert: Option<CertError>,
    /// The key file's own problem.
    pub key: Option<CertError>,
    /// Both files are fine, but the key does not belong to the certificate.
    pub pair: Option<CertError>,
}

fn file_error(file: &Path, reason: String) -> CertError {
    CertError::File {
        file: file.display().to_string(),
        reason,
    }
}

/// The certificate chain in `cert`, every block of it parsed.
fn load_chain(cert: &Path) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let cert_pem = read_pem(cert).map_err(|reason| file_error(cert, reason))?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(cert, pem_reason(&e)))?;
    if chain.is_empty() {
        return Err(file_error(
            cert,
            "no CERTIFICATE block in the file".to_owned(),
        ));
    }
    // Every block, not only the leaf (which the key check reads): a
    // damaged intermediate would fail every verifying client's handshake.
    for (n, der) in chain.iter().enumerate() {
        if let Err(e) = x509_parser::parse_x509_certificate(der) {
            return Err(file_error(
                cert,
                format!(
                    "certificate {} of the chain is not a valid X.509 certificate: {e}",
                    n + 1
                ),
            ));
        }
    }
    Ok(chain)
}

/// The private key in `key`, loaded by the crypto provider.
fn load_key(key: &Path) -> Result<Arc<dyn rustls::sign::SigningKey>, CertError> {
    let key_pem = read_pem(key).map_err(|reason| file_error(key, reason))?;
    let der =
        PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| file_error(key, pem_reason(&e)))?;
    provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| CertError::Key(format!("{}: unusable private key: {e}", key.display())))
}

/// The chain and key together, if the key belongs to the chain's leaf.
fn pair(
    chain: Vec<CertificateDer<'static>>,
    signing: Arc<dyn rustls::sign::SigningKey>,
    cert: &Path,
    key: &Path,
) -> Result<CertifiedKey, CertError> {
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        // rustls says "keys may not be consistent: KeyMismatch"; the
        // sentence says it already, and only an unknown key needs more.
        let why = match e {
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch) => String::new(),
            rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown) => {
                " (the key's public half could not be compared with the certificate's)".to_owned()
            }
            // The leaf could not be parsed to compare: the certificate's
            // problem, not the key's.
            e => return file_error(cert, unusable_certificate(&e)),
        };
        CertError::Key(format!(
            "{} does not belong to the certificate in {}{why}",
            key.display(),
            cert.display()
        ))
    })?;
    Ok(certified)
}

/// Why rustls cannot use a leaf certificate that parsed as PEM.
fn unusable_certificate(e: &rustls::Error) -> String {
    // webpki's error sits behind rustls' `OtherError`; its name is the
    // one stable handle on it.
    if format!("{e:?}").contains("UnsupportedCertVersion") {
        return "an X.509 version 1 certificate, which rustls does not accept: make a version 3 one (`openssl req -x509`, or `openssl x509 -req` with `-extfile` naming its extensions)".to_owned();
    }
    format!("not a certificate rustls can use ({e})")
}

/// The most a certificate chain or key file may hold.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// A PEM file's bytes: a regular file (a FIFO put at the path would hold
/// the watcher, or `swan check`, for good) of at most [`MAX_PEM_BYTES`].
fn read_pem(path: &Path) -> Result<Vec<u8>, String> {
    crate::regular_file::read(path, crate::regular_file::Links::Follow, MAX_PEM_BYTES)
        .map_err(|e| e.to_string())
}

fn pem_reason(e: &rustls::pki_types::pem::Error) -> String {
    use rustls::pki_types::pem::Error;
    match e {
        Error::Io(io) => io.to_string(),
        Error::NoItemsFound => "no PEM block of the expected kind in the file".to_owned(),
        // The marker as text, not as the bytes `Debug` shows.
        Error::MissingSectionEnd { end_marker } => format!(
            "not valid PEM: a block does not end (no `{}` line; is the file still being written?)",
            String::from_utf8_lossy(end_marker).trim()
        ),
        Error::IllegalSectionStart { line } => format!(
            "not valid PEM: a malformed block start `{}`",
            String::from_utf8_lossy(line).trim()
        ),
        other => format!("not valid PEM: {other}"),
    }
}

/// When the leaf certificate of a pair is valid, for people.
#[derive(Debug, Clone)]
pub struct Validity {
    /// What is wrong with it now, if anything: it has expired, or is not
    /// valid yet. Clients refuse such a certificate, so a reload keeps the
    /// one serving instead, and start-up and `swan check` say so.
    pub problem: Option<String>,
    /// When it expires.
    pub expires: String,
}

/// The validity of `key`'s leaf certificate; `None` when it cannot be read
/// (rustls served it, so that does not stop it serving).
pub fn validity(key: &CertifiedKey) -> Option<Validity> {
    let leaf = key.cert.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let v = cert.validity();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let problem = if now > v.not_after.timestamp() {
        Some(format!("expired on {}", v.not_after))
    } else if now < v.not_before.timestamp() {
        Some(format!("is not valid before {}", v.not_before))
    } else {
        None
    };
    Some(Validity {
        problem,
        expires: v.not_after.to_string(),
    })
}

/// [`validity`]'s problem, if any.
pub fn validity_problem(key: &CertifiedKey) -> Option<String> {
    validity(key).and_then(|v| v.problem)
}

#[cfg(test)]
mod tests {
    use super::{load, pem_reason};
    use rustls::pki_types::pem::Error;

    /// An X.509 version 1 certificate (what `openssl x509 -req` makes
    /// without `-extfile`), which rustls refuses: the message names the
    /// certificate and says what to make instead, not that the key does
    /// not belong to it. A throwaway pair made for this test.
    #[test]
    fn a_version_1_certificate_is_the_certificates_problem() {
        const V1_CERT: &str = "\
-----BEGIN CERTIFICATE-----\n\
MIIBJDCBywIUY9y7HUPkvGENv/L/xXFM5sjQzgIwCgYIKoZIzj0EAwIwFDESMBAG\n\
A1UEAwwJbG9jYWxob3N0MCAXDTI2MTIwMzE4MDgzN1oYDzIxMjYxMTA5MTgwODM3\n\
WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC\n\
AATiDcrCi6+8Ear5Dg5jur+yJMrWyye08DWKSjjR1/Rkz8h99xS8zNhq4xLTwt17\n\
PDf1b0CAzTD7tHzakQ16Qp9dMAoGCCqGSM49BAMCA0gAMEUCIC7sQZWDSgEZyVZT\n\
sjrcr8nOtN0Fsx0HvF9O9aN4lrUOAiEA/5y8u9U4aq/mDMcytvE3fEA9cj4pPdav\n\
5JQCDJrtr+Q=\n\
-----END CERTIFICATE-----\n\
";
        const V1_KEY: &str = "\
-----BEGIN PRIVATE KEY-----\n\
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg/EkrKREwiASqWWhJ\n\
8KhG8tU+XbPyMFNGcJcp6LBKvxuhRANCAATiDcrCi6+8Ear5Dg5jur+yJMrWyye0\n\
8DWKSjjR1/Rkz8h99xS8zNhq4xLTwt17PDf1b0CAzTD7tHzakQ16Qp9d\n\
-----END PRIVATE KEY-----\n\
";
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert_path, V1_CERT).expect("cert");
        std::fs::write(&key_path, V1_KEY).expect("key");
        let problems = super::problems(&cert_path, &key_path);
        assert!(
            problems.key.is_none() && problems.pair.is_none(),
            "{problems:?}"
        );
        let err = problems.cert.expect("the certificate refused").to_string();
        assert!(err.starts_with(&cert_path.display().to_string()), "{err}");
        assert!(err.contains("X.509 version 1"), "{err}");
        let err = load(&cert_path, &key_path)
            .expect_err("refused")
            .to_string();
        assert!(!err.contains("does not belong"), "{err}");
    }

    /// A chain with a block that is not a certificate (a damaged
    /// intermediate) is refused, where only the leaf used to be read; a
    /// FIFO at the key's path is refused at once instead of blocking.
    #[test]
    fn a_damaged_chain_block_or_a_fifo_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = rcgen::KeyPair::generate().expect("key");
        let leaf = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&key_path, key.serialize_pem()).expect("key");
        std::fs::write(&cert_path, leaf.pem()).expect("cert");
        assert!(load(&cert_path, &key_path).is_ok());
        let damaged = format!(
            "{}-----BEGIN CERTIFICATE-----\nAAAAAAAA\n-----END CERTIFICATE-----\n",
            leaf.pem()
        );
        std::fs::write(&cert_path, damaged).expect("cert");
        let err = load(&cert_path, &key_path)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("certificate 2 of the chain"), "{err}");
        std::fs::write(&cert_path, leaf.pem()).expect("cert");
        let fifo = dir.path().join("fifo.pem");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let err = load(&cert_path, &fifo).expect_err("refused").to_string();
        assert!(err.contains("not a regular file"), "{err}");
        let err = load(&fifo, &key_path).expect_err("refused").to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    /// A half-written file names the marker it lacks as text, not bytes.
    #[test]
    fn pem_errors_read_as_text() {
        let missing = Error::MissingSectionEnd {
            end_marker: b"-----END CERTIFICATE-----".to_vec(),
        };
        let text = pem_reason(&missing);
        assert!(
            text.contains("no `-----END CERTIFICATE-----` line"),
            "{text}"
        );
        assert!(!text.contains("[45"), "{text}");
    }
}
