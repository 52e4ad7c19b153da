"""Helpers for tests that run pods through the real KAI Scheduler of the local cluster."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localcluster import waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kai import QUEUE_LABEL, SCHEDULER_NAME
from localcluster.kubeapi import ApiError, KubeAPI, Obj
from localcluster.testing import claim, exec_pod

from .hubtools import GPU_HUB_CONFIG

UNLIMITED = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def queue(
    name: str,
    gpu_quota: float = -1,
    gpu_limit: float = -1,
    parent: str | None = None,
    over_quota_weight: float = 1,
) -> Obj:
    """A KAI Queue (scheduling.run.ai/v2) with explicit limits: CPU and memory unlimited."""
    spec: dict[str, Any] = {
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": gpu_limit, "overQuotaWeight": over_quota_weight},
            "cpu": dict(UNLIMITED),
            "memory": dict(UNLIMITED),
        }
    }
    if parent:
        spec["parentQueue"] = parent
    return {"apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": name}, "spec": spec}


def queue_names(namespace: str) -> tuple[str, str]:
    """A parent and a leaf queue name unique to a test (queues are cluster-scoped)."""
    suffix = namespace.rsplit("-", 1)[-1]
    return f"dept-{suffix}", f"team-{suffix}"


def _create_afresh(api: KubeAPI, q: Obj, timeout: float = 30.0) -> None:
    """Create a queue; one of that name left by an earlier test (queues are cluster-wide) is
    deleted first, and waited for."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            api.create(q)
            return
        except ApiError as e:
            if e.status != 409 or time.monotonic() > deadline:
                raise
        api.delete("Queue", q["metadata"]["name"])
        time.sleep(0.5)


def make_queues(api: KubeAPI, queues: list[Obj]) -> Iterator[None]:
    """Create the queues (parents first); delete them afterwards (leaves first)."""
    for q in queues:
        _create_afresh(api, q)
    try:
        yield
    finally:
        for q in reversed(queues):
            api.delete("Queue", q["metadata"]["name"])


def kai_pod(
    name: str,
    queue_name: str,
    claim_name: str | None = None,
    priority_class: str = "build",
    command: list[str] | None = None,
) -> Obj:
    pod = exec_pod(name, claim_name=claim_name, command=command, labels={QUEUE_LABEL: queue_name})
    pod["spec"]["schedulerName"] = SCHEDULER_NAME
    pod["spec"]["priorityClassName"] = priority_class
    return pod


def kai_claim(
    name: str, queue_name: str | None, device_class: str, selectors: list[str] | None = None
) -> Obj:
    return claim(name, device_class, selectors, labels={QUEUE_LABEL: queue_name} if queue_name else None)


def first_available(name: str, queue_name: str | None, alternatives: list[tuple[str, str, list[str]]]) -> Obj:
    """A claim with one `firstAvailable` request: (subrequest name, device class, selectors)."""
    subs = [
        {
            "name": sub,
            "deviceClassName": cls,
            "count": 1,
            "selectors": [{"cel": {"expression": s}} for s in sel],
        }
        for sub, cls, sel in alternatives
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue_name} if queue_name else {}},
        "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": subs}]}},
    }


def pending_message(api: KubeAPI, namespace: str, pod: str, timeout: float = 30) -> str:
    """KAI's reason why a pod waits: the PodScheduled=False message it writes on the pod."""
    return waits.pod_unschedulable(api, namespace, pod, timeout)


def podgroup_of(api: KubeAPI, namespace: str, pod: str, timeout: float = 30) -> Obj:
    """The PodGroup KAI's podgrouper made for a bare pod (named in the pod's annotation)."""

    def find() -> Obj | None:
        p = api.get("Pod", pod, namespace)
        name = (p["metadata"].get("annotations") or {}).get("pod-group-name")
        if not name:
            return None
        try:
            return api.request(
                "GET", f"/apis/scheduling.run.ai/v2alpha2/namespaces/{namespace}/podgroups/{name}"
            )
        except ApiError:
            return None

    return waits.wait_for(find, timeout, f"the PodGroup of pod {namespace}/{pod}")


def queue_status(api: KubeAPI, name: str) -> Obj:
    return api.get("Queue", name).get("status") or {}


BINDREQUESTS = "/apis/scheduling.run.ai/v1alpha2/namespaces/{namespace}/bindrequests"


