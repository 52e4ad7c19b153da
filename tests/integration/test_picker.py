"""The picker's figures agree with the real scheduler, and its size definitions
with the real CEL evaluation."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core.availability import Inventory
from gpusessions.core.sizes import DeviceMatch, device_class
from localcluster import waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI
from localcluster.runtime import now_iso
from localcluster.shapes import build_node, build_node_status, build_slices, gpu_uuid, parse_shape
from localcluster.testing import claim, exec_pod

from . import hubtools
from .hubtools import GPU_HUB_CONFIG

pytestmark = pytest.mark.cluster


MORE_PROFILES = """
EXTRA.append({"display_name": "Two whole GPUs", "slug": "gpu-x2",
              "kubespawner_override": {"gpu_device_class": "gpu.nvidia.com", "gpu_count": 2}})
EXTRA.append({"display_name": "A MIG profile asked of whole GPUs", "slug": "gpu-profile",
              "kubespawner_override": {"gpu_device_class": "gpu.nvidia.com",
                                       "gpu_selectors": [ONE_G]}})
"""


@contextmanager
def picker_hub(namespace: str, workdir: Path) -> Iterator[Hub]:
    """The GPU hub with two more sizes, shared by this module's tests (`shared_hub`)."""
    h = start_hub(
        GPU_HUB_CONFIG.format(namespace=namespace) + f"ONE_G = {ONE_G[0]!r}\n" + MORE_PROFILES, workdir
    )
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture
def user_token(hub: Hub) -> str:
    return hubtools.user_token(hub, "picker")


@pytest.fixture
def dynamic_hub(dynamic_namespace: str, dynamic_cluster: Any, tmp_path: Path) -> Iterator[Hub]:
    """The same hub on the dynamic-MIG cluster (small-dynamic)."""
    h = start_hub(
        GPU_HUB_CONFIG.format(namespace=dynamic_namespace) + f"ONE_G = {ONE_G[0]!r}\n" + MORE_PROFILES,
        tmp_path / "hub-dynamic",
        env_extra={"KUBECONFIG": str(dynamic_cluster.paths.kubeconfig)},
    )
    yield h
    h.stop()


@pytest.fixture
def dynamic_token(dynamic_hub: Hub) -> str:
    return hubtools.user_token(dynamic_hub, "picker")


def figures(hub: Hub, token: str, api: KubeAPI) -> dict[str, dict[str, Any]]:
    """The picker's figures once its watch has seen every allocation the API has."""

    def caught_up() -> dict[str, Any] | None:
        allocated = sum(
            len(c["status"]["allocation"]["devices"]["results"])
            for c in api.list("ResourceClaim")["items"]
            if (c.get("status") or {}).get("allocation")
        )
        slices = len(api.list("ResourceSlice")["items"])
        body = hubtools.availability(hub, token)
        seen = body["seen"]
        return body if (seen["allocated_devices"], seen["slices"]) == (allocated, slices) else None

    body = waits.wait_for(caught_up, 20, "the picker to see every slice and allocation")
    return {p["slug"]: p for p in body["profiles"]}


def _fill(
    api: KubeAPI, ns: str, prefix: str, n: int, device_class_name: str, selectors: list[str], count: int = 1
) -> list[str]:
    """Create n claims of `count` devices (with a pod each) and wait until all are allocated."""
    names = [f"{prefix}-{i}" for i in range(n)]
    for name in names:
        api.create(claim(name, device_class_name, selectors, count), ns)
        api.create(exec_pod(name, claim_name=name, command=["sleep", "3600"]), ns)
    for name in names:
        waits.claim_allocated(api, ns, name)
    return names


def _one_more_waits(
    api: KubeAPI, ns: str, name: str, device_class_name: str, selectors: list[str], count: int = 1
) -> None:
    api.create(claim(name, device_class_name, selectors, count), ns)
    api.create(exec_pod(name, claim_name=name, command=["sleep", "3600"]), ns)
    assert "cannot allocate all claims" in waits.pod_unschedulable(api, ns, name)


