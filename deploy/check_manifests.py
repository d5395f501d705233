"""Checks deploy/kubernetes/ offline; run by deploy/validate.sh, which sets
up the venv this needs (kubernetes-validate, PyYAML) and the environment:

  K8S_VERSIONS  Kubernetes versions to validate against ("1.30.0 1.37.0")
  SWAN_REPO     the repository root (for Containerfile)
  SWAN_BIN      optional: a swan binary to run `swan check` with

Usage: python check_manifests.py DIR. Prints one line per check and
"validate: N passed, M failed" last; exits 1 if any check failed.
"""

import os
import posixpath
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import yaml
from kubernetes_validate import utils as kv


class Report:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def ok(self, what):
        self.passed += 1
        print(f"ok    {what}")

    def fail(self, what):
        self.failed += 1
        print(f"FAIL  {what}")

    def check(self, cond, what, why=""):
        if cond:
            self.ok(what)
        else:
            self.fail(f"{what}: {why}" if why else what)
        return cond


class UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping, as the API
    server's strict decoding does (PyYAML silently keeps the last)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_yaml(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.load_all(f, Loader=UniqueKeyLoader) if d is not None]


def name_of(doc):
    return f"{doc.get('kind', '?')}/{(doc.get('metadata') or {}).get('name', '?')}"


# swan's duration syntax (runtime/src/config/reader.rs: parse_duration).
DURATION = re.compile(r"^\s*([0-9.]+)\s*(ms|s|m|min|h)\s*$")
UNIT = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600}


def seconds(value):
    m = DURATION.match(value) if isinstance(value, str) else None
    if not m:
        raise ValueError(f"{value!r} is not a duration like \"5s\"")
    return float(m.group(1)) * UNIT[m.group(2)]


def port_of(addr):
    host, sep, port = str(addr).rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{addr!r} is not IP:PORT")
    return int(port)


def pod_specs(doc):
    """(label, pod spec, pod labels) of a workload or a bare Pod."""
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind == "Pod":
        return [(name_of(doc), spec, (doc.get("metadata") or {}).get("labels") or {})]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        tpl = spec.get("template") or {}
        return [(name_of(doc), tpl.get("spec") or {}, (tpl.get("metadata") or {}).get("labels") or {})]
    if kind == "CronJob":
        tpl = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        return [(name_of(doc), tpl.get("spec") or {}, (tpl.get("metadata") or {}).get("labels") or {})]
    return []


def effective(pod, container, key):
    """A securityContext field as the kubelet sees it: the container's,
    else the pod's."""
    c = (container.get("securityContext") or {}).get(key)
    return c if c is not None else (pod.get("securityContext") or {}).get(key)


def prestop_seconds(container):
    """Seconds the preStop hook holds SIGTERM back, or None if unknown."""
    hook = ((container.get("lifecycle") or {}).get("preStop")) or {}
    if not hook:
        return 0
    if "sleep" in hook:
        return int(hook["sleep"]["seconds"])
    cmd = (hook.get("exec") or {}).get("command") or []
    if len(cmd) == 2 and posixpath.basename(cmd[0]) == "sleep" and str(cmd[1]).isdigit():
        return int(cmd[1])
    if len(cmd) == 3 and posixpath.basename(cmd[0]) in ("sh", "bash") and cmd[1] == "-c":
        m = re.fullmatch(r"\s*(?:exec\s+)?(?:/bin/)?sleep\s+(\d+)\s*", cmd[2])
        if m:
            return int(m.group(1))
    return None


