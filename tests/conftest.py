"""Shared pytest fixtures: one local cluster per test run, a fresh namespace per test."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.integration.hubtools import gpu_hub

from localcluster import cluster as lc
from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI
from localcluster.paths import SHAPES_DIR, ClusterPaths
from localcluster.shapes import Shape, load_shape
from localcluster.testing import namespace_name

TEST_SHAPE = os.environ.get("DEVCLUSTER_TEST_SHAPE", "small")


def pytest_configure(config: pytest.Config) -> None:
    """With pytest-xdist (`-n 2`), every worker after the first gets a local cluster of its own:
    its own folder (.cache/devcluster-gw<n>), ports (DEVCLUSTER_PORT_BASE + 4000 n) and pod
    addresses, the same binaries. Set before any fixture reads them, inherited by the hubs and
    the runtime the worker starts."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    n = int(worker.removeprefix("gw") or 0)
    if n == 0:
        return
    default = ClusterPaths.default()
    base = int(os.environ.get("DEVCLUSTER_PORT_BASE", lc.DEFAULT_PORT_BASE))
    os.environ["DEVCLUSTER_BIN"] = str(default.bin)
    os.environ["DEVCLUSTER_DIR"] = str(default.root.with_name(f"{default.root.name}-{worker}"))
    os.environ["DEVCLUSTER_PORT_BASE"] = str(base + 4000 * n)


DYNAMIC_SHAPE = "small-dynamic"


@dataclass
class Cluster:
    paths: ClusterPaths
    state: lc.State
    api: KubeAPI
    shape: Shape


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The running local cluster: reuse one that is up, or start one (and stop it at the end)."""
    paths = ClusterPaths.default()
    running = lc.State.load(paths.state)
    if running and running.shape != TEST_SHAPE and lc.healthy(paths, running):
        # Not reused: its shape differs and a demo hub may be using it. Stop the whole run with
        # one line, rather than one error per test.
        pytest.exit(
            f"a local cluster with shape '{running.shape}' is running at {running.server} (left by "
            f"'make demo'?); the tests need shape '{TEST_SHAPE}': run 'make demo-down' or "
            "'make cluster-down' first",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
    started = not lc.healthy(paths)
    try:
        state = lc.up(TEST_SHAPE, paths=paths)
    except lc.ClusterError as e:
        pytest.fail(f"the local cluster is not available: {e}", pytrace=False)
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    yield Cluster(paths, state, api, load_shape(TEST_SHAPE, SHAPES_DIR))
    if started and not os.environ.get("DEVCLUSTER_KEEP"):
        lc.down(paths)


@pytest.fixture
def api(cluster: Cluster) -> KubeAPI:
    return cluster.api


@pytest.fixture(scope="session")
def dynamic_cluster(cluster: Cluster) -> Iterator[Cluster]:
    """A second local cluster with the driver's DynamicMIG gate on (shape small-dynamic): one
    NVIDIA driver install is either static or dynamic MIG, so a cluster is too. It runs beside
    the test cluster, on its port base + 100 and in a folder of its own."""
    from urllib.parse import urlparse

    root = cluster.paths.root
    paths = ClusterPaths(root.with_name(root.name + "-dynamic"), bin_dir=cluster.paths.bin)
    base = (urlparse(cluster.state.server).port or lc.DEFAULT_PORT_BASE) + 100
    started = not lc.healthy(paths)
    try:
        state = lc.up(DYNAMIC_SHAPE, base, paths)
    except lc.ClusterError as e:
        pytest.fail(f"the dynamic-MIG local cluster is not available: {e}", pytrace=False)
    yield Cluster(
        paths, state, KubeAPI.from_kubeconfig(paths.kubeconfig), load_shape(DYNAMIC_SHAPE, SHAPES_DIR)
    )
    if started and not os.environ.get("DEVCLUSTER_KEEP"):
        lc.down(paths)


@pytest.fixture
def dynamic_api(dynamic_cluster: Cluster) -> KubeAPI:
    return dynamic_cluster.api


@pytest.fixture
def dynamic_namespace(request: pytest.FixtureRequest, dynamic_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace on the dynamic-MIG cluster, cleaned up as `namespace` is."""
    yield from _fresh_namespace(request, dynamic_cluster)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[str]:
    """A fresh namespace, deleted (and waited for) after the test, so devices are free again.
    A test marked `shared_hub` gets the shared hub's namespace instead, emptied after it."""
    shared = _shared(request)
    if shared is None:
        yield from _fresh_namespace(request, cluster)
        return
    yield shared.namespace
    shared.empty(cluster)
    items = request.session.items
    request.getfixturevalue("shared_hubs").done_with(shared.factory, items, items.index(request.node))


