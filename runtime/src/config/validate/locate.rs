//! Findings turned into problems: the file, line and column of the value
//! each is about, or the command-line flag that set it.

use std::path::{Path, PathBuf};

use super::{At, Finding, Origin, Positions};
use crate::config::error::Problem;
use crate::config::reader::line_column;

/// Turns findings into problems located in `source` (the text of `file`),
/// or on the command line for values that came from flags.
pub(crate) fn locate(
    findings: Vec<Finding>,
    positions: &Positions,
    file: Option<&Path>,
    source: Option<&str>,
) -> Vec<Problem> {
    findings
        .into_iter()
        .map(|f| {
            let site = match f.at {
                At::SiteDefault(i)
                | At::SiteName(i)
                | At::SiteHost(i, _)
                | At::SiteRoot(i)
                | At::SiteServlets(i)
                | At::RouteServlet(i, _)
                | At::Stores(i, ..) => positions.sites.get(i),
                At::Store(_)
                | At::StorePath(_)
                | At::Tls
                | At::TlsCert
                | At::TlsKey
                | At::RedirectHttp
                | At::AccessLog
                | At::PidFile => None,
            };
            let index = |i: usize| site.map_or(i, |s| s.index);
            let (key, origin) = match f.at {
                At::SiteDefault(i) => (
                    format!("site[{}].default", index(i)),
                    site.map(|s| Origin::File(s.table.clone())),
                ),
                At::SiteName(i) => (
                    format!("site[{}].name", index(i)),
                    site.map(|s| Origin::File(s.name.clone().unwrap_or_else(|| s.table.clone()))),
                ),
                At::SiteHost(i, h) => (
                    format!("site[{}].hosts", index(i)),
                    site.map(|s| Origin::File(s.hosts.get(h).unwrap_or(&s.table).clone())),
                ),
                At::SiteRoot(i) => (
                    format!("site[{}].root", index(i)),
                    site.map(|s| s.root.clone()),
                ),
                At::SiteServlets(i) => (
                    format!("site[{}].servlets", index(i)),
                    site.map(|s| s.servlets.clone()),
                ),
                At::RouteServlet(i, r) => {
                    let route = site.and_then(|s| s.routes.get(r));
                    (
                        format!(
                            "site[{}].route[{}].servlet",
                            index(i),
                            route.map_or(r, |p| p.index)
                        ),
                        route.map(|p| p.servlet.clone()),
                    )
                }
                At::Stores(i, None, k) => (
                    format!("site[{}].servlet.stores[{k}]", index(i)),
                    site.map(|s| Origin::File(s.stores.get(k).unwrap_or(&s.table).clone())),
                ),
                At::Stores(i, Some(r), k) => {
                    let route = site.and_then(|s| s.routes.get(r));
                    (
                        format!(
                            "site[{}].route[{}].stores[{k}]",
                            index(i),
                            route.map_or(r, |p| p.index)
                        ),
                        route
                            .and_then(|p| p.stores.get(k))
                            .or(site.map(|s| &s.table))
                            .map(|span| Origin::File(span.clone())),
                    )
                }
                At::Tls => (
                    "server.tls".to_owned(),
                    positions.tls.clone().map(Origin::File),
                ),
                At::TlsCert | At::TlsKey => {
                    let (key, n) = if f.at == At::TlsCert {
                        ("cert", 0)
                    } else {
                        ("key", 1)
                    };
                    (
                        format!("server.tls.{key}"),
                        positions.tls_files[n]
                            .clone()
                            .or(positions.tls.clone())
                            .map(Origin::File),
                    )
                }
                At::RedirectHttp => (
                    "server.tls.redirect_http".to_owned(),
                    positions
                        .redirect_http
                        .clone()
                        .or(positions.tls.clone())
                        .map(Origin::File),
                ),
                At::AccessLog => (
                    "log.access".to_owned(),
                    positions.access_log.clone().map(Origin::File),
                ),
                At::PidFile => (
                    "server.pid_file".to_owned(),
                    Some(positions.pid_file.clone()),
                ),
                At::Store(n) => {
                    let store = positions.stores.get(n);
                    (
                        format!("store[{}].name", store.map_or(n, |s| s.index)),
                        store.map(|s| {
                            Origin::File(s.name.clone().unwrap_or_else(|| s.table.clone()))
                        }),
                    )
                }
                At::StorePath(n) => {
                    let store = positions.stores.get(n);
                    (
                        format!("store[{}].path", store.map_or(n, |s| s.index)),
                        store.map(|s| Origin::File(s.path.clone().unwrap_or(s.table.clone()))),
                    )
                }
            };
            let flag = match f.at {
                At::SiteRoot(_) => "--root",
                At::SiteServlets(_) => "--servlets",
                At::PidFile => "--pid-file",
                _ => "",
            };
            let (file, key, line, column) = match (origin, file, source) {
                (Some(Origin::CommandLine), ..) => {
                    (PathBuf::from("(command line)"), flag.to_owned(), 0, 0)
                }
                (Some(Origin::File(span)), Some(file), Some(source)) => {
                    let (line, column) = line_column(source, span.start);
                    (file.to_path_buf(), key, line, column)
                }
                (_, file, _) => (
                    file.map_or_else(|| PathBuf::from("(defaults)"), Path::to_path_buf),
                    key,
                    0,
                    0,
                ),
            };
            Problem {
                file,
                line,
                column,
                key,
                message: f.message,
                hint: Some(f.hint),
            }
        })
        .collect()
}