def _scheduler_fails(api: KubeAPI, ns: str, device_class_name: str, selectors: list[str], error: str) -> None:
    """A claim of this class and selectors (with a pod) is not allocated: the scheduler reports `error`."""
    api.create(claim("bad", device_class_name, selectors), ns)
    api.create(exec_pod("bad", claim_name="bad", command=["sleep", "3600"]), ns)
    waits.wait_for(
        lambda: any(error in e for e in waits.events_for(api, ns, "Pod", "bad")),
        30,
        f"the scheduler to report {error!r}",
    )
    assert not (api.get("ResourceClaim", "bad", ns).get("status") or {}).get("allocation")


ONE_G = ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]
THREE_G = ["device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"]
# GPU 0 of small-dynamic: a partitionable H100.
FOUR_G_ON_H100 = [
    "device.attributes['gpu.nvidia.com'].profile == '4g.40gb'",
    f"device.attributes['gpu.nvidia.com'].parentUUID == '{gpu_uuid('gpu-node-d', 0)}'",
]


@pytest.mark.shared_hub.with_args(picker_hub)
def test_n_free_static_mig_means_n_allocate(hub: Hub, user_token: str, api: KubeAPI, namespace: str) -> None:
    f = figures(hub, user_token, api)
    assert f["mig-1g-10gb"]["state"] == "free"
    n = f["mig-1g-10gb"]["free"]
    assert n == 9  # 2 static on GPU 0 + 7 static on GPU 2 (small is static MIG)
    _fill(api, namespace, "one", n, "mig.nvidia.com", ONE_G)
    _one_more_waits(api, namespace, "one-extra", "mig.nvidia.com", ONE_G)
    f = figures(hub, user_token, api)
    assert f["mig-1g-10gb"]["free"] == 0 and f["mig-1g-10gb"]["state"] == "none-free"
    assert "wait in line" in f["mig-1g-10gb"]["availability"]
    # Static MIG devices share nothing: the whole GPU 1 and GPU 0's 3g.40gb are still free.
    assert f["gpu"]["free"] == 1
    assert f["mig-3g-40gb"]["free"] == 1


def test_n_free_partitionable_mig_means_n_allocate(
    dynamic_hub: Hub, dynamic_token: str, dynamic_api: KubeAPI, dynamic_namespace: str
) -> None:
    hub, api, namespace = dynamic_hub, dynamic_api, dynamic_namespace
    f = figures(hub, dynamic_token, api)
    n = f["mig-1g-10gb"]["free"]
    assert n == 14  # 7 placements on the H100 and 7 on the A100
    _fill(api, namespace, "one", n, "mig.nvidia.com", ONE_G)
    _one_more_waits(api, namespace, "one-extra", "mig.nvidia.com", ONE_G)
    f = figures(hub, dynamic_token, api)
    assert f["mig-1g-10gb"]["free"] == 0 and f["mig-1g-10gb"]["state"] == "none-free"
    # Counters are shared between profiles: with 1g slices on every placement, neither a
    # 3g.40gb nor the whole GPU fits.
    assert f["gpu"]["free"] == 0
    assert f["mig-3g-40gb"]["free"] == 0


def test_counters_shared_between_profiles_on_a_partitionable_gpu(
    dynamic_hub: Hub, dynamic_token: str, dynamic_api: KubeAPI, dynamic_namespace: str
) -> None:
    hub, api, namespace = dynamic_hub, dynamic_api, dynamic_namespace
    _fill(api, namespace, "four", 1, "mig.nvidia.com", FOUR_G_ON_H100)  # memory slices 0-3 of the H100
    f = figures(hub, dynamic_token, api)
    assert f["gpu"]["free"] == 0
    # 3g.40gb: placement 4 on the H100, and placements 0 and 4 on the A100.
    assert f["mig-3g-40gb"]["free"] == 3
    _fill(api, namespace, "three", 3, "mig.nvidia.com", THREE_G)
    _one_more_waits(api, namespace, "three-extra", "mig.nvidia.com", THREE_G)
    f = figures(hub, dynamic_token, api)
    assert f["mig-3g-40gb"]["free"] == 0
    # 1g.10gb: every memory slice of both GPUs is taken.
    assert f["mig-1g-10gb"]["free"] == 0
    _one_more_waits(api, namespace, "one-extra", "mig.nvidia.com", ONE_G)


