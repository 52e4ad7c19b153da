"""KAI's queues on the real KAI Scheduler of the local cluster, with plain pods and claims:
a queue's limit, reclaim of a preemptible session, a non-preemptible one left alone, and how
KAI counts MIG devices against a queue (measured; docs/queues.md quotes these tests).

The `small` shape has one whole GPU that a `gpu.nvidia.com` claim can get (GPU 1, the
whole one; GPUs 0 and 2 are split statically into MIG devices, which hides them).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from localcluster import waits
from localcluster.kubeapi import KubeAPI
from localcluster.testing import allocated

from .kaitools import (
    kai_claim,
    kai_pod,
    make_queues,
    podgroup_of,
    queue,
    queue_status,
    recounted,
    stays_pending,
)

pytestmark = pytest.mark.cluster

GPU = "gpu.nvidia.com"
MIG = "mig.nvidia.com"
PROFILE = "device.attributes['gpu.nvidia.com'].profile == '{}'"


def names(namespace: str) -> tuple[str, str, str]:
    s = namespace.rsplit("-", 1)[-1]
    return f"dept-{s}", f"a-{s}", f"b-{s}"


@pytest.fixture
def teams(api: KubeAPI, namespace: str) -> Iterator[tuple[str, str]]:
    """Two teams under one department: team A has a GPU quota (and limit) of 2, team B none (it
    may only borrow, up to 2). One whole-GPU session needs 2: KAI charges the notebook that
    shares the holder's claim once more when it admits it (see
    test_kai_charges_the_notebook_of_a_shared_claim_again)."""
    dept, a, b = names(namespace)
    qs = [queue(dept, 2, -1), queue(a, 2, 2, parent=dept), queue(b, 0, 2, parent=dept)]
    for _ in make_queues(api, qs):
        yield a, b


def session(api: KubeAPI, ns: str, name: str, q: str, cls: str, sel: list[str] | None, prio: str) -> None:
    """A session as gpusessions makes it: a labelled standalone claim, a holder and a notebook."""
    api.create(kai_claim(name, q, cls, sel), ns)
    api.create(kai_pod(f"{name}-holder", q, name, priority_class=prio), ns)
    api.create(kai_pod(f"{name}-nb", q, name, priority_class=prio), ns)


def test_a_queues_limit_holds_and_the_waiting_pod_says_why(api: KubeAPI, namespace: str) -> None:
    dept, a, _ = names(namespace)
    for _ in make_queues(api, [queue(dept, 1, -1), queue(a, 1, 1, parent=dept)]):
        api.create(kai_claim("one", a, GPU), namespace)
        api.create(kai_pod("one-holder", a, "one"), namespace)
        waits.pod_ready(api, namespace, "one-holder", timeout=60)
        # A second GPU would pass team A's limit of 1: it waits, and KAI says why within seconds.
        t0 = time.monotonic()
        api.create(kai_claim("two", a, GPU), namespace)
        api.create(kai_pod("two-holder", a, "two"), namespace)
        msg = waits.pod_unschedulable(api, namespace, "two-holder", timeout=30)
        took = time.monotonic() - t0
        print(f"KAI's reason after {took:.1f}s: {msg}")
        assert took < 10, took
        assert msg == (
            f"OverLimit: {a} quota has reached the allowable limit of GPUs. "
            "Limit is 1 GPUs, currently 1 GPUs allocated and workload requested 1 GPUs."
        )
        [cond] = podgroup_of(api, namespace, "two-holder")["status"]["schedulingConditions"]
        [why] = cond["reasons"]
        assert why["reason"] == "OverLimit"
        details = why["details"]["queueDetails"]
        assert details["name"] == a and details["queueResourceLimits"]["nvidia.com/gpu"] == "1"
        assert details["queueAllocatedResources"]["nvidia.com/gpu"] == "1"
        assert stays_pending(api, namespace, "two-holder", a)
        waits.wait_for(
            lambda: queue_status(api, a).get("allocated", {}).get("gpu.nvidia.com") == "1",
            30,
            "KAI's queuecontroller to report 1 GPU allocated",
        )
        # The first GPU given back, the waiting one is scheduled.
        api.delete("Pod", "one-holder", namespace, grace_period=0)
        waits.pod_ready(api, namespace, "two-holder", timeout=60)


def test_mig_devices_against_a_queue_of_gpu_limit_one(
    api: KubeAPI, namespace: str, teams: tuple[str, str]
) -> None:
    """Measured: what a 1g.10gb slice costs a queue in KAI's eyes."""
    a, _ = teams
    for i in range(3):
        session(api, namespace, f"m{i}", a, MIG, [PROFILE.format("1g.10gb")], "build")
    # Team A's GPU limit is 2; three 1g.10gb sessions (six pods) all run: KAI charges nothing for
    # a device of class mig.nvidia.com (its name has no "gpu").
    for i in range(3):
        waits.pod_ready(api, namespace, f"m{i}-nb", timeout=60)
        assert len(allocated(api.get("ResourceClaim", f"m{i}", namespace))) == 1
    st = recounted(api, namespace, a)
    print("Queue status with three MIG sessions:", st)
    assert not st.get("allocated"), st


