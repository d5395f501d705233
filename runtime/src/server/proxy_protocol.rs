//! The PROXY protocol, v1 (text) and v2 (binary), as HAProxy specifies it:
//! a load balancer that terminates TCP says who the client is in a header
//! before the first byte of HTTP. Parsing is the `ppp` crate's; this module
//! reads exactly the header's bytes off the socket (so nothing of the
//! request that follows is consumed) and believes it only from trusted
//! peers.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use ppp::{HeaderResult, v1, v2};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::config::ProxyConfig;

/// The v2 signature.
const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
/// A v1 header is at most this long, `\r\n` included.
const V1_MAX: usize = 107;
/// A v2 header's address block and TLVs are read up to this size.
const V2_MAX: usize = 4096;

/// Why a connection's PROXY header was refused (the connection closes).
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// The peer is not in `[server.proxy] trusted`.
    #[error("PROXY header from {0}, which is not a trusted proxy")]
    Untrusted(IpAddr),
    /// Not a PROXY header, or a malformed one.
    #[error("malformed PROXY header: {0}")]
    Malformed(String),
    /// It did not arrive within the header read timeout.
    #[error("no PROXY header in time")]
    Timeout,
    /// The peer closed before sending a byte: a TCP health check, not a
    /// refusal worth a warning.
    #[error("closed before sending anything")]
    Closed,
    /// The connection failed.
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// Who a PROXY header says the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Client {
    /// Its address (the proxy's own for a LOCAL or UNKNOWN header).
    pub(crate) addr: SocketAddr,
    /// It reached the proxy over TLS (v2's `PP2_TYPE_SSL` with
    /// `PP2_CLIENT_SSL`): it used HTTPS, though this hop is plain TCP.
    pub(crate) tls: bool,
}

/// `PP2_TYPE_SSL`, and its `PP2_CLIENT_SSL` flag.
const PP2_TYPE_SSL: u8 = 0x20;
const PP2_CLIENT_SSL: u8 = 0x01;

/// Reads the PROXY header that starts `stream`, from `peer`: the client it
/// names, or `peer` itself for a LOCAL (health check) or UNKNOWN header.
pub(crate) async fn read_header(
    stream: &mut TcpStream,
    peer: SocketAddr,
    proxy: &ProxyConfig,
    timeout: Duration,
) -> Result<Client, ProxyError> {
    if !proxy.trusts(peer.ip()) {
        return Err(ProxyError::Untrusted(peer.ip()));
    }
    let header = tokio::time::timeout(timeout, read_bytes(stream))
        .await
        .map_err(|_| ProxyError::Timeout)??;
    client_of(&header, peer)
}

