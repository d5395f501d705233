//! `[[site]]`, with its `[site.cache]`, `[site.servlet]` and
//! `[[site.route]]` tables.

use std::ops::Range;
use std::path::Path;

use super::{CACHE_KEYS, ROUTE_KEYS, SERVLET_KEYS};
use crate::config::outbound::OutboundRule;
use crate::config::reader::{Diagnostics, TableReader};
use crate::config::types::{
    CacheConfig, MAX_SERVLET_MEMORY, RouteConfig, RoutePath, ServletLimits, SiteConfig,
};
use crate::config::validate::{Origin, RoutePositions, SitePositions};

/// Reads the limit keys present in `t` over `base`.
fn servlet_limits(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    base: &ServletLimits,
    max_instances: u32,
    store_spans: &mut Vec<Range<usize>>,
) -> ServletLimits {
    let mut l = base.clone();
    if let Some(n) = t.size(diag, "max_memory") {
        let v = *n.get_ref();
        if !(64 << 10..=MAX_SERVLET_MEMORY).contains(&v) {
            diag.error(
                n.span(),
                &t.key_path("max_memory"),
                format!("{v} bytes is out of range"),
                Some("use a size from 64 KiB (one wasm page) to 4 GiB".to_owned()),
            );
        } else {
            l.max_memory = v;
        }
    }
    for (key, slot) in [
        ("timeout", &mut l.timeout),
        ("queue_timeout", &mut l.queue_timeout),
    ] {
        if let Some(d) = t.duration(diag, key) {
            if d.get_ref().is_zero() {
                diag.error(
                    d.span(),
                    &t.key_path(key),
                    "a zero duration would fail every request",
                    Some("use a positive duration such as \"5s\"".to_owned()),
                );
            } else {
                *slot = *d.get_ref();
            }
        }
    }
    if let Some(n) = t.size(diag, "max_response_bytes") {
        l.max_response_bytes = *n.get_ref();
        l.max_response_bytes_set = true;
    }
    if let Some(n) = t.size(diag, "max_body_bytes") {
        l.max_body_bytes = *n.get_ref();
    }
    if let Some(values) = t.strings(diag, "allowed_outbound_hosts") {
        let mut rules = Vec::new();
        for (n, v) in values.iter().enumerate() {
            match OutboundRule::parse(v.get_ref()) {
                Ok(rule) => rules.push(rule),
                Err(message) => diag.error(
                    v.span(),
                    &format!("{}[{n}]", t.key_path("allowed_outbound_hosts")),
                    message,
                    Some("write scheme://host[:port], such as \"https://api.example.com\", \"https://*.example.com\" or \"http://127.0.0.1:8080\"".to_owned()),
                ),
            }
        }
        l.outbound.allowed_hosts = rules;
    }
    if let Some(values) = t.strings(diag, "stores") {
        store_spans.clear();
        store_spans.extend(values.iter().map(|v| v.span()));
        l.stores = values.into_iter().map(|v| v.into_inner()).collect();
    }
    if let Some(b) = t.bool(diag, "outbound_private") {
        l.outbound.allow_private = b;
    }
    if let Some(b) = t.bool(diag, "wasi_http_p3") {
        l.wasi_http_p3 = b;
    }
    for (key, slot) in [
        ("outbound_connect_timeout", &mut l.outbound.connect_timeout),
        (
            "outbound_first_byte_timeout",
            &mut l.outbound.first_byte_timeout,
        ),
        ("outbound_timeout", &mut l.outbound.timeout),
    ] {
        if let Some(d) = t.duration(diag, key) {
            if d.get_ref().is_zero() {
                diag.error(
                    d.span(),
                    &t.key_path(key),
                    "a zero timeout would fail every outbound request",
                    Some("use a positive duration such as \"5s\"".to_owned()),
                );
            } else {
                *slot = *d.get_ref();
            }
        }
    }
    for (key, slot, min) in [
        ("max_concurrency", &mut l.max_concurrency, 1),
        ("reuse", &mut l.reuse, 1),
        ("prewarm", &mut l.prewarm, 0),
        (
            "max_outbound_concurrency",
            &mut l.outbound.max_concurrency,
            1,
        ),
    ] {
        if let Some(n) = t.uint(diag, key, min, 1_000_000) {
            if *n.get_ref() < min {
                diag.error(
                    n.span(),
                    &t.key_path(key),
                    format!("must be at least {min}"),
                    Some(match key {
                        "reuse" => "1 means a fresh instance for every request".to_owned(),
                        _ => format!("use a number of {min} or more"),
                    }),
                );
            } else if key == "prewarm" && *n.get_ref() > u64::from(max_instances) {
                // A pool that can never fill, holding every instance slot:
                // no other servlet could even be tried at a reload.
                diag.error(
                    n.span(),
                    &t.key_path(key),
                    format!(
                        "{} instances ready ahead is more than server.max_instances ({max_instances}) allows in the whole process",
                        n.get_ref()
                    ),
                    Some(format!(
                        "use at most {max_instances}; every route's prewarmed instances hold slots of server.max_instances"
                    )),
                );
            } else {
                *slot = *n.get_ref() as u32;
            }
        }
    }
    l
}

