"""Admission of a new claim into its team's queue: the thin I/O side of `QueuePolicy`.

`QueuePolicy` (core/queues.py) decides from what it is given; this reads what it needs
from the hub's shared watch (the team's claims, the devices a size may get) when a
session is about to create a claim, and hands the decision to the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from gpusessions.core import labels as L
from gpusessions.core.claims import GPURequest
from gpusessions.core.progress import Refused
from gpusessions.core.queues import QueuePolicy
from gpusessions.kube.watch import cluster_view

VIEW_WAIT = 5.0  # seconds to wait for the shared watch's first list
PENDING_SECONDS = 30.0  # how long a created claim counts here before the watch must show it

Obj = dict[str, Any]
# One admission at a time per team queue and per user (admit, then create): two spawns in the
# same instant cannot both pass a limit one of them fills. This hub's claims created but not yet
# in the shared watch count too.
_locks: dict[str, asyncio.Lock] = {}
_pending: dict[tuple[str, str], tuple[float, Obj]] = {}


def _lock(key: str) -> asyncio.Lock:
    return _locks.setdefault(key, asyncio.Lock())


def claims_now() -> list[Obj]:
    """The claims of the shared watch, and those this hub created that it does not show yet."""
    objects = cluster_view().claims.objects
    now = time.monotonic()
    for key, (at, _) in list(_pending.items()):
        if f"{key[0]}/{key[1]}" in objects or now - at > PENDING_SECONDS:
            del _pending[key]
    return [*objects.values(), *(obj for _, obj in _pending.values())]


def user_sessions(claims: list[Obj], user: str, exclude: tuple[str, str] | None) -> int:
    """The user's GPU sessions (claims of ours not being deleted), but the one being made."""
    n = 0
    for c in claims:
        md = c.get("metadata") or {}
        if (md.get("labels") or {}).get(L.MANAGED_BY) != L.MANAGER or md.get("deletionTimestamp"):
            continue
        if (md.get("annotations") or {}).get(L.USER_ANNOTATION) != user:
            continue
        if exclude is not None and (md.get("namespace"), md.get("name")) == exclude:
            continue
        n += 1
    return n


class Admission:
    """What a new claim of one server in `queue` is charged, and whether its team may take it;
    and whether its user may hold one more GPU session (`max_sessions`, 0: no limit)."""

    def __init__(
        self,
        policy: QueuePolicy,
        queue: str | None,
        claim: tuple[str, str],
        log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
        who: str = "",
        user: str = "",
        max_sessions: int = 0,
    ):
        self.policy = policy
        self.queue = queue
        self.claim = claim  # (namespace, name): the claim being made, not counted as the team's
        self.log = log or logging.getLogger("gpusessions")
        self.who = who
        self.user = user
        self.max_sessions = max_sessions

    @classmethod
    def of(
        cls, spawner: Any, policy: QueuePolicy, queue: str | None, claim: tuple[str, str]
    ) -> Admission | None:
        """A spawner's admission of a GPU claim: its team queue's quota and its user's
        `max_gpu_sessions_per_user`; None when neither limits it."""
        max_sessions = int(getattr(spawner, "max_gpu_sessions_per_user", 0) or 0)
        if not queue and max_sessions <= 0:
            return None
        who = getattr(spawner, "_log_name", "")
        return cls(
            policy, queue or None, claim, spawner.log, who, user=spawner.user.name, max_sessions=max_sessions
        )

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Hold the user's and the team's admission while a claim is admitted and created."""
        async with _lock(f"user:{self.user}"), _lock(f"queue:{self.queue or ''}"):
            yield

    def created(self, claim: Obj) -> None:
        """A claim this admission let in: it counts before the watch shows it."""
        md = claim.get("metadata") or {}
        _pending[(md.get("namespace", ""), md.get("name", ""))] = (time.monotonic(), claim)

    async def admit(self, request: GPURequest) -> dict[str, str]:
        """The new claim's annotations (what it is charged); `Refused` when it would take the
        user past `max_sessions` or the team past its quota. Without a reliable picture of the
        cluster nothing is checked: the scheduler's own quota is the hard limit."""
        view = cluster_view()
        if not await view.wait_ready(timeout=VIEW_WAIT) or view.errors:
            if self.queue and self.policy.limit(self.queue) is not None:
                self.log.warning(
                    "%s: no cluster view; the team quota of %s is not checked", self.who, self.queue
                )
            return {}
        claims = claims_now()
        if self.max_sessions > 0:
            held = user_sessions(claims, self.user, self.claim)
            if held >= self.max_sessions:
                raise Refused(
                    f"You hold {held} GPU session(s), the most one user may have on this hub: stop "
                    "one of your servers and release its GPU (hub home page), then start this one.",
                    reason="user-session-limit",
                )
        if not self.queue:
            return {}
        inv, _, _, classes = view.derived()
        charged = self.policy.charge(request, inv, classes)
        self.policy.admit(self.queue, request, charged, claims, inv, exclude=self.claim)
        return self.policy.claim_annotations(charged)
