//! What a servlet may reach over HTTP (`allowed_outbound_hosts` and the
//! outbound timeouts of `[site.servlet]` or a route).

use std::time::Duration;

/// Time an outbound request may take to connect (and, for HTTPS, finish
/// its handshake).
pub const DEFAULT_OUTBOUND_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Time an outbound request may wait for the response head.
pub const DEFAULT_OUTBOUND_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time an outbound request may take in all, body included.
pub const DEFAULT_OUTBOUND_TIMEOUT: Duration = Duration::from_secs(60);
/// Outbound requests one servlet may have in flight.
pub const DEFAULT_OUTBOUND_CONCURRENCY: u64 = 16;

/// What a servlet may reach over HTTP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundConfig {
    /// Allowed destinations (`allowed_outbound_hosts`). Default: none.
    pub allowed_hosts: Vec<OutboundRule>,
    /// Whether names may resolve to loopback, private or link-local
    /// addresses (`outbound_private`). Default: false.
    pub allow_private: bool,
    /// Connect (and TLS handshake) time limit. Default: 5 s.
    pub connect_timeout: Duration,
    /// Time to the response head. Default: 30 s.
    pub first_byte_timeout: Duration,
    /// Time for the whole exchange. Default: 60 s.
    pub timeout: Duration,
    /// Requests in flight at once. Default: 16.
    pub max_concurrency: u32,
}

impl Default for OutboundConfig {
    fn default() -> Self {
        OutboundConfig {
            allowed_hosts: Vec::new(),
            allow_private: false,
            connect_timeout: DEFAULT_OUTBOUND_CONNECT_TIMEOUT,
            first_byte_timeout: DEFAULT_OUTBOUND_FIRST_BYTE_TIMEOUT,
            timeout: DEFAULT_OUTBOUND_TIMEOUT,
            max_concurrency: DEFAULT_OUTBOUND_CONCURRENCY as u32,
        }
    }
}

/// One `allowed_outbound_hosts` entry: `scheme://host[:port]`. `*` stands
/// for any scheme, host or port; `*.example.com` for any subdomain; no
/// port means the scheme's default one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundRule {
    /// `http`, `https`, or `*`.
    pub scheme: String,
    /// A lower-case name, an IP address, `*.suffix`, or `*`.
    pub host: String,
    /// A port; `None` for `*`, or the scheme's default when not written.
    pub port: Option<u16>,
    /// Whether the port was left out (the scheme's default applies).
    pub default_port: bool,
}

impl std::fmt::Display for OutboundRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.port, self.default_port) {
            (Some(p), _) => write!(f, "{}://{host}:{p}", self.scheme),
            (None, true) => write!(f, "{}://{host}", self.scheme),
            (None, false) => write!(f, "{}://{host}:*", self.scheme),
        }
    }
}

impl OutboundRule {
    /// Parses `scheme://host[:port]`.
    pub fn parse(s: &str) -> Result<OutboundRule, String> {
        let (scheme, rest) = s
            .split_once("://")
            .ok_or_else(|| format!("{s:?} has no scheme"))?;
        let scheme = scheme.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https" | "*") {
            return Err(format!("{s:?}: the scheme must be http, https or *"));
        }
        let rest = rest.trim_end_matches('/');
        if rest.contains(['/', '?', '#', '@']) || rest.is_empty() {
            return Err(format!("{s:?}: write only scheme://host[:port]"));
        }
        let (host, port) = match rest.strip_prefix('[') {
            // [IPv6]:port
            Some(v6) => {
                let (host, after) = v6
                    .split_once(']')
                    .ok_or_else(|| format!("{s:?}: unclosed `[`"))?;
                match after {
                    "" => (host, None),
                    _ => (
                        host,
                        Some(
                            after
                                .strip_prefix(':')
                                .ok_or_else(|| format!("{s:?}: expected `:port` after `]`"))?,
                        ),
                    ),
                }
            }
            None => match rest.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (rest, None),
            },
        };
        let host = host.to_ascii_lowercase();
        if host.is_empty() {
            return Err(format!("{s:?} has no host"));
        }
        let wildcard_ok = host == "*" || host.strip_prefix("*.").is_some_and(|h| !h.contains('*'));
        if host.contains('*') && !wildcard_ok {
            return Err(format!(
                "{s:?}: `*` may only be the whole host or its first label (*.example.com)"
            ));
        }
        let bracketed = rest.starts_with('[');
        if bracketed && host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{s:?}: {host:?} in `[...]` is not an IPv6 address"));
        }
        let named = host.strip_prefix("*.").unwrap_or(&host);
        if !bracketed
            && host != "*"
            && (named.split('.').any(|label| {
                label.is_empty()
                    || label.len() > 63
                    || label.starts_with('-')
                    || label.ends_with('-')
                    || !label
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            }) || named.len() > 253)
        {
            return Err(format!(
                "{s:?}: {host:?} is not a host name or IP address (letters, digits, `-` and `_` in dot-separated labels, no label starting or ending with `-`)"
            ));
        }
        // `127.1`, `2130706433`, `0x7f.1`: an address in a spelling URL
        // parsers read as a number, which the rule would compare as a name
        // and never match.
        let last = named.rsplit('.').next().unwrap_or_default();
        let numeric = !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit())
            || last
                .strip_prefix("0x")
                .is_some_and(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()));
        if !bracketed && host.parse::<std::net::Ipv4Addr>().is_err() && numeric {
            return Err(format!(
                "{s:?}: {host:?} is an address in a short or numeric spelling: write it as four decimal numbers (127.0.0.1)"
            ));
        }
        if host.parse::<std::net::IpAddr>().is_ok_and(|ip| {
            ip.is_unspecified()
                || matches!(ip, std::net::IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_unspecified()))
        }) {
            return Err(format!(
                "{s:?}: {host:?} is the unspecified address, which as a destination reaches this host: name the address meant (127.0.0.1 or [::1], with outbound_private = true)"
            ));
        }
        let host = canonical_host(host);
        let (port, default_port) = match port {
            None => (None, true),
            Some("*") => (None, false),
            Some(p) => (
                Some(
                    p.parse::<u16>()
                        .ok()
                        .filter(|&n| n != 0 && p.bytes().all(|b| b.is_ascii_digit()))
                        .ok_or_else(|| format!("{s:?}: {p:?} is not a port (1 to 65535, or *)"))?,
                ),
                false,
            ),
        };
        Ok(OutboundRule {
            scheme,
            host,
            port,
            default_port,
        })
    }

    /// Whether a request to `scheme://host:port` matches this rule.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        let scheme_ok = self.scheme == "*" || self.scheme == scheme;
        let host_ok = self.host == "*"
            || self.host == host
            || self.host.strip_prefix("*.").is_some_and(|suffix| {
                host.strip_suffix(suffix)
                    .is_some_and(|h| h.ends_with('.') && h.len() > 1)
            });
        let port_ok = match (self.port, self.default_port) {
            (Some(p), _) => p == port,
            (None, true) => port == if scheme == "https" { 443 } else { 80 },
            (None, false) => true,
        };
        scheme_ok && host_ok && port_ok
    }
}

/// A host as rules and requests are compared: an address in its one
/// canonical form (`0:0:0:0:0:0:0:1` and `::1` are one host), a name as
/// it is.
pub fn canonical_host(host: String) -> String {
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => host,
    }
}
