//! Progress of a long site load, logged every few seconds.

/// A load that takes long says how far it got, every few seconds.
pub(super) struct Progress {
    started: std::time::Instant,
    next: std::time::Duration,
    files: usize,
}

impl Progress {
    const EVERY: std::time::Duration = std::time::Duration::from_secs(2);

    pub(super) fn new() -> Progress {
        Progress {
            started: std::time::Instant::now(),
            next: Progress::EVERY,
            files: 0,
        }
    }

    pub(super) fn file_done(&mut self, site: &str, cached_bytes: u64) {
        self.files += 1;
        if self.files.is_multiple_of(256) && self.started.elapsed() >= self.next {
            self.next = self.started.elapsed() + Progress::EVERY;
            tracing::info!(
                site,
                files = self.files,
                cached_mib = cached_bytes >> 20,
                elapsed_s = self.started.elapsed().as_secs(),
                "loading files"
            );
        }
    }
}
