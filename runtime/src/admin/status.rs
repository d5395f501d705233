//! The status page (`/`, HTML with no external assets, refreshing itself)
//! and the same facts as JSON (`/status.json`): listeners, sites, cache,
//! servlets with their pools and recent errors, stores, recent reloads,
//! uptime.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Value, json};

use crate::app::App;
use crate::servlet::Target;

/// Seconds between the page's refreshes.
const REFRESH_SECONDS: u32 = 5;

fn rfc3339(t: SystemTime) -> String {
    time::OffsetDateTime::from(t)
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

/// Everything the page shows, as JSON.
pub(crate) fn json(app: &Arc<App>, readiness: &str, states: &[(String, Option<String>)]) -> Value {
    let o = &app.observe;
    let sites = app.sites.load();
    let sites: Vec<Value> = sites
        .iter()
        .map(|site| {
            let c = &site.config;
            let stats = site.cache.stats();
            let requests = o.site(&c.name).requests.totals().requests();
            let servlets: Vec<Value> = site
                .servlets
                .routes
                .iter()
                .map(|route| match &route.target {
                    Target::Servlet(s) => {
                        let st = s.stats();
                        let l = &s.info().limits;
                        json!({
                            "route": route.path.to_string(),
                            "file": s.info().file.display().to_string(),
                            "kind": s.kind().to_string(),
                            "tier": format!("{:?}", s.tier()).to_lowercase(),
                            "limits": {
                                "max_memory": l.max_memory,
                                "timeout_ms": l.timeout.as_millis() as u64,
                                "max_body_bytes": l.max_body_bytes,
                                "max_response_bytes": l.response_limit(matches!(
                                    s.kind(),
                                    crate::servlet::ServletKind::Component { .. }
                                )),
                                "max_concurrency": l.max_concurrency,
                                "queue_timeout_ms": l.queue_timeout.as_millis() as u64,
                                "reuse": l.reuse,
                                "prewarm": l.prewarm,
                                "stores": l.stores,
                            },
                            "ready": s.ready_instances(),
                            "in_use": s.in_use(),
                            "instantiated": st.instantiated.get(),
                            "requests": st.requests.get().map_or(0, |r| r.totals().requests()),
                            "traps": st.traps.get(),
                            "timeouts": st.timeouts.get(),
                            "busy": st.busy.get(),
                            "compile_ms": s.compile_time().as_secs_f64() * 1000.0,
                            "recent_errors": st.recent_errors().iter().map(|e| json!({
                                "at": rfc3339(e.at),
                                "request_id": e.request_id,
                                "what": e.what,
                            })).collect::<Vec<_>>(),
                        })
                    }
                    Target::BuildFailed(e) => json!({
                        "route": route.path.to_string(),
                        "build_failed": e.name,
                        "why": e.summary(),
                    }),
                    Target::Refused(name) => json!({
                        "route": route.path.to_string(),
                        "refused": name.as_ref(),
                    }),
                })
                .collect();
            json!({
                "name": c.name,
                "default": c.default,
                "hosts": c.hosts,
                "root": c.root.display().to_string(),
                "cache_control": c.cache_control,
                "servlets_folder": c.servlets.as_ref().map(|p| p.display().to_string()),
                "cache": {
                    "files": stats.cached_files,
                    "bytes": stats.cached_bytes,
                    "compressed_variants": stats.compressed_variants,
                    "streamed_files": stats.streamed_files,
                    "budget": c.cache.budget,
                },
                "static_requests": requests,
                "servlets": servlets,
                "refused": site.servlets.refused.iter().map(|r| r.error.to_string()).collect::<Vec<_>>(),
            })
        })
        .collect();
    let stores: Vec<Value> = app
        .loader
        .iter()
        .flat_map(|l| l.stores().in_force())
        .map(|s| {
            let st = s.stats();
            let state = match states.iter().find(|(name, _)| name == s.name()) {
                Some((_, None)) => "up".to_owned(),
                Some((_, Some(why))) => format!("down: {why}"),
                None => "unknown".to_owned(),
            };
            json!({
                "name": s.name(),
                "kind": s.kind(),
                "state": state,
                "operations": st.operations.get(),
                "unavailable": st.unavailable.get(),
                "limit": st.limited.get(),
                "failed": st.failed.get(),
            })
        })
        .collect();
    let reloads: Vec<Value> = o
        .recent_reloads()
        .iter()
        .map(|r| json!({"at": rfc3339(r.at), "what": r.what, "ok": r.ok, "applied": r.applied, "detail": r.detail}))
        .collect();
    json!({
        "version": env!("CARGO_PKG_VERSION"),
        "started": rfc3339(o.started_at),
        "uptime_seconds": o.started.elapsed().as_secs(),
        "readiness": readiness,
        "listeners": app.server.listen.iter().map(|l| l.to_string()).collect::<Vec<_>>(),
        "connections_open": o.connections_open.load(std::sync::atomic::Ordering::Relaxed),
        "connections_parked": o.connections_parked.load(std::sync::atomic::Ordering::Relaxed),
        "sites": sites,
        "stores": stores,
        "reloads": reloads,
    })
}

/// Text safe inside HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => esc(s),
        Value::Null => "-".to_owned(),
        other => esc(&other.to_string()),
    }
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < 3 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The page.
pub(crate) fn html(status: &Value) -> String {
    let mut h = String::with_capacity(8 << 10);
    let _ = write!(
        h,
        "<!doctype html><html lang=en><head><meta charset=utf-8>\
         <meta http-equiv=refresh content={REFRESH_SECONDS}>\
         <meta name=viewport content=\"width=device-width\">\
         <title>swan status</title><style>\
         body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222;overflow-wrap:anywhere}}\
         h1{{font-size:1.4em}}h2{{font-size:1.15em;margin-top:1.6em}}\
         table{{border-collapse:collapse;margin:.4em 0}}td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}}\
         th{{background:#f3f3f3}}.ok{{color:#080}}.bad{{color:#b00}}code{{font-size:.95em}}\
         </style></head><body>"
    );
    let readiness = status["readiness"].as_str().unwrap_or("?");
    let class = if readiness == "ready" { "ok" } else { "bad" };
    let _ = write!(
        h,
        "<h1>swan {}</h1><p id=summary>Status: <b class={class} id=readiness>{}</b> · up {} (since {}) · {} connections open ({} idle, parked) · refreshes every {REFRESH_SECONDS} s · <a href=/metrics>metrics</a> · <a href=/status.json>JSON</a></p>",
        s(&status["version"]),
        esc(readiness),
        status["uptime_seconds"]
            .as_u64()
            .map_or_else(|| "?".to_owned(), uptime),
        s(&status["started"]),
        s(&status["connections_open"]),
        s(&status["connections_parked"]),
    );
    h.push_str("<h2>Listeners</h2><ul id=listeners>");
    for l in status["listeners"].as_array().into_iter().flatten() {
        let _ = write!(h, "<li><code>{}</code></li>", s(l));
    }
    h.push_str("</ul>");
    for site in status["sites"].as_array().into_iter().flatten() {
        let c = &site["cache"];
        let _ = write!(
            h,
            "<h2 class=site>Site {}{}</h2><p>hosts: {} · root <code>{}</code>{} · {} static requests</p>\
             <p class=cache>Cache: {} files in memory, {} of {} budget, {} compressed variants, {} streamed from disk</p>",
            s(&site["name"]),
            if site["default"] == Value::Bool(true) {
                " (default)"
            } else {
                ""
            },
            site["hosts"]
                .as_array()
                .filter(|a| !a.is_empty())
                .map_or("any".to_owned(), |a| a
                    .iter()
                    .map(s)
                    .collect::<Vec<_>>()
                    .join(", ")),
            s(&site["root"]),
            site["cache_control"]
                .as_str()
                .map_or_else(String::new, |cc| format!(
                    " · cache-control <code>{}</code>",
                    esc(cc)
                )),
            s(&site["static_requests"]),
            s(&c["files"]),
            bytes(c["bytes"].as_u64().unwrap_or(0)),
            bytes(c["budget"].as_u64().unwrap_or(0)),
            s(&c["compressed_variants"]),
            s(&c["streamed_files"]),
        );
        let servlets = site["servlets"].as_array().cloned().unwrap_or_default();
        if !servlets.is_empty() {
            h.push_str("<table class=servlets><tr><th>route</th><th>kind</th><th>tier</th><th>limits</th><th>pool ready / in use</th><th>made</th><th>requests</th><th>traps / timeouts / 503</th><th>compile</th><th>recent errors</th></tr>");
            for sv in &servlets {
                if let Some(name) = sv["build_failed"].as_str() {
                    let _ = write!(
                        h,
                        "<tr><td><code>{}</code></td><td colspan=9 class=bad>build of {} failed: {}</td></tr>",
                        s(&sv["route"]),
                        esc(name),
                        s(&sv["why"])
                    );
                    continue;
                }
                if let Some(name) = sv["refused"].as_str() {
                    let _ = write!(
                        h,
                        "<tr><td><code>{}</code></td><td colspan=9 class=bad>{} refused at load: its paths answer 500 (the reason is below)</td></tr>",
                        s(&sv["route"]),
                        esc(name)
                    );
                    continue;
                }
                let l = &sv["limits"];
                let errors: Vec<String> = sv["recent_errors"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        format!(
                            "{} {} ({})",
                            s(&e["at"]),
                            s(&e["what"]),
                            s(&e["request_id"])
                        )
                    })
                    .collect();
                let _ = write!(
                    h,
                    "<tr class=servlet><td><code>{}</code><br><small>{}</small></td><td>{}</td><td>{}</td>\
                     <td>memory {} · timeout {} ms · body {} · response {} · concurrency {} · queue {} ms · reuse {} · prewarm {}</td>\
                     <td>{} / {}</td><td>{}</td><td>{}</td><td>{} / {} / {}</td><td>{:.1} ms</td><td>{}</td></tr>",
                    s(&sv["route"]),
                    s(&sv["file"]),
                    s(&sv["kind"]),
                    s(&sv["tier"]),
                    bytes(l["max_memory"].as_u64().unwrap_or(0)),
                    s(&l["timeout_ms"]),
                    bytes(l["max_body_bytes"].as_u64().unwrap_or(0)),
                    l["max_response_bytes"]
                        .as_u64()
                        .map_or_else(|| "unlimited (streamed)".to_owned(), bytes),
                    s(&l["max_concurrency"]),
                    s(&l["queue_timeout_ms"]),
                    s(&l["reuse"]),
                    s(&l["prewarm"]),
                    s(&sv["ready"]),
                    s(&sv["in_use"]),
                    s(&sv["instantiated"]),
                    s(&sv["requests"]),
                    s(&sv["traps"]),
                    s(&sv["timeouts"]),
                    s(&sv["busy"]),
                    sv["compile_ms"].as_f64().unwrap_or(0.0),
                    if errors.is_empty() {
                        "none".to_owned()
                    } else {
                        errors.join("<br>")
                    },
                );
            }
            h.push_str("</table>");
        }
        for r in site["refused"].as_array().into_iter().flatten() {
            let _ = write!(h, "<p class=bad>refused: {}</p>", s(r));
        }
    }
    let stores = status["stores"].as_array().cloned().unwrap_or_default();
    if !stores.is_empty() {
        h.push_str("<h2>Stores</h2><table id=stores><tr><th>name</th><th>kind</th><th>state</th><th>operations</th><th>unavailable</th><th>over a limit</th><th>other errors</th></tr>");
        for st in &stores {
            let up = st["state"].as_str() == Some("up");
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td{}>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                s(&st["name"]),
                s(&st["kind"]),
                if up { "" } else { " class=bad" },
                s(&st["state"]),
                s(&st["operations"]),
                s(&st["unavailable"]),
                s(&st["limit"]),
                s(&st["failed"])
            );
        }
        h.push_str("</table>");
    }
    h.push_str("<h2>Recent reloads</h2>");
    let reloads = status["reloads"].as_array().cloned().unwrap_or_default();
    if reloads.is_empty() {
        h.push_str("<p id=reloads>none since start</p>");
    } else {
        h.push_str("<table id=reloads><tr><th>when</th><th>what</th><th>result</th></tr>");
        for r in &reloads {
            let ok = r["ok"] == Value::Bool(true);
            let applied = r["applied"] == Value::Bool(true);
            let _ = write!(
                h,
                "<tr><td>{}</td><td>{}</td><td class={}>{}{}</td></tr>",
                s(&r["at"]),
                s(&r["what"]),
                if ok { "ok" } else { "bad" },
                match (ok, applied) {
                    (true, _) => "live",
                    (false, true) => "live in part",
                    (false, false) => "refused",
                },
                if r["detail"].as_str().is_some_and(|d| !d.is_empty()) {
                    format!(": {}", s(&r["detail"]))
                } else {
                    String::new()
                },
            );
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>");
    h
}

/// `secs` as a person reads an uptime: its two largest units.
fn uptime(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3_600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_in_its_two_largest_units() {
        assert_eq!(uptime(0), "0 s");
        assert_eq!(uptime(59), "59 s");
        assert_eq!(uptime(61), "1 min 1 s");
        assert_eq!(uptime(3_600), "1 h 0 min");
        assert_eq!(uptime(86_399), "23 h 59 min");
        assert_eq!(uptime(90_061), "1 d 1 h");
    }

    #[test]
    fn the_page_escapes_what_it_shows() {
        let status = json!({
            "version": "1", "readiness": "ready", "uptime_seconds": 3, "started": "x",
            "connections_open": 0, "connections_parked": 0, "listeners": ["http://127.0.0.1:1/"],
            "sites": [{"name": "<script>", "default": true, "hosts": [], "root": "/w", "cache": {},
                       "static_requests": 0, "servlets": [], "refused": []}],
            "stores": [], "reloads": [],
        });
        let page = html(&status);
        assert!(page.contains("Site &lt;script&gt; (default)"));
        assert!(!page.contains("<script>"));
    }
}
