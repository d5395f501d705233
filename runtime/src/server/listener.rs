//! Binding listening sockets: `SO_REUSEPORT` groups so that each worker
//! thread can accept on a socket of its own, and only this process's.
//!
//! `SO_REUSEPORT` lets any process of the same user join a group, and the
//! kernel then splits connections between them: a forgotten old swan would
//! keep answering part of the traffic. So an address is ours alone: before
//! binding, a probe socket without `SO_REUSEPORT` must be able to take it
//! (it cannot while anyone listens there), and after binding, no listening
//! socket on it may belong to anyone else (`/proc/net/tcp`, which closes the
//! race of two processes starting at once). A planned handover passes the
//! sockets themselves to the new process (`handover`), never a second bind.

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

    /// Whether binding needs a privilege this process lacks (a port below
    /// 1024 without `CAP_NET_BIND_SERVICE`).
    pub fn is_permission_denied(&self) -> bool {
        self.source.kind() == io::ErrorKind::PermissionDenied
    }
}

/// A warning when `max_connections` is at or past the process's
/// open-file limit (`ulimit -n`): each connection takes a descriptor, and
/// a file being streamed another, so past the limit accepting fails and
/// backs off while connections wait.
pub fn descriptor_warning(max_connections: usize) -> Option<String> {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current?;
    (max_connections as u64 >= limit).then(|| {
        format!(
            "max_connections ({max_connections}) is at or past the open-file limit ({limit}): each connection takes a descriptor (and a file being streamed another); lower max_connections below it, or raise the limit (ulimit -n, LimitNOFILE=)"
        )
    })
}

/// Binds `per_addr` sockets to each address, sharing the port with
/// `SO_REUSEPORT` within this process only; port 0 picks one free port
/// shared by the whole group. Returns one group per address.
pub fn bind(addrs: &[SocketAddr], per_addr: usize) -> Result<Vec<Vec<TcpListener>>, BindError> {
    addrs
        .iter()
        .map(|&addr| bind_group(addr, per_addr))
        .collect()
}

/// Binds one group of `per_addr` sockets to `addr` (see [`bind`]).
pub fn bind_group(addr: SocketAddr, per_addr: usize) -> Result<Vec<TcpListener>, BindError> {
    let error = |addr| move |source| BindError { addr, source };
    if addr.port() != 0 {
        probe(addr).map_err(error(addr))?;
    }
    let first = bind_one(addr).map_err(error(addr))?;
    let bound = first.local_addr().map_err(error(addr))?;
    let mut group = vec![first];
    for _ in 1..per_addr.max(1) {
        group.push(bind_one(bound).map_err(error(bound))?);
    }
    if let Some(inode) = foreign_listener(&group, bound) {
        return Err(BindError {
            addr: bound,
            source: io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "address already in use: another process listens there too (socket inode {inode})"
                ),
            ),
        });
    }
    Ok(group)
}

/// Fails with "address already in use" when anyone listens on `addr`: a
/// socket without `SO_REUSEPORT` cannot join a group.
fn probe(addr: SocketAddr) -> io::Result<()> {
    socket(addr)?.bind(&addr.into())
}

/// The inode of a socket listening on `addr` that is not one of `group`,
/// from the kernel's table of TCP sockets (none found when it cannot be
/// read: the probe stands alone then).
fn foreign_listener(group: &[TcpListener], addr: SocketAddr) -> Option<u64> {
    let ours: Vec<u64> = group
        .iter()
        .filter_map(|s| rustix::fs::fstat(s).ok().map(|st| st.st_ino))
        .collect();
    let table = if addr.is_ipv4() {
        "/proc/net/tcp"
    } else {
        "/proc/net/tcp6"
    };
    let text = std::fs::read_to_string(table).ok()?;
    listening_inodes(&text, addr).find(|inode| !ours.contains(inode))
}

/// Inodes of the sockets in `/proc/net/tcp{,6}` text that listen on `addr`.
fn listening_inodes(text: &str, addr: SocketAddr) -> impl Iterator<Item = u64> + '_ {
    const LISTEN: &str = "0A";
    text.lines().skip(1).filter_map(move |line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 10 || fields[3] != LISTEN {
            return None;
        }
        (parse_proc_addr(fields[1])? == addr).then(|| fields[9].parse().ok())?
    })
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6): the kernel
/// prints each 32-bit word of the address as a number in host order.
fn parse_proc_addr(field: &str) -> Option<SocketAddr> {
    let (ip, port) = field.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip: std::net::IpAddr = match ip.len() {
        8 => std::net::Ipv4Addr::from(word(0)?).into(),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            std::net::Ipv6Addr::from(bytes).into()
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// A TCP socket for `addr`, not bound yet: `SO_REUSEADDR` (connections of
/// an earlier run in TIME_WAIT are no reason to refuse the address), and
/// an IPv6 address is IPv6 only (`[::]` leaves IPv4's port alone).
fn socket(addr: SocketAddr) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    Ok(socket)
}

/// One listening socket of this process's alone (the admin listener):
/// no `SO_REUSEPORT`, and an IPv6 address is IPv6 only, as for the public
/// listeners (`[::]` does not take IPv4's port as well).
pub fn bind_single(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = socket(addr)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

fn bind_one(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = socket(addr)?;
    socket.set_reuse_port(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_addresses_parse_in_host_order() {
        assert_eq!(
            parse_proc_addr("0100007F:1F90"),
            Some("127.0.0.1:8080".parse().expect("addr"))
        );
        assert_eq!(
            parse_proc_addr("00000000000000000000000001000000:0050"),
            Some("[::1]:80".parse().expect("addr"))
        );
        assert_eq!(parse_proc_addr("zz:1"), None);
    }

    #[test]
    fn a_second_group_on_a_taken_address_is_refused() {
        let first = bind_group("127.0.0.1:0".parse().expect("addr"), 2).expect("first");
        let taken = first[0].local_addr().expect("addr");
        let second = bind_group(taken, 2).expect_err("shared");
        assert!(second.is_addr_in_use(), "{second:?}");
        // This process's own group is not "someone else".
        assert_eq!(foreign_listener(&first, taken), None);
        // Once the first group is gone, the address is free again.
        drop(first);
        bind_group(taken, 2).expect("free again");
    }

    #[test]
    fn a_group_joined_behind_the_probes_back_is_found() {
        let group = bind_group("127.0.0.1:0".parse().expect("addr"), 1).expect("group");
        let addr = group[0].local_addr().expect("addr");
        // What another process would do: join with SO_REUSEPORT directly.
        let intruder = bind_one(addr).expect("join");
        let inode = rustix::fs::fstat(&intruder).expect("fstat").st_ino;
        assert_eq!(foreign_listener(&group, addr), Some(inode));
    }
}