@pytest.mark.shared_hub.with_args(picker_hub)
def test_n_free_whole_gpus_means_n_allocate(hub: Hub, user_token: str, api: KubeAPI, namespace: str) -> None:
    f = figures(hub, user_token, api)
    n = f["gpu"]["free"]
    assert n == 1 and f["gpu"]["compute"] == "1 whole GPU"
    _fill(api, namespace, "whole", n, "gpu.nvidia.com", [])
    _one_more_waits(api, namespace, "whole-extra", "gpu.nvidia.com", [])
    f = figures(hub, user_token, api)
    assert f["gpu"]["free"] == 0
    # The whole GPU 1 is taken; the 9 static 1g.10gb of GPUs 0 and 2 stay free.
    assert f["mig-1g-10gb"]["free"] == 9


@pytest.fixture
def second_node(api: KubeAPI, namespace: str) -> Iterator[str]:
    """A second GPU node with 3 whole GPUs, published as the runtime would (Node Ready, slices).
    No runtime runs its pods: what is tested is where the scheduler allocates."""
    name = f"extra-{namespace}"[:63]
    spec = parse_shape("extra", {"nodes": [{"name": name, "gpus": [{"model": "H100-80GB"}] * 3}]}).nodes[0]
    node = build_node(spec)
    del node["metadata"]["labels"]["devcluster.gpusessions.io/node"]  # not the runtime's: it would delete it
    api.create(node)
    api.patch("Node", name, build_node_status(spec, now_iso()), subresource="status")
    slices = build_slices(spec)
    for s in slices:
        s["metadata"]["labels"] = {"test.gpusessions.io/extra": "true"}
        api.create(s)
    yield name
    for s in slices:
        api.delete("ResourceSlice", s["metadata"]["name"])
    api.delete("Node", name)


@pytest.mark.shared_hub.with_args(picker_hub)
def test_sessions_of_two_devices_count_per_node(
    hub: Hub, user_token: str, api: KubeAPI, namespace: str, second_node: str
) -> None:
    """The scheduler takes both devices of a claim from one node: 1 whole GPU on gpu-node-0 and
    3 on the second node make 1 session of 2 GPUs, not 4 // 2 = 2."""
    f = figures(hub, user_token, api)
    assert (f["gpu"]["free"], f["gpu-x2"]["free"], f["gpu-x2"]["total"]) == (4, 1, 1)
    assert f["gpu-x2"]["compute"] == "2 whole GPUs"
    names = _fill(api, namespace, "two", 1, "gpu.nvidia.com", [], count=2)
    results = api.get("ResourceClaim", names[0], namespace)["status"]["allocation"]["devices"]["results"]
    assert {r["pool"] for r in results} == {second_node}
    _one_more_waits(api, namespace, "two-extra", "gpu.nvidia.com", [], count=2)
    f = figures(hub, user_token, api)
    assert (f["gpu"]["free"], f["gpu-x2"]["free"], f["gpu-x2"]["state"]) == (2, 0, "none-free")


