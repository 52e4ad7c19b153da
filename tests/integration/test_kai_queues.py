"""KAI's queues on the real KAI Scheduler of the local cluster, with plain pods and claims:
a queue's limit, reclaim of a preemptible session, a non-preemptible one left alone, and how
KAI counts MIG devices against a queue (measured; docs/queues.md quotes these tests).

The `small` shape has one whole GPU that a `gpu.nvidia.com` claim can get (GPU 1, the
partitionable one; GPU 0 is split statically into MIG devices).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from localcluster import waits
from localcluster.kubeapi import KubeAPI
from localcluster.testing import allocated

from .kaitools import kai_claim, kai_pod, make_queues, podgroup_of, queue, queue_status, stays_pending

pytestmark = pytest.mark.cluster

GPU = "gpu.nvidia.com"
MIG = "mig.nvidia.com"
PROFILE = "device.attributes['gpu.nvidia.com'].profile == '{}'"


def names(namespace: str) -> tuple[str, str, str]:
    s = namespace.rsplit("-", 1)[-1]
    return f"dept-{s}", f"a-{s}", f"b-{s}"


@pytest.fixture
def teams(api: KubeAPI, namespace: str) -> Iterator[tuple[str, str]]:
    """Two teams under one department: team A has a GPU quota of 1, team B none (it may only
    borrow, up to a limit of 1)."""
    dept, a, b = names(namespace)
    qs = [queue(dept, 1, 1), queue(a, 1, 1, parent=dept), queue(b, 0, 1, parent=dept)]
    for _ in make_queues(api, qs):
        yield a, b


def session(api: KubeAPI, ns: str, name: str, q: str, cls: str, sel: list[str] | None, prio: str) -> None:
    """A session as gpusessions makes it: a labelled standalone claim, a holder and a notebook."""
    api.create(kai_claim(name, q, cls, sel), ns)
    api.create(kai_pod(f"{name}-holder", q, name, priority_class=prio), ns)
    api.create(kai_pod(f"{name}-nb", q, name, priority_class=prio), ns)


def test_a_queues_limit_holds_and_the_waiting_pod_says_why(
    api: KubeAPI, namespace: str, teams: tuple[str, str]
) -> None:
    a, _ = teams
    session(api, namespace, "one", a, GPU, None, "build")
    waits.pod_ready(api, namespace, "one-nb", timeout=60)
    # A second whole GPU would pass team A's limit of 1 (and there is none left): it waits.
    t0 = time.monotonic()
    api.create(kai_claim("two", a, GPU), namespace)
    api.create(kai_pod("two-holder", a, "two"), namespace)
    msg = waits.pod_unschedulable(api, namespace, "two-holder", timeout=30)
    took = time.monotonic() - t0
    print(f"KAI's reason after {took:.1f}s: {msg}")
    pg = podgroup_of(api, namespace, "two-holder")
    print("PodGroup status:", pg.get("status"))
    assert took < 10
    assert stays_pending(api, namespace, "two-holder", 3)
    st = queue_status(api, a)
    print("Queue status:", st)


def test_mig_devices_against_a_queue_of_gpu_limit_one(
    api: KubeAPI, namespace: str, teams: tuple[str, str]
) -> None:
    """Measured: what a 1g.10gb slice costs a queue in KAI's eyes."""
    a, _ = teams
    for i in range(3):
        session(api, namespace, f"m{i}", a, MIG, [PROFILE.format("1g.10gb")], "build")
    ready = []
    for i in range(3):
        try:
            waits.pod_ready(api, namespace, f"m{i}-nb", timeout=30)
            ready.append(i)
        except AssertionError:
            pass
    print("MIG sessions scheduled against a GPU limit of 1:", ready)
    time.sleep(3)
    print("Queue status:", queue_status(api, a))
    for i in range(3):
        c = api.get("ResourceClaim", f"m{i}", namespace)
        print(i, (c.get("status") or {}).get("allocation") and allocated(c))


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
    left = [p["metadata"]["name"] for p in api.list("Pod", namespace)["items"]]
    print("pods after reclaim:", left)
    ev = waits.events_for(api, namespace, "Pod", "borrow-nb")
    print("events of borrow-nb:", ev)


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
    print("non-preemptible over quota:", msg)
    assert stays_pending(api, namespace, "other-holder", 5)
    for p in ("mine-holder", "mine-nb"):
        assert api.get("Pod", p, namespace)["metadata"].get("deletionTimestamp") is None
