//! The production keys: `listen` entries with options, `[server.tls]`,
//! `[server.proxy]`, `[admin]` and `[log]`.

use std::path::Path;

use toml::de::DeValue;

use super::parse_listen;
use crate::config::ops::{
    AccessLogFormat, AccessLogTarget, AdminConfig, DEFAULT_ADMIN_LISTEN, ListenerConfig, LogConfig,
    ProxyConfig, TlsConfig, parse_net,
};
use crate::config::reader::{Diagnostics, TableReader};
use crate::config::validate::Positions;

/// Keys of an inline listener table in `listen`.
pub(crate) const LISTENER_KEYS: &[&str] = &["addr", "tls", "proxy_protocol"];
/// Keys of `[server.tls]`.
pub(crate) const TLS_KEYS: &[&str] = &["cert", "key", "redirect_http", "hsts"];
/// Keys of `[server.proxy]`.
pub(crate) const PROXY_KEYS: &[&str] = &["trusted"];
/// Keys of `[admin]`.
pub(crate) const ADMIN_KEYS: &[&str] = &["listen", "ready_needs_stores", "hosts"];
/// Keys of `[log]`.
pub(crate) const LOG_KEYS: &[&str] = &["access", "format", "buffer"];

const LISTEN_HINT: &str =
    "write \"IP:PORT\", or { addr = \"IP:PORT\", tls = true, proxy_protocol = true }";

/// What the rest of `[server]` provides for listeners' options.
#[derive(Debug, Clone, Copy)]
pub(super) struct ListenContext {
    /// A `[server.tls]` table is present.
    pub(super) has_tls: bool,
    /// `[server.proxy] trusted` names someone.
    pub(super) has_trusted: bool,
}

/// `listen`: a string, or an array of strings and inline tables.
pub(super) fn listeners(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    context: ListenContext,
) -> Option<Vec<ListenerConfig>> {
    let value = t.take("listen")?;
    let (items, in_array): (Vec<_>, bool) = match value.get_ref() {
        DeValue::Array(items) => (items.iter().collect(), true),
        _ => (vec![value], false),
    };
    let mut out: Vec<ListenerConfig> = Vec::new();
    // Each listener's place in the array as written (entries that did not
    // parse are not in `out`).
    let mut written_at: Vec<usize> = Vec::new();
    for (n, item) in items.into_iter().enumerate() {
        let path = if in_array {
            format!("server.listen[{n}]")
        } else {
            "server.listen".to_owned()
        };
        let before = out.len();
        match item.get_ref() {
            DeValue::String(s) => match parse_listen(s) {
                Ok(addr) => out.push(ListenerConfig::plain(addr)),
                Err((message, hint)) => diag.error(item.span(), &path, message, Some(hint)),
            },
            DeValue::Table(table) => {
                let mut l = TableReader::new(path.clone(), item.span(), table);
                let addr = match l.string(diag, "addr") {
                    Some(a) => match parse_listen(a.get_ref()) {
                        Ok(addr) => Some(addr),
                        Err((message, hint)) => {
                            diag.error(a.span(), &l.key_path("addr"), message, Some(hint));
                            None
                        }
                    },
                    None => {
                        l.missing(diag, "addr", LISTEN_HINT);
                        None
                    }
                };
                let tls = l.bool(diag, "tls").unwrap_or(false);
                let proxy_protocol = l.bool(diag, "proxy_protocol").unwrap_or(false);
                if tls && !context.has_tls {
                    diag.error(
                        item.span(),
                        &l.key_path("tls"),
                        "a TLS listener needs a certificate",
                        Some("add [server.tls] with `cert` and `key` (PEM files)".to_owned()),
                    );
                }
                if proxy_protocol && !context.has_trusted {
                    diag.error(
                        item.span(),
                        &l.key_path("proxy_protocol"),
                        "PROXY protocol headers are accepted only from trusted proxies, and none is configured",
                        Some("list your load balancers' addresses in [server.proxy] trusted".to_owned()),
                    );
                }
                l.finish(diag, LISTENER_KEYS);
                if let Some(addr) = addr {
                    out.push(ListenerConfig {
                        addr,
                        tls,
                        proxy_protocol,
                    });
                }
            }
            other => diag.error(
                item.span(),
                &path,
                format!(
                    "expected an address or a listener table, found {}",
                    other.type_str()
                ),
                Some(LISTEN_HINT.to_owned()),
            ),
        }
        // Two listeners on one address (or a wildcard address and another
        // on its port) could not both be bound.
        if out.len() > before {
            written_at.push(n);
        }
        if out.len() > before
            && let Some(new) = out.last().map(|l| l.addr)
            && let Some(k) = out[..before].iter().position(|l| overlap(l.addr, new))
        {
            diag.error(
                item.span(),
                &path,
                format!(
                    "{new} overlaps server.listen[{}] ({})",
                    written_at[k], out[k].addr
                ),
                Some("give each listener its own address and port".to_owned()),
            );
        }
    }
    if out.is_empty() && !diag.has_errors() {
        diag.error(
            value.span(),
            "server.listen",
            "no listen address",
            Some("give at least one, such as [\"127.0.0.1:8080\"]".to_owned()),
        );
    }
    Some(out)
}