fn route(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    base: &Path,
    defaults: &ServletLimits,
    index: usize,
    max_instances: u32,
) -> Option<(RouteConfig, RoutePositions, Range<usize>)> {
    let mut path_span = t.span();
    let path = match t.string(diag, "path") {
        Some(p) => match RoutePath::parse(p.get_ref()) {
            Ok(path) => {
                path_span = p.span();
                Some(path)
            }
            Err(message) => {
                diag.error(
                    p.span(),
                    &t.key_path("path"),
                    message,
                    Some("use an exact path (\"/login\") or a prefix (\"/api/*\")".to_owned()),
                );
                None
            }
        },
        None => {
            t.missing(
                diag,
                "path",
                "every route needs `path = \"/api/*\"` (or an exact path)",
            );
            None
        }
    };
    let servlet = match t.string(diag, "servlet") {
        Some(s) => Some((base.join(s.get_ref()), s.span())),
        None => {
            t.missing(
                diag,
                "servlet",
                "every route needs `servlet = \"servlets/api.wasm\"`",
            );
            None
        }
    };
    let mut store_spans = Vec::new();
    let limits = servlet_limits(t, diag, defaults, max_instances, &mut store_spans);
    let mut settings = Vec::new();
    if let Some(mut s) = t.table(diag, "settings") {
        let keys: Vec<String> = s.keys().map(str::to_owned).collect();
        for key in &keys {
            if let Some(v) = s.string(diag, key) {
                // Settings are also the guest's environment variables:
                // a name with `=` would set another variable.
                if key.is_empty() || key.contains(['=', '\0']) {
                    diag.error(
                        v.span(),
                        &s.key_path(key),
                        format!("`{}` cannot be a setting", key.escape_debug()),
                        Some("setting names are also environment variable names: not empty, without `=` or NUL".to_owned()),
                    );
                    continue;
                }
                if v.get_ref().contains('\0') {
                    diag.error(
                        v.span(),
                        &s.key_path(key),
                        "a setting's value cannot hold a NUL character".to_owned(),
                        Some("settings are also environment variables, whose values end at the first NUL".to_owned()),
                    );
                    continue;
                }
                settings.push((key.clone(), v.into_inner()));
            }
        }
        s.finish(diag, &[]);
    }
    // A route without a path is reported above, but its servlet file is
    // still checked: every problem shows in one run.
    let (servlet, servlet_span) = servlet?;
    let route = RouteConfig {
        path: path.unwrap_or(RoutePath::Exact(String::new())),
        servlet,
        limits,
        settings,
    };
    Some((
        route,
        RoutePositions {
            index,
            servlet: Origin::File(servlet_span),
            stores: store_spans,
        },
        path_span,
    ))
}

