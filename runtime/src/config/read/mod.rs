//! Reading `swan.toml` into the configuration types, key by key.
//!
//! This step checks what a value says on its own (types, units, ranges,
//! syntax of paths and addresses) and reports unknown keys; it touches no
//! file. What depends on other values or on the filesystem is checked once,
//! afterwards, by `validate`; the positions recorded here let those
//! problems point at the right line too.

use std::path::Path;

use toml::de::DeTable;

mod ops;
pub(in crate::config) use ops::overlap;
mod server;
mod site;
mod store;

use super::reader::{Diagnostics, TableReader};
use super::types::{Config, ServerConfig};
use super::validate::Positions;

/// Keys of `[server]`.
pub(crate) const SERVER_KEYS: &[&str] = &[
    "listen",
    "workers",
    "runtime",
    "max_header_bytes",
    "max_body_bytes",
    "header_read_timeout",
    "keepalive_timeout",
    "send_timeout",
    "body_timeout",
    "body_min_rate",
    "max_connections",
    "drain_timeout",
    "max_instances",
    "mode",
    "request_id_header",
    "build_sources",
    "build_timeout",
    "max_code_cache_bytes",
    "pid_file",
    "drain_grace",
    "tls",
    "proxy",
];
/// Keys of `[[site]]`.
pub(crate) const SITE_KEYS: &[&str] = &[
    "name",
    "hosts",
    "default",
    "root",
    "servlets",
    "cache",
    "cache_control",
    "servlet",
    "route",
];
/// Keys of `[site.cache]`.
pub(crate) const CACHE_KEYS: &[&str] = &["max_file_size", "budget", "compress"];
/// Keys of `[site.servlet]`, also allowed in a `[[site.route]]`.
pub(crate) const SERVLET_KEYS: &[&str] = &[
    "max_memory",
    "timeout",
    "max_response_bytes",
    "max_body_bytes",
    "max_concurrency",
    "queue_timeout",
    "reuse",
    "prewarm",
    "allowed_outbound_hosts",
    "outbound_private",
    "outbound_connect_timeout",
    "outbound_first_byte_timeout",
    "outbound_timeout",
    "max_outbound_concurrency",
    "stores",
    "wasi_http_p3",
];
/// Keys of `[[store]]`.
pub(crate) const STORE_KEYS: &[&str] = &[
    "name",
    "kind",
    "path",
    "url",
    "url_env",
    "connections",
    "timeout",
    "max_key_bytes",
    "max_value_bytes",
    "max_ops_per_request",
    "max_list_keys",
];
/// Keys of `[[site.route]]` besides the servlet limits.
pub(crate) const ROUTE_KEYS: &[&str] = &["path", "servlet", "settings"];
/// Top-level keys.
pub(crate) const ROOT_KEYS: &[&str] = &["server", "site", "store", "admin", "log"];
/// Every table and its keys, to tell a key in the wrong table where it goes.
pub(crate) const HOMES: &[(&str, &[&str])] = &[
    (
        "the top level ([server], [[site]], [[store]], [admin], [log])",
        ROOT_KEYS,
    ),
    ("[server]", SERVER_KEYS),
    ("a listener table of `listen`", ops::LISTENER_KEYS),
    ("[server.tls]", ops::TLS_KEYS),
    ("[server.proxy]", ops::PROXY_KEYS),
    ("[admin]", ops::ADMIN_KEYS),
    ("[log]", ops::LOG_KEYS),
    ("[[site]]", SITE_KEYS),
    ("[site.cache]", CACHE_KEYS),
    ("[site.servlet] (or a [[site.route]])", SERVLET_KEYS),
    ("[[site.route]]", ROUTE_KEYS),
    ("[[store]]", STORE_KEYS),
];

