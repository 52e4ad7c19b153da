"""Who waits for a GPU that a stopped session keeps (pure).

A waiter is a session whose server is starting (the hub says pending spawn), whose claim is
not allocated and whose holder pod is Pending: the scheduler found no free device for it. A
stopped session's kept device could serve it when both claims make the same device request:
the same `gpusessions.io/request-hash` annotation (the hash of the claim's spec: device
class, count, selectors, alternatives), which is what the same profile gives. The profile
annotation alone is empty for a spawn without options (the default profile), and the
DeviceClass alone is too coarse (`mig.nvidia.com` covers every MIG size).

Only as many stopped sessions as there are waiters for their request are marked contended,
those stopped longest first: one waiter does not cost three users their kept GPUs. Waiters
left over after the kept GPUs mark running sessions of the same request whose GPU is idle
(no busy reading from a reliable agent), those idle longest first: the policy may reclaim
them after `gpu_idle_limit_contended`. A session exempt ("keep until") or with a busy GPU
is never marked; a user's "Keep my GPU" exempts only `keep_contended` after the warning it
answered.
"""

from __future__ import annotations

from collections import Counter

from gpusessions.culler.model import Session
from gpusessions.culler.policy import Policy, gpu_idle_since, keep_counts_from


def request_key(s: Session) -> str:
    return s.request or (f"profile:{s.profile}" if s.profile else "")


def is_waiter(s: Session) -> bool:
    return (
        s.hub_server
        and s.pending == "spawn"
        and not s.allocated
        and not s.deleting
        and s.holder is not None
        and s.holder_phase == "Pending"
        and bool(request_key(s))
    )


def _exempt(s: Session, now: float, policy: Policy | None) -> bool:
    """An exemption that holds even while someone waits (an admin's keep, or a user's keep
    whose warning came less than `keep_contended` ago)."""
    if s.keep_until is None or s.keep_until <= now:
        return False
    r = policy.for_session(s) if policy else Policy().rules
    if s.kept_at is not None and r.keep_limit > 0 and now >= keep_counts_from(s) + r.keep_limit:
        return False  # a user's keep past its limit holds for nobody
    limit = r.keep_contended
    return s.kept_at is None or limit <= 0 or now < keep_counts_from(s) + limit


def _kept(s: Session, now: float, policy: Policy | None = None) -> bool:
    """A stopped server's kept GPU that the culler may release (not exempt, not going already)."""
    return (
        s.hub_server
        and not s.running
        and not s.pending
        and s.allocated
        and not s.deleting
        and not s.node_gone
        and s.stopped_since is not None
        and not _exempt(s, now, policy)
    )


def _running(s: Session, now: float, policy: Policy | None = None) -> bool:
    """A running server's GPU that the culler may reclaim (not exempt, not going already)."""
    return (
        s.hub_server
        and s.running
        and not s.pending
        and s.allocated
        and not s.deleting
        and not s.node_gone
        and not _exempt(s, now, policy)
    )


def mark_contention(sessions: list[Session], now: float, policy: Policy | None = None) -> Counter[str]:
    """Set `waiters` on the stopped sessions whose GPU a waiter could use; returns waiters by request."""
    waiters = Counter(request_key(s) for s in sessions if is_waiter(s))
    left = Counter(waiters)
    for s in sorted((s for s in sessions if _kept(s, now, policy)), key=lambda s: s.stopped_since or 0.0):
        s.waiters = 0
        key = request_key(s)
        if key and left[key] > 0:
            left[key] -= 1
            s.waiters = waiters[key]
    idle = [
        (since, s) for s in sessions if _running(s, now, policy) and (since := gpu_idle_since(s)) is not None
    ]
    for _since, s in sorted(idle, key=lambda x: x[0]):
        s.waiters = 0
        key = request_key(s)
        if key and left[key] > 0:
            left[key] -= 1
            s.waiters = waiters[key]
    return waiters