/// `[server.tls]`.
pub(super) fn tls(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    base: &Path,
    positions: &mut Positions,
) -> Option<TlsConfig> {
    let mut file = |key: &str, what: &str, span: &mut Option<std::ops::Range<usize>>| match t
        .string(diag, key)
    {
        Some(p) => {
            *span = Some(p.span());
            Some(base.join(p.get_ref()))
        }
        None => {
            t.missing(
                diag,
                key,
                format!("give the PEM file of the {what}, relative to this file"),
            );
            None
        }
    };
    let [cert_span, key_span] = &mut positions.tls_files;
    let cert = file("cert", "certificate chain (leaf first)", cert_span);
    let key = file("key", "private key", key_span);
    positions.redirect_http = t.take("redirect_http").map(|v| v.span());
    let redirect_http = t.bool(diag, "redirect_http").unwrap_or(false);
    let hsts = match t.string(diag, "hsts") {
        Some(v) if v.get_ref().is_empty() => None,
        Some(v) => {
            let problem = if http::HeaderValue::from_str(v.get_ref()).is_err() {
                Some("not a valid header value")
            } else if !has_max_age(v.get_ref()) {
                Some(
                    "no `max-age=SECONDS` directive: browsers ignore a Strict-Transport-Security header without one (RFC 6797)",
                )
            } else {
                None
            };
            match problem {
                None => Some(v.into_inner()),
                Some(problem) => {
                    diag.error(
                        v.span(),
                        &t.key_path("hsts"),
                        problem,
                        Some(
                            "such as \"max-age=63072000; includeSubDomains\" (\"\" turns it off)"
                                .to_owned(),
                        ),
                    );
                    None
                }
            }
        }
        None => None,
    };
    Some(TlsConfig {
        cert: cert?,
        key: key?,
        redirect_http,
        hsts,
    })
}

/// `[server.proxy]`.
pub(super) fn proxy(t: &mut TableReader<'_, '_>, diag: &mut Diagnostics<'_>) -> ProxyConfig {
    let mut p = ProxyConfig::default();
    for (n, v) in t
        .strings(diag, "trusted")
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        match parse_net(v.get_ref()) {
            Some(net) => p.trusted.push(net),
            None => diag.error(
                v.span(),
                &format!("server.proxy.trusted[{n}]"),
                format!("{:?} is not an IP address or network", v.get_ref()),
                Some(
                    "write an address (\"10.0.0.5\") or a network (\"10.0.0.0/8\", \"fd00::/8\")"
                        .to_owned(),
                ),
            ),
        }
    }
    p
}

/// `[admin]`.
///
/// `server` are the server's listeners: the admin listener cannot share
/// one's port.
pub(super) fn admin(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    server: &[ListenerConfig],
) -> Option<AdminConfig> {
    // A bad `listen` is reported, and the other keys are still read (and
    // checked): not reading them would report them as unknown.
    let listen = match t.string(diag, "listen") {
        Some(v) => match parse_listen(v.get_ref()) {
            Ok(addr) => Some((addr, v.span())),
            Err((message, hint)) => {
                diag.error(v.span(), &t.key_path("listen"), message, Some(hint));
                None
            }
        },
        None => DEFAULT_ADMIN_LISTEN
            .parse()
            .ok()
            .map(|addr| (addr, t.span())),
    };
    let listen = listen.and_then(|(listen, span)| {
        let Some(k) = server.iter().position(|l| overlap(l.addr, listen)) else {
            return Some(listen);
        };
        diag.error(
            span,
            &t.key_path("listen"),
            format!("{listen} overlaps the server listener {}", server[k].addr),
            Some(
                "the admin listener needs a port of its own, such as \"127.0.0.1:9090\"".to_owned(),
            ),
        );
        None
    });
    let ready_needs_stores = t.bool(diag, "ready_needs_stores").unwrap_or(true);
    let mut hosts = Vec::new();
    for h in t.strings(diag, "hosts").unwrap_or_default() {
        match super::site::host_name(h.get_ref()) {
            Ok(host) => hosts.push(host),
            Err((message, _)) => diag.error(
                h.span(),
                &t.key_path("hosts"),
                message,
                Some(
                    "list the bare names the admin listener is reached by, such as \"metrics.internal\" (IP addresses and localhost are always answered)"
                        .to_owned(),
                ),
            ),
        }
    }
    Some(AdminConfig {
        listen: listen?,
        ready_needs_stores,
        hosts,
    })
}

