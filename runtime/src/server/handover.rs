//! Zero-downtime binary upgrade: the running process starts its successor
//! with the listening sockets themselves (inherited descriptors, never a
//! second bind), waits until the successor reports ready, and only then
//! stops accepting and drains. A successor that fails to start changes
//! nothing: the old process keeps serving.
//!
//! The protocol between the two, through the environment:
//! - `SWAN_LISTEN_FDS`: `ADDR=FD,FD;ADDR=FD` — the socket groups, in the
//!   order of the old process's `listen`, each socket's descriptor;
//! - `SWAN_ADMIN_FD`: the admin listener's descriptor, when there is one;
//! - `SWAN_READY_FD`: the write end of a pipe; the successor writes
//!   `ready\n` to it once it accepts connections, then closes it;
//! - `SWAN_STORE_FILES`: the embedded stores' files the old process holds,
//!   one per line: the successor takes those over once the old process
//!   exits (any other file held elsewhere stays an error).

use std::ffi::OsString;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use rustix::io::{FdFlags, fcntl_getfd, fcntl_setfd};

const LISTEN_FDS: &str = "SWAN_LISTEN_FDS";
const ADMIN_FD: &str = "SWAN_ADMIN_FD";
const READY_FD: &str = "SWAN_READY_FD";
const STORE_FILES: &str = "SWAN_STORE_FILES";
const READY: &[u8] = b"ready\n";

