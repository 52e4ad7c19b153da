"""DRA under the real KAI Scheduler (scheduler, binder, podgrouper of the local cluster).

The same behaviour test_dra_behaviour.py proves for kube-scheduler, here with
`schedulerName: kai-scheduler`: a holder and a notebook sharing one standalone
claim, the queue label KAI requires on that claim, dynamic MIG (partitionable
devices) and `firstAvailable` (both need the project's patch to KAI,
devcluster/kai/patches/). Runs on the `small` shape (gpu-node-0: GPU 0
statically split into 3g.40gb + 2g.20gb + 2 x 1g.10gb, GPU 1 whole); the
dynamic MIG test runs on the second cluster, shape `small-dynamic` (gpu-node-d,
GPU 0 a partitionable H100), which runs KAI too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from localcluster import waits
from localcluster.kubeapi import KubeAPI
from localcluster.shapes import gpu_uuid, mig_uuid
from localcluster.testing import allocated, exec_pod, visible_devices

from .kaitools import first_available, kai_claim, kai_pod, make_queues, queue, queue_names, stays_pending

pytestmark = pytest.mark.cluster

MIG = "mig.nvidia.com"
GPU = "gpu.nvidia.com"
NODE = "gpu-node-0"
PROFILE = "device.attributes['gpu.nvidia.com'].profile == '{}'"


@pytest.fixture
def team(api: KubeAPI, namespace: str) -> Iterator[str]:
    """A leaf queue under a parent, GPU quota and limit 2 (whole GPUs), for this test."""
    parent, leaf = queue_names(namespace)
    yield from _with_queues(api, parent, leaf)


def _with_queues(api: KubeAPI, parent: str, leaf: str) -> Iterator[str]:
    for _ in make_queues(api, [queue(parent, 2, 2), queue(leaf, 2, 2, parent=parent)]):
        yield leaf


def test_holder_and_notebook_share_a_claim_under_kai(api: KubeAPI, namespace: str, team: str) -> None:
    api.create(kai_claim("c", team, MIG, [PROFILE.format("1g.10gb")]), namespace)
    api.create(kai_pod("holder", team, "c"), namespace)
    api.create(kai_pod("notebook", team, "c"), namespace)
    holder = waits.pod_ready(api, namespace, "holder")
    nb = waits.pod_ready(api, namespace, "notebook")
    first = allocated(waits.claim_allocated(api, namespace, "c"))
    assert holder["spec"]["schedulerName"] == nb["spec"]["schedulerName"] == "kai-scheduler"
    assert nb["spec"]["nodeName"] == holder["spec"]["nodeName"] == NODE
    reserved = {r["name"] for r in api.get("ResourceClaim", "c", namespace)["status"]["reservedFor"]}
    assert reserved == {"holder", "notebook"}
    before = visible_devices(namespace, "notebook")
    assert before == visible_devices(namespace, "holder") and before.startswith("MIG-")

    # The notebook restarts: the holder keeps the claim, KAI places the new pod on the same device.
    api.delete("Pod", "notebook", namespace, grace_period=0)
    waits.gone(api, "Pod", "notebook", namespace)
    assert allocated(api.get("ResourceClaim", "c", namespace)) == first
    api.create(kai_pod("notebook", team, "c"), namespace)
    waits.pod_ready(api, namespace, "notebook")
    assert allocated(api.get("ResourceClaim", "c", namespace)) == first
    assert waits.wait_for(lambda: visible_devices(namespace, "notebook") == before, 10, "same device")


def test_kai_blocks_a_pod_whose_standalone_gpu_claim_has_no_queue_label(
    api: KubeAPI, namespace: str, team: str
) -> None:
    api.create(kai_claim("nolabel", None, GPU), namespace)
    api.create(kai_pod("p", team, "nolabel"), namespace)
    msg = waits.pod_unschedulable(api, namespace, "p")
    assert (
        "DRA claim nolabel is a shared GPU claim but does not have a queue label (kai.scheduler/queue)" in msg
    )
    assert not (api.get("ResourceClaim", "nolabel", namespace).get("status") or {}).get("allocation")
    # The label set, KAI schedules it.
    api.patch("ResourceClaim", "nolabel", {"metadata": {"labels": {"kai.scheduler/queue": team}}}, namespace)
    waits.pod_ready(api, namespace, "p", timeout=60)


def test_dynamic_mig_under_kai_and_counters_refuse_overallocation(
    dynamic_api: KubeAPI, dynamic_namespace: str, dynamic_cluster: Any
) -> None:
    api, namespace, paths = dynamic_api, dynamic_namespace, dynamic_cluster.paths
    node = "gpu-node-d"
    gpu0 = gpu_uuid(node, 0)  # GPU 0 of small-dynamic is a partitionable H100
    with contextlib.contextmanager(_with_queues)(api, *queue_names(namespace)) as team:
        on_gpu0 = f"device.attributes['gpu.nvidia.com'].parentUUID == '{gpu0}'"

        api.create(kai_claim("four", team, MIG, [on_gpu0, PROFILE.format("4g.40gb")]), namespace)
        api.create(kai_pod("p-four", team, "four"), namespace)
        waits.pod_ready(api, namespace, "p-four", timeout=60)
        assert allocated(api.get("ResourceClaim", "four", namespace)) == [(node, "gpu-0-mig-4g40gb-5-0")]
        assert waits.wait_for(
            lambda: visible_devices(namespace, "p-four", paths=paths) == mig_uuid(gpu0, "4g.40gb", 0),
            10,
            "dynamic MIG uuid",
        )
        # The 4g.40gb took memory slices 0-3: a 3g.40gb fits only at placement 4 ...
        api.create(kai_claim("three-a", team, MIG, [on_gpu0, PROFILE.format("3g.40gb")]), namespace)
        api.create(kai_pod("p-three-a", team, "three-a"), namespace)
        waits.pod_ready(api, namespace, "p-three-a", timeout=60)
        assert allocated(api.get("ResourceClaim", "three-a", namespace)) == [(node, "gpu-0-mig-3g40gb-9-4")]
        # ... and a second one does not fit at all: the counters are spent.
        api.create(kai_claim("three-b", team, MIG, [on_gpu0, PROFILE.format("3g.40gb")]), namespace)
        api.create(kai_pod("p-three-b", team, "three-b"), namespace)
        msg = waits.pod_unschedulable(api, namespace, "p-three-b")
        assert stays_pending(api, namespace, "p-three-b", team)
        assert not (api.get("ResourceClaim", "three-b", namespace).get("status") or {}).get("allocation")
        print("KAI's message for a dynamic MIG device whose counters are spent:", msg)

        # Counters given back: the waiting claim is allocated.
        api.delete("Pod", "p-four", namespace, grace_period=0)
        waits.claim_deallocated(api, namespace, "four")
        waits.pod_ready(api, namespace, "p-three-b", timeout=60)
        assert allocated(api.get("ResourceClaim", "three-b", namespace)) == [(node, "gpu-0-mig-3g40gb-9-0")]
        for pod in ("p-three-a", "p-three-b"):
            api.delete("Pod", pod, namespace, grace_period=0)


def _fallback(api: KubeAPI, namespace: str, queue_name: str | None, scheduler: str) -> list[tuple[str, str]]:
    """Take GPU 0's only 3g.40gb, then ask for [3g.40gb on GPU 0, else 1g.10gb on GPU 0]."""
    gpu0 = f"device.attributes['gpu.nvidia.com'].parentUUID == '{gpu_uuid(NODE, 0)}'"
    alternatives = [
        ("big", MIG, [gpu0, PROFILE.format("3g.40gb")]),
        ("small", MIG, [gpu0, PROFILE.format("1g.10gb")]),
    ]
    suffix = scheduler.split("-")[0]

    def pod(name: str, claim_name: str) -> dict:
        if queue_name:
            return kai_pod(name, queue_name, claim_name)
        return exec_pod(name, claim_name=claim_name)

    api.create(kai_claim(f"taken-{suffix}", queue_name, MIG, [gpu0, PROFILE.format("3g.40gb")]), namespace)
    api.create(pod(f"p-taken-{suffix}", f"taken-{suffix}"), namespace)
    waits.pod_ready(api, namespace, f"p-taken-{suffix}", timeout=60)
    api.create(first_available(f"fa-{suffix}", queue_name, alternatives), namespace)
    api.create(pod(f"p-fa-{suffix}", f"fa-{suffix}"), namespace)
    waits.pod_ready(api, namespace, f"p-fa-{suffix}", timeout=60)
    c = api.get("ResourceClaim", f"fa-{suffix}", namespace)
    results = c["status"]["allocation"]["devices"]["results"]
    out = [(r["request"], r["device"].split("-mig-")[1].rsplit("-", 2)[0]) for r in results]
    for name in (f"p-fa-{suffix}", f"p-taken-{suffix}"):
        api.delete("Pod", name, namespace, grace_period=0)
    for name in (f"fa-{suffix}", f"taken-{suffix}"):
        waits.claim_deallocated(api, namespace, name)
    return out


def test_first_available_falls_back_under_kai_as_under_kube_scheduler(
    api: KubeAPI, namespace: str, team: str
) -> None:
    under_kube = _fallback(api, namespace, None, "default-scheduler")
    under_kai = _fallback(api, namespace, team, "kai-scheduler")
    assert under_kube == [("gpu/small", "1g10gb")]
    assert under_kai == under_kube
