"""Start, reuse, inspect and stop the local cluster.

`up` starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler, KAI
Scheduler's five components (with its CRDs and priority classes) and the
process runtime (which registers the simulated nodes and publishes their
ResourceSlices), waits until each is healthy and writes the kubeconfig. A
second `up` reuses a healthy running cluster. `down` stops everything the
cluster started, pod processes included, and frees the ports.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import components, kai, procs
from .certs import PKI, ensure_pki
from .components import Ports
from .fakedriver import node_slices
from .kubeapi import KubeAPI
from .paths import SHAPES_DIR, ClusterPaths
from .shapes import Shape, load_shape

DEFAULT_PORT_BASE = 16443
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", *kai.COMPONENTS, "runtime")
# Run under localcluster.supervise (their pids in state.json are the supervisors'); the
# runtime is not: its crash is a bug of ours that tests must see.
SUPERVISED = ORDER[:-1]


class ClusterError(RuntimeError):
    """A problem a person can act on; printed as one line, never a traceback."""


@dataclass
class State:
    shape: str
    server: str
    ports: dict[str, int]
    pids: dict[str, int]
    started: float
    emulate: str | None = None  # the Kubernetes version the components emulate (None: their own)

    @classmethod
    def load(cls, path: Path) -> State | None:
        try:
            d = json.loads(path.read_text())
            return cls(d["shape"], d["server"], d["ports"], d["pids"], d["started"], d.get("emulate"))
        except (OSError, ValueError, KeyError):
            return None

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.__dict__, indent=2))
        tmp.replace(path)


def say(msg: str) -> None:
    print(f"devcluster: {msg}", flush=True)


@contextlib.contextmanager
def _locked(paths: ClusterPaths) -> Iterator[None]:
    paths.root.mkdir(parents=True, exist_ok=True)
    with open(paths.lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _http_ok(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _admin_ctx(pki: PKI) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.load_cert_chain(str(pki.admin_crt), str(pki.admin_key))
    return ctx


def _insecure_ctx() -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _healthz(port: int) -> Callable[[], bool]:
    url = f"https://127.0.0.1:{port}/healthz"
    return lambda: _http_ok(url, _insecure_ctx())


def healthy(paths: ClusterPaths, state: State | None = None) -> bool:
    state = state or State.load(paths.state)
    if state is None:
        return False
    if not all(procs.alive(p) for p in state.pids.values()):
        return False
    return _http_ok(state.server + "/readyz", _admin_ctx(PKI(paths.pki)))


def _wait(name: str, pid: int, check: Callable[[], bool], log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not procs.alive(pid):
            raise ClusterError(
                f"{name} exited during start-up; see {log} (last lines: {procs.last_lines(log)})"
            )
        time.sleep(0.2)
    raise ClusterError(f"{name} did not become ready within {timeout:.0f}s; see {log}")


def _python_env(paths: ClusterPaths) -> dict[str, str]:
    env = dict(os.environ)
    root = paths.root
    extra = [str(Path(__file__).resolve().parents[1])]
    env["PYTHONPATH"] = os.pathsep.join([*extra, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["DEVCLUSTER_DIR"] = str(root)
    # KAI's components read the cluster's address and credentials from KUBECONFIG.
    env["KUBECONFIG"] = str(paths.kubeconfig)
    return env


def spawn_component(name: str, cmd: list[str], paths: ClusterPaths) -> int:
    """Start a control-plane component under the supervisor (restarted when it exits, as the
    kubelet restarts static pods); the pid is the supervisor's."""
    return procs.spawn(components.supervised(name, cmd), paths.log(name), paths.root, env=_python_env(paths))


