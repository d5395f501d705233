//! The practical limit of this machine: answers every request with the same
//! fixed 100-byte response and does no HTTP parsing at all (it only counts
//! `\r\n\r\n` to know how many requests a read held). One current-thread
//! tokio runtime per core, each accepting on its own SO_REUSEPORT socket.
//! Whatever rate this reaches is what the kernel and the load generator
//! leave to any server here.
//!
//! Usage: `limit ADDR [WORKERS]`

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BODY_LEN: usize = 100;

fn response() -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nServer: limit\r\nContent-Type: text/html\r\nContent-Length: {BODY_LEN}\r\n\r\n"
    )
    .into_bytes();
    r.extend(std::iter::repeat_n(b'x', BODY_LEN));
    r
}

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| std::io::Error::other("usage: limit ADDR [WORKERS]"))?;
    let workers = args
        .next()
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let mut threads = Vec::new();
    for _ in 0..workers {
        let socket = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::STREAM,
            None,
        )?;
        socket.set_reuse_port(true)?;
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        socket.bind(&addr.into())?;
        socket.listen(4096)?;
        let std_listener: std::net::TcpListener = socket.into();
        threads.push(std::thread::spawn(move || -> std::io::Result<()> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(std_listener)?;
                let response: &'static [u8] = Box::leak(response().into_boxed_slice());
                loop {
                    let Ok((mut stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 16 << 10];
                        let mut out = Vec::new();
                        loop {
                            let n = match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => n,
                            };
                            let requests = buf[..n]
                                .windows(4)
                                .filter(|w| *w == b"\r\n\r\n")
                                .count()
                                .max(1);
                            out.clear();
                            for _ in 0..requests {
                                out.extend_from_slice(response);
                            }
                            if stream.write_all(&out).await.is_err() {
                                return;
                            }
                        }
                    });
                }
                #[expect(
                    unreachable_code,
                    reason = "the accept loop runs until the process is killed"
                )]
                Ok::<(), std::io::Error>(())
            })
        }));
    }
    for t in threads {
        t.join()
            .map_err(|_| std::io::Error::other("worker panicked"))??;
    }
    Ok(())
}