def _bind_requested(api: KubeAPI, namespace: str, pod: str) -> bool:
    """Whether KAI's scheduler has asked its binder to bind `pod` (a BindRequest names it)."""
    items = api.request("GET", BINDREQUESTS.format(namespace=namespace)).get("items") or []
    return any((b.get("spec") or {}).get("podName") == pod for b in items)


def stays_pending(
    api: KubeAPI, namespace: str, pod: str, queue_name: str, cycles: int = 2, timeout: float = 60
) -> bool:
    """True if KAI passed `pod` over in `cycles` scheduling cycles that all began after this
    call: the witness of each cycle is a probe pod (no resources, the same queue) created after
    the previous probe was bound, and bound itself, while `pod` has no node and no BindRequest.
    KAI considers every pending workload in each cycle, so a probe bound after `pod` was already
    waiting is a cycle that looked at `pod` and left it (no clock decides)."""
    probes = []
    try:
        for i in range(cycles):
            name = f"{pod}-probe{i}"[:63]
            api.create(kai_pod(name, queue_name), namespace)
            probes.append(name)
            waits.wait_for(
                lambda name=name: api.get("Pod", name, namespace)["spec"].get("nodeName"),
                timeout,
                f"KAI to bind the probe pod {namespace}/{name} (a scheduling cycle after {pod}'s)",
            )
            if api.get("Pod", pod, namespace)["spec"].get("nodeName") or _bind_requested(api, namespace, pod):
                return False
        return True
    finally:
        for name in probes:
            api.delete("Pod", name, namespace, grace_period=0)


PROBE_CPU = "10m"


def recounted(api: KubeAPI, namespace: str, queue_name: str, timeout: float = 60) -> Obj:
    """The queue's status as KAI's queuecontroller computes it after this call: a probe pod
    asking for CPU only (PROBE_CPU) joins the queue, and the first status that counts it is one
    summed over every PodGroup of the queue from then on (what was there before is in it). The
    probe's own CPU is taken out again; the probe is deleted."""
    pod = kai_pod(f"recount-{queue_name}"[:63], queue_name)
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": PROBE_CPU}}
    api.create(pod, namespace)
    try:
        st = waits.wait_for(
            lambda: (s := queue_status(api, queue_name)).get("allocated", {}).get("cpu") and s,
            timeout,
            f"KAI's queuecontroller to count a probe pod in queue {queue_name}",
            explain=lambda: f"queue {queue_name} status: {queue_status(api, queue_name)}",
        )
    finally:
        api.delete("Pod", pod["metadata"]["name"], namespace, grace_period=0)
    print(f"queue {queue_name} with the probe:", st)
    return {k: {r: n for r, n in v.items() if r != "cpu"} for k, v in st.items() if isinstance(v, dict)}


def reclaim_teams(namespace: str) -> tuple[str, str, str]:
    s = namespace.rsplit("-", 1)[-1]
    return f"dept-{s}", f"owner-{s}", f"borrower-{s}"


def reclaim_hub(api: KubeAPI, namespace: str, workdir: Path) -> Iterator[Hub]:
    """A hub whose physics users (ann) own a team queue of GPU quota 2 and whose biology users
    (cy) have none (they may borrow); a whole-GPU profile `gpu-pre` that may be reclaimed."""
    dept, owner, borrower = reclaim_teams(namespace)
    extra = f"""
c.GPUSessionSpawner.kai_queue = {{"physics": {owner!r}, "biology": {borrower!r}}}
c.JupyterHub.load_groups = {{"physics": {{"users": ["ann"]}}, "biology": {{"users": ["cy"]}}}}
c.KubeSpawner.poll_interval = 2
EXTRA.append({{
    "display_name": "Whole GPU, may be reclaimed", "slug": "gpu-pre",
    "kubespawner_override": {{
        "gpu_device_class": "gpu.nvidia.com", "kai_priority_class": "build-preemptible",
    }},
}})
"""
    # One whole-GPU session needs a quota of 2 in KAI's eyes (docs/queues.md).
    qs = [queue(dept, 2, -1), queue(owner, 2, 2, parent=dept), queue(borrower, 0, 2, parent=dept)]
    for _ in make_queues(api, qs):
        h = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + extra, workdir)
        yield h
        h.stop()
