//! `[[store]]`.

use std::path::Path;

use toml::Spanned;

use crate::config::reader::{Diagnostics, TableReader};
use crate::config::store::{
    DEFAULT_REDIS_CONNECTIONS, DEFAULT_REDIS_TIMEOUT, StoreConfig, StoreKind, StoreLimits,
};
use crate::config::validate::StorePositions;

/// Reads one `[[store]]` table (the `index`th of the file).
pub(super) fn read(
    t: &mut TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    base: &Path,
    index: usize,
) -> Option<(StoreConfig, StorePositions)> {
    let written = t.string(diag, "name");
    let name_span = written.as_ref().map(|n| n.span());
    let name = match written {
        Some(n) if is_store_name(n.get_ref()) => Some(n.into_inner()),
        Some(n) => {
            diag.error(
                n.span(),
                &t.key_path("name"),
                format!("{:?} is not a store name", n.get_ref()),
                Some("use letters, digits, '-' and '_'".to_owned()),
            );
            None
        }
        None => {
            t.missing(
                diag,
                "name",
                "every store needs a name, such as `name = \"default\"`",
            );
            None
        }
    };
    let path = t.string(diag, "path");
    let url = t.string(diag, "url");
    let url_env = t.string(diag, "url_env");
    let connections = t.uint(diag, "connections", 1, 64);
    let timeout = t.duration(diag, "timeout");
    let kind = match t.string(diag, "kind") {
        Some(k) if k.get_ref() == "embedded" => {
            let redis_only = [
                url.as_ref().map(|v| ("url", v.span())),
                url_env.as_ref().map(|v| ("url_env", v.span())),
                connections.as_ref().map(|v| ("connections", v.span())),
                timeout.as_ref().map(|v| ("timeout", v.span())),
            ];
            for (key, span) in redis_only.into_iter().flatten() {
                diag.error(
                    span,
                    &t.key_path(key),
                    format!("an embedded store has no `{key}`: it is a Redis setting"),
                    Some("use `path` for an embedded store, or `kind = \"redis\"`".to_owned()),
                );
            }
            let file = match &path {
                Some(p) => base.join(p.get_ref()),
                None => base
                    .join("data")
                    .join(format!("{}.redb", name.as_deref().unwrap_or("store"))),
            };
            Some(StoreKind::Embedded { path: file })
        }
        Some(k) if k.get_ref() == "redis" => {
            if let Some(p) = &path {
                diag.error(
                    p.span(),
                    &t.key_path("path"),
                    "a Redis store has no path",
                    Some("use `url` (or `url_env`) for a Redis store".to_owned()),
                );
            }
            let connections = match connections {
                Some(n) if *n.get_ref() == 0 => {
                    diag.error(
                        n.span(),
                        &t.key_path("connections"),
                        "must be at least 1",
                        Some("remove `connections` to keep the default (2)".to_owned()),
                    );
                    DEFAULT_REDIS_CONNECTIONS
                }
                Some(n) => *n.get_ref() as u32,
                None => DEFAULT_REDIS_CONNECTIONS,
            };
            let timeout = match timeout {
                Some(d) if d.get_ref().is_zero() => {
                    diag.error(
                        d.span(),
                        &t.key_path("timeout"),
                        "must be more than 0",
                        Some("remove `timeout` to keep the default (1s)".to_owned()),
                    );
                    DEFAULT_REDIS_TIMEOUT
                }
                Some(d) => *d.get_ref(),
                None => DEFAULT_REDIS_TIMEOUT,
            };
            redis_url(t, diag, url, url_env).map(|url| StoreKind::Redis {
                url,
                connections,
                timeout,
            })
        }
        Some(k) => {
            diag.error(
                k.span(),
                &t.key_path("kind"),
                format!("unknown store kind {:?}", k.get_ref()),
                Some("use \"embedded\" or \"redis\"".to_owned()),
            );
            None
        }
        None => {
            t.missing(
                diag,
                "kind",
                "use kind = \"embedded\" (a file here) or \"redis\"",
            );
            None
        }
    };
    let mut limits = StoreLimits::default();
    for (key, slot) in [
        ("max_key_bytes", &mut limits.max_key_bytes),
        ("max_value_bytes", &mut limits.max_value_bytes),
    ] {
        if let Some(n) = t.size(diag, key) {
            if *n.get_ref() == 0 {
                diag.error(
                    n.span(),
                    &t.key_path(key),
                    "must be at least 1 byte",
                    Some(format!("remove `{key}` to keep the default")),
                );
            } else {
                *slot = *n.get_ref();
            }
        }
    }
    for (key, slot) in [
        ("max_ops_per_request", &mut limits.max_ops_per_request),
        ("max_list_keys", &mut limits.max_list_keys),
    ] {
        if let Some(n) = t.uint(diag, key, 1, 1_000_000) {
            if *n.get_ref() == 0 {
                diag.error(
                    n.span(),
                    &t.key_path(key),
                    "must be at least 1",
                    Some(format!("remove `{key}` to keep the default")),
                );
            } else {
                *slot = *n.get_ref();
            }
        }
    }
    let at = StorePositions {
        index,
        table: t.span(),
        name: name_span,
        path: path.as_ref().map(|p| p.span()),
    };
    Some((
        StoreConfig {
            name: name?,
            kind: kind?,
            limits,
        },
        at,
    ))
}