/// Reads a document as far as it goes: the configuration (possibly
/// incomplete when `diag` has errors) and where its values came from.
pub(crate) fn document(
    source: &str,
    file: &Path,
    base: &Path,
    diag: &mut Diagnostics<'_>,
) -> Option<(Config, Positions)> {
    let document = match DeTable::parse(source) {
        Ok(d) => d,
        Err(e) => {
            let span = e.span().unwrap_or(0..0);
            let message = e.message().trim();
            // The parser says which rule, not which key: the span does.
            let named = source
                .get(span.clone())
                .map(str::trim)
                .filter(|k| !k.is_empty() && k.len() <= 100 && !k.contains('\n'));
            let (message, hint) = match named {
                Some(key) if message == "duplicate key" => (
                    format!("duplicate key `{key}`"),
                    "a key is set once per table, and a [table] header appears once: remove one of them",
                ),
                _ => (
                    message.to_owned(),
                    "this is not valid TOML; see https://toml.io",
                ),
            };
            diag.error(span, "(syntax)", message, Some(hint.to_owned()));
            return None;
        }
    };
    let mut root = TableReader::new("", document.span(), document.get_ref());
    let mut positions = Positions::default();
    let server = match root.table(diag, "server") {
        Some(mut t) => {
            let s = server::read(&mut t, diag, base, &mut positions);
            t.finish(diag, SERVER_KEYS);
            s
        }
        None => ServerConfig::defaults(),
    };
    let admin = root.table(diag, "admin").and_then(|mut t| {
        let a = ops::admin(&mut t, diag, &server.listen);
        t.finish(diag, ops::ADMIN_KEYS);
        a
    });
    let log = match root.table(diag, "log") {
        Some(mut t) => {
            let l = ops::log(&mut t, diag, base, &mut positions.access_log);
            t.finish(diag, ops::LOG_KEYS);
            l
        }
        None => Default::default(),
    };
    let site_tables = root.tables(diag, "site");
    let store_tables = root.tables(diag, "store");
    let root_span = root.span();
    root.finish(diag, ROOT_KEYS);

    let mut sites = Vec::new();
    for (index, mut t) in site_tables.into_iter().enumerate() {
        let read = site::read(&mut t, diag, base, index, server.max_instances);
        t.finish(diag, SITE_KEYS);
        match read {
            Some((site, at)) => {
                sites.push(site);
                positions.sites.push(at);
            }
            None => positions.dropped_sites = true,
        }
    }
    if sites.is_empty() && !diag.has_errors() {
        diag.error(
            root_span,
            "site",
            "no site is configured",
            Some("add a [[site]] table with at least `root = \"www\"`".to_owned()),
        );
    }
    if sites.len() == 1 {
        sites[0].default = true;
    }
    let mut stores = Vec::new();
    for (index, mut t) in store_tables.into_iter().enumerate() {
        let read = store::read(&mut t, diag, base, index);
        t.finish(diag, STORE_KEYS);
        if let Some((store, at)) = read {
            stores.push(store);
            positions.stores.push(at);
        }
    }
    if stores.is_empty() && positions.stores.is_empty() {
        stores.push(crate::config::store::StoreConfig::implicit_default(base));
    }
    let config = Config {
        file: Some(file.to_path_buf()),
        server,
        sites,
        stores,
        admin,
        log,
    };
    Some((config, positions))
}

/// Parses a listen address, explaining what is wrong with a bad one.
pub(crate) fn parse_listen(value: &str) -> Result<std::net::SocketAddr, (String, String)> {
    let hint =
        || "write IP:PORT, such as \"127.0.0.1:8080\", \"0.0.0.0:80\" or \"[::1]:8080\"".to_owned();
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    match value.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u64>() {
            Ok(p) if p > u64::from(u16::MAX) => Err((
                format!("port {p} is out of range"),
                "a port is a number from 1 to 65535 (0 picks a free one)".to_owned(),
            )),
            Ok(_) => Err((
                format!("{host:?} is not an IP address"),
                format!("{}; host names are not resolved", hint()),
            )),
            Err(_) => Err((format!("{port:?} is not a port number"), hint())),
        },
        None => Err((format!("{value:?} has no port"), hint())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_errors_say_what_is_wrong() {
        assert!(parse_listen("127.0.0.1:8080").is_ok());
        assert!(parse_listen("[::1]:0").is_ok());
        let port = parse_listen("127.0.0.1:70000").err().map(|e| e.0);
        assert!(port.is_some_and(|m| m.contains("port 70000 is out of range")));
        let host = parse_listen("localhost:80").err().map(|e| e.0);
        assert!(host.is_some_and(|m| m.contains("not an IP address")));
        let bare = parse_listen("8080").err().map(|e| e.0);
        assert!(bare.is_some_and(|m| m.contains("has no port")));
    }
}
