"""The poll's work on a server's GPU session: a running server's lost holder healed (or the
GPU released, as configured), a stopped server whose GPU KAI took back told so and released,
and pods evicted for a NoExecute device taint (an admin's DeviceTaintRule took the GPU out of
service) told so, the server stopped and, as `on_holder_loss` says, the GPU released or the
claim kept (its next start is allocated a healthy device of the same size).

`Reconcile` knows nothing of JupyterHub: the spawner's `poll` builds one from its names, its
saved state and its settings, and calls `running()` or `stopped()`. What it reads comes from the
shared holder watch where that can answer, and from `SessionAPI` (or anything with the same
methods: the unit tests give plain objects).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpusessions.core import claims as C
from gpusessions.core import health
from gpusessions.hub.session import GPUSession, SessionNames

Obj = dict[str, Any]

HOLDER_LOST_RELEASED = (
    "Your GPU's holder pod was lost (deleted or evicted), so your server was stopped and its "
    "GPU released, as this hub is configured. Start again to get a GPU."
)
HOLDER_LOST_RECREATED = (
    "Your GPU's holder pod was lost (deleted or evicted) and has been recreated: the GPU stays yours."
)
KERNELS_LOST = " Kernels running beside the GPU were lost: restart them."


class ReconcileAPI(Protocol):
    """The calls the poll's work makes (`kube.api.SessionAPI` has them)."""

    async def get_pod(self, namespace: str, name: str) -> Obj | None: ...

    async def wait_events(
        self, namespace: str, field_selector: str, found: Callable[[list[Obj]], Any], timeout: float
    ) -> Any: ...


class EvictPolicy(Protocol):
    """How the scheduler's evictions show (`core.queues.QueuePolicy` has it)."""

    evict_events_selector: str

    def evicted_by(
        self, events: Iterable[Obj], namespace: str, pods: Iterable[str], since: float
    ) -> str | None: ...

    def reclaim_notice(self, queue: str, by: str, parked: bool = False) -> str: ...


class HolderView(Protocol):
    """A watch of holder pods (`kube.watch.Cache`): what it shows, if it can be trusted."""

    objects: dict[str, Obj]
    error: str | None

    @property
    def ready(self) -> Any: ...


@dataclass
class Reconcile:
    api: ReconcileAPI
    names: SessionNames
    notebook_pod: str
    policy: EvictPolicy
    session: Callable[[], GPUSession]  # a session for healing the holder (kernels as at the start)
    release: Callable[[], Awaitable[bool]]  # the spawner's release_gpu (forgets the state too)
    notify: Callable[[str], object]  # a notice to the user, on the home page and in JupyterLab
    # The same, told once per start (the polls before and after a stop both see an eviction).
    notify_once: Callable[[str], object] | None = None
    queue: str = ""  # the scheduler queue saved at the start ("" : none)
    since: float = 0.0  # when the start began: older eviction events are not about this session
    kernels: bool = False  # the holder hosts the kernels (they go with a lost holder)
    parks: bool = False  # ... and parks them when it is deleted (an eviction too)
    on_holder_loss: str = "recreate"
    evict_event_wait: float = 5.0
    # How long a lost holder's eviction event of the device-taint controller is waited for (it
    # writes the event just before it deletes the pods).
    taint_event_wait: float = 2.0
    holders: HolderView | None = None
    log: logging.Logger | logging.LoggerAdapter[Any] = field(
        default_factory=lambda: logging.getLogger("gpusessions")
    )
    log_name: str = ""

    async def _holder_lost(self) -> bool:
        n = self.names
        return C.holder_lost(await self.api.get_pod(n.namespace, n.holder))

    async def running(self) -> int | None:
        """A running server: its holder still there, or healed; 1 when the server was stopped
        (the GPU released: KAI took it back, or `on_holder_loss` is `release`)."""
        n = self.names
        # The shared watch answers the common case (the holder is fine) without an API call;
        # only a holder the watch does not show as healthy is read, to be sure.
        h = self.holders
        trusted = h is not None and h.ready.is_set() and not h.error
        if trusted and h is not None and not C.holder_lost(h.objects.get(f"{n.namespace}/{n.holder}")):
            return None
        if not await self._holder_lost():
            return None
        if await self._taint_evicted():
            return 1
        # Evicted by KAI (reclaim, preemption): not recreated, the GPU is another team's now.
        if self.queue and await self.stopped(holder_lost=True):
            return 1
        if self.on_holder_loss == "release":
            self.log.warning(
                "%s: the GPU holder was lost; stopping and releasing, as configured", self.log_name
            )
            self.notify(HOLDER_LOST_RELEASED)
            await self.release()
            return 1
        if await self.session().heal_holder() == "recreated":
            self.log.warning("%s: the GPU holder was lost and has been recreated", self.log_name)
            self.notify(HOLDER_LOST_RECREATED + (KERNELS_LOST if self.kernels else ""))
        return None

    async def _taint_evicted(self) -> bool:
        """The holder (or notebook) was evicted for a NoExecute device taint: the user told, the
        GPU released (`on_holder_loss` `release`) or the claim kept, which the scheduler
        allocates anew, elsewhere, at the next start (a holder made now would be evicted too,
        while the notebook still holds the tainted device). True if so."""
        n = self.names
        pods = (n.holder, self.notebook_pod)

        def found(events: list[Obj]) -> bool | None:
            return True if health.taint_evicted(events, n.namespace, pods, self.since) else None

        # The holder watch may still show the pod going, with the controller's condition on it.
        seen = self.holders.objects.get(f"{n.namespace}/{n.holder}") if self.holders is not None else None
        if not health.taint_evicted_pod(seen) and not await self.api.wait_events(
            n.namespace, health.TAINT_EVICT_SELECTOR, found, self.taint_event_wait
        ):
            return False
        self.log.warning("%s: pods evicted for a NoExecute device taint", self.log_name)
        tell = self.notify_once or self.notify
        if self.on_holder_loss == "release":
            tell(health.TAINT_EVICTED_RELEASED)
            await self.release()
        else:
            tell(health.TAINT_EVICTED_KEPT)
        return True

    async def stopped(self, holder_lost: bool = False) -> bool:
        """KAI deleted this session's pods to give the GPU to another team (an Evict event on
        their PodGroups): tell the user and release the GPU (its allocation is gone anyway); or
        a NoExecute device taint evicted them (`_taint_evicted`). True if so. `holder_lost`: the
        caller has just read the holder and found it lost (and looked for a taint eviction)."""
        n = self.names
        if not holder_lost and not await self._holder_lost():
            return False  # the holder runs: whatever stopped the notebook, it was not a reclaim
        if not holder_lost and await self._taint_evicted():
            return True
        if not self.queue:
            return False  # no scheduler queue: no reclaim to look for
        pods = (n.holder, self.notebook_pod)

        def found(events: list[Obj]) -> str | None:
            return self.policy.evicted_by(events, n.namespace, pods, self.since)

        # KAI writes the event while (or just after) it deletes the pods: the events are
        # watched for it, at most `evict_event_wait` seconds.
        by = await self.api.wait_events(
            n.namespace, self.policy.evict_events_selector, found, self.evict_event_wait
        )
        if by is None:
            self.log.info("%s: holder gone, no Evict event of KAI for it", self.log_name)
            return False
        self.log.warning("%s: KAI took the GPU back for %s; releasing it", self.log_name, by)
        self.notify(self.policy.reclaim_notice(self.queue, by, self.parks))
        await self.release()
        return True
