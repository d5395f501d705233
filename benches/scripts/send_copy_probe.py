#!/usr/bin/env python3
"""Sender CPU per MiB on loopback: `send(2)` from memory vs `sendfile(2)`.

BENCHMARKS.md ("Large files") asks whether swan's cached large bodies
would go out cheaper with `sendfile` from a sealed memfd (or from the
file itself) than with the one `send(2)` copy they take now. This probe
answers it for this machine's kernel, without swan or hyper in the way:
one process sends the same 1 MiB N times over one loopback TCP
connection, a forked child reads and discards it, and the sender's CPU
time (user + system, which includes the loopback receive work done in
its softirqs) and wall time per MiB are printed.

    python3 benches/scripts/send_copy_probe.py [N] [ROUNDS]

Modes: `write` (`sendall` from a bytes object: what swan does for cached
bodies), `memfd` (`sendfile` from a memfd holding the bytes), `file`
(`sendfile` from a file in /tmp: what NGINX does). Rounds alternate the
modes; the medians are printed last.
"""

import os
import socket
import statistics
import sys
import tempfile
import time

SIZE = 1 << 20


def run(mode: str, n: int, data: bytes) -> tuple[float, float]:
    fd = None
    path = None
    if mode == "memfd":
        fd = os.memfd_create("probe", os.MFD_ALLOW_SEALING)
        os.write(fd, data)
    elif mode == "file":
        handle, path = tempfile.mkstemp(prefix="send-probe-")
        os.write(handle, data)
        os.close(handle)
        fd = os.open(path, os.O_RDONLY)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    child = os.fork()
    if child == 0:
        conn = socket.create_connection(("127.0.0.1", port))
        buf = bytearray(SIZE)
        total = 0
        while total < n * SIZE:
            got = conn.recv_into(buf)
            if not got:
                break
            total += got
        os._exit(0)
    sock, _ = listener.accept()
    cpu0, wall0 = time.process_time(), time.monotonic()
    for _ in range(n):
        if fd is None:
            sock.sendall(data)
        else:
            offset = 0
            while offset < SIZE:
                offset += os.sendfile(sock.fileno(), fd, offset, SIZE - offset)
    cpu1, wall1 = time.process_time(), time.monotonic()
    os.waitpid(child, 0)
    sock.close()
    listener.close()
    if fd is not None:
        os.close(fd)
    if path is not None:
        os.unlink(path)
    return (cpu1 - cpu0) / n * 1e6, (wall1 - wall0) / n * 1e6


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    data = os.urandom(SIZE)
    results: dict[str, list[tuple[float, float]]] = {}
    for _ in range(rounds):
        for mode in ("write", "memfd", "file"):
            cpu, wall = run(mode, n, data)
            results.setdefault(mode, []).append((cpu, wall))
            print(f"{mode:6} cpu {cpu:6.0f} µs/MiB  wall {wall:6.0f} µs/MiB", flush=True)
    print("medians:")
    for mode, runs in results.items():
        cpu = statistics.median(r[0] for r in runs)
        wall = statistics.median(r[1] for r in runs)
        print(f"{mode:6} cpu {cpu:6.0f} µs/MiB  wall {wall:6.0f} µs/MiB")


if __name__ == "__main__":
    main()