def up(
    shape_name: str,
    port_base: int | None = None,
    paths: ClusterPaths | None = None,
    timeout: float = 120.0,
    emulate: str | None = None,
) -> State:
    """Start (or reuse) the local cluster. `emulate`: the Kubernetes version the components
    run as (`--emulated-version`); default DEVCLUSTER_EMULATE, or none (their own)."""
    emulate = emulate or os.environ.get("DEVCLUSTER_EMULATE") or None
    paths = paths or ClusterPaths.default()
    shape = load_shape(shape_name, SHAPES_DIR)
    with _locked(paths):
        state = State.load(paths.state)
        if state and healthy(paths, state):
            if state.shape != shape.name:
                raise ClusterError(
                    f"a cluster with shape '{state.shape}' is already running; "
                    f"run 'make cluster-down' first to start shape '{shape.name}'"
                )
            if state.emulate != emulate:
                raise ClusterError(
                    f"a cluster running as Kubernetes {state.emulate or components.KUBE_VERSION} is "
                    f"already running here; run 'make cluster-down' first to start one as "
                    f"{emulate or components.KUBE_VERSION}"
                )
            say(f"reusing the running cluster (shape {state.shape}) at {state.server}")
            return state
        if state or procs.owned_pids(paths.root):
            say("cleaning up a previous cluster that is no longer healthy")
            _stop(paths, state)
        port_base = port_base or int(os.environ.get("DEVCLUSTER_PORT_BASE", DEFAULT_PORT_BASE))
        return _start(shape, paths, port_base, timeout, emulate)


def _check_binaries(paths: ClusterPaths) -> None:
    missing = [
        b
        for b in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager")
        if not (paths.bin / b).exists()
    ] + kai.binaries_missing(paths)
    if missing:
        raise ClusterError(
            f"missing binaries {', '.join(missing)} in {paths.bin}; build them with 'make devcluster-build'"
        )


def _start(shape: Shape, paths: ClusterPaths, port_base: int, timeout: float, emulate: str | None) -> State:
    _check_binaries(paths)
    ports = Ports.from_base(port_base)
    kai_ports = kai.KaiPorts.from_base(port_base)
    for name, port in {**ports.named(), **kai_ports.named()}.items():
        if not procs.port_free(port):
            raise ClusterError(
                f"port {port} (for {name}) on 127.0.0.1 is in use by another program; "
                f"stop it or choose other ports with DEVCLUSTER_PORT_BASE=<n> (uses n..n+14)"
            )
    paths.logs.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(paths.etcd_data, ignore_errors=True)
    shutil.rmtree(paths.pods, ignore_errors=True)
    shutil.rmtree(paths.homes, ignore_errors=True)
    pki = ensure_pki(paths.pki)
    server = f"https://127.0.0.1:{ports.apiserver}"
    paths.kubeconfig.write_text(components.kubeconfig_yaml(server, pki))
    paths.kubeconfig.chmod(0o600)
    (paths.root / "audit-policy.yaml").write_text(components.AUDIT_POLICY)
    paths.audit_log.unlink(missing_ok=True)
    paths.removed_nodes.unlink(missing_ok=True)
    pids: dict[str, int] = {}
    state = State(shape.name, server, ports.__dict__, pids, time.time(), emulate)
    t0 = time.monotonic()
    try:
        as_version = f" as Kubernetes {emulate} (emulated)" if emulate else ""
        nodes, gpus = len(shape.nodes), shape.gpu_count
        say(f"starting shape '{shape.name}'{as_version}: {nodes} node(s), {gpus} GPU(s)")
        log = paths.log("etcd")
        pids["etcd"] = spawn_component("etcd", components.etcd_cmd(paths, ports), paths)
        _wait(
            "etcd",
            pids["etcd"],
            lambda: _http_ok(f"http://127.0.0.1:{ports.etcd_client}/health"),
            log,
            timeout,
        )
        log = paths.log("kube-apiserver")
        pids["kube-apiserver"] = spawn_component(
            "kube-apiserver", components.apiserver_cmd(paths, pki, ports, emulate), paths
        )
        ctx = _admin_ctx(pki)
        _wait(
            "kube-apiserver", pids["kube-apiserver"], lambda: _http_ok(server + "/readyz", ctx), log, timeout
        )
        say(f"kube-apiserver ready at {server} ({time.monotonic() - t0:.1f}s)")
        api = KubeAPI.from_kubeconfig(paths.kubeconfig)
        install_kai_objects(api, paths, timeout)
        for name, cmd in (
            ("kube-controller-manager", components.controller_manager_cmd(paths, pki, ports, emulate)),
            ("kube-scheduler", components.scheduler_cmd(paths, ports, emulate)),
            *kai.commands(paths, kai_ports).items(),
        ):
            pids[name] = spawn_component(name, cmd, paths)
        for name, port in (
            ("kube-controller-manager", ports.controller_manager),
            ("kube-scheduler", ports.scheduler),
        ):
            _wait(name, pids[name], _healthz(port), paths.log(name), timeout)
        for name in kai.COMPONENTS:
            _wait(name, pids[name], kai_ready(kai_ports, name), paths.log(name), timeout)
        say(f"KAI Scheduler ready ({time.monotonic() - t0:.1f}s)")
        log = paths.log("runtime")
        cmd = components.runtime_cmd(shape.name, paths, ports.kubelet)
        pids["runtime"] = procs.spawn(cmd, log, paths.root, env=_python_env(paths))
        _wait(
            "runtime (simulated nodes)", pids["runtime"], lambda: _nodes_published(api, shape), log, timeout
        )
        state.save(paths.state)
        say(f"cluster ready in {time.monotonic() - t0:.1f}s")
        return state
    except BaseException:
        procs.terminate([pids[n] for n in reversed(ORDER) if n in pids])
        raise


