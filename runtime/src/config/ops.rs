//! What running swan in production adds to `[server]` and the file: the
//! listeners' options (TLS, PROXY protocol), `[server.tls]`,
//! `[server.proxy]`, `[admin]` and `[log]`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use ipnet::IpNet;

/// The admin listener's address when `[admin]` gives none.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9090";
/// Access log lines buffered between requests and the writer.
pub const DEFAULT_ACCESS_LOG_BUFFER: usize = 16_384;

/// One listening address and what connections to it speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenerConfig {
    /// The address.
    pub addr: SocketAddr,
    /// HTTPS (TLS with ALPN h2 / http/1.1), with `[server.tls]`'s
    /// certificate. Default: false.
    pub tls: bool,
    /// Every connection starts with a PROXY protocol header (v1 or v2),
    /// accepted only from `[server.proxy] trusted` peers. Default: false.
    pub proxy_protocol: bool,
}

impl ListenerConfig {
    /// Plain HTTP on `addr`.
    pub fn plain(addr: SocketAddr) -> ListenerConfig {
        ListenerConfig {
            addr,
            tls: false,
            proxy_protocol: false,
        }
    }
}

impl std::fmt::Display for ListenerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}/", self.addr)?;
        if self.proxy_protocol {
            write!(f, " (PROXY protocol)")?;
        }
        Ok(())
    }
}

/// `[server.tls]`: the certificate of every `tls = true` listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// PEM certificate chain, leaf first. Reloaded when it changes.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1). Reloaded when it changes.
    pub key: PathBuf,
    /// Plain listeners answer every request with a redirect to the same
    /// URL on the first TLS listener. Default: false.
    pub redirect_http: bool,
    /// `Strict-Transport-Security` value sent on TLS responses, such as
    /// `max-age=63072000; includeSubDomains`. Default: none.
    pub hsts: Option<String>,
}

/// `[server.proxy]`: which peers may say who the client is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyConfig {
    /// Addresses and networks of trusted proxies: their `X-Forwarded-For`
    /// and `X-Forwarded-Proto` are believed, and their PROXY protocol
    /// headers accepted. Default: none.
    pub trusted: Vec<IpNet>,
}

impl ProxyConfig {
    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted.iter().any(|net| net.contains(&ip))
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Parses a trusted peer: `IP` (one address) or `IP/PREFIX` (a network).
pub fn parse_net(s: &str) -> Option<IpNet> {
    let net = match s.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => IpNet::from(s.parse::<IpAddr>().ok()?),
    };
    Some(match net {
        IpNet::V6(v6) => match v6.addr().to_ipv4_mapped() {
            Some(v4) if v6.prefix_len() >= 96 => {
                IpNet::V4(ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96).ok()?)
            }
            _ => IpNet::V6(v6.trunc()),
        },
        IpNet::V4(v4) => IpNet::V4(v4.trunc()),
    })
}

/// `[admin]`: the operations listener (metrics, health, status page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConfig {
    /// Where it listens. Default: 127.0.0.1:9090.
    pub listen: SocketAddr,
    /// Whether `/readyz` fails while a store a route lists is
    /// unreachable. Default: true.
    pub ready_needs_stores: bool,
    /// Host names it answers besides IP addresses and `localhost`
    /// (lowercase, without a trailing dot). Default: none.
    pub hosts: Vec<String>,
}

/// `[log]`: the access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Where access log lines go. Default: nowhere.
    pub access: AccessLogTarget,
    /// Line format. Default: combined.
    pub format: AccessLogFormat,
    /// Lines buffered for the writer; past it lines are dropped and
    /// counted, requests never wait. Default: 16,384.
    pub buffer: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            access: AccessLogTarget::Off,
            format: AccessLogFormat::Combined,
            buffer: DEFAULT_ACCESS_LOG_BUFFER,
        }
    }
}

/// Where access log lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogTarget {
    /// No access log.
    Off,
    /// Standard output.
    Stdout,
    /// A file, appended to, reopened on SIGUSR1 (log rotation).
    File(PathBuf),
}

/// An access log line's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// NGINX's "combined" plus request time, site, route and request id.
    Combined,
    /// One JSON object per line.
    Json,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_peers_are_addresses_or_networks() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let p = ProxyConfig {
            trusted: [
                "10.1.0.0/16",
                "127.0.0.1",
                "fd00::/8",
                "::ffff:192.168.0.0/112",
            ]
            .iter()
            .map(|s| parse_net(s).expect("parses"))
            .collect(),
        };
        assert!(p.trusts(ip("10.1.255.3")));
        assert!(!p.trusts(ip("10.2.0.1")));
        assert!(p.trusts(ip("127.0.0.1")));
        assert!(!p.trusts(ip("127.0.0.2")));
        assert!(p.trusts(ip("fd12::1")));
        assert!(!p.trusts(ip("::1")));
        // Mapped addresses are the IPv4 addresses they map, both ways.
        assert!(p.trusts(ip("::ffff:127.0.0.1")));
        assert!(p.trusts(ip("192.168.3.4")));
        assert!(parse_net("10.0.0.0/33").is_none());
        assert!(parse_net("nope").is_none());
        // Host bits are dropped: 10.1.2.3/8 is 10.0.0.0/8.
        assert_eq!(
            parse_net("10.1.2.3/8").map(|n| n.to_string()).as_deref(),
            Some("10.0.0.0/8")
        );
    }
}