/// `[log]`.
pub(super) fn log(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    base: &Path,
    position: &mut Option<std::ops::Range<usize>>,
) -> LogConfig {
    let mut l = LogConfig::default();
    if let Some(v) = t.string(diag, "access") {
        *position = Some(v.span());
        l.access = match v.get_ref().as_str() {
            "off" => AccessLogTarget::Off,
            "stdout" | "-" => AccessLogTarget::Stdout,
            "" => {
                diag.error(
                    v.span(),
                    "log.access",
                    "an empty path",
                    Some("write \"off\" to turn the access log off, \"stdout\", or a path such as \"logs/access.log\"".to_owned()),
                );
                AccessLogTarget::Off
            }
            // Meant as a word, not as a file of that name (stderr is
            // swan's own log, which access lines would drown).
            word @ ("STDOUT" | "Stdout" | "OFF" | "Off" | "none" | "None" | "NONE" | "stderr"
            | "STDERR" | "Stderr") => {
                let hint = if word.eq_ignore_ascii_case("stderr") {
                    "swan's own log goes to stderr: write \"stdout\", or a path (\"./stderr\" for a file of that name)"
                } else {
                    "write \"stdout\" or \"off\" (lower case), or a path such as \"logs/access.log\""
                };
                diag.error(
                    v.span(),
                    "log.access",
                    format!("{word:?} would be a file of that name"),
                    Some(hint.to_owned()),
                );
                AccessLogTarget::Off
            }
            path => AccessLogTarget::File(base.join(path)),
        };
    }
    if let Some(v) = t.string(diag, "format") {
        match v.get_ref().as_str() {
            "combined" => l.format = AccessLogFormat::Combined,
            "json" => l.format = AccessLogFormat::Json,
            other => diag.error(
                v.span(),
                &t.key_path("format"),
                format!("unknown access log format {other:?}"),
                Some("use \"combined\" (NGINX's, default) or \"json\"".to_owned()),
            ),
        }
    }
    if let Some(n) = t.uint(diag, "buffer", 1, 1 << 24) {
        if *n.get_ref() == 0 {
            diag.error(
                n.span(),
                &t.key_path("buffer"),
                "a buffer of 0 lines would drop every line",
                Some("use a positive number; the default is 16384".to_owned()),
            );
        } else {
            l.buffer = *n.get_ref() as usize;
        }
    }
    l
}

/// Whether two listen addresses would take the same port: the same
/// address, or a wildcard (`0.0.0.0`, or `[::]`, which swan binds IPv6
/// only) and any address of its family on its port. Port 0 is always a
/// fresh port.
pub(in crate::config) fn overlap(a: std::net::SocketAddr, b: std::net::SocketAddr) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    let (x, y) = (a.ip(), b.ip());
    x == y || (x.is_ipv4() == y.is_ipv4() && (x.is_unspecified() || y.is_unspecified()))
}

/// Whether an HSTS value has the `max-age` directive RFC 6797 requires:
/// once, with a number of seconds (bare or quoted).
fn has_max_age(value: &str) -> bool {
    let ages: Vec<&str> = value
        .split(';')
        .filter_map(|d| {
            let (name, v) = d.split_once('=')?;
            name.trim()
                .eq_ignore_ascii_case("max-age")
                .then_some(v.trim())
        })
        .collect();
    matches!(ages.as_slice(), [age] if {
        let digits = age.strip_prefix('"').and_then(|a| a.strip_suffix('"')).unwrap_or(age);
        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
    })
}