def kai_ready(ports: kai.KaiPorts, name: str) -> Callable[[], bool]:
    url = ports.ready_url(name)
    return lambda: _http_ok(url)


def install_kai_objects(api: KubeAPI, paths: ClusterPaths, timeout: float) -> None:
    """KAI's CRDs (established before its components start) and its priority classes."""
    try:
        crds = kai.crds(kai.crd_dir(paths))
    except FileNotFoundError as e:
        raise ClusterError(str(e)) from None
    for crd in crds:
        api.apply(crd)
    for pc in kai.priority_classes():
        api.apply(pc)
    names = [c["metadata"]["name"] for c in crds]

    def established() -> bool:
        for n in names:
            conds = (api.get("CustomResourceDefinition", n).get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return False
        return True

    deadline = time.monotonic() + timeout
    while not established():
        if time.monotonic() > deadline:
            raise ClusterError(f"KAI's CRDs were not established within {timeout:.0f}s")
        time.sleep(0.2)


def _nodes_published(api: KubeAPI, shape: Shape) -> bool:
    try:
        nodes = api.list("Node", label_selector="devcluster.gpusessions.io/node=true")["items"]
        ready = {
            n["metadata"]["name"]
            for n in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        }
        if not {n.name for n in shape.nodes} <= ready:
            return False
        want = sum(len(node_slices(n)) for n in shape.nodes)
        names = {n.name for n in shape.nodes}
        have = sum(1 for s in api.list("ResourceSlice")["items"] if s["spec"].get("nodeName") in names)
        return have >= want
    except Exception:
        return False


def _stop(paths: ClusterPaths, state: State | None) -> None:
    # One at a time, in reverse start order: the apiserver shuts down cleanly
    # only while etcd is still there.
    for name in reversed(ORDER):
        if state and name in state.pids:
            procs.terminate([state.pids[name]])
    # Anything else this cluster started (pod processes, strays of a lost state).
    procs.terminate(procs.owned_pids(paths.root), timeout=5)
    with contextlib.suppress(FileNotFoundError):
        paths.state.unlink()


def down(paths: ClusterPaths | None = None) -> bool:
    """Stop the cluster; True if something was running."""
    paths = paths or ClusterPaths.default()
    with _locked(paths):
        state = State.load(paths.state)
        running = bool(state) or bool(procs.owned_pids(paths.root))
        _stop(paths, state)
        if state:
            busy = [f"{n}:{p}" for n, p in state.ports.items() if not procs.port_free(p)]
            if busy:
                time.sleep(1)
                busy = [f"{n}:{p}" for n, p in state.ports.items() if not procs.port_free(p)]
            if busy:
                raise ClusterError(f"stopped the cluster, but ports are still busy: {', '.join(busy)}")
        return running


def status(paths: ClusterPaths | None = None) -> dict[str, Any]:
    paths = paths or ClusterPaths.default()
    state = State.load(paths.state)
    if not state:
        return {"running": False}
    return {
        "running": healthy(paths, state),
        "shape": state.shape,
        "server": state.server,
        "kubeconfig": str(paths.kubeconfig),
        "components": {n: procs.alive(p) for n, p in state.pids.items()},
        "logs": str(paths.logs),
    }
