"""Slices published from real clusters, loaded into the local apiserver with Nodes of the same
names: the picker's free count of each size is what the real kube-scheduler then allocates
(claims are made until the first one waits), a whole-GPU claim on the 25.8.0 dump shows why the
size check refuses whole GPUs there, and the size check at hub start names a missing attribute
and the node that lacks it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core.availability import Inventory, count_free, size_match
from localcluster import realslices, waits
from localcluster.hubproc import start_hub
from localcluster.kubeapi import KubeAPI
from localcluster.runtime import now_iso
from localcluster.testing import claim, exec_pod

pytestmark = pytest.mark.cluster

GPU, MIG = "gpu.nvidia.com", "mig.nvidia.com"


def _profile(p: str) -> list[str]:
    return [f"device.attributes['gpu.nvidia.com'].profile == '{p}'"]


# Per loadable dump: the sizes it offers (device class, selectors).
SIZES = {
    "real-whole-gpu-t4-openshift.yaml": [(GPU, [])],
    "real-whole-gpu-p100-v1beta1-alauda.yaml": [(GPU, [])],
    "real-static-mig-h100-excerpt-hrishi.yaml": [(MIG, _profile("4g.40gb")), (MIG, _profile("3g.40gb"))],
    "real-static-mig-a100-issue719-fragments.yaml": [(MIG, _profile("1g.10gb"))],
}


def test_every_loadable_dump_has_sizes_here() -> None:
    loadable = {p.name for p in realslices.dump_files() if realslices.load(p).slices}
    assert loadable == set(SIZES)


@pytest.fixture
def loaded(request: pytest.FixtureRequest, api: KubeAPI) -> Iterator[realslices.Dump]:
    """The dump's Nodes (Ready; no runtime runs their pods) and its slices, owned by them."""
    dump = realslices.load(realslices.REAL_SLICES_DIR / request.param)
    uids = {}
    for node in realslices.node_objects(dump):
        name = node["metadata"]["name"]
        if api.get_or_none("Node", name) is not None:  # left by an interrupted run
            api.delete("Node", name)
            waits.gone(api, "Node", name)
        uids[name] = api.create(node)["metadata"]["uid"]
        api.patch("Node", name, realslices.node_status(now_iso()), subresource="status")
    slices = realslices.owned_slices(dump, uids)
    for s in slices:
        api.create(s)
    yield dump
    for s in slices:
        api.delete("ResourceSlice", s["metadata"]["name"])
    for name in uids:
        api.delete("Node", name)


def _classes(api: KubeAPI) -> dict[str, Any]:
    return {c["metadata"]["name"]: c for c in api.list("DeviceClass")["items"]}


def _pinned_pod(name: str, nodes: list[str]) -> dict[str, Any]:
    pod = exec_pod(name, claim_name=name, command=["sleep", "3600"])
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": nodes}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    return pod


def _allocate_until_one_waits(
    api: KubeAPI, ns: str, prefix: str, nodes: list[str], dc: str, selectors: list[str], limit: int = 16
) -> list[dict[str, Any]]:
    """Claims (each with a pod kept to the dump's nodes) one after another, until one waits; the
    allocated claims."""
    done = []
    for i in range(limit):
        name = f"{prefix}-{i}"
        api.create(claim(name, dc, selectors), ns)
        api.create(_pinned_pod(name, nodes), ns)
        got = waits.wait_for(
            lambda n=name: _allocated_or_waiting(api, ns, n), 60, f"claim {name} to be allocated or to wait"
        )
        if got == "waits":
            return done
        done.append(got)
    raise AssertionError(f"more than {limit} claims of {dc} {selectors} were allocated")


def _allocated_or_waiting(api: KubeAPI, ns: str, name: str) -> Any:
    c = api.get("ResourceClaim", name, ns)
    if (c.get("status") or {}).get("allocation"):
        return c
    pod = api.get("Pod", name, ns)
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if (cond.get("type"), cond.get("reason")) == ("PodScheduled", "Unschedulable") and (
            "cannot allocate all claims" in cond.get("message", "")
        ):
            return "waits"
    return None


@pytest.mark.parametrize("loaded", sorted(SIZES), indirect=True)
def test_picker_free_counts_are_what_the_scheduler_allocates(
    api: KubeAPI, namespace: str, loaded: realslices.Dump
) -> None:
    nodes = loaded.nodes
    inv = Inventory.from_slices(
        s for s in api.list("ResourceSlice")["items"] if s["spec"].get("nodeName") in set(nodes)
    )
    classes = _classes(api)
    for i, (dc, selectors) in enumerate(SIZES[loaded.name]):
        match = size_match([dc], selectors, classes)
        assert match is not None
        keys = [k for k in inv.candidates(match) if k not in inv.cut]
        free, _, _ = count_free(inv, match, set(), candidates=keys)
        allocated = _allocate_until_one_waits(api, namespace, f"s{i}", nodes, dc, selectors)
        assert len(allocated) == free, (loaded.name, dc, selectors)
        assert free > 0
        for c in allocated:
            [r] = c["status"]["allocation"]["devices"]["results"]
            assert r["pool"] in nodes


@pytest.mark.parametrize("loaded", ["real-static-mig-a100-issue719-fragments.yaml"], indirect=True)
def test_the_real_scheduler_takes_a_cut_gpu_published_whole(
    api: KubeAPI, namespace: str, loaded: realslices.Dump
) -> None:
    """On driver 25.8.0's slices the scheduler gives a plain whole-GPU claim the GPU that MIG
    devices are cut from, even while one of them is allocated: which is why the size check
    refuses whole-GPU sizes there (unit: test_real_slices.test_a_whole_gpu_size_never_takes_...)."""
    nodes = loaded.nodes
    mig = _allocate_until_one_waits(api, namespace, "mig", nodes, MIG, _profile("1g.10gb"))
    assert len(mig) == 2
    whole = _allocate_until_one_waits(api, namespace, "whole", nodes, GPU, [])
    taken = {(r["pool"], r["device"]) for c in whole for r in c["status"]["allocation"]["devices"]["results"]}
    assert ("aks-migpool-68842551-vmss000001", "gpu-0") in taken


@pytest.mark.parametrize("loaded", ["real-whole-gpu-p100-v1beta1-alauda.yaml"], indirect=True)
def test_the_size_check_at_hub_start_names_the_missing_attribute_and_node(
    namespace: str, tmp_path: Path, loaded: realslices.Dump
) -> None:
    config = f"""
from gpusessions.hub.handlers import configure_hub
c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.profile_list = [
    {{"display_name": "HMM GPU", "slug": "hmm-gpu", "kubespawner_override": {{
        "gpu_device_class": "gpu.nvidia.com",
        "gpu_selectors": ["device.attributes['gpu.nvidia.com'].addressingMode == 'HMM'"]}}}},
    {{"display_name": "Any GPU", "slug": "any-gpu",
      "kubespawner_override": {{"gpu_device_class": "gpu.nvidia.com"}}}},
]
configure_hub(c)
"""
    hub = start_hub(config, tmp_path / "hub")
    try:
        line = waits.wait_for(
            lambda: next((ln for ln in hub.log_text().splitlines() if "gpusessions size check" in ln), None),
            60,
            "the size check's line in the hub log",
        )
        assert "profile hmm-gpu:" in line
        assert "reads 'addressingMode', which device gpu-0 on node 192.168.140.59 lacks" in line
        assert "any-gpu" not in hub.log_text()
    finally:
        hub.stop()
