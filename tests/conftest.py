"""Shared pytest fixtures: one local cluster per test run, a fresh namespace per test."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from localcluster import cluster as lc
from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI
from localcluster.paths import SHAPES_DIR, ClusterPaths
from localcluster.shapes import Shape, load_shape
from localcluster.testing import namespace_name

TEST_SHAPE = os.environ.get("DEVCLUSTER_TEST_SHAPE", "small")
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
    """A fresh namespace, deleted (and waited for) after the test, so devices are free again."""
    yield from _fresh_namespace(request, cluster)


def _fresh_namespace(request: pytest.FixtureRequest, cluster: Cluster) -> Iterator[str]:
    name = namespace_name(request.node.name)
    cluster.api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # As on any cluster, pods can be created once the serviceaccount controller has made the
    # namespace's `default` account; right after an apiserver restart that can take seconds.
    waits.wait_for(
        lambda: cluster.api.get_or_none("ServiceAccount", "default", name),
        60,
        f"the default ServiceAccount of namespace {name}",
    )
    yield name
    if not lc.healthy(cluster.paths):
        st = lc.status(cluster.paths)
        dead = [n for n, up in st.get("components", {}).items() if not up]
        pytest.fail(
            f"the local cluster broke during the test: {', '.join(dead) or 'apiserver'} not running; "
            f"see {cluster.paths.logs}",
            pytrace=False,
        )
    # Pods first, without grace: the namespace controller would otherwise wait
    # out each pod's grace period before it deletes the rest.
    cluster.api.delete_collection("Pod", name, grace_period=0)
    cluster.api.delete_collection("ResourceClaim", name)
    cluster.api.delete("Namespace", name)
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


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    """A JupyterHub with GPUSessionSpawner on this test's namespace (modules may override it)."""
    from tests.integration.hubtools import gpu_hub

    h = gpu_hub(namespace, tmp_path / "hub")
    yield h
    h.stop()


@pytest.fixture
def load_file() -> Iterator[Path]:
    """The simulated NVML's load file (per device UUID); restored after the test."""
    path = ClusterPaths.default().root / "fake-nvml" / "load.json"
    before = path.read_text()
    yield path
    path.write_text(before)
