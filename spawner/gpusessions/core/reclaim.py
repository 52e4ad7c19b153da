"""KAI Scheduler took a session's GPU back (reclaim or preemption): how it shows, what the user is
told (pure).

KAI evicts by deleting the pods (holder and notebook are PodGroups of their own), and writes an
`Evict` event on each evicted pod's PodGroup: "Pod <ns>/<pod> was preempted by workload
<ns>/<podgroup>.", then one line per queue involved ("<queue> uses <GPU: 2, ...> with a quota
of <GPU: 0, ...>, fair-share of <...> and queue priority of <100>.") (measured on the real KAI
v0.17, tests/integration/test_kai_reclaim.py). The
pods are gone by the time the hub notices, so the event is what tells an eviction from a stop.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gpusessions.core.timestamps import epoch

Obj = dict[str, Any]
EVICT_REASON = "Evict"
EVICT_SELECTOR = f"involvedObject.kind=PodGroup,reason={EVICT_REASON}"
_EVICTED = re.compile(r"^Pod (?P<ns>[^/\s]+)/(?P<pod>\S+) was preempted by workload (?P<by>\S+?)\.?$")


def evicted_by(events: Iterable[Obj], namespace: str, pods: Iterable[str], since: float = 0.0) -> str | None:
    """The workload (`namespace/podgroup`) KAI evicted one of `pods` for, from its Evict events
    newer than `since` (epoch seconds); None if KAI evicted none of them."""
    wanted = set(pods)
    for e in events:
        if e.get("reason") != EVICT_REASON or event_time(e) < since:
            continue
        # The first line names pod and workload; KAI adds a line per queue on its fair share.
        m = _EVICTED.match(str(e.get("message") or "").strip().splitlines()[0] if e.get("message") else "")
        if m and m.group("ns") == namespace and m.group("pod") in wanted:
            return m.group("by")
    return None


def event_time(e: Obj) -> float:
    """When the event last happened (epoch seconds); +inf when it says nothing (count it)."""
    for v in (e.get("lastTimestamp"), e.get("eventTime"), (e.get("metadata") or {}).get("creationTimestamp")):
        t = epoch(v)
        if t is not None:
            return t
    return float("inf")


def notice(queue: str, by: str, parked: bool = False) -> str:
    """What the user reads on the hub home page after KAI took their GPU back; `parked`: the
    holder parked its kernels as it went (KAI deletes it with its own grace period, the park
    budget), so the next start restores them."""
    workload = by.split("/", 1)[-1]
    kept = (
        " Your kernels were parked first (their variables saved to your home): start again and "
        "they are restored, with a note of anything that could not be kept."
        if parked
        else ""
    )
    return (
        f"Your GPU session was taken back by the scheduler: your team's queue {queue} was using "
        f"GPUs beyond its share, and another team's workload ({workload}) needed them. Your "
        f"server was stopped and its GPU released.{kept} Start again to wait for a GPU, or pick a "
        "size that is not marked as borrowed."
    )
