//! Which addresses are public: what an outbound request may reach
//! without a rule naming the address or `outbound_private`.

use std::net::{IpAddr, Ipv4Addr};

/// Whether an address is reachable on the public internet: not loopback,
/// private, link-local (cloud metadata lives there), shared, reserved,
/// documentation or multicast, in either family, nor a tunnel or
/// translation prefix that carries an IPv4 address (6to4, Teredo, NAT64,
/// SIIT's `::ffff:0:0:0/96`).
pub(crate) fn is_global(ip: IpAddr) -> bool {
    fn v4(ip: Ipv4Addr) -> bool {
        let o = ip.octets();
        !(ip.is_unspecified()
            || ip.is_loopback()
            || ip.is_private()
            || ip.is_link_local()
            || ip.is_broadcast()
            || ip.is_documentation()
            || ip.is_multicast()
            || o[0] == 0
            || (o[0] == 100 && (o[1] & 0xc0) == 64)
            || (o[0] == 192 && o[1] == 0 && o[2] == 0)
            || (o[0] == 198 && (o[1] & 0xfe) == 18)
            || o[0] >= 240)
    }
    match ip {
        IpAddr::V4(ip) => v4(ip),
        IpAddr::V6(ip) => {
            if let Some(mapped) = ip.to_ipv4_mapped() {
                return v4(mapped);
            }
            let s = ip.segments();
            // Only 2000::/3 is allocated for global unicast: everything
            // else is unspecified, loopback, the IPv4-compatible and
            // -translated (`::ffff:0:a.b.c.d`, SIIT) forms, discard,
            // NAT64 (`64:ff9b::/96`), unique or link-local, multicast.
            !((s[0] & 0xe000) != 0x2000
                || s[0] == 0x2002
                // 2001::/23, IETF protocol assignments: Teredo, benchmarking,
                // ORCHID and the like, none a web server.
                || (s[0] == 0x2001 && s[1] < 0x200)
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                // Documentation, again (RFC 9637).
                || (s[0] == 0x3fff && s[1] < 0x1000))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_global() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:0:127.0.0.1",
            "::ffff:0:7f00:1",
            "::ffff:0:10.0.0.1",
            "::ffff:0:0:1.1.1.1",
            "100::1",
            "64:ff9b::a00:1",
            "2002:a00:1::",
            "2001:0:4136:e378:8000:63bf:f5ff:fffe",
            "2001:2::1",
            "2001:20::1",
            "3fff::1",
            "3fff:fff::1",
            "224.0.0.1",
        ] {
            let ip: IpAddr = private.parse().expect(private);
            assert!(!is_global(ip), "{private}");
        }
        for public in [
            "1.1.1.1",
            "93.184.216.34",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450:4001::1",
            "::ffff:1.1.1.1",
        ] {
            let ip: IpAddr = public.parse().expect(public);
            assert!(is_global(ip), "{public}");
        }
    }
}
