//! The access log: one line per request, written by a thread of its own.
//!
//! When a response has been sent, its request formats its line into a
//! buffer of its worker thread's own (one of 16 shards, each behind a lock
//! no other core takes but the writer's, every 20 ms): no queue, no
//! allocation, nothing read again from another core's cache. The writer
//! thread wakes every 20 ms, swaps each shard's buffer for an empty one and
//! writes them, merged back into the order the lines were logged, with one
//! `write`. Requests never wait for the disk: past
//! `buffer` lines (or `buffer` KiB of lines) waiting, a line is dropped
//! and counted
//! (`swan_access_log_dropped_total`). A file target is reopened on request
//! (SIGUSR1), so `logrotate` can move it away and have swan write a new one;
//! [`AccessLog::close`] writes what is left when the server stops.
//!
//! Order: lines are written in the order they were logged (each is
//! numbered as it is logged).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use crossbeam_utils::CachePadded;

use super::counters::{Counter, SHARDS, shard_index};
pub use super::log_line::{Entry, RequestText};
use super::log_line::{TimeText, combined, json};
use crate::config::{AccessLogFormat, AccessLogTarget, LogConfig};

/// How often the writer takes the waiting lines and writes them out (so a
/// line reaches the file at most this late, unless a shard half fills
/// first and wakes it).
const BATCH_EVERY: Duration = Duration::from_millis(20);

/// How long stopping waits for the last lines to be written.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Bytes a waiting line may take on average: `buffer` lines may wait, and
/// `buffer` KiB of them.
const LINE_BYTES: usize = 1 << 10;

/// A shard's buffer keeps at most this much room after a burst.
const KEEP_CAPACITY: usize = 256 << 10;

/// The requests' side: cheap to clone, never blocks on the disk.
#[derive(Clone)]
pub struct AccessLog {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("format", &self.shared.format)
            .field("shards", &self.shared.shards.len())
            .field("per_shard", &self.shared.per_shard)
            .finish_non_exhaustive()
    }
}

/// The access log could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot open the access log {path}")]
pub struct OpenError {
    /// The file.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: io::Error,
}

impl AccessLog {
    /// Starts the writer for `config`; `None` when the log is off.
    /// `threads` is how many threads log (the server's workers): together
    /// they hold `buffer` lines.
    pub fn start(
        config: &LogConfig,
        threads: usize,
        dropped: Arc<Counter>,
    ) -> Result<Option<AccessLog>, OpenError> {
        let out = match &config.access {
            AccessLogTarget::Off => return Ok(None),
            // Its own descriptor of stdout, written without std's
            // `LineWriter`: after a partial write (a full pipe, a signal)
            // that would keep part of a batch in its buffer and report it
            // written, so a stop could not tell what was lost.
            AccessLogTarget::Stdout => Output::Stdout(
                rustix::io::fcntl_dupfd_cloexec(io::stdout(), 0)
                    .map(File::from)
                    .map_err(|e| OpenError {
                        path: PathBuf::from("(stdout)"),
                        source: e.into(),
                    })?,
            ),
            AccessLogTarget::File(path) => Output::File {
                file: open(path)?,
                path: path.clone(),
            },
        };
        let shared = Arc::new(Shared::new(config.format, config.buffer, threads, dropped));
        let (ended, writer_ended) = std::sync::mpsc::channel::<()>();
        let writer = Writer {
            _ended: ended,
            out,
            mid_line: false,
            spares: (0..shared.shards.len()).map(|_| Lines::default()).collect(),
            merged: Vec::new(),
            order: Vec::new(),
            taken: Vec::with_capacity(shared.shards.len()),
            failures: None,
            shared: shared.clone(),
        };
        let handle = std::thread::Builder::new()
            .name("swan-access-log".to_owned())
            .spawn(move || writer.run())
            .map_err(|source| OpenError {
                path: PathBuf::from("(writer thread)"),
                source,
            })?;
        let _ = shared.writer.set(handle.thread().clone());
        *lock(&shared.handle) = Some((handle, writer_ended));
        Ok(Some(AccessLog { shared }))
    }

    /// Formats `entry` into this thread's buffer; drops (and counts) it
    /// when `buffer` lines are already waiting.
    #[inline]
    pub fn log(&self, entry: &Entry) {
        if self.shared.log(entry) {
            // The first shard to half fill wakes the writer early.
            if let Some(writer) = self.shared.writer.get() {
                writer.unpark();
            }
        }
    }

