//! Who is on the other end: the connection's peer, the client it speaks
//! for, and whether the connection is encrypted. The client comes from a
//! trusted PROXY protocol header, or from a trusted proxy's
//! `X-Forwarded-For` ([`Peer::forwarded`]); everyone else is who their
//! socket says.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use http::header::HeaderName;

use crate::config::ProxyConfig;

/// The client address header a trusted proxy sets, and swan sets for a
/// servlet.
pub const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The scheme header a trusted proxy sets, and swan sets for a servlet.
pub const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// The other end of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The TCP peer: a load balancer, or the client itself.
    pub addr: SocketAddr,
    /// The client, as a trusted PROXY protocol header named it (else
    /// `addr`).
    pub client: SocketAddr,
    /// Whether the connection is TLS.
    pub tls: bool,
}

impl Peer {
    /// A direct connection from `addr`.
    pub fn direct(addr: SocketAddr, tls: bool) -> Peer {
        Peer {
            addr,
            client: addr,
            tls,
        }
    }

    /// The client and scheme of one request: when the connection comes
    /// from a trusted proxy, its `X-Forwarded-For` (the rightmost address
    /// that is not itself a trusted proxy) and `X-Forwarded-Proto` are
    /// believed. Returns the client and whether the client used HTTPS.
    pub fn forwarded(&self, headers: &HeaderMap, proxy: &ProxyConfig) -> (SocketAddr, bool) {
        if proxy.trusted.is_empty() || !proxy.trusts(self.client.ip()) {
            return (self.client, self.tls);
        }
        let mut client = self.client;
        // Every X-Forwarded-For header, in order, as one list; walk it from
        // the right while the hops are trusted proxies.
        let hops: Vec<&str> = headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            // Empty list elements are allowed and mean nothing (RFC 9110
            // §5.6.1).
            .filter(|hop| !hop.is_empty())
            .collect();
        for hop in hops.iter().rev() {
            let Some(ip) = parse_hop(hop) else { break };
            // `::ffff:203.0.113.9` is 203.0.113.9.
            let ip = ip.to_canonical();
            client = SocketAddr::new(ip, 0);
            if !proxy.trusts(ip) {
                break;
            }
        }
        // The rightmost value is the one the nearest (trusted) proxy set;
        // anything left of it came from further away, maybe the client.
        let proto = headers
            .get_all(&X_FORWARDED_PROTO)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|p| !p.is_empty());
        let https = match proto {
            Some(p) => p.eq_ignore_ascii_case("https"),
            None => self.tls,
        };
        (client, https)
    }
}

/// An `X-Forwarded-For` hop: an IP, possibly `[v6]`, possibly with a port.
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(ip) = hop.parse() {
        return Some(ip);
    }
    if let Ok(addr) = hop.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    hop.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_net;

    fn proxy(nets: &[&str]) -> ProxyConfig {
        ProxyConfig {
            trusted: nets.iter().filter_map(|n| parse_net(n)).collect(),
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, http::HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn only_trusted_proxies_are_believed() {
        let lb = Peer::direct(SocketAddr::from(([10, 0, 0, 1], 5000)), false);
        let stranger = Peer::direct(SocketAddr::from(([198, 51, 100, 1], 5000)), false);
        let p = proxy(&["10.0.0.0/8"]);
        let h = headers(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-proto", "https"),
        ]);
        let (client, https) = lb.forwarded(&h, &p);
        assert_eq!(client.ip().to_string(), "203.0.113.9");
        assert!(https);
        // The same headers from anyone else are ignored.
        assert_eq!(stranger.forwarded(&h, &p), (stranger.client, false));
        // Spoofed entries on the left are skipped: the rightmost untrusted
        // hop is the client.
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.0.0.7")]);
        assert_eq!(lb.forwarded(&h, &p).0.ip().to_string(), "203.0.113.9");
        // Several headers are one list; ports and brackets are allowed.
        let h = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "[2001:db8::5]:443"),
        ]);
        assert_eq!(lb.forwarded(&h, &p).0.ip().to_string(), "2001:db8::5");
        // Garbage stops the walk at the last good hop.
        let h = headers(&[("x-forwarded-for", "nonsense, 10.0.0.9")]);
        assert_eq!(lb.forwarded(&h, &p).0.ip().to_string(), "10.0.0.9");
        // No trusted proxies at all: nothing is believed.
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(lb.forwarded(&h, &proxy(&[])), (lb.client, false));
    }

    #[test]
    fn empty_elements_mapped_addresses_and_the_nearest_proto() {
        let lb = Peer::direct(SocketAddr::from(([10, 0, 0, 1], 5000)), false);
        let p = proxy(&["10.0.0.0/8"]);
        let h = headers(&[("x-forwarded-for", "203.0.113.9,, ,")]);
        assert_eq!(lb.forwarded(&h, &p).0.ip().to_string(), "203.0.113.9");
        let h = headers(&[("x-forwarded-for", "::ffff:203.0.113.9")]);
        assert_eq!(lb.forwarded(&h, &p).0.ip().to_string(), "203.0.113.9");
        // The proxy appends its value: the rightmost one counts, in one
        // header or several.
        for (pairs, https) in [
            (
                &[
                    ("x-forwarded-proto", "https"),
                    ("x-forwarded-proto", "http"),
                ][..],
                false,
            ),
            (
                &[
                    ("x-forwarded-proto", "http"),
                    ("x-forwarded-proto", "https"),
                ][..],
                true,
            ),
            (&[("x-forwarded-proto", "http, https")][..], true),
            (&[("x-forwarded-proto", "https, http")][..], false),
        ] {
            assert_eq!(lb.forwarded(&headers(pairs), &p).1, https, "{pairs:?}");
        }
    }
}
