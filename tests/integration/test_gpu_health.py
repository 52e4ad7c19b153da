"""A broken GPU on the local cluster: the simulated driver taints the device as the NVIDIA DRA
driver does (`localcluster.gpuhealth`), and its user, the admin and the picker see it; the
next start lands on a healthy GPU. An admin's DeviceTaintRule (NoExecute) evicts a session
like a drain: its user is told, and the next start is allocated a healthy device. KAI's
scheduler (with DRADeviceTaints on) does not allocate a device the driver tainted."""

from __future__ import annotations

import pytest

from gpusessions.core import health
from localcluster import gpuhealth, waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI
from localcluster.testing import allocated

from .cullertools import metrics
from .healthtools import health_hub, notices, page
from .hubtools import (
    allocated_device,
    availability,
    follow_spawn,
    nb,
    spawn,
    stop,
    user_token,
    wait_ready,
    wait_stopped,
)
from .kaitools import kai_claim, kai_pod, make_queues, queue, queue_names, stays_pending

pytestmark = pytest.mark.cluster
ONE_G = {"profile": "mig-1g-10gb"}
MESSAGE = (
    "Your GPU reported a fatal error (XID 79); save your work: Release and start again to get a healthy GPU."
)


def _health_notices(hub: Hub, user: str) -> list[str]:
    return [n["text"] for n in notices(hub, user) if n.get("kind") == "gpu-health"]


@pytest.mark.shared_hub.with_args(health_hub)
def test_a_broken_gpu_is_seen_by_its_user_the_admin_and_the_picker_and_replaced(
    api: KubeAPI, namespace: str, hub: Hub
) -> None:
    token = user_token(hub, "ann")
    spawn(hub, "ann", ONE_G)
    _, device, node = allocated_device(api, namespace, "gpu-ann")

    def free() -> int:
        return int(
            next(p for p in availability(hub, token)["profiles"] if p["slug"] == "mig-1g-10gb")["free"]
        )

    before = free()
    try:
        taint = gpuhealth.fail_gpu(api, node, device, xid=79)
        # Kept by the apiserver (DRADeviceTaints is on), with the time it was added.
        assert (taint["value"], taint["effect"], bool(taint.get("timeAdded"))) == ("79", "NoSchedule", True)
        # The user, on the hub home page and in JupyterLab (the GPU panel's data).
        assert waits.wait_for(lambda: _health_notices(hub, "ann"), 15, "the home page's notice") == [MESSAGE]
        code, d = nb(hub, "GET", "/user/ann/gpusessions/gpu")
        assert code == 200 and d["state"]["health"] == {"ok": False, "message": MESSAGE}
        # The admin: the fleet map's broken device, why, and who holds it; the metric.
        [b] = waits.wait_for(lambda: page(hub)["fleet"]["totals"]["broken"] or None, 30, "the admin page")
        assert (b["node"], b["device"], b["why"], b["session"] >= 0) == (
            node,
            device,
            "a fatal error (XID 79)",
            True,
        )
        assert f'device="{device}",effect="NoSchedule",held="true",key="gpu.nvidia.com/xid"' in metrics(hub)
        # The next start: the kept claim is not re-attached; a healthy GPU of the same size.
        stop(hub, "ann")
        (code, _), said = follow_spawn(hub, "ann", ONE_G)
        assert code in (201, 202)
        assert any(
            m.startswith("The GPU kept for you reported a fatal error (XID 79): releasing it") for m in said
        ), said
        wait_ready(hub, "ann")
        assert allocated_device(api, namespace, "gpu-ann")[1] != device
        # The picker: the broken device is not free (one more session holds a device now).
        waits.wait_for(lambda: free() == before - 1 or None, 15, f"the picker to count {before - 1} free")
        assert _health_notices(hub, "ann") == [], "a healthy GPU now: nothing to say"
    finally:
        gpuhealth.heal(api, node)


@pytest.mark.shared_hub.with_args(health_hub)
def test_a_device_taint_rule_evicts_like_a_drain_and_the_next_start_gets_a_healthy_gpu(
    api: KubeAPI, namespace: str, hub: Hub
) -> None:
    spawn(hub, "bob", ONE_G)
    pool, device, _ = allocated_device(api, namespace, "gpu-bob")
    rule = gpuhealth.taint_rule(namespace, pool, device, "example.com/maintenance", "swap")
    api.create(rule)
    try:
        wait_stopped(hub, "bob", timeout=60)
        told = waits.wait_for(
            lambda: (
                [t for t in (n["text"] for n in notices(hub, "bob")) if t == health.TAINT_EVICTED_KEPT]
                or None
            ),
            30,
            "bob to be told",
            lambda: hub.log_tail(3000),
        )
        assert told == [health.TAINT_EVICTED_KEPT]
        spawn(hub, "bob", ONE_G)
        assert allocated_device(api, namespace, "gpu-bob")[1] != device, "not the tainted device again"
    finally:
        api.delete("DeviceTaintRule", namespace)


def test_kai_does_not_allocate_a_device_the_driver_tainted(api: KubeAPI, namespace: str) -> None:
    parent, leaf = queue_names(namespace)
    for _ in make_queues(api, [queue(parent, 2, 2), queue(leaf, 2, 2, parent=parent)]):
        gpuhealth.fail_gpu(api, "gpu-node-0", "gpu-1", xid=79)  # the small shape's one whole GPU
        try:
            api.create(kai_claim("c", leaf, "gpu.nvidia.com"), namespace)
            api.create(kai_pod("p", leaf, "c"), namespace)
            assert stays_pending(api, namespace, "p", leaf), "KAI allocated the broken GPU"
        finally:
            gpuhealth.heal(api, "gpu-node-0")
        # Healed (the plugin restarted): the same claim gets the GPU in a later cycle.
        assert allocated(waits.claim_allocated(api, namespace, "c")) == [("gpu-node-0", "gpu-1")]
