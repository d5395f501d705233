//! Servlets refused at load, and what each refusal was for: the same
//! file with the same settings is refused again untried, so a broken
//! module left in a folder is neither compiled nor reported at every
//! reload.

use std::path::PathBuf;
use std::sync::Arc;

use super::ServletInfo;
use super::native::LoadError;
use crate::config::RoutePath;
use crate::file_stamp::FileStamp;

/// A servlet that could not be loaded (the rest of the site still is).
#[derive(Debug, Clone)]
pub struct Refused {
    /// The file.
    pub file: PathBuf,
    /// Why.
    pub error: Arc<LoadError>,
    /// Whether a previous version of it still serves.
    pub kept_previous: bool,
    /// Refused by this load, not remembered from an earlier one (a broken
    /// file left in the folder is logged and counted once, not at every
    /// reload of the folder).
    pub fresh: bool,
    /// The route, settings and file stamp refused, and when: the same
    /// again is not tried again (for [`REFUSAL_KEPT`] if the refusal may
    /// pass later): a start function that loops to its deadline would
    /// hold up every reload of the folder.
    pub(super) tried: Option<Tried>,
}

/// What a refusal was for, and when.
#[derive(Debug, Clone)]
pub(super) struct Tried {
    pub(super) route: RoutePath,
    pub(super) info: Box<ServletInfo>,
    pub(super) stamp: Option<FileStamp>,
    pub(super) at: std::time::Instant,
}

impl Refused {
    /// The route refused, when the refusal is a route's (not a name no
    /// route can have, or a failed build).
    pub fn route(&self) -> Option<&RoutePath> {
        self.tried.as_ref().map(|t| &t.route)
    }
}

impl Tried {
    /// Whether loading `info` at `route` from a file stamped `stamp` is
    /// what was refused, and is refused again untried: always, unless
    /// the refusal `may_pass_later`, then for [`REFUSAL_KEPT`].
    pub(super) fn answers(
        &self,
        route: &RoutePath,
        info: &ServletInfo,
        stamp: Option<FileStamp>,
        may_pass_later: bool,
    ) -> bool {
        self.same(route, info, stamp) && (!may_pass_later || self.at.elapsed() < REFUSAL_KEPT)
    }

    /// Whether it was for `info` at `route` from a file stamped `stamp`,
    /// however long ago.
    pub(super) fn same(
        &self,
        route: &RoutePath,
        info: &ServletInfo,
        stamp: Option<FileStamp>,
    ) -> bool {
        self.route == *route && *self.info == *info && self.stamp == stamp
    }
}

/// How long a refusal that may pass later answers for the same file and
/// settings: a trial start slowed past its deadline by a busy reload, or
/// failed for want of a store, is tried again at the next change after
/// this (one that loops holds up that reload for up to its `timeout`).
/// Other refusals stand until the file or the settings change.
const REFUSAL_KEPT: std::time::Duration = std::time::Duration::from_secs(60);

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn only_a_refusal_that_may_pass_later_is_tried_again_once_old() {
        let info = ServletInfo {
            name: "a".to_owned(),
            file: PathBuf::from("s/a.wasm"),
            limits: crate::config::ServletLimits::default(),
            settings: Vec::new(),
            development: false,
        };
        let route = RoutePath::parse("/a/*").expect("route");
        let tried = |ago: Duration| Tried {
            route: route.clone(),
            info: Box::new(info.clone()),
            stamp: None,
            at: Instant::now()
                .checked_sub(ago)
                .expect("an instant that long ago"),
        };
        let (recent, old) = (tried(Duration::ZERO), tried(REFUSAL_KEPT * 2));
        // An invalid module: refused untried however long ago.
        assert!(recent.answers(&route, &info, None, false));
        assert!(old.answers(&route, &info, None, false));
        // A start that ran out of time or failed: tried again after
        // REFUSAL_KEPT.
        assert!(recent.answers(&route, &info, None, true));
        assert!(!old.answers(&route, &info, None, true));
        // Other settings: tried.
        let other = ServletInfo {
            development: true,
            ..info.clone()
        };
        assert!(!recent.answers(&route, &other, None, false));
    }
}
