//! `/metrics`: everything the server counts, in the Prometheus text format
//! (prometheus-client's encoder). Values are read at scrape time from the
//! live objects (sharded counters, pools, caches, stores); nothing is kept
//! twice.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::app::App;
use crate::observe::Readiness;
use crate::observe::counters::{LATENCY_BUCKETS, RouteTotals, STATUS_CLASSES};
use crate::servlet::Target;
use crate::servlet::stats::OUTBOUND_REFUSALS;

/// The label pairs of one sample.
type Labels = Vec<(&'static str, String)>;

/// Renders the metrics of `app`.
/// The metrics text; `stores` is each store's state now (see
/// `store_states`).
pub(crate) fn render(app: &Arc<App>, stores: Vec<(String, Option<String>)>) -> String {
    let mut registry = Registry::with_prefix("swan");
    registry.register_collector(Box::new(Snapshot(app.clone(), stores)));
    let mut out = String::with_capacity(16 << 10);
    if prometheus_client::encoding::text::encode(&mut out, &registry).is_err() {
        out.clear();
    }
    out
}

#[derive(Debug)]
struct Snapshot(Arc<App>, Vec<(String, Option<String>)>);

/// `labels` with their values escaped as the text format requires (`\`,
/// `"` and a line feed): the encoder writes values as given, and a site
/// name or route with a quote would break the whole scrape.
fn escaped(labels: &Labels) -> Labels {
    labels
        .iter()
        .map(|(name, value)| {
            let mut v = String::with_capacity(value.len());
            for c in value.chars() {
                match c {
                    '\\' => v.push_str("\\\\"),
                    '"' => v.push_str("\\\""),
                    '\n' => v.push_str("\\n"),
                    c => v.push(c),
                }
            }
            (*name, v)
        })
        .collect()
}

/// Writes one metric family: `samples` as `kind`.
fn family(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: &[(Labels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut f = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in samples {
        let labels = escaped(labels);
        let m = f.encode_family(&labels)?;
        match kind {
            MetricType::Counter => ConstCounter::new(*value as u64).encode(m)?,
            _ => ConstGauge::new(*value).encode(m)?,
        }
    }
    Ok(())
}

fn histogram(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: &[(Labels, RouteTotals)],
) -> Result<(), std::fmt::Error> {
    let mut f = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, t) in samples {
        let labels = escaped(labels);
        let mut m = f.encode_family(&labels)?;
        let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS
            .iter()
            .zip(&t.buckets)
            .map(|(b, n)| (*b, *n))
            .collect();
        buckets.push((f64::MAX, t.buckets[LATENCY_BUCKETS.len()]));
        m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            t.sum_seconds,
            t.requests(),
            &buckets,
            None,
        )?;
    }
    Ok(())
}

impl Collector for Snapshot {
    fn encode(&self, mut e: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let app = &self.0;
        let o = &app.observe;
        family(
            &mut e,
            "build_info",
            "swan's version",
            MetricType::Gauge,
            &[(vec![("version", env!("CARGO_PKG_VERSION").to_owned())], 1.0)],
        )?;
        family(
            &mut e,
            "uptime_seconds",
            "Seconds since start",
            MetricType::Gauge,
            &[(vec![], o.started.elapsed().as_secs_f64())],
        )?;
        family(
            &mut e,
            "ready",
            "1 when /readyz answers 200 (stores aside)",
            MetricType::Gauge,
            &[(
                vec![],
                f64::from(u8::from(o.readiness() == Readiness::Ready)),
            )],
        )?;
        family(
            &mut e,
            "connections_open",
            "Client connections open now",
            MetricType::Gauge,
            &[(
                vec![],
                o.connections_open
                    .load(std::sync::atomic::Ordering::Relaxed) as f64,
            )],
        )?;
        family(
            &mut e,
            "connections_parked",
            "Open connections parked: idle HTTP/1 keep-alive, holding no buffers",
            MetricType::Gauge,
            &[(
                vec![],
                o.connections_parked
                    .load(std::sync::atomic::Ordering::Relaxed) as f64,
            )],
        )?;
        family(
            &mut e,
            "connections",
            "Client connections accepted",
            MetricType::Counter,
            &[(vec![], o.connections_total.get() as f64)],
        )?;
        family(
            &mut e,
            "connections_failed",
            "Connections closed before their first request: a TLS handshake that failed or timed out, a PROXY protocol header missing, malformed or from an untrusted peer",
            MetricType::Counter,
            &[
                (vec![("stage", "tls".to_owned())], o.tls_failed.get() as f64),
                (
                    vec![("stage", "proxy".to_owned())],
                    o.proxy_refused.get() as f64,
                ),
            ],
        )?;
        family(
            &mut e,
            "static_sendfile",
            "Streamed responses sent with sendfile(2), from the page cache to the socket",
            MetricType::Counter,
            &[(vec![], o.sendfile_responses.get() as f64)],
        )?;

        let refused: Vec<(Labels, f64)> = crate::observe::REFUSED_STATUSES
            .iter()
            .zip(&o.heads_refused)
            .map(|(status, c)| (vec![("status", status.to_string())], c.get() as f64))
            .collect();
        family(
            &mut e,
            "requests_refused",
            "Request heads refused before a site saw them (malformed 400, cut off by header_read_timeout 408, URI too long 414, headers too large 431)",
            MetricType::Counter,
            &refused,
        )?;

        // Requests: static files per site, servlet routes per route.
        let mut totals: Vec<(Labels, RouteTotals)> = Vec::new();
        for (site, c) in o.sites() {
            totals.push((
                vec![("site", site.to_string()), ("route", "static".to_owned())],
                c.requests.totals(),
            ));
        }
        for ((site, route), c) in o.routes() {
            totals.push((
                vec![("site", site.to_string()), ("route", route.to_string())],
                c.totals(),
            ));
        }
        let mut by_class = Vec::new();
        for (labels, t) in &totals {
            for (class, n) in STATUS_CLASSES.iter().zip(t.by_class) {
                if n > 0 {
                    let mut l = labels.clone();
                    l.push(("class", (*class).to_owned()));
                    by_class.push((l, n as f64));
                }
            }
        }
        family(
            &mut e,
            "requests",
            "Requests answered, by site, route and status class",
            MetricType::Counter,
            &by_class,
        )?;
        let bytes: Vec<(Labels, f64)> = totals
            .iter()
            .map(|(l, t)| (l.clone(), t.bytes as f64))
            .collect();
        family(
            &mut e,
            "response_body_bytes",
            "Response body bytes sent",
            MetricType::Counter,
            &bytes,
        )?;
        histogram(
            &mut e,
            "request_duration_seconds",
            "Time from the request head to the response head",
            &totals,
        )?;

        // Static files.
        let sites = app.sites.load();
        let mut hits = Vec::new();
        let mut streamed = Vec::new();
        for (site, c) in o.sites() {
            hits.push((vec![("site", site.to_string())], c.cache_hits.get() as f64));
            streamed.push((vec![("site", site.to_string())], c.streamed.get() as f64));
        }
        family(
            &mut e,
            "static_cache_hits",
            "Static responses served from memory",
            MetricType::Counter,
            &hits,
        )?;
        family(
            &mut e,
            "static_streamed",
            "Static responses streamed from disk",
            MetricType::Counter,
            &streamed,
        )?;
        let mut files = Vec::new();
        let mut cached = Vec::new();
        for site in sites.iter() {
            let s = site.cache.stats();
            let l = vec![("site", site.config.name.clone())];
            files.push((l.clone(), s.cached_files as f64));
            cached.push((l, s.cached_bytes as f64));
        }
        family(
            &mut e,
            "static_cache_files",
            "Files held in memory",
            MetricType::Gauge,
            &files,
        )?;
        family(
            &mut e,
            "static_cache_bytes",
            "Bytes held in memory, compressed variants included",
            MetricType::Gauge,
            &cached,
        )?;
        family(
            &mut e,
            "reloads",
            "Reloads, by result",
            MetricType::Counter,
            &[
                (vec![("result", "ok".to_owned())], o.reloads_ok.get() as f64),
                (
                    vec![("result", "refused".to_owned())],
                    o.reloads_failed.get() as f64,
                ),
                (
                    vec![("result", "partial".to_owned())],
                    o.reloads_partial.get() as f64,
                ),
            ],
        )?;

        // Servlets: one sample per loaded servlet (reset when it reloads).
        let mut info = Vec::new();
        let (mut outbound_refused, mut outbound_failed) = (Vec::new(), Vec::new());
        let (
            mut made,
            mut ready,
            mut busy_now,
            mut traps,
            mut timeouts,
            mut busy,
            mut compile,
            mut reuse,
        ) = (
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
            Vec::new(),
        );
        for site in sites.iter() {
            for route in site.servlets.routes.iter() {
                let Target::Servlet(s) = &route.target else {
                    continue;
                };
                let l: Labels = vec![
                    ("site", site.config.name.clone()),
                    ("route", route.path.to_string()),
                ];
                let mut i = l.clone();
                i.push(("kind", s.kind().to_string()));
                i.push(("tier", format!("{:?}", s.tier()).to_lowercase()));
                i.push(("file", s.info().file.display().to_string()));
                info.push((i, 1.0));
                let st = s.stats();
                made.push((l.clone(), st.instantiated.get() as f64));
                ready.push((l.clone(), s.ready_instances() as f64));
                busy_now.push((l.clone(), s.in_use() as f64));
                traps.push((l.clone(), st.traps.get() as f64));
                timeouts.push((l.clone(), st.timeouts.get() as f64));
                busy.push((l.clone(), st.busy.get() as f64));
                for (reason, n) in OUTBOUND_REFUSALS.iter().zip(&st.outbound_refused) {
                    let mut r = l.clone();
                    r.push(("reason", (*reason).to_owned()));
                    outbound_refused.push((r, n.get() as f64));
                }
                outbound_failed.push((l.clone(), st.outbound_failed.get() as f64));
                reuse.push((l.clone(), f64::from(s.info().limits.reuse)));
                compile.push((l, s.compile_time().as_secs_f64()));
            }
        }
        family(
            &mut e,
            "servlet_info",
            "Loaded servlets: kind, compiler tier, file",
            MetricType::Gauge,
            &info,
        )?;
        family(
            &mut e,
            "servlet_instances_made",
            "Instances made (ahead of requests and on demand)",
            MetricType::Counter,
            &made,
        )?;
        family(
            &mut e,
            "servlet_instances_ready",
            "Instances ready to serve now",
            MetricType::Gauge,
            &ready,
        )?;
        family(
            &mut e,
            "servlet_requests_in_flight",
            "Requests running now",
            MetricType::Gauge,
            &busy_now,
        )?;
        family(
            &mut e,
            "servlet_reuse_limit",
            "Requests one instance may serve (1: fresh per request)",
            MetricType::Gauge,
            &reuse,
        )?;
        family(
            &mut e,
            "servlet_traps",
            "Requests that trapped or broke the ABI (500, or a component body aborted mid-stream)",
            MetricType::Counter,
            &traps,
        )?;
        family(
            &mut e,
            "servlet_timeouts",
            "Requests past their timeout (504, or a component body aborted mid-stream)",
            MetricType::Counter,
            &timeouts,
        )?;
        family(
            &mut e,
            "servlet_busy",
            "Requests that found no free instance (503)",
            MetricType::Counter,
            &busy,
        )?;
        family(
            &mut e,
            "servlet_outbound_refused",
            "Outbound requests refused before connecting, by reason (invalid_url, denied, private_address, concurrency)",
            MetricType::Counter,
            &outbound_refused,
        )?;
        family(
            &mut e,
            "servlet_outbound_failed",
            "Outbound requests that failed before their response head (connection, timeout, a broken answer)",
            MetricType::Counter,
            &outbound_failed,
        )?;
        family(
            &mut e,
            "servlet_compile_seconds",
            "Time compiling and checking the module took",
            MetricType::Gauge,
            &compile,
        )?;

        // Stores.
        if let Some(loader) = &app.loader {
            let (mut ops, mut errors, mut up) = (Vec::new(), Vec::new(), Vec::new());
            for store in loader.stores().in_force() {
                let st = store.stats();
                let l = vec![
                    ("store", store.name().to_owned()),
                    ("kind", store.kind().to_owned()),
                ];
                if let Some((_, problem)) = self.1.iter().find(|(name, _)| name == store.name()) {
                    up.push((l.clone(), if problem.is_none() { 1.0 } else { 0.0 }));
                }
                ops.push((l.clone(), st.operations.get() as f64));
                for (why, c) in [
                    ("unavailable", &st.unavailable),
                    ("limit", &st.limited),
                    ("other", &st.failed),
                ] {
                    let mut le = l.clone();
                    le.push(("error", why.to_owned()));
                    errors.push((le, c.get() as f64));
                }
            }
            family(
                &mut e,
                "store_operations",
                "Key-value store operations",
                MetricType::Counter,
                &ops,
            )?;
            family(
                &mut e,
                "store_errors",
                "Failed store operations, by cause",
                MetricType::Counter,
                &errors,
            )?;
            family(
                &mut e,
                "store_up",
                "1 when the store answers a ping within 400 ms now (whatever ready_needs_stores says)",
                MetricType::Gauge,
                &up,
            )?;
        }
        family(
            &mut e,
            "access_log_dropped",
            "Access log lines dropped (the writer could not keep up)",
            MetricType::Counter,
            &[(vec![], o.access_log_dropped.get() as f64)],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Odd;

    impl Collector for Odd {
        fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
            family(
                &mut encoder,
                "requests",
                "Requests.",
                MetricType::Counter,
                &[(vec![("site", "m\"a\\in\nx".to_owned())], 3.0)],
            )
        }
    }

    /// A label value with a quote, a backslash and a line feed stays one
    /// well-formed sample line.
    #[test]
    fn label_values_are_escaped_once() {
        let mut registry = Registry::with_prefix("swan");
        registry.register_collector(Box::new(Odd));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
        assert!(
            out.contains("swan_requests_total{site=\"m\\\"a\\\\in\\nx\"} 3\n"),
            "{out}"
        );
    }
}