/// Reads one `[[site]]` table (the `index`th of the file).
pub(super) fn read(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    base: &Path,
    index: usize,
    max_instances: u32,
) -> Option<(SiteConfig, SitePositions)> {
    let site_key = t.key_path("");
    let site_key = site_key.trim_end_matches('.');
    let listed = t.strings(diag, "hosts").unwrap_or_default();
    // Named after its first host, even one refused below: a made-up
    // "default" would also clash with another site's name.
    let first_listed = listed.first().map(|h| h.get_ref().trim().to_owned());
    let (hosts, host_spans): (Vec<String>, Vec<Range<usize>>) = listed
        .into_iter()
        .filter_map(|h| match host_name(h.get_ref()) {
            Ok(host) => Some((host, h.span())),
            Err((message, hint)) => {
                diag.error(
                    h.span(),
                    &format!("{site_key}.hosts"),
                    message,
                    Some(hint.to_owned()),
                );
                None
            }
        })
        .unzip();
    let written = t.string(diag, "name");
    let name_span = written.as_ref().map(|n| n.span());
    let name = match written {
        // A name goes into every log line of the site's requests: a
        // control character (a newline) in it would forge lines.
        Some(n) if n.get_ref().is_empty() || n.get_ref().chars().any(char::is_control) => {
            diag.error(
                n.span(),
                &format!("{site_key}.name"),
                "a site name must be non-empty text without control characters",
                Some("use letters, digits and punctuation, such as name = \"blog\"".to_owned()),
            );
            None
        }
        n => n.map(|n| n.into_inner()),
    }
    .or_else(|| hosts.first().cloned())
    .or(first_listed)
    .unwrap_or_else(|| "default".to_owned());
    let default = t.bool(diag, "default").unwrap_or(false);
    // An empty path would be the configuration's own folder: its files,
    // the configuration included, served to anyone.
    let empty = |diag: &mut Diagnostics<'_>, key: &str, span| {
        diag.error(
            span,
            &format!("{site_key}.{key}"),
            "an empty path",
            Some(format!(
                "name a folder, such as {key} = \"{}\" (\".\" is the configuration's folder, if that is really meant)",
                if key == "root" { "www" } else { "servlets" }
            )),
        );
    };
    let root = match t.string(diag, "root") {
        Some(r) if r.get_ref().is_empty() => {
            empty(diag, "root", r.span());
            None
        }
        Some(r) => Some((base.join(r.get_ref()), r.span())),
        None => {
            t.missing(
                diag,
                "root",
                "every site needs `root = \"www\"`: the folder of its static files".to_owned(),
            );
            None
        }
    };
    let servlets = match t.string(diag, "servlets") {
        Some(s) if s.get_ref().is_empty() => {
            empty(diag, "servlets", s.span());
            None
        }
        s => s.map(|s| (base.join(s.get_ref()), s.span())),
    };
    let mut cache = CacheConfig::default();
    if let Some(mut c) = t.table(diag, "cache") {
        if let Some(n) = c.size(diag, "max_file_size") {
            cache.max_file_size = *n.get_ref();
        }
        if let Some(n) = c.size(diag, "budget") {
            if *n.get_ref() == 0 {
                diag.error(
                    n.span(),
                    &c.key_path("budget"),
                    "a zero budget leaves no room for any file",
                    Some("use a positive size such as \"256 MiB\"; set max_file_size = 0 to stream every file from disk".to_owned()),
                );
            } else {
                cache.budget = *n.get_ref();
            }
        }
        if let Some(b) = c.bool(diag, "compress") {
            cache.compress = b;
        }
        c.finish(diag, CACHE_KEYS);
    }
    let cache_control = t.string(diag, "cache_control").and_then(|v| {
        if http::HeaderValue::from_str(v.get_ref()).is_ok() {
            Some(v.into_inner())
        } else {
            diag.error(
                v.span(),
                &format!("{site_key}.cache_control"),
                "not a valid header value",
                Some("use visible ASCII, such as \"public, max-age=3600\"".to_owned()),
            );
            None
        }
    });
    let mut store_spans = Vec::new();
    let servlet_limits = match t.table(diag, "servlet") {
        Some(mut s) => {
            let limits = servlet_limits(
                &mut s,
                diag,
                &ServletLimits::default(),
                max_instances,
                &mut store_spans,
            );
            s.finish(diag, SERVLET_KEYS);
            limits
        }
        None => ServletLimits::default(),
    };
    let mut routes: Vec<RouteConfig> = Vec::new();
    let mut route_positions: Vec<RoutePositions> = Vec::new();
    for (index, mut r) in t.tables(diag, "route").into_iter().enumerate() {
        if let Some((route, at, path_span)) =
            route(&mut r, diag, base, &servlet_limits, index, max_instances)
        {
            // Two routes for one path: only one could ever answer.
            // (A route without a valid path is reported already.)
            let valid = route.path != RoutePath::Exact(String::new());
            let twin = routes.iter().position(|other| other.path == route.path);
            if let Some(first) = twin.filter(|_| valid).map(|k| route_positions[k].index) {
                diag.error(
                    path_span,
                    &r.key_path("path"),
                    format!("route[{first}] already has this path"),
                    Some("a path has one route: merge the two or remove one".to_owned()),
                );
            } else {
                routes.push(route);
                route_positions.push(at);
            }
        }
        let known: Vec<&str> = ROUTE_KEYS.iter().chain(SERVLET_KEYS).copied().collect();
        r.finish(diag, &known);
    }
    let (root, root_span) = root?;
    let positions = SitePositions {
        index,
        table: t.span(),
        name: name_span,
        hosts: host_spans,
        root: Origin::File(root_span),
        servlets: servlets
            .as_ref()
            .map_or(Origin::Default, |(_, span)| Origin::File(span.clone())),
        routes: route_positions,
        stores: store_spans,
    };
    Some((
        SiteConfig {
            name,
            hosts,
            default,
            root,
            servlets: servlets.map(|(path, _)| path),
            cache,
            cache_control,
            servlet_limits,
            routes,
        },
        positions,
    ))
}

