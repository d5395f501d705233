//! A real `redis-server` (Debian's package, installed by scripts/setup) on
//! a free loopback port with a data folder of its own, stopped (by pid)
//! when dropped.

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

/// A running Redis.
pub struct RedisServer {
    child: Option<Child>,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one on a free port of 127.0.0.1.
    pub fn start() -> Result<RedisServer> {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        let dir = tempfile::tempdir()?;
        let mut server = RedisServer {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            dir,
        };
        server.restart()?;
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// The data folder.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Sends one command, after `AUTH password` when one is given, on a
    /// connection of its own; the first line of its reply (`+OK`, `:3`,
    /// `-ERR ...`).
    pub fn command(&self, password: Option<&str>, args: &[&str]) -> Result<String> {
        use std::io::{BufRead, BufReader, Write};
        let encode = |args: &[&str]| {
            let mut out = format!("*{}\r\n", args.len());
            for a in args {
                out.push_str(&format!("${}\r\n{a}\r\n", a.len()));
            }
            out
        };
        let stream = TcpStream::connect(self.addr)?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut reader = BufReader::new(stream.try_clone()?);
        let mut line = String::new();
        if let Some(password) = password {
            (&stream).write_all(encode(&["AUTH", password]).as_bytes())?;
            reader.read_line(&mut line)?;
            anyhow::ensure!(line.starts_with("+OK"), "AUTH: {line}");
            line.clear();
        }
        (&stream).write_all(encode(args).as_bytes())?;
        reader.read_line(&mut line)?;
        Ok(line.trim_end().to_owned())
    }

    /// Stops the server (SIGKILL, like a crash), keeping its port.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port and folder; waits until it answers.
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        let child = Command::new("redis-server")
            .arg("--port")
            .arg(self.addr.port().to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start redis-server (run scripts/setup to install it)")?;
        self.child = Some(child);
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(10) {
            if TcpStream::connect(self.addr).is_ok() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        anyhow::bail!("redis-server did not start on {}", self.addr)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