/// A handover went wrong.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// The environment names descriptors that are not listening sockets.
    #[error("{var} is not what a swan upgrade passes: {why}")]
    BadEnvironment {
        /// Which variable.
        var: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// The successor could not be started.
    #[error("cannot start {program}")]
    Spawn {
        /// The binary.
        program: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The successor exited, or closed its pipe, before it was ready.
    #[error("the new process exited before it was ready ({status})")]
    Exited {
        /// How it ended.
        status: String,
    },
    /// The successor was not ready in time; it was stopped.
    #[error("the new process was not ready within {0:?}; it was stopped")]
    Timeout(Duration),
    /// A descriptor could not be prepared.
    #[error("cannot pass the listening sockets")]
    Io(#[from] io::Error),
}

/// What a successor received from the process it replaces.
#[derive(Debug, Default)]
pub struct Inherited {
    groups: Vec<(SocketAddr, Vec<TcpListener>)>,
    admin: Option<TcpListener>,
    ready: Option<OwnedFd>,
    store_files: Vec<PathBuf>,
}

impl Inherited {
    /// Takes what the environment passes, when this process was started by
    /// an upgrade; `None` otherwise. The descriptors are made close-on-exec
    /// again, so that no tool this process runs inherits them.
    pub fn from_env() -> Result<Option<Inherited>, HandoverError> {
        let Some(spec) = std::env::var_os(LISTEN_FDS) else {
            return Ok(None);
        };
        let bad = |var, why: String| HandoverError::BadEnvironment { var, why };
        let spec = spec
            .into_string()
            .map_err(|_| bad(LISTEN_FDS, "not UTF-8".to_owned()))?;
        let mut inherited = Inherited::default();
        for group in spec.split(';').filter(|g| !g.is_empty()) {
            let (addr, fds) = group
                .split_once('=')
                .ok_or_else(|| bad(LISTEN_FDS, format!("`{group}` has no `=`")))?;
            let addr: SocketAddr = addr
                .parse()
                .map_err(|_| bad(LISTEN_FDS, format!("`{addr}` is not an address")))?;
            let sockets = fds
                .split(',')
                .map(|fd| listening_socket(fd).map_err(|why| bad(LISTEN_FDS, why)))
                .collect::<Result<Vec<_>, _>>()?;
            inherited.groups.push((addr, sockets));
        }
        if let Some(fd) = std::env::var(ADMIN_FD).ok().filter(|v| !v.is_empty()) {
            inherited.admin = Some(listening_socket(&fd).map_err(|why| bad(ADMIN_FD, why))?);
        }
        if let Some(fd) = std::env::var(READY_FD).ok().filter(|v| !v.is_empty()) {
            inherited.ready = Some(owned(&fd).map_err(|why| bad(READY_FD, why))?);
        }
        if let Some(files) = std::env::var_os(STORE_FILES) {
            use std::os::unix::ffi::OsStrExt;
            inherited.store_files = files
                .as_bytes()
                .split(|&b| b == b'\n')
                .filter(|f| !f.is_empty())
                .map(|f| PathBuf::from(std::ffi::OsStr::from_bytes(f)))
                .collect();
        }
        Ok(Some(inherited))
    }

    /// The embedded stores' files the old process holds (canonical).
    pub fn store_files(&self) -> &[PathBuf] {
        &self.store_files
    }

    /// The inherited group for listener number `index` of this process's
    /// configuration, bound to `want`: the group bound to that address, or
    /// (when `want` asks for port 0, "any port") the one at the same place
    /// with the same IP.
    pub fn take_group(&mut self, index: usize, want: SocketAddr) -> Option<Vec<TcpListener>> {
        let at = self
            .groups
            .iter()
            .position(|(addr, g)| *addr == want && !g.is_empty())
            .or_else(|| {
                let (addr, g) = self.groups.get(index)?;
                (want.port() == 0 && addr.ip() == want.ip() && !g.is_empty()).then_some(index)
            })?;
        Some(std::mem::take(&mut self.groups[at].1))
    }

    /// The inherited admin socket, when it is bound to `want` (or port 0
    /// is asked for on the same IP).
    pub fn take_admin(&mut self, want: SocketAddr) -> Option<TcpListener> {
        let admin = self.admin.take()?;
        let addr = admin.local_addr().ok()?;
        (addr == want || (want.port() == 0 && addr.ip() == want.ip())).then_some(admin)
    }

    /// Inherited sockets no listener of this configuration took (they are
    /// closed when `self` is dropped).
    pub fn unused(&self) -> Vec<SocketAddr> {
        self.groups
            .iter()
            .filter(|(_, g)| !g.is_empty())
            .map(|(a, _)| *a)
            .chain(self.admin.iter().filter_map(|a| a.local_addr().ok()))
            .collect()
    }

    /// The pipe to report readiness on (taken once).
    pub fn take_ready(&mut self) -> Option<ReadyReport> {
        self.ready.take().map(ReadyReport)
    }
}

/// Tells the process being replaced that this one accepts connections.
#[derive(Debug)]
pub struct ReadyReport(OwnedFd);

impl ReadyReport {
    /// Reports readiness (the old process then drains).
    pub fn send(self) {
        let mut pipe = std::fs::File::from(self.0);
        if let Err(e) = pipe.write_all(READY) {
            tracing::warn!(error = %e, "cannot tell the old process this one is ready");
        }
    }
}

/// Parses a descriptor number and checks it names a listening socket.
fn listening_socket(fd: &str) -> Result<TcpListener, String> {
    let fd = owned(fd)?;
    match rustix::net::sockopt::socket_acceptconn(&fd) {
        Ok(true) => {}
        Ok(false) => return Err("a descriptor is a socket that does not listen".to_owned()),
        Err(e) => return Err(format!("a descriptor is not a socket: {e}")),
    }
    let listener = TcpListener::from(fd);
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("cannot make a socket non-blocking: {e}"))?;
    Ok(listener)
}

/// Takes ownership of descriptor `fd` after checking it is open, and makes
/// it close-on-exec.
fn owned(fd: &str) -> Result<OwnedFd, String> {
    let raw: RawFd = fd
        .trim()
        .parse()
        .map_err(|_| format!("`{fd}` is not a descriptor number"))?;
    if raw < 3 {
        return Err(format!("descriptor {raw} is a standard stream"));
    }
    let fd = adopt(raw)?;
    let flags = fcntl_getfd(&fd).map_err(|e| e.to_string())?;
    fcntl_setfd(&fd, flags | FdFlags::CLOEXEC).map_err(|e| e.to_string())?;
    Ok(fd)
}

/// An unsafe operation (the other is mapping compiled code, in
/// `engine::code_cache`): owning a descriptor that the parent
/// process passed by number. Rust has no safe way to do it (a number is
/// not proof of ownership); `fcntl` on the raw number first checks it is
/// open, so an `OwnedFd` is only ever made for an open descriptor that
/// nothing else in this process refers to (the environment variable is
/// the only place its number came from, and it is read once at start-up).
#[allow(unsafe_code, reason = "adopting an inherited descriptor; see above")]
fn adopt(raw: RawFd) -> Result<OwnedFd, String> {
    // SAFETY: `raw` is only borrowed for the duration of the check.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(raw) };
    fcntl_getfd(borrowed).map_err(|e| format!("descriptor {raw} is not open: {e}"))?;
    // SAFETY: open (checked above) and owned by nobody else in this
    // process: the parent passed it for this process to own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// The running process's side: duplicates of its listening sockets, kept
/// to pass to a successor.
#[derive(Debug)]
pub struct Handover {
    groups: Vec<(SocketAddr, Vec<TcpListener>)>,
    admin: Option<TcpListener>,
    program: PathBuf,
    args: Vec<OsString>,
    store_files: Vec<PathBuf>,
}

/// A successor that reported ready.
#[derive(Debug)]
pub struct Successor {
    /// Its process id.
    pub pid: u32,
}

impl Handover {
    /// Keeps duplicates of `groups` (and the admin socket) to hand over;
    /// the successor is `program` run with `args` (this process's own),
    /// told that this process holds the embedded stores' `store_files`.
    pub fn new(
        groups: &[Vec<TcpListener>],
        admin: Option<&TcpListener>,
        program: PathBuf,
        args: Vec<OsString>,
        store_files: Vec<PathBuf>,
    ) -> io::Result<Handover> {
        let groups = groups
            .iter()
            .filter(|g| !g.is_empty())
            .map(|g| {
                let addr = g[0].local_addr()?;
                let dups = g
                    .iter()
                    .map(TcpListener::try_clone)
                    .collect::<io::Result<_>>()?;
                Ok((addr, dups))
            })
            .collect::<io::Result<_>>()?;
        let admin = admin.map(TcpListener::try_clone).transpose()?;
        Ok(Handover {
            groups,
            admin,
            program,
            args,
            store_files,
        })
    }

    /// Starts the successor and waits (at most `timeout`) until it reports
    /// ready. On any failure the successor is stopped and this process
    /// goes on as before.
    pub async fn start_successor(&self, timeout: Duration) -> Result<Successor, HandoverError> {
        // Descriptors the child inherits: duplicates without close-on-exec,
        // closed here once it started.
        let mut passed: Vec<OwnedFd> = Vec::new();
        let mut inheritable = |fd: &dyn AsFd| -> io::Result<RawFd> {
            let dup = rustix::io::fcntl_dupfd_cloexec(fd, 3)?;
            fcntl_setfd(&dup, FdFlags::empty())?;
            let raw = dup.as_raw_fd();
            passed.push(dup);
            Ok(raw)
        };
        let mut spec = String::new();
        for (addr, group) in &self.groups {
            let fds = group
                .iter()
                .map(|s| inheritable(s).map(|fd| fd.to_string()))
                .collect::<io::Result<Vec<_>>>()?;
            spec.push_str(&format!("{addr}={};", fds.join(",")));
        }
        let admin = match &self.admin {
            Some(a) => inheritable(a)?.to_string(),
            None => String::new(),
        };
        let (ready_rx, ready_tx) =
            rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io::Error::from)?;
        let ready_fd = inheritable(&ready_tx)?;
        drop(ready_tx);
        let spawned = Command::new(&self.program)
            .args(&self.args)
            .env(LISTEN_FDS, &spec)
            .env(ADMIN_FD, &admin)
            .env(READY_FD, ready_fd.to_string())
            .env(STORE_FILES, {
                use std::os::unix::ffi::OsStrExt;
                let mut files = Vec::new();
                for f in &self.store_files {
                    files.extend_from_slice(f.as_os_str().as_bytes());
                    files.push(b'\n');
                }
                std::ffi::OsString::from(std::ffi::OsStr::from_bytes(&files))
            })
            .stdin(Stdio::null())
            .spawn();
        // The child has its copies; without ours, its pipe end closing
        // (it exited) is seen as end of file.
        drop(passed);
        let child = spawned.map_err(|source| HandoverError::Spawn {
            program: self.program.clone(),
            source,
        })?;
        let pid = child.id();
        // Stopped unless it reports ready: also when this wait is abandoned
        // (the server was told to stop meanwhile), or it would serve on
        // after this process exits, with nobody the wiser.
        let mut child = Unready(Some(child));
        tracing::info!(pid, program = %self.program.display(), "upgrade: new process started; waiting until it is ready");
        let read = tokio::task::spawn_blocking(move || {
            let mut pipe = std::fs::File::from(ready_rx);
            let mut got = Vec::new();
            let _ = Read::by_ref(&mut pipe).take(64).read_to_end(&mut got);
            got
        });
        match tokio::time::timeout(timeout, read).await {
            Ok(Ok(got)) if got == READY => {
                child.0 = None;
                Ok(Successor { pid })
            }
            Ok(_) => {
                // It closed the pipe without a word: it exited, or is a
                // program that does not speak this protocol.
                let status = match tokio::task::spawn_blocking(move || child.stop()).await {
                    Ok(Some(s)) => s.to_string(),
                    _ => "unknown status".to_owned(),
                };
                Err(HandoverError::Exited { status })
            }
            Err(_) => {
                let _ = tokio::task::spawn_blocking(move || child.stop()).await;
                Err(HandoverError::Timeout(timeout))
            }
        }
    }
}

/// A new process that has not reported ready: killed and reaped when this
/// is dropped, unless it was taken out.
struct Unready(Option<std::process::Child>);

impl Unready {
    /// Kills and reaps the process; its exit status.
    fn stop(mut self) -> Option<std::process::ExitStatus> {
        kill_and_reap(self.0.take()?)
    }
}

impl Drop for Unready {
    fn drop(&mut self) {
        if let Some(child) = self.0.take() {
            tracing::warn!(
                pid = child.id(),
                "upgrade abandoned (this process is stopping): the new process is stopped"
            );
            kill_and_reap(child);
        }
    }
}

fn kill_and_reap(mut child: std::process::Child) -> Option<std::process::ExitStatus> {
    let _ = child.kill();
    child.wait().ok()
}
