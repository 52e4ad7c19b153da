"""Fault injection for tests: stop and start one component of the running local cluster.

    with faults.stopped("kube-scheduler"):
        ...                      # the cluster runs without it
    faults.restart("kube-apiserver")

A component is stopped with SIGTERM (SIGKILL after a timeout) and started again with the
same command, ports and data (etcd keeps its data folder), then waited for like `up` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import cluster as lc
from . import components, kai, procs
from .certs import PKI
from .components import Ports
from .kubeapi import KubeAPI
from .paths import ClusterPaths
from .shapes import load_shape

COMPONENTS = lc.ORDER


def _state(paths: ClusterPaths) -> lc.State:
    state = lc.State.load(paths.state)
    if state is None:
        raise lc.ClusterError("no local cluster is running")
    return state


def _command(name: str, paths: ClusterPaths, state: lc.State) -> list[str]:
    ports, pki = Ports.from_base(state.ports["apiserver"]), PKI(paths.pki)
    if name == "etcd":
        return components.etcd_cmd(paths, ports)
    if name == "kube-apiserver":
        return components.apiserver_cmd(paths, pki, ports, state.emulate)
    if name == "kube-controller-manager":
        return components.controller_manager_cmd(paths, pki, ports, state.emulate)
    if name == "kube-scheduler":
        return components.scheduler_cmd(paths, ports, state.emulate)
    if name == "runtime":
        return components.runtime_cmd(state.shape, paths, ports.kubelet)
    if name in kai.COMPONENTS:
        return kai.commands(paths, kai.KaiPorts.from_base(ports.apiserver))[name]
    raise ValueError(f"unknown component {name!r}; one of {', '.join(COMPONENTS)}")


def stop(name: str, paths: ClusterPaths | None = None) -> None:
    paths = paths or ClusterPaths.default()
    state = _state(paths)
    _command(name, paths, state)  # validates the name
    procs.terminate([state.pids[name]], timeout=10)


def start(name: str, paths: ClusterPaths | None = None, timeout: float = 60) -> None:
    paths = paths or ClusterPaths.default()
    state = _state(paths)
    cmd = _command(name, paths, state)
    if name == "runtime":
        pid = procs.spawn(cmd, paths.log(name), paths.root, env=lc._python_env(paths))
    else:
        pid = lc.spawn_component(name, cmd, paths)
    state.pids[name] = pid
    state.save(paths.state)
    ports = Ports.from_base(state.ports["apiserver"])
    checks = {
        "etcd": lambda: lc._http_ok(f"http://127.0.0.1:{ports.etcd_client}/health"),
        "kube-apiserver": lambda: lc._http_ok(state.server + "/readyz", lc._admin_ctx(PKI(paths.pki))),
        "kube-controller-manager": lc._healthz(ports.controller_manager),
        "kube-scheduler": lc._healthz(ports.scheduler),
        **{k: lc.kai_ready(kai.KaiPorts.from_base(ports.apiserver), k) for k in kai.COMPONENTS},
    }
    if name == "runtime":
        api = KubeAPI.from_kubeconfig(paths.kubeconfig)
        shape = load_shape(state.shape, lc.SHAPES_DIR)
        checks["runtime"] = lambda: lc._nodes_published(api, shape)
    lc._wait(name, pid, checks[name], paths.log(name), timeout)


def restart(name: str, paths: ClusterPaths | None = None) -> None:
    stop(name, paths)
    start(name, paths)


@contextlib.contextmanager
def node_removed(node: str, paths: ClusterPaths | None = None) -> Iterator[None]:
    """The Node deleted and kept away inside the block, as when a machine leaves the fleet (the
    runtime, our kubelet, does not register it again); registered again after the block."""
    paths = paths or ClusterPaths.default()
    _state(paths)  # a running cluster
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    paths.removed_nodes.write_text(node + "\n")
    try:
        api.delete("Node", node)
        yield
    finally:
        paths.removed_nodes.unlink(missing_ok=True)
        restart("runtime", paths)  # registers it again now (start waits for it), not at the next resync


@contextlib.contextmanager
def stopped(name: str, paths: ClusterPaths | None = None) -> Iterator[None]:
    """The cluster without `name` inside the block; started again after it (even on failure)."""
    stop(name, paths)
    try:
        yield
    finally:
        start(name, paths)