def _fresh_namespace(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[str]:
    name = namespace_name(request.node.name)
    _create_namespace(cluster, name)
    yield name
    _check_cluster(cluster)
    _empty_namespace(cluster, name)
    cluster.api.delete("Namespace", name)


def _create_namespace(cluster: Cluster, name: str) -> None:
    cluster.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # As on any cluster, pods can be created once the serviceaccount controller has made the
    # namespace's `default` account; right after an apiserver restart that can take seconds.
    waits.wait_for(
        lambda: cluster.api.get_or_none("ServiceAccount", "default", name),
        60,
        f"the default ServiceAccount of namespace {name}",
    )


def _check_cluster(cluster: Cluster) -> None:
    if not lc.healthy(cluster.paths):
        st = lc.status(cluster.paths)
        dead = [n for n, up in st.get("components", {}).items() if not up]
        pytest.fail(
            f"the local cluster broke during the test: {', '.join(dead) or 'apiserver'} not running; "
            f"see {cluster.paths.logs}",
            pytrace=False,
        )


def _empty_namespace(cluster: Cluster, name: str, everything: bool = False) -> None:
    """No pod or claim of the namespace left (with `everything`, none of the other objects a
    test makes either), so the next test finds every device free."""
    # Pods first, without grace: the namespace controller would otherwise wait
    # out each pod's grace period before it deletes the rest.
    cluster.api.delete_collection("Pod", name, grace_period=0)
    cluster.api.delete_collection("ResourceClaim", name)
    if everything:
        for kind in ("CronJob", "Job", "ResourceClaimTemplate", "NetworkPolicy", "Event"):
            cluster.api.delete_collection(kind, name)
        cluster.api.delete_collection(
            "Secret", name, label_selector="app.kubernetes.io/managed-by=gpusessions"
        )
    # The namespace itself goes in the background; what the next test needs
    # is that no device stays allocated to this one. Not merely "deallocated
    # now": a pod that was waiting for devices can still be placed by the
    # scheduler as the others' devices free up, which allocates its claim
    # after its pod is gone (the bind then fails) and left a device allocated
    # into the next test. A claim that is gone (deleted here, gone once its
    # allocation is released) cannot be allocated any more.
    waits.wait_for(
        lambda: not cluster.api.list("ResourceClaim", name)["items"],
        60,
        f"the claims of namespace {name} to be released and deleted",
    )
    if everything:
        waits.wait_for(
            lambda: not cluster.api.list("Pod", name)["items"], 60, f"the pods of namespace {name} to go"
        )


@pytest.fixture
def hub(request: pytest.FixtureRequest, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    """A JupyterHub with GPUSessionSpawner on this test's namespace (modules may override it).
    A test marked `shared_hub` gets that shared hub, its log read from the test's start."""
    shared = _shared(request)
    if shared is not None:
        yield shared.current(request.getfixturevalue("cluster")).from_here()
        return
    h = gpu_hub(namespace, tmp_path / "hub")
    yield h
    h.stop()


HubFactory = Callable[[str, Path], AbstractContextManager[Hub]]


@contextmanager
def plain_gpu_hub(namespace: str, workdir: Path) -> Iterator[Hub]:
    """The hub of `hub` (hubtools.GPU_HUB_CONFIG): what `@pytest.mark.shared_hub` shares."""
    h = gpu_hub(namespace, workdir)
    try:
        yield h
    finally:
        h.stop()


def _key(factory: HubFactory) -> str:
    """A factory's name: the same function may be imported under two module names (`tests.integration.x`
    from the browser tests, `integration.x` from its own package)."""
    return f"{factory.__module__.rsplit('.', 1)[-1]}.{factory.__qualname__}"


def _factory(item: pytest.Item) -> HubFactory | None:
    m = item.get_closest_marker("shared_hub")
    if m is None:
        return None
    return m.args[0] if m.args else plain_gpu_hub  # type: ignore[no-any-return]


class SharedHub:
    """One JupyterHub made by a factory and its namespace, shared by the tests marked
    `shared_hub(factory)` (no argument: `plain_gpu_hub`): a hub's start costs seconds, a test's
    users cost nothing. After each test every user but the admin is deleted through the hub
    (their claims and holders go, as on a real hub) and the namespace is emptied, so the next
    test starts as on a new hub; a hub a test stopped is started again for the next one."""

    def __init__(self, factory: HubFactory, namespace: str, workdir: Path) -> None:
        self.factory, self.namespace, self.workdir = factory, namespace, workdir
        self.hub: Hub | None = None
        self.stack = ExitStack()
        self.starts = 0

    def current(self, cluster: Cluster) -> Hub:
        if self.hub is not None and self.hub.proc.poll() is not None:
            self.close(cluster)
        if self.hub is None:
            self.starts += 1
            self.hub = self.stack.enter_context(self.factory(self.namespace, self.workdir / str(self.starts)))
        return self.hub

    def empty(self, cluster: Cluster) -> None:
        _check_cluster(cluster)
        if self.hub is not None and self.hub.proc.poll() is None:
            waits.wait_for(
                self._delete_users, 120, "the shared hub to delete the test's users", self._log_tail
            )
        else:  # a test stopped it: the next one gets a new one (a new database too)
            self.close(cluster)
        _empty_namespace(cluster, self.namespace, everything=True)

    def close(self, cluster: Cluster) -> None:
        self.hub = None
        self.stack.close()
        self.stack = ExitStack()

    def _delete_users(self) -> bool:
        assert self.hub is not None
        code, users = self.hub.api("GET", "/users")
        assert code == 200, users
        left = False
        for u in users:
            name = u["name"]
            if name == "admin":  # an admin of the config: only its servers go
                for server in u.get("servers") or {}:
                    path = f"/users/admin/servers/{server}" if server else "/users/admin/server"
                    self.hub.api("DELETE", path, {"remove": True} if server else None)
                    left = True
                continue
            code, _ = self.hub.api("DELETE", f"/users/{name}", timeout=60)
            if code != 204:  # 400: a spawn or a stop is still under way; asked again
                left = True
        return not left

    def _log_tail(self) -> str:
        return self.hub.log.read_text(errors="replace")[-3000:] if self.hub else ""


class SharedHubs:
    """The shared hubs of this run, one per factory, each with a namespace of its own; a hub is
    stopped after the last test that shares it."""

    def __init__(self, cluster: Cluster, root: Path) -> None:
        self.cluster, self.root = cluster, root
        self.hubs: dict[str, SharedHub] = {}
        self.last: dict[str, int] | None = None  # the index of each factory's last test

    def get(self, factory: HubFactory) -> SharedHub:
        key = _key(factory)
        if key not in self.hubs:
            name = namespace_name(f"shared-{factory.__name__}")
            _create_namespace(self.cluster, name)
            self.hubs[key] = SharedHub(factory, name, self.root / name)
        return self.hubs[key]

    def done_with(self, factory: HubFactory, items: list[pytest.Item], index: int) -> None:
        """After test `index` of the run's `items`: stop the factory's hub and delete its
        namespace if no later test shares it."""
        if self.last is None:
            self.last = {}
            for i, item in enumerate(items):
                if (f := _factory(item)) is not None:
                    self.last[_key(f)] = i
        if self.last.get(_key(factory), -1) <= index:
            self._end(_key(factory))

    def _end(self, key: str) -> None:
        shared = self.hubs.pop(key)
        shared.close(self.cluster)
        _empty_namespace(self.cluster, shared.namespace)
        self.cluster.api.delete("Namespace", shared.namespace)

    def close(self) -> None:
        for key in list(self.hubs):
            self._end(key)


@pytest.fixture(scope="session")
def shared_hubs(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedHubs]:
    hubs = SharedHubs(cluster, tmp_path_factory.mktemp("shared-hubs"))
    yield hubs
    hubs.close()


def _shared(request: pytest.FixtureRequest) -> SharedHub | None:
    factory = _factory(request.node)
    if factory is None:
        return None
    hubs: SharedHubs = request.getfixturevalue("shared_hubs")
    return hubs.get(factory)


@pytest.fixture
def load_file() -> Iterator[Path]:
    """The simulated NVML's load file (per device UUID); restored after the test."""
    path = ClusterPaths.default().root / "fake-nvml" / "load.json"
    before = path.read_text()
    yield path
    path.write_text(before)
