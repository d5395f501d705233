//! What a reload changed in a site's servlets: routes added, replaced by a
//! new version, removed. The log says it, and so does the status page's
//! entry for the reload.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::loader::SiteServlets;
use crate::config::RoutePath;

/// One route's change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// What happened to it.
    pub kind: ChangeKind,
    /// The route.
    pub route: RoutePath,
    /// The servlet's file (the old one's, for a removal).
    pub file: PathBuf,
}

/// What happened to a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// A servlet serves a route that had none.
    Added,
    /// A new version serves the route.
    Replaced,
    /// The route is gone.
    Removed,
}

impl Change {
    /// The log line's message.
    pub fn message(&self) -> &'static str {
        match self.kind {
            ChangeKind::Added => "servlet added",
            ChangeKind::Replaced => {
                "servlet replaced: the new version serves (requests under way finish on the old one)"
            }
            ChangeKind::Removed => {
                "servlet removed: its route is gone (requests under way finish on it)"
            }
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            ChangeKind::Added => "added",
            ChangeKind::Replaced => "replaced",
            ChangeKind::Removed => "removed",
        };
        let file = self.file.file_name().unwrap_or(self.file.as_os_str());
        write!(f, "{kind} {} ({})", self.route, file.to_string_lossy())
    }
}

impl SiteServlets {
    /// The routes whose servlet differs from `previous`'s, in route order,
    /// removals last.
    pub fn changes_since(&self, previous: &SiteServlets) -> Vec<Change> {
        let mut changes = Vec::new();
        for new in &self.loaded {
            let kind = match previous.loaded.iter().find(|old| old.path == new.path) {
                None => ChangeKind::Added,
                Some(old) if !Arc::ptr_eq(&old.servlet, &new.servlet) => ChangeKind::Replaced,
                Some(_) => continue,
            };
            changes.push(Change {
                kind,
                route: new.path.clone(),
                file: new.servlet.info().file.clone(),
            });
        }
        for old in &previous.loaded {
            if !self.routes.iter().any(|r| r.path == old.path) {
                changes.push(Change {
                    kind: ChangeKind::Removed,
                    route: old.path.clone(),
                    file: old.servlet.info().file.clone(),
                });
            }
        }
        changes
    }
}

/// Logs `site`'s servlet `changes`, a line each; their texts, for the
/// reload's entry on the status page.
pub fn log_changes(site: &str, changes: &[Change]) -> Vec<String> {
    changes
        .iter()
        .map(|c| {
            tracing::info!(site, route = %c.route, file = %c.file.display(), "{}", c.message());
            c.to_string()
        })
        .collect()
}
