//! What a configuration reload cannot change while swan runs (listeners,
//! workers, TLS paths, `[log]`, `[admin]`, stores): each is logged as a
//! warning that names the keys that changed, and noted for the status
//! page's entry of the reload.

use std::fmt::Debug;

use crate::app::App;
use crate::config::Config;

/// The notes "needs a restart: ..." for `config` against what `app` runs,
/// each also logged.
pub(super) fn needs_restart(app: &App, config: &Config) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    // A listener on port 0 runs on the port it was given: the same
    // listener still, not a change.
    let mut server = config.server.clone();
    for (new, running) in server.listen.iter_mut().zip(&app.server.listen) {
        if new.addr.port() == 0 && new.addr.ip() == running.addr.ip() {
            new.addr = running.addr;
        }
    }
    if server != app.server {
        // Name the keys that changed: the TLS certificate's paths, HSTS
        // and the trusted proxies are [server] too, and easy to expect live.
        let (new, old) = (&server, &app.server);
        let mut changed = Vec::new();
        changed.extend(optional_keys("[server.tls]", &new.tls, &old.tls));
        if new.proxy != old.proxy {
            changed.push(keys("[server.proxy]", &new.proxy, &old.proxy));
        }
        let mut rest = new.clone();
        rest.tls.clone_from(&old.tls);
        rest.proxy.clone_from(&old.proxy);
        if rest != *old {
            changed.push(keys("[server]", &rest, old));
        }
        tracing::warn!(
            "{} changed: they take effect after a restart; the running values stay in force (a certificate's files, not its paths, reload by themselves)",
            changed.join("; ")
        );
        notes.push(format!("needs a restart: {}", changed.join("; ")));
    }
    let mut changed = Vec::new();
    if config.log != app.log {
        changed.push(keys("[log]", &config.log, &app.log));
    }
    changed.extend(optional_keys("[admin]", &config.admin, &app.admin));
    if !changed.is_empty() {
        tracing::warn!(
            "{} changed: they take effect after a restart (SIGUSR1 reopens the access log file)",
            changed.join("; ")
        );
        notes.push(format!("needs a restart: {}", changed.join("; ")));
    }
    if config.wants_servlets() && app.loader.is_none() {
        tracing::warn!(
            "servlets were added to a server started without any: restart to enable them"
        );
        notes.push("needs a restart: servlets added to a server started without any".to_owned());
    }
    if let Some(loader) = &app.loader {
        let missing: Vec<String> = config
            .stores_used()
            .into_iter()
            .filter(|name| loader.stores().get(name).is_none())
            .collect();
        if !missing.is_empty() {
            tracing::warn!(
                stores = %missing.join(", "),
                "routes list stores that were not open at start: they answer \"denied\" until a restart opens them"
            );
            notes.push(format!("needs a restart: stores {}", missing.join(", ")));
        }
        let changed: Vec<&str> = loader
            .stores()
            .iter()
            .filter(|open| {
                config
                    .stores
                    .iter()
                    .find(|c| c.name == open.name())
                    .is_some_and(|c| c != open.config())
            })
            .map(|open| open.name())
            .collect();
        if !changed.is_empty() {
            tracing::warn!(
                stores = %changed.join(", "),
                "store settings changed: they take effect after a restart; the running settings stay in force"
            );
            notes.push(format!(
                "needs a restart: settings of stores {}",
                changed.join(", ")
            ));
        }
    }
    notes
}

/// `table` and the keys whose values differ between `new` and `old` (two
/// values of one struct type): "[server] workers, listen".
fn keys<T: Debug>(table: &str, new: &T, old: &T) -> String {
    let fields = changed_fields(new, old);
    if fields.is_empty() {
        table.to_owned()
    } else {
        format!("{table} {}", fields.join(", "))
    }
}

/// [`keys`] for a table that may be absent: `None` when unchanged, the
/// table alone when it was added or removed.
fn optional_keys<T: Debug + PartialEq>(
    table: &str,
    new: &Option<T>,
    old: &Option<T>,
) -> Option<String> {
    match (new, old) {
        (Some(n), Some(o)) => (n != o).then(|| keys(table, n, o)),
        (n, o) => (n.is_some() != o.is_some()).then(|| table.to_owned()),
    }
}

/// The fields of a struct whose values differ between `new` and `old`, in
/// declaration order. Read off their `Debug` forms: `{:#?}` puts each
/// field of the outer struct on a line of its own, four spaces in, and
/// what follows at a deeper indent until the next field. Only names are
/// returned, never values (a URL may hold a password).
fn changed_fields<T: Debug>(new: &T, old: &T) -> Vec<String> {
    fn fields(text: &str) -> Vec<(&str, String)> {
        let mut out: Vec<(&str, String)> = Vec::new();
        for line in text.lines() {
            let field = line
                .strip_prefix("    ")
                .filter(|l| !l.starts_with(' '))
                .and_then(|l| l.split_once(": "))
                .filter(|(k, _)| k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            match (field, out.last_mut()) {
                (Some((k, v)), _) => out.push((k, v.to_owned())),
                (None, Some((_, v))) => {
                    v.push('\n');
                    v.push_str(line);
                }
                (None, None) => {}
            }
        }
        out
    }
    let (new, old) = (format!("{new:#?}"), format!("{old:#?}"));
    let old = fields(&old);
    fields(&new)
        .into_iter()
        .filter(|(k, v)| old.iter().find(|(o, _)| o == k).map(|(_, ov)| ov) != Some(v))
        .map(|(k, _)| k.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::changed_fields;

    #[derive(Debug)]
    #[expect(dead_code, reason = "read through Debug")]
    struct Inner {
        a: u32,
        b: Vec<u32>,
    }

    #[derive(Debug)]
    #[expect(dead_code, reason = "read through Debug")]
    struct Outer {
        workers: u32,
        listen: Vec<String>,
        inner: Option<Inner>,
        name: String,
    }

    #[test]
    fn the_fields_that_differ_are_named_in_order() {
        let old = Outer {
            workers: 2,
            listen: vec!["127.0.0.1:80".to_owned()],
            inner: Some(Inner {
                a: 1,
                b: vec![1, 2],
            }),
            name: "x: y".to_owned(),
        };
        let new = Outer {
            workers: 2,
            listen: vec!["127.0.0.1:81".to_owned()],
            inner: Some(Inner {
                a: 1,
                b: vec![1, 3],
            }),
            name: "x: y".to_owned(),
        };
        assert_eq!(changed_fields(&new, &old), ["listen", "inner"]);
        assert!(changed_fields(&old, &old).is_empty());
    }
}