/// Letters, digits, '-' and '_'.
pub(crate) fn is_store_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The Redis URL of a `[[store]]`: `url`, or the environment variable
/// `url_env` names (so the password stays out of the file). Checked with the
/// redis crate's own parser; a password is never repeated in an error.
fn redis_url(
    t: &TableReader<'_, '_>,
    diag: &mut Diagnostics<'_>,
    url: Option<Spanned<String>>,
    url_env: Option<Spanned<String>>,
) -> Option<String> {
    let (value, span, key) = match (url, url_env) {
        (Some(_), Some(e)) => {
            diag.error(
                e.span(),
                &t.key_path("url_env"),
                "`url` and `url_env` are both set",
                Some(
                    "keep one: `url_env` names an environment variable holding the URL".to_owned(),
                ),
            );
            return None;
        }
        (Some(u), None) => {
            let span = u.span();
            (u.into_inner(), span, "url")
        }
        (None, Some(e)) => {
            let span = e.span();
            match std::env::var(e.get_ref()) {
                Ok(v) => (v, span, "url_env"),
                Err(_) => {
                    diag.error(
                        span,
                        &t.key_path("url_env"),
                        format!("the environment variable {} is not set", e.get_ref()),
                        Some(
                            "set it to redis://[USER:PASSWORD@]HOST:PORT[/DB] before starting swan"
                                .to_owned(),
                        ),
                    );
                    return None;
                }
            }
        }
        (None, None) => {
            diag.error(
                t.span(),
                &t.key_path("url"),
                "a Redis store needs `url` or `url_env`",
                Some("such as url = \"redis://127.0.0.1:6379\"".to_owned()),
            );
            return None;
        }
    };
    let scheme_ok = value.starts_with("redis://") || value.starts_with("rediss://");
    let parsed = scheme_ok
        .then(|| redis::IntoConnectionInfo::into_connection_info(value.as_str()))
        .transpose();
    match parsed {
        Ok(Some(_)) => Some(value),
        Ok(None) | Err(_) => {
            let why = match parsed {
                Err(e) => format!(": {}", e.detail().unwrap_or(&e.to_string())),
                _ => String::new(),
            };
            diag.error(
                span,
                &t.key_path(key),
                format!(
                    "{} is not a Redis URL{why}",
                    crate::config::redact_url(&value)
                ),
                Some("write redis://[USER:PASSWORD@]HOST:PORT[/DB] (rediss:// for TLS)".to_owned()),
            );
            None
        }
    }
}