/// A `hosts` entry as requests are matched against it: lower case, without
/// the root's trailing dot (`Example.COM.` is `example.com`, as a request's
/// Host is read); an IPv6 address in brackets. Else what is wrong, and a
/// hint: an entry that could never match a request is an error, not a
/// site nobody reaches.
pub(super) fn host_name(raw: &str) -> Result<String, (String, &'static str)> {
    let host = raw.trim().to_ascii_lowercase();
    let bare = "write the bare name, such as \"example.com\", without scheme or port";
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return match inner.parse::<std::net::Ipv6Addr>() {
            Ok(_) => Ok(host),
            Err(_) => Err((
                format!("{raw:?} is not an IPv6 address"),
                "write it as \"[2001:db8::1]\"",
            )),
        };
    }
    if host.contains('*') {
        return Err((
            format!("{raw:?}: host names are matched exactly, there are no wildcards"),
            "list every name the site answers to; a site with `default = true` answers the rest",
        ));
    }
    if !host.is_ascii() {
        return Err((
            format!(
                "{raw:?} is not ASCII: clients send internationalised names in their ASCII form"
            ),
            "write the name as its punycode (\"bücher.example\" is \"xn--bcher-kva.example\")",
        ));
    }
    let name = host.strip_suffix('.').unwrap_or(&host);
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(label_ok) {
        return Err((format!("{raw:?} is not a host name"), bare));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::host_name;

    #[test]
    fn host_names_are_read_as_requests_are_matched() {
        assert_eq!(host_name(" Example.COM. ").as_deref(), Ok("example.com"));
        assert_eq!(host_name("[::1]").as_deref(), Ok("[::1]"));
        assert_eq!(host_name("127.0.0.1").as_deref(), Ok("127.0.0.1"));
        for never in [
            "*.example.com",
            "bücher.example",
            "exa\tmple",
            ".",
            "a..b",
            "http://a",
            "a:80",
            "[::1",
            "[nope]",
            "",
        ] {
            assert!(host_name(never).is_err(), "{never:?}");
        }
    }
}
