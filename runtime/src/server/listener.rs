//! Binding listening sockets: `SO_REUSEPORT` groups so that each worker
//! thread can accept on a socket of its own.

use std::io;
use std::net::{SocketAddr, TcpListener};

use socket2::{Domain, Protocol, Socket, Type};

/// Pending connections the kernel may queue per socket.
const BACKLOG: i32 = 4096;

/// A socket could not be bound.
#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}")]
pub struct BindError {
    /// The address.
    pub addr: SocketAddr,
    /// The cause.
    #[source]
    pub source: io::Error,
}

impl BindError {
    /// Whether the address is taken by another process.
    pub fn is_addr_in_use(&self) -> bool {
        self.source.kind() == io::ErrorKind::AddrInUse
    }
}

/// Binds `per_addr` sockets to each address, sharing the port with
/// `SO_REUSEPORT`; port 0 picks one free port shared by the whole group.
/// Returns one group per address.
pub fn bind(addrs: &[SocketAddr], per_addr: usize) -> Result<Vec<Vec<TcpListener>>, BindError> {
    addrs
        .iter()
        .map(|&addr| {
            let first = bind_one(addr).map_err(|source| BindError { addr, source })?;
            let bound = first
                .local_addr()
                .map_err(|source| BindError { addr, source })?;
            let mut group = vec![first];
            for _ in 1..per_addr.max(1) {
                group.push(bind_one(bound).map_err(|source| BindError {
                    addr: bound,
                    source,
                })?);
            }
            Ok(group)
        })
        .collect()
}

fn bind_one(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}
