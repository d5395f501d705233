//! `[server]`.

use super::ops;
use crate::config::reader::{Diagnostics, TableReader};
use crate::config::types::{
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_INSTANCES, MAX_MAX_HEADER_BYTES, MIN_MAX_HEADER_BYTES,
    RuntimeModel, ServerConfig,
};
use crate::config::validate::{Origin, Positions};

/// Reads `[server]`.
pub(super) fn read(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    base: &std::path::Path,
    positions: &mut Positions,
) -> ServerConfig {
    let mut s = ServerConfig::defaults();
    if let Some(mut tls) = t.table(diag, "tls") {
        positions.tls = Some(tls.span());
        s.tls = ops::tls(&mut tls, diag, base, positions);
        tls.finish(diag, ops::TLS_KEYS);
    }
    if let Some(mut proxy) = t.table(diag, "proxy") {
        s.proxy = ops::proxy(&mut proxy, diag);
        proxy.finish(diag, ops::PROXY_KEYS);
    }
    let context = ops::ListenContext {
        has_tls: positions.tls.is_some(),
        has_trusted: !s.proxy.trusted.is_empty(),
    };
    if let Some(listen) = ops::listeners(t, diag, context) {
        s.listen = listen;
    }
    if let Some(n) = t.uint(diag, "workers", 1, 1024) {
        if *n.get_ref() == 0 {
            diag.error(
                n.span(),
                "server.workers",
                "0 workers would serve nobody",
                Some("use a positive number, or leave `workers` out for one per core".to_owned()),
            );
        } else {
            s.workers = *n.get_ref() as usize;
        }
    }
    if let Some(v) = t.string(diag, "runtime") {
        match v.get_ref().as_str() {
            "per-core" => s.runtime = RuntimeModel::PerCore,
            "shared" => s.runtime = RuntimeModel::Shared,
            other => diag.error(
                v.span(),
                "server.runtime",
                format!("unknown runtime model {other:?}"),
                Some("use \"per-core\" (default) or \"shared\"".to_owned()),
            ),
        }
    }
    if let Some(n) = t.size(diag, "max_header_bytes") {
        let value = *n.get_ref();
        if (MIN_MAX_HEADER_BYTES..=MAX_MAX_HEADER_BYTES).contains(&value) {
            s.max_header_bytes = value as usize;
        } else {
            diag.error(
                n.span(),
                "server.max_header_bytes",
                format!("{value} bytes is out of range"),
                Some("use a size from 8 KiB to 1 MiB; the default is 16 KiB".to_owned()),
            );
        }
    }
    if let Some(n) = t.size(diag, "max_body_bytes") {
        s.max_body_bytes = *n.get_ref();
    }
    if let Some(n) = t.size(diag, "max_code_cache_bytes") {
        s.max_code_cache_bytes = *n.get_ref();
    }
    if let Some(n) = t.size(diag, "body_min_rate") {
        s.body_min_rate = *n.get_ref();
    }
    for (key, slot) in [
        ("header_read_timeout", &mut s.header_read_timeout),
        ("keepalive_timeout", &mut s.keepalive_timeout),
        ("send_timeout", &mut s.send_timeout),
        ("body_timeout", &mut s.body_timeout),
        ("drain_timeout", &mut s.drain_timeout),
        ("drain_grace", &mut s.drain_grace),
    ] {
        if let Some(d) = t.duration(diag, key) {
            if d.get_ref().is_zero() && key != "drain_timeout" && key != "drain_grace" {
                diag.error(
                    d.span(),
                    &format!("server.{key}"),
                    "a zero timeout would close every connection at once",
                    Some("use a positive duration such as \"10s\"".to_owned()),
                );
            } else {
                *slot = *d.get_ref();
            }
        }
    }
    if let Some(n) = t.uint(diag, "max_connections", 1, 1 << 24) {
        if *n.get_ref() == 0 {
            diag.error(
                n.span(),
                "server.max_connections",
                "0 connections would serve nobody",
                Some(format!(
                    "use a positive number; the default is {DEFAULT_MAX_CONNECTIONS}"
                )),
            );
        } else {
            s.max_connections = *n.get_ref() as usize;
        }
    }
    if let Some(v) = t.string(diag, "mode") {
        match v.get_ref().as_str() {
            "production" => s.development = false,
            "development" => s.development = true,
            other => diag.error(
                v.span(),
                "server.mode",
                format!("unknown mode {other:?}"),
                Some("use \"production\" (default) or \"development\"".to_owned()),
            ),
        }
    }
    // Each instance reserves about 8 GiB of address space (its memories'
    // slots) in each engine (a tier each, and one more for p3): past a few
    // thousand the 128 TiB a process has on x86-64 run out and the engines
    // cannot be made.
    if let Some(n) = t.uint(diag, "max_instances", 1, 4_000) {
        if *n.get_ref() == 0 {
            diag.error(
                n.span(),
                "server.max_instances",
                "0 instances would run no servlet",
                Some(format!(
                    "use a positive number; the default is {DEFAULT_MAX_INSTANCES}"
                )),
            );
        } else {
            s.max_instances = *n.get_ref() as u32;
        }
    }
    if let Some(b) = t.bool(diag, "request_id_header") {
        s.request_id_header = b;
    }
    s.build_sources = t.bool(diag, "build_sources");
    if let Some(d) = t.duration(diag, "build_timeout") {
        if d.get_ref().is_zero() {
            diag.error(
                d.span(),
                "server.build_timeout",
                "a zero timeout would fail every build",
                Some("use a positive duration such as \"5m\"".to_owned()),
            );
        } else {
            s.build_timeout = *d.get_ref();
        }
    }
    if let Some(v) = t.string(diag, "pid_file") {
        positions.pid_file = Origin::File(v.span());
        // Empty stays empty (not the folder it would join to): validation
        // says so, unless `--pid-file` replaces it first.
        s.pid_file = Some(match v.get_ref().as_str() {
            "" => std::path::PathBuf::new(),
            path => base.join(path),
        });
    }
    s
}