@pytest.mark.shared_hub.with_args(picker_hub)
@pytest.mark.parametrize("auth", [None, "token not-a-real-token"])
def test_availability_needs_a_login(hub: Hub, auth: str | None) -> None:
    """Without a login (no cookie, no token) or with a bad token: 403 and no figures."""
    req = urllib.request.Request(
        hub.hub_api + "/gpusessions/availability", headers={"Authorization": auth} if auth else {}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 403
    body = err.value.read().decode()
    assert "profiles" not in body and "free" not in body, body


@pytest.mark.shared_hub.with_args(picker_hub)
def test_a_size_whose_selector_fails_on_a_device_is_unknown(
    hub: Hub, user_token: str, api: KubeAPI, namespace: str
) -> None:
    """The gpu.nvidia.com class lets the whole GPU through, and `profile == '1g.10gb'` then fails
    on it (it has no profile attribute): the scheduler fails the claim with a CEL runtime error
    rather than skipping the device, so the picker does not count it as free."""
    f = figures(hub, user_token, api)
    assert f["gpu-profile"]["state"] == "unknown" and f["gpu-profile"]["free"] is None
    assert "fails with a CEL error on 1 device(s)" in f["gpu-profile"]["availability"]
    _scheduler_fails(api, namespace, "gpu.nvidia.com", ONE_G, "CEL runtime error: no such key: profile")


@pytest.mark.shared_hub.with_args(picker_hub)
def test_sizes_the_cluster_lacks_and_cpu(hub: Hub, user_token: str, api: KubeAPI) -> None:
    f = figures(hub, user_token, api)
    assert f["cpu"]["state"] == "cpu" and f["cpu"]["free"] is None
    assert f["huge"]["state"] == "not-offered" and f["huge"]["total"] == 0
    assert f["tpu"]["state"] == "not-offered"
    assert f["mig-1g-10gb"]["memory"] == 9984 * 2**20
    assert f["mig-1g-10gb"]["compute"] == "1/7 of a GPU"
    # Without KAI queues (no `kai_queue`) there is no team figure, and the form shows none.
    assert all(p["queue"] is None for p in f.values())
    page = hubtools.logged_in(hub, "picker").open(hub.url + "/hub/spawn/picker", timeout=30).read().decode()
    assert "gs-avail-mig-1g-10gb" in page and 'id="gs-team' not in page


SIZES = {
    "gs-1g": DeviceMatch.of({"type": "mig", "profile": "1g.10gb"}),
    "gs-2g": DeviceMatch.of({"type": "mig", "profile": "2g.20gb"}),
    "gs-3g": DeviceMatch.of({"type": "mig", "profile": "3g.40gb"}, {"memory": "39Gi"}),
    "gs-whole": DeviceMatch.of({"type": "gpu"}),
    "gs-whole-big": DeviceMatch.of({"type": "gpu"}, {"memory": "70Gi"}),
    "gs-none": DeviceMatch.of({"type": "mig", "profile": "9g.99gb"}),
    "gs-driver-ok": DeviceMatch.of({"type": "gpu"}, versions={"driverVersion": "580.9.0"}),
    "gs-driver-new": DeviceMatch.of({"type": "gpu"}, versions={"driverVersion": "581.0.0"}),
    "gs-hopper-3g": DeviceMatch.of(
        {"type": "mig", "profile": "3g.40gb"}, versions={"cudaComputeCapability": "9.0.0"}
    ),
}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_generated_cel_and_python_matcher_agree_on_every_device(
    api: KubeAPI, namespace: str, name: str
) -> None:
    """The scheduler evaluates the generated DeviceClass CEL: claims of that class, one
    device each, are allocated until the next one waits. For these sizes the matching devices
    do not overlap, so the scheduler then holds exactly the devices the Python matcher picks.

    (allocationMode: All would say it in one claim, but kube-scheduler 1.35.4 panics on it
    when the matching devices consume counters: nil pointer in checkAvailableCounters.)"""
    match = SIZES[name]
    inv = Inventory.from_slices(api.list("ResourceSlice")["items"])
    python_side = {k[2] for k, d in inv.devices if match.matches(k[0], d)}
    dc_name = f"{name}-{namespace}"[:63]
    api.apply(device_class(dc_name, match))
    try:
        names = _fill(api, namespace, "c", len(python_side), dc_name, [])
        _one_more_waits(api, namespace, "c-extra", dc_name, [])
        scheduler_side = {
            r["device"]
            for n in names
            for r in api.get("ResourceClaim", n, namespace)["status"]["allocation"]["devices"]["results"]
        }
        assert scheduler_side == python_side
    finally:
        api.delete("DeviceClass", dc_name)


def test_a_version_attribute_compared_with_a_string_matches_nothing(api: KubeAPI, namespace: str) -> None:
    """driverVersion is a semver in CEL: `== '580.95.5'` has no overload, so the scheduler
    allocates nothing (it reports the CEL error); the Python matcher matches no device either."""
    match = DeviceMatch.of({"type": "gpu", "driverVersion": "580.95.5"})
    inv = Inventory.from_slices(api.list("ResourceSlice")["items"])
    assert [k for k, d in inv.devices if match.matches(k[0], d)] == []
    dc_name = f"gs-driver-eq-{namespace}"[:63]
    api.apply(device_class(dc_name, match))
    try:
        _scheduler_fails(api, namespace, dc_name, [], "CEL runtime error: no such overload")
    finally:
        api.delete("DeviceClass", dc_name)
