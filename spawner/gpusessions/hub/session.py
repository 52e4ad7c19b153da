"""The lifecycle of one server's GPU: claim, holder, allocation, release.

`GPUSession` is driven by the spawner but knows nothing of JupyterHub: it
takes names, the GPU request and holder settings, talks to the API through
`SessionAPI`, and reports progress through a callback.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpusessions.core import claims as C
from gpusessions.core import kernels as K
from gpusessions.core import labels as L
from gpusessions.core import progress as P
from gpusessions.core.progress import Refused as Refused
from gpusessions.hub.metrics import GPU_WAIT, WAITING
from gpusessions.kube.api import Conflict, SessionAPI

Obj = dict[str, Any]
T = TypeVar("T")


class Admission(Protocol):
    """What a new claim needs from its scheduler queue (`hub.admission.Admission`)."""

    async def admit(self, request: C.GPURequest) -> dict[str, str]:
        """The new claim's annotations; raises `Refused` when its team may not take it."""
        ...


@dataclass(frozen=True)
class SessionNames:
    namespace: str
    claim: str
    holder: str
    username: str
    servername: str
    profile: str = ""


@dataclass
class Allocation:
    claim: Obj
    kept: bool
    gateway_url: str | None = None
    node: str | None = field(init=False)
    devices: list[tuple[str, str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.node = C.allocated_node(self.claim)
        self.devices = C.allocated_devices(self.claim)


class GPUSession:
    def __init__(
        self,
        api: SessionAPI,
        names: SessionNames,
        request: C.GPURequest,
        holder: C.HolderSettings,
        emit: Callable[[str], None],
        log: logging.Logger | logging.LoggerAdapter[Any] | None = None,
        extra_labels: dict[str, str] | None = None,
        poll_interval: float = 0.5,
        kernels: K.KernelSettings | None = None,
        admission: Admission | None = None,
        claim_changed: Callable[[str, str, str | None, float], Awaitable[None]] | None = None,
    ):
        self.api = api
        self.n = names
        self.request = request
        self.holder = holder
        self.emit = emit
        self.log = log or logging.getLogger("gpusessions")
        self.extra_labels = extra_labels or {}
        self.poll = poll_interval
        self.kernels = kernels
        # Asked before a claim is created (not when a kept one is adopted): the team's quota.
        self.admission = admission
        # (namespace, claim, resourceVersion seen, timeout): returns when the claim changed
        # (a watch), so waiting for the allocation needs no polling; None: poll with back-off.
        self.claim_changed = claim_changed
        self.what = request.describe()

    # -- start -----------------------------------------------------------------------
    async def ensure(self, timeout: float) -> Allocation:
        await self._check_offered()
        claim, kept = await self._ensure_claim()
        try:
            if self.kernels is not None:
                await self._ensure_secret(claim)
                if self.kernels.network_policy:
                    await self._ensure_network_policy(claim)
            await self._ensure_holder()
        except Refused:
            if not kept:
                # The claim was made for this start: withdraw it (its secret and policy go with
                # it), but leave the object in the way alone, it is not ours.
                await self.api.delete_claim(self.n.namespace, self.n.claim)
            raise
        deadline = time.monotonic() + timeout
        profile = self.n.profile
        if kept and C.allocation(claim):
            self.emit(P.kept(self.what, claim))
            alloc = Allocation(claim, kept=True)
            GPU_WAIT.labels(profile, "kept").observe(0)
        else:
            self.emit(P.waiting(self.what, None))
            started, outcome = time.monotonic(), "timeout"
            WAITING.labels(profile).inc()
            try:
                claim = await self._wait_allocated(timeout)
                outcome = "allocated"
            except Refused:
                outcome = "refused"
                raise
            finally:
                WAITING.labels(profile).dec()
                GPU_WAIT.labels(profile, outcome).observe(time.monotonic() - started)
            self.emit(P.allocated(self.what, claim))
            alloc = Allocation(claim, kept=False)
        if self.kernels is not None:
            alloc.gateway_url = await self._wait_gateway(max(deadline - time.monotonic(), 30.0))
        return alloc

    async def _relabel(self, claim: Obj) -> None:
        """A kept claim follows the session's labels (the user's queue may have changed):
        KAI blocks a pod whose standalone claim lacks the pod's queue label."""
        have = claim["metadata"].get("labels") or {}
        missing = {k: v for k, v in self.extra_labels.items() if have.get(k) != v}
        if not missing:
            return
        self.log.info("Relabelling claim %s/%s: %s", self.n.namespace, self.n.claim, missing)
        if not await self.api.label_claim(self.n.namespace, self.n.claim, dict(missing)):
            raise Refused("Your GPU claim was deleted while starting; try again.", reason="claim-deleted")
        claim["metadata"]["labels"] = {**have, **missing}
        holder = await self.api.get_pod(self.n.namespace, self.n.holder)
        if holder is not None and any(
            (holder["metadata"].get("labels") or {}).get(k) != v for k, v in missing.items()
        ):
            # Pod labels of a running holder could be patched, but its scheduler and queue were
            # fixed when it was scheduled: a new holder takes the new queue.
            self.emit("Your team's queue changed: moving your GPU session to it ...")
            await self.api.delete_pod(self.n.namespace, self.n.holder, grace_seconds=0)
            await self._wait_pod_gone(60)

    async def _ensure_secret(self, claim: Obj) -> None:
        """The gateway's token: kept with the claim (a notebook restart must not change it)."""
        assert self.kernels is not None
        n, name = self.n, self.kernels.secret
        await self._ensure_claim_child(
            "Secret",
            name,
            claim,
            self.api.get_secret_metadata,
            lambda: self.api.create_secret(
                K.build_secret(name, n.namespace, K.new_token(), n.username, n.servername, claim)
            ),
            self.api.delete_secret,
        )

    async def _ensure_network_policy(self, claim: Obj) -> None:
        """Only this session's notebook pod may reach the gateway (owned by the claim)."""
        assert self.kernels is not None
        k, n = self.kernels, self.n
        name = K.network_policy_name(n.holder)

        async def metadata(namespace: str, name: str) -> Obj | None:
            obj = await self.api.get_network_policy(namespace, name)
            return None if obj is None else obj["metadata"]

        await self._ensure_claim_child(
            "NetworkPolicy",
            name,
            claim,
            metadata,
            lambda: self.api.create_network_policy(
                K.build_network_policy(
                    name, n.namespace, claim, k.port, k.agent_port, n.username, n.servername
                )
            ),
            self.api.delete_network_policy,
        )

    async def _ensure_claim_child(
        self,
        kind: str,
        name: str,
        claim: Obj,
        get_metadata: Callable[[str, str], Awaitable[Obj | None]],
        create: Callable[[], Awaitable[Any]],
        delete: Callable[[str, str], Awaitable[bool]],
    ) -> None:
        """An object of this session that the claim owns: adopted if ours and of this claim,
        replaced if left from an earlier claim (the collector will take that one), refused if
        someone else's."""

        async def get() -> Obj | None:
            md = await get_metadata(self.n.namespace, name)
            return None if md is None else {"metadata": md}

        async def adopt(existing: Obj) -> bool:
            if K.owned_by_claim(existing["metadata"], claim):
                return True
            await delete(self.n.namespace, name)
            return False

        await self._adopt_or_create(kind, kind, name, "kernels-object-conflict", get, adopt, create)

    async def _adopt_or_create(
        self,
        kind: str,
        what: str,
        name: str,
        reason: str,
        get: Callable[[], Awaitable[Obj | None]],
        adopt: Callable[[Obj], Awaitable[bool]],
        create: Callable[[], Awaitable[Any]],
    ) -> tuple[Any, bool]:
        """One object of this session: (object, True) when an existing one of ours is adopted
        (`adopt` says yes; when it says no it has cleared the object away, and the decision is
        made again), (created, False) when made; someone else's is refused and left alone. A 409
        on create (made meanwhile, by another hub process or a retried request) decides again."""
        for _ in range(3):
            existing = await get()
            if existing is not None:
                if not self._owned(existing):
                    raise Refused(
                        f"A {kind} named {name} already exists in {self.n.namespace} and does not "
                        "belong to this server; nothing was changed. Ask your admin.",
                        reason=reason,
                    )
                if await adopt(existing):
                    return existing, True
                continue
            try:
                return await create(), False
            except Conflict:
                continue
        raise Refused(f"Could not create the {what} {name}: it keeps changing.", reason=reason)

    async def _poll(
        self,
        attempt: Callable[[], Awaitable[tuple[bool, T]]],
        timeout: float,
        expired: Callable[[], Awaitable[Exception]],
        interval: float,
        backoff: float = 1.0,
        longest: float = 0.0,
        pause: Callable[[float], Awaitable[None]] | None = None,
    ) -> T:
        """Call `attempt` until it says done (and what it got), waiting `interval` between
        calls (times `backoff`, up to `longest`; `pause` may return sooner, a watch); after
        `timeout` seconds raise what `expired` returns."""
        deadline = time.monotonic() + timeout
        while True:
            done, value = await attempt()
            if done:
                return value
            if time.monotonic() >= deadline:
                raise await expired()
            await (pause or asyncio.sleep)(interval)
            interval *= backoff
            if longest:
                interval = min(interval, longest)

    async def _wait_gateway(self, timeout: float) -> str | None:
        """The holder's kernel gateway URL, once it answers (its readiness probe)."""
        assert self.kernels is not None
        port = self.kernels.port
        said = False
        holder: Obj | None = None

        async def attempt() -> tuple[bool, str | None]:
            nonlocal said, holder
            holder = await self.api.get_pod(self.n.namespace, self.n.holder)
            if holder is None:
                raise Refused(
                    "Your GPU holder pod disappeared while starting (released by an admin?).",
                    reason="holder-gone",
                )
            if not K.has_gateway(holder):
                # A holder kept from before persist_kernels was on: it has no kernel host.
                self.emit(
                    "Your kept GPU session has no kernel host (it was started before kept kernels "
                    "were turned on): kernels run in the notebook this time. Release the GPU to change that."
                )
                return True, None
            url = K.gateway_url(holder, port)
            if url:
                return True, url
            if not said:
                self.emit("Starting your kernel host beside the GPU (kernels there survive restarts) ...")
                said = True
            return False, None

        async def expired() -> Exception:
            return Refused(P.gateway_timeout(timeout, holder), reason="kernels-timeout")

        # The kernel host takes seconds, not minutes: read often (the wait used to back
        # off to 2 s and added about 1.5 s to a cold start).
        return await self._poll(attempt, timeout, expired, min(self.poll, 0.25), 1.2, 0.5)

    async def heal_holder(self) -> str | None:
        """The holder pod was lost while the notebook runs: make a new one for the same claim
        (the notebook still reserves it, so it is the same GPU). None if the claim is gone."""
        claim = await self.api.get_claim(self.n.namespace, self.n.claim)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return None  # gone, or going (released by the culler or an admin): nothing to heal
        if self.kernels is not None:
            await self._ensure_secret(claim)
        await self._ensure_holder()
        return "recreated"

    async def _check_offered(self) -> None:
        for dc in self.request.device_classes():
            if await self.api.get_device_class(dc) is None:
                raise Refused(
                    f"The GPU size '{self.what}' is not offered on this cluster "
                    f"(DeviceClass '{dc}' does not exist). Ask your admin, or pick another size.",
                    reason="gpu-size-unknown",
                )

    def _owned(self, obj: Obj) -> bool:
        return L.owned_by(obj.get("metadata") or {}, self.n.username, self.n.servername)

    async def _ensure_claim(self) -> tuple[Obj, bool]:
        """The claim for this request: adopted if ours and matching, else (re)created."""
        n = self.n

        async def adopt(existing: Obj) -> bool:
            if existing["metadata"].get("deletionTimestamp"):
                self.emit("Your previous GPU is still being released ...")
                await self._wait_claim_gone(60)
                return False
            if C.claim_matches(existing, self.request):
                await self._relabel(existing)
                return True
            self.emit("You picked another GPU size: releasing the GPU you had ...")
            await self.release(wait=True)
            return False

        async def create() -> Obj:
            # The team's queue may refuse a new claim (its quota); a kept one is never refused.
            annotations = await self.admission.admit(self.request) if self.admission is not None else {}
            body = C.build_claim(
                n.claim, n.namespace, self.request, n.username, n.servername, n.profile, self.extra_labels
            )
            body["metadata"]["annotations"].update(annotations)
            self.log.info("Creating ResourceClaim %s/%s (%s)", n.namespace, n.claim, self.what)
            return await self.api.create_claim(body)

        return await self._adopt_or_create(
            "ResourceClaim",
            "GPU claim",
            n.claim,
            "claim-conflict",
            lambda: self.api.get_claim(n.namespace, n.claim),
            adopt,
            create,
        )

    async def _ensure_holder(self) -> Obj:
        n = self.n

        async def adopt(pod: Obj) -> bool:
            ann = (pod["metadata"].get("annotations") or {}).get(L.CLAIM_ANNOTATION)
            if C.holder_lost(pod) or ann != n.claim:
                await self.api.delete_pod(n.namespace, n.holder, grace_seconds=0)
                await self._wait_pod_gone(60)
                return False
            return True

        async def create() -> Obj:
            body = C.build_holder_pod(
                n.holder,
                n.namespace,
                n.claim,
                self.holder,
                n.username,
                n.servername,
                self.extra_labels,
                self.kernels,
            )
            self.log.info("Creating holder pod %s/%s", n.namespace, n.holder)
            return await self.api.create_pod(body)

        pod, _ = await self._adopt_or_create(
            "pod",
            "holder pod",
            n.holder,
            "holder-conflict",
            lambda: self.api.get_pod(n.namespace, n.holder),
            adopt,
            create,
        )
        return dict(pod)

    async def _wait_allocated(self, timeout: float) -> Obj:
        last_msg = P.waiting(self.what, None)  # ensure() said it already
        claim: Obj | None = None
        holder: Obj | None = None

        async def attempt() -> tuple[bool, Obj | None]:
            nonlocal claim, holder, last_msg
            claim = await self.api.get_claim(self.n.namespace, self.n.claim)
            if claim is None:
                raise Refused(
                    "Your GPU claim was deleted while waiting (released by an admin?).",
                    reason="claim-deleted",
                )
            if C.allocation(claim) and self.n.holder in C.reserved_for(claim):
                return True, claim
            holder = await self.api.get_pod(self.n.namespace, self.n.holder)
            msg = P.waiting(self.what, holder)
            if msg != last_msg:
                self.emit(msg)
                last_msg = msg
            return False, None

        async def expired() -> Exception:
            text = P.timed_out(self.what, timeout, holder, claim)
            self.log.info("GPU allocation timed out for %s: %s", self.n.claim, text)
            await self.release(wait=False)
            return Refused(text, reason="gpu-timeout")

        async def pause(interval: float) -> None:
            if self.claim_changed is None:
                await asyncio.sleep(interval)
                return
            # Woken by the watch when the claim changes; the back-off only bounds a missed event.
            seen = ((claim or {}).get("metadata") or {}).get("resourceVersion")
            await self.claim_changed(self.n.namespace, self.n.claim, seen, interval)

        # Back off while waiting (up to 5 s between reads), so a long wait costs tens of
        # API reads, not one pair every half second.
        allocated = await self._poll(attempt, timeout, expired, self.poll, 1.5, max(self.poll, 5.0), pause)
        assert allocated is not None
        return allocated

    # -- release -----------------------------------------------------------------------
    async def release(self, wait: bool = False) -> bool:
        """Delete holder and claim (404 is fine). True if anything was there."""
        had_holder = await self.api.delete_pod(self.n.namespace, self.n.holder, grace_seconds=0)
        had_claim = await self.api.delete_claim(self.n.namespace, self.n.claim)
        # The gateway token goes with the session (404 when it never had one).
        await self.api.delete_secret(self.n.namespace, K.secret_name(self.n.holder))
        if wait:
            await self._wait_pod_gone(60)
            await self._wait_claim_gone(60)
        return had_holder or had_claim

    async def release_if_ours(self) -> bool:
        """Release a claim of this server's name that is ours though the hub's state does not
        know it (a hub that died mid-spawn). One GET when there is none."""
        claim = await self.api.get_claim(self.n.namespace, self.n.claim)
        if claim is None or not self._owned(claim):
            return False
        return await self.release(wait=False)

    async def _wait_claim_gone(self, timeout: float) -> None:
        await self._wait_gone(
            lambda: self.api.get_claim(self.n.namespace, self.n.claim),
            timeout,
            f"Your previous GPU claim {self.n.claim} is still being released; try again soon.",
            "claim-releasing",
        )

    async def _wait_pod_gone(self, timeout: float) -> None:
        await self._wait_gone(
            lambda: self.api.get_pod(self.n.namespace, self.n.holder),
            timeout,
            f"The holder pod {self.n.holder} is still stopping; try again soon.",
            "holder-stopping",
        )

    async def _wait_gone(
        self, get: Callable[[], Awaitable[Obj | None]], timeout: float, message: str, reason: str
    ) -> None:
        async def attempt() -> tuple[bool, None]:
            return await get() is None, None

        async def expired() -> Exception:
            return Refused(message, reason=reason)

        await self._poll(attempt, timeout, expired, self.poll)