/// The header's bytes, and not one more.
async fn read_bytes(stream: &mut TcpStream) -> Result<Vec<u8>, ProxyError> {
    match stream.peek(&mut [0u8; 1]).await {
        Ok(0) => return Err(ProxyError::Closed),
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Err(ProxyError::Closed),
        Ok(_) | Err(_) => {}
    }
    let mut header = vec![0u8; 12];
    stream.read_exact(&mut header).await?;
    if header == V2_SIGNATURE {
        let mut fixed = [0u8; 4];
        stream.read_exact(&mut fixed).await?;
        let len = usize::from(u16::from_be_bytes([fixed[2], fixed[3]]));
        if len > V2_MAX {
            return Err(ProxyError::Malformed(format!("{len}-byte v2 header")));
        }
        header.extend_from_slice(&fixed);
        let start = header.len();
        header.resize(start + len, 0);
        stream.read_exact(&mut header[start..]).await?;
        return Ok(header);
    }
    if !header.starts_with(b"PROXY ") {
        return Err(ProxyError::Malformed(
            "the connection did not start with one".to_owned(),
        ));
    }
    // v1: up to the first "\n", which must end "\r\n". Peek at what has
    // arrived and take only the header's part of it.
    let mut peeked = [0u8; V1_MAX];
    while !header.ends_with(b"\n") {
        let room = V1_MAX.saturating_sub(header.len());
        if room == 0 || header.contains(&b'\n') {
            return Err(ProxyError::Malformed(
                "v1 header longer than 107 bytes".to_owned(),
            ));
        }
        let n = stream.peek(&mut peeked[..room]).await?;
        if n == 0 {
            return Err(ProxyError::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        let take = peeked[..n]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(n, |i| i + 1);
        let start = header.len();
        header.resize(start + take, 0);
        stream.read_exact(&mut header[start..]).await?;
    }
    if !header.ends_with(b"\r\n") {
        return Err(ProxyError::Malformed("v1 header without \\r\\n".to_owned()));
    }
    Ok(header)
}

/// The client `header` names.
fn client_of(header: &[u8], peer: SocketAddr) -> Result<Client, ProxyError> {
    // `::ffff:203.0.113.7` is `203.0.113.7`, as X-Forwarded-For reads it:
    // one client, one address in the log and to servlets.
    let canonical = |a: SocketAddr| SocketAddr::new(a.ip().to_canonical(), a.port());
    parsed(header, peer).map(|c| Client {
        addr: canonical(c.addr),
        tls: c.tls,
    })
}

fn parsed(header: &[u8], peer: SocketAddr) -> Result<Client, ProxyError> {
    match HeaderResult::parse(header) {
        HeaderResult::V1(Ok(h)) => Ok(Client {
            addr: match h.addresses {
                v1::Addresses::Tcp4(a) => SocketAddr::from((a.source_address, a.source_port)),
                v1::Addresses::Tcp6(a) => SocketAddr::from((a.source_address, a.source_port)),
                v1::Addresses::Unknown => peer,
            },
            tls: false,
        }),
        HeaderResult::V2(Ok(h)) => {
            // A LOCAL header's block is discarded unread. Otherwise a TLV
            // that runs past the header's end (or is cut short) makes the
            // header malformed, as the specification says, not one to read
            // up to its first bad TLV.
            let local = h.command == v2::Command::Local;
            if !local && h.tlvs().any(|tlv| tlv.is_err()) {
                return Err(ProxyError::Malformed(
                    "v2 header with a malformed TLV".to_owned(),
                ));
            }
            let tls = !local
                && h.tlvs().flatten().any(|tlv| {
                    tlv.kind == PP2_TYPE_SSL
                        && tlv.value.first().is_some_and(|c| c & PP2_CLIENT_SSL != 0)
                });
            let addr = match (h.command, h.addresses) {
                (v2::Command::Local, _) => peer,
                (_, v2::Addresses::IPv4(a)) => SocketAddr::from((a.source_address, a.source_port)),
                (_, v2::Addresses::IPv6(a)) => SocketAddr::from((a.source_address, a.source_port)),
                (_, _) => peer,
            };
            Ok(Client { addr, tls })
        }
        HeaderResult::V1(Err(e)) => Err(ProxyError::Malformed(format!("{e:?}"))),
        HeaderResult::V2(Err(e)) => Err(ProxyError::Malformed(format!("{e:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer() -> SocketAddr {
        SocketAddr::from(([10, 0, 0, 1], 40000))
    }

    #[test]
    fn v1_and_v2_headers_name_the_client() {
        let v1 = b"PROXY TCP4 203.0.113.7 10.0.0.2 51000 8080\r\n";
        assert_eq!(
            client_of(v1, peer()).ok().map(|c| c.addr),
            Some(SocketAddr::from(([203, 0, 113, 7], 51000)))
        );
        let v1_6 = b"PROXY TCP6 2001:db8::7 2001:db8::1 51000 443\r\n";
        assert_eq!(
            client_of(v1_6, peer())
                .map(|c| c.addr.to_string())
                .ok()
                .as_deref(),
            Some("[2001:db8::7]:51000")
        );
        assert_eq!(
            client_of(b"PROXY UNKNOWN\r\n", peer()).ok().map(|c| c.addr),
            Some(peer())
        );
        // An IPv4-mapped client is its IPv4 address, as X-Forwarded-For
        // reads it.
        let mapped = b"PROXY TCP6 ::ffff:203.0.113.7 ::1 51000 443\r\n";
        assert_eq!(
            client_of(mapped, peer()).ok().map(|c| c.addr),
            Some(SocketAddr::from(([203, 0, 113, 7], 51000)))
        );
        let mut v2 = V2_SIGNATURE.to_vec();
        v2.extend_from_slice(&[
            0x21, 0x11, 0, 12, 198, 51, 100, 9, 10, 0, 0, 2, 0xC3, 0x50, 0x1F, 0x90,
        ]);
        assert_eq!(
            client_of(&v2, peer()).ok(),
            Some(Client {
                addr: SocketAddr::from(([198, 51, 100, 9], 50000)),
                tls: false
            })
        );
        // The same with PP2_TYPE_SSL: the client came over TLS (flags
        // PP2_CLIENT_SSL, verify 0, no sub-TLVs); without the flag, not.
        for (client_flags, tls) in [(0x01, true), (0x00, false)] {
            let mut ssl = V2_SIGNATURE.to_vec();
            ssl.extend_from_slice(&[0x21, 0x11, 0, 20, 198, 51, 100, 9, 10, 0, 0, 2]);
            ssl.extend_from_slice(&[0xC3, 0x50, 0x1F, 0x90]);
            ssl.extend_from_slice(&[0x20, 0, 5, client_flags, 0, 0, 0, 0]);
            assert_eq!(client_of(&ssl, peer()).ok().map(|c| c.tls), Some(tls));
        }
        // A TLV claiming 80 bytes where 3 are left, and one cut inside its
        // own type and length: malformed.
        for tlvs in [&[0x02, 0x00, 0x50, b'a', b'b', b'c'][..], &[0x02, 0x00][..]] {
            let mut bad = V2_SIGNATURE.to_vec();
            let len = 12 + tlvs.len() as u8;
            bad.extend_from_slice(&[0x21, 0x11, 0, len, 198, 51, 100, 9, 10, 0, 0, 2]);
            bad.extend_from_slice(&[0xC3, 0x50, 0x1F, 0x90]);
            bad.extend_from_slice(tlvs);
            assert!(client_of(&bad, peer()).is_err(), "{tlvs:?}");
        }
        // LOCAL: a health check from the proxy itself.
        let mut local = V2_SIGNATURE.to_vec();
        local.extend_from_slice(&[0x20, 0x00, 0, 0]);
        assert_eq!(client_of(&local, peer()).ok().map(|c| c.addr), Some(peer()));
        assert!(client_of(b"PROXY TCP4 nonsense\r\n", peer()).is_err());
    }
}