def resolve_port(container, port):
    """A probe's or Service's target port (name or number) as a number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def containerfile_uid(repo):
    path = Path(repo) / "Containerfile"
    if not path.exists():
        return None, "no Containerfile"
    user = None
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\s*USER\s+(\S+)", line)
        if m:
            user = m.group(1)
    if user is None:
        return None, "Containerfile sets no USER"
    uid = user.split(":")[0]
    if not uid.isdigit():
        return None, f"Containerfile USER {user!r} is not numeric (runAsNonRoot needs a numeric id)"
    return int(uid), None


def main():
    top = Path(sys.argv[1]).resolve()
    versions = os.environ.get("K8S_VERSIONS", "1.30.0").split()
    repo = os.environ.get("SWAN_REPO") or str(Path(__file__).resolve().parent.parent)
    r = Report()

    files = sorted(p for p in top.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    kustomization = top / "kustomization.yaml"

    # --- 1. Schemas -------------------------------------------------------
    docs_by_file = {}
    for path in files:
        rel = path.relative_to(top)
        if path == kustomization:
            continue
        try:
            docs = load_yaml(path)
        except yaml.YAMLError as e:
            r.fail(f"{rel}: not valid YAML: {e}")
            continue
        if not docs:
            r.fail(f"{rel}: holds no resource")
            continue
        docs_by_file[path] = docs
        for doc in docs:
            if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
                r.fail(f"{rel}: a document without apiVersion and kind")
                continue
            problems = []
            for v in versions:
                try:
                    kv.validate(doc, v, strict=True)
                except kv.ValidationError as e:
                    where = ".".join(str(x) for x in e.path) or "(top)"
                    problems.append(f"k8s {v}: {where}: {e.message}")
                except kv.SchemaNotFoundError as e:
                    # The CLI only warns here; a kind or apiVersion that no
                    # schema knows is a typo or a missing CRD: an error.
                    problems.append(e.message)
                except kv.VersionNotSupportedError:
                    problems.append(f"kubernetes-validate has no schemas for {v}")
                except Exception as e:  # noqa: BLE001 - report, don't crash
                    problems.append(f"k8s {v}: cannot validate: {e}")
            r.check(
                not problems,
                f"{rel}: {name_of(doc)} matches the schema of Kubernetes {', '.join(versions)} (strict)",
                "; ".join(problems),
            )

    # --- 2. kustomization.yaml ---------------------------------------------
    listed = []
    namespace = None
    if r.check(kustomization.exists(), "kustomization.yaml exists"):
        try:
            (k,) = load_yaml(kustomization)
            ok = k.get("kind") == "Kustomization" and str(k.get("apiVersion", "")).startswith(
                "kustomize.config.k8s.io/"
            )
            r.check(ok, "kustomization.yaml is a Kustomization", f"kind {k.get('kind')!r}")
            listed = k.get("resources") or []
            namespace = k.get("namespace")
        except (yaml.YAMLError, ValueError) as e:
            r.fail(f"kustomization.yaml: not valid YAML with one document: {e}")
    r.check(len(listed) == len(set(listed)), "kustomization.yaml lists no file twice")
    for entry in listed:
        r.check((top / entry).is_file(), f"kustomization.yaml: {entry} exists")
    for path in files:
        if path.parent == top and path != kustomization:
            r.check(
                path.name in listed,
                f"kustomization.yaml lists {path.name}",
                "a manifest in the folder that `kubectl apply -k` would skip",
            )

    deployed = [d for e in listed for d in docs_by_file.get((top / e).resolve(), [])]
    index = {(d.get("kind"), (d.get("metadata") or {}).get("name")): d for d in deployed}

    if namespace:
        r.check(("Namespace", namespace) in index, f"the Namespace {namespace!r} is among the resources")
        for d in deployed:
            if d.get("kind") == "Namespace":
                continue
            ns = (d.get("metadata") or {}).get("namespace")
            r.check(ns == namespace, f"{name_of(d)} is in namespace {namespace!r}", f"it says {ns!r}")

    for step, args in ((check_security, (docs_by_file, repo)), (check_swan, (index, deployed, repo))):
        try:
            step(r, *args)
        except Exception as e:  # noqa: BLE001 - a malformed manifest the schema step reported
            r.fail(f"{step.__name__} stopped on a malformed manifest: {type(e).__name__}: {e}")
    return finish(r)


def check_security(r, docs_by_file, repo):
    """Every pod's and container's security settings, extras included."""
    # --- 3. Security of every pod, extras included -------------------------
    uid, why = containerfile_uid(repo)
    r.check(uid is not None, f"Containerfile runs as numeric user {uid}", why)
    for docs in docs_by_file.values():
        for doc in docs:
            for label, pod, _ in pod_specs(doc):
                r.check(
                    pod.get("automountServiceAccountToken") is False,
                    f"{label}: no service account token mounted",
                )
                for c in (pod.get("initContainers") or []) + (pod.get("containers") or []):
                    what = f"{label} container {c.get('name')}"
                    sc = c.get("securityContext") or {}
                    r.check(effective(pod, c, "runAsNonRoot") is True, f"{what}: runAsNonRoot true")
                    r.check(sc.get("readOnlyRootFilesystem") is True, f"{what}: readOnlyRootFilesystem true")
                    r.check(sc.get("allowPrivilegeEscalation") is False, f"{what}: allowPrivilegeEscalation false")
                    r.check(not sc.get("privileged"), f"{what}: not privileged")
                    drop = (sc.get("capabilities") or {}).get("drop") or []
                    r.check("ALL" in drop, f"{what}: capabilities drop ALL", f"drop is {drop}")
                    add = (sc.get("capabilities") or {}).get("add") or []
                    r.check(not add, f"{what}: adds no capability", f"add is {add}")
                    seccomp = (effective(pod, c, "seccompProfile") or {}).get("type")
                    r.check(
                        seccomp in ("RuntimeDefault", "Localhost"),
                        f"{what}: seccompProfile RuntimeDefault",
                        f"it is {seccomp!r}",
                    )
                    repo_name = c.get("image", "").split("@")[0].rsplit("/", 1)[-1].split(":")[0]
                    if repo_name == "swan" and uid is not None:
                        run_as = effective(pod, c, "runAsUser")
                        r.check(
                            run_as == uid,
                            f"{what}: runAsUser {uid}, the Containerfile's user",
                            f"it is {run_as!r}",
                        )


def check_swan(r, index, deployed, repo):
    """swan's Deployment, Services and budget against its swan.toml."""
    # --- 4. swan's Deployment against its configuration ---------------------
    cm = index.get(("ConfigMap", "swan-config"))
    dep = index.get(("Deployment", "swan"))
    if not r.check(cm is not None, "ConfigMap swan-config exists") or not r.check(
        dep is not None, "Deployment swan exists"
    ):
        return
    text = (cm.get("data") or {}).get("swan.toml")
    if not r.check(isinstance(text, str), "ConfigMap swan-config holds swan.toml"):
        return
    try:
        conf = tomllib.loads(text)
        r.ok("swan.toml in the ConfigMap parses as TOML")
    except tomllib.TOMLDecodeError as e:
        r.fail(f"swan.toml in the ConfigMap parses as TOML: {e}")
        return

    server = conf.get("server") or {}
    admin = conf.get("admin") or {}
    try:
        listen = server.get("listen", [])
        http_ports = {port_of(a) for a in ([listen] if isinstance(listen, str) else listen)}
        admin_port = port_of(admin["listen"])
        grace_s = seconds(server["drain_grace"])
        timeout_s = seconds(server["drain_timeout"])
        r.ok(f"swan.toml: listen {sorted(http_ports)}, admin {admin_port}, "
             f"drain_grace {grace_s:g}s, drain_timeout {timeout_s:g}s")
    except (KeyError, ValueError) as e:
        r.fail(f"swan.toml: server.listen, admin.listen, server.drain_grace and "
               f"server.drain_timeout must all be there and valid: {e!r}")
        return

    pod = dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"].get("metadata", {}).get("labels") or {}
    containers = pod.get("containers") or []
    c = next((x for x in containers if x.get("name") == "swan"), containers[0] if containers else {})

    # Shutdown arithmetic.
    tgps = pod.get("terminationGracePeriodSeconds", 30)
    pre = prestop_seconds(c)
    if r.check(pre is not None, "preStop hook is a sleep of known length",
               "only `sleep: {seconds: N}` or an exec of `sleep N` can be checked"):
        need = pre + grace_s + timeout_s
        r.check(
            tgps >= need,
            f"terminationGracePeriodSeconds {tgps} >= preStop {pre} + drain_grace {grace_s:g} "
            f"+ drain_timeout {timeout_s:g} = {need:g} (margin {tgps - need:g}s)",
            "swan would be SIGKILLed while requests are still draining",
        )

    # Ports and probes.
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    numbers = set(ports.values())
    for hp in sorted(http_ports):
        r.check(hp in numbers, f"container exposes [server] listen port {hp}", f"ports are {ports}")
    r.check(admin_port in numbers, f"container exposes [admin] listen port {admin_port}", f"ports are {ports}")
    for probe, path in (("startupProbe", "/readyz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/livez")):
        get = (c.get(probe) or {}).get("httpGet")
        if not r.check(get is not None, f"{probe} is an httpGet"):
            continue
        port = resolve_port(c, get.get("port"))
        r.check(port == admin_port, f"{probe} asks the admin port {admin_port}", f"it asks {get.get('port')!r} = {port}")
        r.check(get.get("path") == path, f"{probe} asks {path}", f"it asks {get.get('path')!r}")

    # Deployment shape.
    spec = dep["spec"]
    replicas = spec.get("replicas", 1)
    r.check(selects(spec["selector"].get("matchLabels"), labels), "Deployment swan's selector matches its pods")
    ru = (spec.get("strategy") or {}).get("rollingUpdate") or {}
    r.check(ru.get("maxUnavailable") in (0, "0%"), "rollout never takes a serving pod away first (maxUnavailable 0)")

    # The configuration file.
    argv = (c.get("command") or []) + (c.get("args") or [])
    mounts = {m["mountPath"].rstrip("/"): m for m in c.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    config_path = argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
    if r.check(config_path is not None, "swan is started with --config FILE", f"argv is {argv}"):
        d, f = posixpath.split(config_path)
        m = mounts.get(d)
        vol = volumes.get(m["name"]) if m else None
        cmv = (vol or {}).get("configMap") or {}
        keys = [i["path"] for i in cmv.get("items") or []] or list((cm.get("data") or {}).keys())
        r.check(
            cmv.get("name") == "swan-config" and f in keys and "subPath" not in m,
            f"{config_path} is swan.toml of ConfigMap swan-config",
            f"mount {m}, volume {vol}",
        )

    # Compiled-code cache.
    env = {e["name"]: e.get("value") for e in c.get("env") or []}
    cache = (env.get("SWAN_CACHE_DIR") or "").rstrip("/")
    m = mounts.get(cache)
    r.check(
        bool(cache) and m is not None and not m.get("readOnly") and "emptyDir" in volumes.get(m["name"], {}),
        f"SWAN_CACHE_DIR {cache or '(unset)'} is a writable emptyDir",
    )

    # Site folders on the shared volume.
    for i, site in enumerate(conf.get("site") or []):
        for key in ("root", "servlets"):
            p = site.get(key)
            if p is None:
                continue
            m = mounts.get(p.rstrip("/"))
            claim = ((volumes.get(m["name"]) if m else {}) or {}).get("persistentVolumeClaim") or {}
            r.check(
                m is not None and claim.get("claimName") is not None
                and ("PersistentVolumeClaim", claim.get("claimName")) in index,
                f"site[{i}].{key} {p} is mounted from a PersistentVolumeClaim in the resources",
                f"mount {m}",
            )
            r.check(m is not None and m.get("readOnly") is True, f"site[{i}].{key} {p} is mounted read-only")

    # Services.
    templates = [x for d in deployed for x in pod_specs(d)]
    for (kind, name), svc in index.items():
        if kind != "Service":
            continue
        sel = (svc.get("spec") or {}).get("selector") or {}
        tpod = next((ps for (_, ps, lbl) in templates if selects(sel, lbl)), None)
        if not r.check(tpod is not None, f"Service {name} selects a pod template", f"selector {sel}"):
            continue
        tcontainers = tpod.get("containers") or []
        for sp in svc["spec"].get("ports") or []:
            tp = sp.get("targetPort", sp.get("port"))
            resolved = next((resolve_port(tc, tp) for tc in tcontainers if resolve_port(tc, tp)), None)
            r.check(resolved is not None, f"Service {name} port {sp.get('port')} -> {tp} = container port {resolved}")
    svc = index.get(("Service", "swan"))
    if r.check(svc is not None, "Service swan exists"):
        tps = [resolve_port(c, p.get("targetPort", p.get("port"))) for p in svc["spec"].get("ports") or []]
        r.check(set(tps) <= http_ports and tps, "Service swan forwards to [server] listen", f"targets {tps}")
        r.check(selects(svc["spec"].get("selector"), labels), "Service swan selects swan's pods")
    svc = index.get(("Service", "swan-admin"))
    if r.check(svc is not None, "Service swan-admin exists"):
        tps = [resolve_port(c, p.get("targetPort", p.get("port"))) for p in svc["spec"].get("ports") or []]
        r.check(tps == [admin_port], "Service swan-admin forwards to [admin] listen", f"targets {tps}")
        ann = (svc.get("metadata") or {}).get("annotations") or {}
        r.check(ann.get("prometheus.io/scrape") == "true" and ann.get("prometheus.io/port") == str(admin_port),
                "Service swan-admin is annotated for Prometheus on the admin port", f"annotations {ann}")

    # Disruption budget.
    pdb = next((d for d in deployed if d.get("kind") == "PodDisruptionBudget"), None)
    if r.check(pdb is not None, "a PodDisruptionBudget exists"):
        ps = pdb["spec"]
        r.check(selects((ps.get("selector") or {}).get("matchLabels"), labels), "the PodDisruptionBudget selects swan's pods")
        ma = ps.get("minAvailable")
        r.check(isinstance(ma, int) and 0 < ma < replicas,
                f"minAvailable {ma} < replicas {replicas} (a node can still be drained)")

    # Stores that point at a Service of this deployment.
    for store in conf.get("store") or []:
        url = store.get("url", "")
        m = re.match(r"^rediss?://(?:[^@/]*@)?([^:/]+)(?::(\d+))?", url)
        if not r.check(m is not None, f"store {store.get('name')!r}: url {url!r} is a redis:// URL"):
            continue
        host, port = m.group(1), int(m.group(2) or 6379)
        svc = index.get(("Service", host.split(".")[0]))
        if svc is None:
            r.ok(f"store {store.get('name')!r}: {host} is outside these manifests (not checked)")
            continue
        sports = [p.get("port") for p in svc["spec"].get("ports") or []]
        r.check(port in sports, f"store {store.get('name')!r}: Service {host} serves port {port}", f"it serves {sports}")

    # --- 5. Optional: swan itself reads the configurations ------------------
    swan_bin = os.environ.get("SWAN_BIN")
    if swan_bin:
        container_toml = Path(repo) / "deploy" / "container" / "swan.toml"
        for label, body in (("ConfigMap swan.toml", text), ("deploy/container/swan.toml", container_toml.read_text())):
            with tempfile.TemporaryDirectory() as tmp:
                conf_path = Path(tmp) / "swan.toml"
                conf_path.write_text(body)
                (Path(tmp) / "www").mkdir()
                (Path(tmp) / "servlets").mkdir()
                run = subprocess.run(
                    [swan_bin, "check", "--config", str(conf_path),
                     "--root", str(Path(tmp) / "www"), "--servlets", str(Path(tmp) / "servlets")],
                    capture_output=True, text=True, timeout=120,
                )
                # Exit 2 is a configuration error. Exit 1 with only stores
                # that do not answer is this machine, not the manifests: the
                # Redis they name exists only inside the cluster.
                errors = [l for l in run.stderr.splitlines() if l.startswith("error:")]
                unreachable_only = run.returncode == 1 and errors and all(
                    "does not answer" in l or "not ready" in l for l in errors)
                r.check(run.returncode == 0 or unreachable_only, f"`swan check` accepts {label}"
                        + (" (its Redis is not reachable from here)" if unreachable_only else ""),
                        (run.stderr or run.stdout).strip().replace("\n", " | "))



def finish(r):
    print(f"validate: {r.passed} passed, {r.failed} failed")
    return 1 if r.failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # noqa: BLE001 - never a traceback instead of a verdict
        print(f"FAIL  validation stopped: {type(e).__name__}: {e}")
        print("validate: 0 passed, 1 failed")
        sys.exit(1)
