//! Which `Host` the admin listener answers: IP addresses, `localhost`,
//! and the names `[admin] hosts` lists. Any other name is how a page a
//! browser on this machine loaded from elsewhere would reach it after
//! rebinding its own name to 127.0.0.1 (DNS rebinding): the browser
//! would then let that page read the status page, with its file paths
//! and errors, as its own.

use std::net::{Ipv4Addr, Ipv6Addr};

/// Whether a request naming `host` (its `Host` header or absolute URI's
/// authority, `None` for none) may be answered. `names` are lowercase.
pub(super) fn allowed(host: Option<&[u8]>, names: &[String]) -> bool {
    let Some(host) = host else {
        // HTTP/1.0 without a Host (HTTP/1.1 needs one: checked before).
        return true;
    };
    let Ok(host) = std::str::from_utf8(host) else {
        return false;
    };
    if let Some(rest) = host.strip_prefix('[') {
        return rest
            .split_once(']')
            .is_some_and(|(ip, port)| ip.parse::<Ipv6Addr>().is_ok() && is_port(port));
    }
    let name = match host.rsplit_once(':') {
        Some((name, port)) if is_port(port) => name,
        Some(_) => return false,
        None => host,
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    name.parse::<Ipv4Addr>().is_ok() || name == "localhost" || names.contains(&name)
}

/// `""` or `:` and digits.
fn is_port(s: &str) -> bool {
    let digits = s.strip_prefix(':').unwrap_or(s);
    s.is_empty() || (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_localhost_and_listed_names_only() {
        let names = vec!["metrics.internal".to_owned()];
        for ok in [
            None,
            Some("127.0.0.1"),
            Some("127.0.0.1:9090"),
            Some("10.1.2.3:80"),
            Some("[::1]"),
            Some("[::1]:9090"),
            Some("localhost"),
            Some("LocalHost.:9090"),
            Some("metrics.internal"),
            Some("Metrics.Internal:9090"),
        ] {
            assert!(allowed(ok.map(str::as_bytes), &names), "{ok:?}");
        }
        for refused in [
            "attacker.example",
            "attacker.example:9090",
            "localhost.attacker.example",
            "127.0.0.1.nip.io",
            "metrics.internal.evil",
            "[::1",
            "[::1]x",
            "[not-ip]:80",
            "127.0.0.1:port",
            "",
        ] {
            assert!(!allowed(Some(refused.as_bytes()), &names), "{refused:?}");
        }
        assert!(!allowed(Some(b"\xff"), &names));
        assert!(!allowed(Some(b"metrics.internal"), &[]));
    }
}