    /// Reopens a file target before the next batch (log rotation).
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Relaxed);
        // No wake-up needed: the flag is read before each batch, and a
        // quiet log has nothing to write to the old file.
    }

    /// Writes every waiting line and stops the writer; lines logged after
    /// this are dropped and counted. Called once the server has stopped
    /// serving, so nothing answered goes unlogged.
    ///
    /// Waits at most [`CLOSE_WAIT`]: a writer stuck on a reader that
    /// stopped reading (a pipe nobody drains) or a hung disk must not keep
    /// the process from exiting. Its lines are then lost, and counted.
    pub fn close(&self) {
        self.shared.closing.store(true, Ordering::Release);
        let Some((handle, ended)) = lock(&self.shared.handle).take() else {
            return;
        };
        handle.thread().unpark();
        match ended.recv_timeout(CLOSE_WAIT) {
            // The writer drops its end when it returns (or panics).
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) | Ok(()) => {
                if handle.join().is_err() {
                    tracing::error!("the access log writer panicked");
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let waiting: u64 = self
                    .shared
                    .shards
                    .iter()
                    .map(|s| lock(s).lines.ends.len() as u64)
                    .sum();
                // A write stuck in the kernel may have handed part of its
                // batch over (a pipe takes what fits, then blocks): those
                // lines are not known to be lost.
                let being_written = self.shared.unwritten.load(Ordering::Acquire);
                self.shared.dropped.add(waiting);
                tracing::error!(
                    waiting,
                    being_written,
                    "the access log could not be written within {} s (a reader that stopped reading, or a hung disk): stopping without it; the `waiting` lines were never written, and of the `being_written` lines of the write under way those the reader had not taken are lost",
                    CLOSE_WAIT.as_secs()
                );
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these cannot leave it half changed in a
    // way that matters: at worst a line is cut short.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn open(path: &PathBuf) -> Result<File, OpenError> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        // Clients' addresses and queries: not for every user.
        .mode(0o640)
        .open(path)
        .map_err(|source| OpenError {
            path: path.clone(),
            source,
        })
}

/// What the requests and the writer share.
struct Shared {
    format: AccessLogFormat,
    shards: Box<[CachePadded<Mutex<Shard>>]>,
    /// Lines one shard holds before dropping: the shards of the threads
    /// that log hold `buffer` together (each thread has a shard of its own
    /// up to 16 threads).
    per_shard: usize,
    /// Bytes of lines one shard holds before dropping: `per_shard` KiB.
    /// Lines are a few hundred bytes, but one carrying a 1 MiB header
    /// written as `\xHH` is 4 MiB, and a writer that cannot write (a
    /// stdout nobody reads) must not let clients fill the memory.
    per_shard_bytes: usize,
    dropped: Arc<Counter>,
    reopen: AtomicBool,
    closing: AtomicBool,
    /// Numbers the lines in the order they were logged, across shards.
    sequence: CachePadded<AtomicU64>,
    writer: OnceLock<Thread>,
    /// Lines of the batch being written not yet written whole: what a
    /// stop that cannot wait for the writer loses besides the shards'.
    unwritten: AtomicU64,
    /// The writer thread, and what tells that it has returned.
    handle: Mutex<Option<(JoinHandle<()>, std::sync::mpsc::Receiver<()>)>>,
}

/// One worker's waiting lines.
#[derive(Default)]
struct Shard {
    lines: Lines,
    clock: TimeText,
}

/// Lines, and where each ends with its number: the writer puts the lines
/// of all shards back in the order they were logged.
#[derive(Default)]
struct Lines {
    text: Vec<u8>,
    ends: Vec<(u64, usize)>,
}

impl Shared {
    fn new(
        format: AccessLogFormat,
        buffer: usize,
        threads: usize,
        dropped: Arc<Counter>,
    ) -> Shared {
        let shards = SHARDS.min(buffer).max(1);
        // Sized by the threads that log, not by the shards: two workers
        // use two shards, and a sixteenth each would hold an eighth of
        // `buffer`.
        let logging = threads.clamp(1, shards);
        Shared {
            format,
            shards: (0..shards)
                .map(|_| CachePadded::new(Mutex::default()))
                .collect(),
            per_shard: (buffer / logging).max(1),
            per_shard_bytes: (buffer / logging).max(1).saturating_mul(LINE_BYTES),
            dropped,
            reopen: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            sequence: CachePadded::new(AtomicU64::new(0)),
            writer: OnceLock::new(),
            unwritten: AtomicU64::new(0),
            handle: Mutex::new(None),
        }
    }

    /// Adds `e`'s line to this thread's shard; true when that shard has
    /// just reached half its room, in lines or in bytes (time to wake the
    /// writer).
    fn log(&self, e: &Entry) -> bool {
        let shard = &self.shards[shard_index() % self.shards.len()];
        let mut shard = lock(shard);
        if shard.lines.ends.len() >= self.per_shard
            || shard.lines.text.len() >= self.per_shard_bytes
            || self.closing.load(Ordering::Relaxed)
        {
            drop(shard);
            self.dropped.add(1);
            return false;
        }
        let Shard { lines, clock } = &mut *shard;
        let before = lines.text.len();
        let time = clock.of(e.time, self.format);
        match self.format {
            AccessLogFormat::Combined => combined(&mut lines.text, time, e),
            AccessLogFormat::Json => json(&mut lines.text, time, e),
        }
        lines.text.push(b'\n');
        let n = self.sequence.fetch_add(1, Ordering::Relaxed);
        lines.ends.push((n, lines.text.len()));
        let half_bytes = self.per_shard_bytes / 2;
        lines.ends.len() == self.per_shard.div_ceil(2)
            || (before < half_bytes && lines.text.len() >= half_bytes)
    }

    /// Swaps shard `i`'s lines for `spare` (empty); false if it had none.
    fn take(&self, i: usize, spare: &mut Lines) -> bool {
        let mut shard = lock(&self.shards[i]);
        if shard.lines.ends.is_empty() {
            return false;
        }
        std::mem::swap(&mut shard.lines, spare);
        true
    }
}

enum Output {
    /// A descriptor of stdout of its own.
    Stdout(File),
    File {
        file: File,
        path: PathBuf,
    },
}

struct Writer {
    /// Dropped when the writer returns, which [`AccessLog::close`] sees.
    _ended: std::sync::mpsc::Sender<()>,
    out: Output,
    /// The output ends in a line cut short (a failed write that could not
    /// be taken back).
    mid_line: bool,
    shared: Arc<Shared>,
    /// One empty buffer per shard, swapped for the shard's lines.
    spares: Vec<Lines>,
    /// The lines of several shards, in the order they were logged.
    merged: Vec<u8>,
    /// (number, shard, start, end) of each line taken.
    order: Vec<(u64, usize, usize, usize)>,
    /// The shards that had lines in this batch.
    taken: Vec<usize>,
    /// When a failed write was last reported, and the failures since.
    failures: Option<(std::time::Instant, u64)>,
}

/// How often a log that cannot be written (disk full, reader gone) is
/// reported.
const REPORT_FAILURES_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

impl Writer {
    fn run(mut self) {
        // Sleeps BATCH_EVERY (or until a shard half fills, or close), then
        // writes what each shard holds. Never waiting on a lock or channel
        // the requests signal means a request has no sleeping thread to
        // wake: that cost a futex wake and a context switch per request,
        // 62% of static throughput at 100 connections on 2 cores
        // (BENCHMARKS.md).
        loop {
            std::thread::park_timeout(BATCH_EVERY);
            // Read before the batch: a line logged before `close` set it
            // is in this batch.
            let closing = self.shared.closing.load(Ordering::Acquire);
            if self.shared.reopen.swap(false, Ordering::Relaxed) {
                self.reopen_file();
            }
            self.write_batch();
            // Closed, or every handle gone (an app dropped without close):
            // once more for a line that raced with the flag.
            if closing || Arc::strong_count(&self.shared) == 1 {
                self.write_batch();
                return;
            }
        }
    }

    /// Takes every shard's lines and writes them, in the order they were
    /// logged, with one `write`: one batch is one append (and one event for
    /// whoever watches the file).
    fn write_batch(&mut self) {
        self.taken.clear();
        for (i, spare) in self.spares.iter_mut().enumerate() {
            if self.shared.take(i, spare) {
                self.taken.push(i);
            }
        }
        let (text, lines): (&[u8], usize) = match self.taken.as_slice() {
            [] => return,
            [one] => (&self.spares[*one].text, self.spares[*one].ends.len()),
            _ => {
                self.order.clear();
                for &i in &self.taken {
                    let mut start = 0;
                    for &(n, end) in &self.spares[i].ends {
                        self.order.push((n, i, start, end));
                        start = end;
                    }
                }
                self.order.sort_unstable_by_key(|line| line.0);
                self.merged.clear();
                for &(_, i, start, end) in &self.order {
                    self.merged
                        .extend_from_slice(&self.spares[i].text[start..end]);
                }
                (&self.merged, self.order.len())
            }
        };
        let unwritten = &self.shared.unwritten;
        unwritten.store(lines as u64, Ordering::Release);
        // A line cut short by an earlier failure is ended first, so the
        // next one does not run on from it.
        if self.mid_line {
            let ended = match &mut self.out {
                Output::Stdout(file) | Output::File { file, .. } => file.write_all(b"\n"),
            };
            self.mid_line = ended.is_err();
        }
        let (sent, failed) = match &mut self.out {
            Output::Stdout(file) | Output::File { file, .. } => write_some(file, text, unwritten),
        };
        // Written, or counted as dropped below.
        unwritten.store(0, Ordering::Release);
        if let Some(e) = failed {
            // The lines not written whole are lost: counted as dropped,
            // and reported once per REPORT_FAILURES_EVERY, not once per
            // batch. A line written in part (a disk that filled up) is cut
            // off the file, or else ended before the next write.
            let whole = text[..sent]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let part = (sent - whole) as u64;
            if part > 0 {
                // Cut only while the file still ends with this writer's
                // own bytes (another process appending to the same file,
                // an upgrade's, would lose its line instead).
                let cut = match &mut self.out {
                    Output::File { file, .. } => {
                        use std::io::Seek;
                        let ours = file.stream_position();
                        match (ours, file.metadata()) {
                            (Ok(end), Ok(m)) if m.len() == end && end >= part => {
                                file.set_len(end - part).is_ok()
                            }
                            _ => false,
                        }
                    }
                    Output::Stdout(_) => false,
                };
                self.mid_line = !cut;
            }
            let lines = text[whole..].iter().filter(|&&b| b == b'\n').count() as u64;
            self.shared.dropped.add(lines);
            let now = std::time::Instant::now();
            match &mut self.failures {
                Some((at, since)) if now.duration_since(*at) < REPORT_FAILURES_EVERY => {
                    *since += 1;
                }
                last => {
                    let before = last.map_or(0, |(_, n)| n);
                    tracing::warn!(error = %e, lines, failures_since_last_report = before, "cannot write the access log; its lines are dropped and counted");
                    *last = Some((now, 0));
                }
            }
        }
        for spare in &mut self.spares {
            spare.text.clear();
            spare.ends.clear();
            spare.text.shrink_to(KEEP_CAPACITY);
            spare.ends.shrink_to(KEEP_CAPACITY / 64);
        }
        self.merged.clear();
        self.merged.shrink_to(KEEP_CAPACITY);
        self.order.shrink_to(KEEP_CAPACITY / 64);
    }

    fn reopen_file(&mut self) {
        if let Output::File { file, path } = &mut self.out {
            match open(path) {
                Ok(f) => {
                    *file = f;
                    // A new file starts on a line of its own.
                    self.mid_line = false;
                    tracing::info!(path = %path.display(), "access log reopened");
                }
                Err(e) => {
                    tracing::error!(path = %e.path.display(), error = %e.source, "cannot reopen the access log; still writing to the old file (send SIGUSR1 again once it can be opened)")
                }
            }
        }
    }
}

/// Writes as much of `text` as `out` takes; how much, and the error that
/// stopped it. `unwritten` (the lines of `text`) goes down by the lines a
/// partial write finished, so that a stop while a write is stuck knows
/// what is lost.
fn write_some(
    out: &mut impl Write,
    text: &[u8],
    unwritten: &AtomicU64,
) -> (usize, Option<io::Error>) {
    let mut sent = 0;
    while sent < text.len() {
        match out.write(&text[sent..]) {
            Ok(0) => return (sent, Some(io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                if sent + n < text.len() {
                    let ended = text[sent..sent + n].iter().filter(|&&b| b == b'\n').count();
                    unwritten.fetch_sub(ended as u64, Ordering::AcqRel);
                }
                sent += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return (sent, Some(e)),
        }
    }
    (sent, None)
}

#[cfg(test)]
mod tests;