def test_a_mig_device_of_a_class_named_gpu_counts_as_one_whole_gpu(
    api: KubeAPI, namespace: str, teams: tuple[str, str]
) -> None:
    """Measured: the chart's DeviceClasses are named `gpusessions-<size>`, which contains "gpu":
    KAI then charges a MIG device of such a class in whole GPUs (where `mig.nvidia.com` costs
    nothing). One session (holder and notebook sharing one claim) counts exactly 1 in the Queue's
    status: the project's patch 0004 charges a shared claim to the first pod it is reserved for
    (unpatched KAI shows 2, one for each pod's PodGroup; docs/queues.md)."""
    a, _ = teams
    cls = f"gpusessions-{namespace[-6:]}-mig-1g-10gb"
    api.create(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {
                "selectors": [
                    {
                        "cel": {
                            "expression": "device.driver == 'gpu.nvidia.com' && "
                            "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
                        }
                    }
                ]
            },
        }
    )
    try:
        session(api, namespace, "s", a, cls, None, "build")
        waits.pod_ready(api, namespace, "s-nb", timeout=60)
        waits.wait_for(
            lambda: int(queue_status(api, a).get("allocated", {}).get(cls) or 0) >= 1,
            30,
            f"KAI to report whole GPUs of class {cls} allocated in queue {a}",
            explain=lambda: f"queue {a} status: {queue_status(api, a)}",
        )
        # Both pods run, so both pods' events are in KAI's podgroupcontroller's queue (unpatched,
        # the notebook's PodGroup brings the count to 2). A PodGroup it finds with nothing to
        # count gets no status written, so the witness is a recount: a probe queued after both,
        # counted in the queue's status.
        st = recounted(api, namespace, a)
        print("one 1g.10gb session of a class named gpu, queue status:", st)
        assert st.get("allocated", {}).get(cls) == "1", st
        assert st.get("requested", {}).get(cls) == "1", st
    finally:
        api.delete_collection("Pod", namespace, grace_period=0)
        api.delete("DeviceClass", cls)


def test_a_preemptible_session_that_borrowed_is_reclaimed_when_the_owner_asks(
    api: KubeAPI, namespace: str, teams: tuple[str, str]
) -> None:
    a, b = teams
    # Team B has no quota: it borrows team A's GPU with a preemptible session.
    session(api, namespace, "borrow", b, GPU, None, "build-preemptible")
    waits.pod_ready(api, namespace, "borrow-nb", timeout=60)
    # Team A asks for its share.
    session(api, namespace, "owner", a, GPU, None, "build")
    waits.pod_ready(api, namespace, "owner-nb", timeout=90)
    # KAI deleted both pods of the borrowing session (each is a PodGroup of its own) ...
    waits.gone(api, "Pod", "borrow-holder", namespace)
    waits.gone(api, "Pod", "borrow-nb", namespace)
    # ... the claim stays, deallocated (gpusessions deletes it, see docs/queues.md) ...
    assert not (api.get("ResourceClaim", "borrow", namespace).get("status") or {}).get("allocation")
    # ... and says so in an event on each PodGroup.
    evicted = {
        e["message"].split()[1]
        for e in api.list("Event", namespace)["items"]
        if e["involvedObject"]["kind"] == "PodGroup" and e.get("reason") == "Evict"
    }
    assert evicted == {f"{namespace}/borrow-holder", f"{namespace}/borrow-nb"}, evicted
    msgs = [e["message"] for e in api.list("Event", namespace)["items"] if e.get("reason") == "Evict"]
    assert all(" was preempted by workload " in m for m in msgs), msgs


def test_a_non_preemptible_session_is_never_evicted(
    api: KubeAPI, namespace: str, teams: tuple[str, str]
) -> None:
    a, b = teams
    # Team B's non-preemptible session inside team A's unused quota? Not allowed: B has no quota.
    session(api, namespace, "mine", a, GPU, None, "build")
    waits.pod_ready(api, namespace, "mine-nb", timeout=60)
    api.create(kai_claim("other", b, GPU), namespace)
    api.create(kai_pod("other-holder", b, "other", priority_class="build"), namespace)
    msg = waits.pod_unschedulable(api, namespace, "other-holder", timeout=30)
    assert msg.startswith(
        f"NonPreemptibleOverQuota: Non-preemptible workload is over quota. Workload requested 1 GPUs, "
        f"but {b} quota is 0 GPUs"
    ), msg
    assert stays_pending(api, namespace, "other-holder", b)
    for p in ("mine-holder", "mine-nb"):
        assert api.get("Pod", p, namespace)["metadata"].get("deletionTimestamp") is None


def test_kai_charges_the_notebook_of_a_shared_claim_again(api: KubeAPI, namespace: str) -> None:
    """Measured: a queue of GPU limit 1, a holder running on a whole GPU; the notebook pod that
    shares the holder's claim is refused as over the limit, though it needs no other device."""
    dept, a, _ = names(namespace)
    for _ in make_queues(api, [queue(dept, 1, -1), queue(a, 1, 1, parent=dept)]):
        api.create(kai_claim("c", a, GPU), namespace)
        api.create(kai_pod("holder", a, "c"), namespace)
        waits.pod_ready(api, namespace, "holder", timeout=60)
        api.create(kai_pod("nb", a, "c"), namespace)
        msg = waits.pod_unschedulable(api, namespace, "nb", timeout=30)
        print("notebook of a shared claim, queue limit 1:", msg)
        assert msg.startswith(
            f"OverLimit: {a} quota has reached the allowable limit of GPUs. Limit is 1 GPUs"
        )
        assert stays_pending(api, namespace, "nb", a)
        print("Queue status:", queue_status(api, a))
