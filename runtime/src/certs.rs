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
    let file_error = |file: &Path, reason: String| CertError::File {
        file: file.display().to_string(),
        reason,
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| file_error(cert, pem_reason(&e)))?
        .collect::<Result<_, _>>()
        .map_err(|e| file_error(cert, pem_reason(&e)))?;
    if chain.is_empty() {
        return Err(file_error(
            cert,
            "no CERTIFICATE block in the file".to_owned(),
        ));
    }
    let der = PrivateKeyDer::from_pem_file(key).map_err(|e| file_error(key, pem_reason(&e)))?;
    let provider = provider();
    let signing = provider
        .key_provider
        .load_private_key(der)
        .map_err(|e| CertError::Key(format!("{}: unusable private key: {e}", key.display())))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        CertError::Key(format!(
            "{} does not belong to the certificate in {}: {e}",
            key.display(),
            cert.display()
        ))
    })?;
    Ok(certified)
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
    use super::pem_reason;
    use rustls::pki_types::pem::Error;

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
