"""The lifecycle of one server's GPU: claim, holder, allocation, release.

`GPUSession` is driven by the spawner (through `lifecycle.prepare` and `reconcile`) but
knows nothing of JupyterHub: it takes names, the GPU request and holder settings, talks to
the API through `SessionAPI`, reads the hub's shared watches through callbacks (so a
cold start makes its objects without reading first, and waits without polling), and
reports progress through a callback. The kernel host's parts are in `kernelhost.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from gpusessions.core import claims as C
from gpusessions.core import kernels as K
from gpusessions.core import labels as L
from gpusessions.core import notebook_pod as NP
from gpusessions.core import progress as P
from gpusessions.core.progress import Refused as Refused
from gpusessions.hub import agenttoken, steps
from gpusessions.hub.kernelhost import KernelHost
from gpusessions.hub.metrics import GPU_WAIT, WAITING
from gpusessions.kube.api import SessionAPI

Obj = dict[str, Any]
T = TypeVar("T")


class Admission(Protocol):
    """What a new claim needs from its scheduler queue (`hub.admission.Admission`)."""

    async def admit(self, request: C.GPURequest) -> dict[str, str]:
        """The new claim's annotations; raises `Refused` when its team may not take it."""
        ...

    def hold(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Held while a claim is admitted and created (one admission at a time)."""
        ...

    def created(self, claim: Obj) -> None:
        """The claim it admitted was created."""
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
    # The gateway's address is known but it is still starting: the notebook pod can be made,
    # and the spawn waits for the gateway (`GPUSession.kernel_host_ready`) while it starts.
    kernel_host_starting: bool = False
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
        holder_changed: Callable[[str, str, str | None, float], Awaitable[None]] | None = None,
        claim_seen: Callable[[str, str], bool | None] | None = None,
        class_seen: Callable[[str], bool | None] | None = None,
        cached: Callable[[str, str, str], Obj | None] | None = None,
        broken: Callable[[Obj], list[Obj]] | None = None,
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
        # What the shared watches show (True, False; None: they cannot tell): a claim the
        # watch does not show is created without a read first, a device class it shows is
        # not read again.
        self.claim_seen = claim_seen
        self.class_seen = class_seen
        # ("claim" or "holder", namespace, name): the object as the shared watch last saw it
        # (None: not seen, or the watch cannot tell). Waits read it instead of the API when
        # it is the very object this start made or adopted (same uid).
        self.cached = cached
        # A claim's blocking device taints (`core.health`: the driver reported its GPU broken);
        # a kept claim on a broken GPU is released and a healthy one of the same size made.
        self.broken = broken
        self._uids: dict[str, str] = {}
        self.what = request.describe()
        self.kernel_host = (
            KernelHost(
                api,
                names.namespace,
                names.holder,
                names.username,
                names.servername,
                kernels,
                emit,
                poll_interval,
                holder_changed,
                lambda: self._seen("holder"),
            )
            if kernels is not None
            else None
        )
        self._kernel_deadline = 0.0

    # -- start -----------------------------------------------------------------------
    async def ensure(self, timeout: float) -> Allocation:
        """Claim, holder and allocation; with kept kernels, the gateway's address (the holder
        has its IP): the notebook pod can be made while the gateway starts."""
        await self._check_offered()
        claim, kept = await self._ensure_claim()
        self._uids["claim"] = str(claim["metadata"].get("uid") or "")
        try:
            # Objects of a claim made just now cannot exist yet: created without a read.
            if self.kernel_host is not None:
                await self.kernel_host.ensure_secret(claim, fresh=not kept)
                if self.kernel_host.settings.network_policy:
                    await self.kernel_host.ensure_network_policy(claim, fresh=not kept)
            holder = await self._ensure_holder(fresh=not kept, claim=claim)
            self._uids["holder"] = str(holder["metadata"].get("uid") or "")
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
        if self.kernel_host is not None:
            await self._annotate_holder(holder, claim)
            now = time.monotonic()
            self._kernel_deadline = now + max(deadline - now, 30.0)
            alloc.gateway_url = await self.kernel_host.address(self._kernel_deadline - now)
            alloc.kernel_host_starting = alloc.gateway_url is not None and not self.kernel_host.is_ready
        return alloc

    async def kernel_host_ready(self) -> str | None:
        """Wait for the gateway `ensure` gave the address of (in the time `ensure` had left,
        at least 30 s): `Refused` if it does not start."""
        assert self.kernel_host is not None
        return await self.kernel_host.ready(max(self._kernel_deadline - time.monotonic(), 0.0))

    def _session_json(self, claim: Obj) -> str:
        """The session annotation (what /etc/gpusessions/session.json says) of an allocated claim."""
        n = self.n
        info = NP.session_info(
            n.claim,
            n.namespace,
            n.holder,
            n.profile,
            self.what,
            C.allocated_node(claim),
            C.allocated_devices(claim),
        )
        return json.dumps(info)

    async def _annotate_holder(self, holder: Obj, claim: Obj) -> None:
        """The holder's kernels read the session file as the notebook does: its annotation is set
        once the claim is allocated (the holder is made before; the kubelet refreshes the
        downwardAPI file). Best effort: the file says nothing until then."""
        value = self._session_json(claim)
        if (holder["metadata"].get("annotations") or {}).get(L.SESSION_ANNOTATION) == value:
            return
        if not await self.api.annotate_pod(self.n.namespace, self.n.holder, {L.SESSION_ANNOTATION: value}):
            self.log.info("holder %s/%s gone before its session annotation", self.n.namespace, self.n.holder)

    def release_wait(self) -> float:
        """How long a release may take: a holder that parks its kernels takes its grace period."""
        return 60.0 + float(K.grace_seconds(self.kernels) or 0)

    def _seen(self, kind: str) -> Obj | None:
        """The claim or holder of this start as the watch shows it (None: not, or not that one)."""
        if self.cached is None or kind not in self._uids:
            return None
        name = self.n.claim if kind == "claim" else self.n.holder
        obj = self.cached(kind, self.n.namespace, name)
        return obj if obj is not None and obj["metadata"].get("uid") == self._uids[kind] else None

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
            # Its own grace period: the kernels park, and the next start restores them.
            await self.api.delete_pod(self.n.namespace, self.n.holder)
            await self._wait_pod_gone(self.release_wait())

    async def _adopt_or_create(
        self,
        kind: str,
        what: str,
        name: str,
        reason: str,
        get: Callable[[], Awaitable[Obj | None]],
        adopt: Callable[[Obj], Awaitable[bool]],
        create: Callable[[], Awaitable[Any]],
        create_first: bool = False,
    ) -> tuple[Any, bool]:
        """`steps.adopt_or_create` for an object of this server."""
        return await steps.adopt_or_create(
            kind, what, name, self.n.namespace, reason, self._owned, get, adopt, create, create_first
        )

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
        """`steps.poll`: `attempt` until done, `interval` between calls (times `backoff`, up to
        `longest`; `pause` may return sooner), `expired`'s exception after `timeout`."""
        return await steps.poll(attempt, timeout, expired, interval, backoff, longest, pause)

    async def heal_holder(self) -> str | None:
        """The holder pod was lost while the notebook runs: make a new one for the same claim
        (the notebook still reserves it, so it is the same GPU). None if the claim is gone."""
        claim = await self.api.get_claim(self.n.namespace, self.n.claim)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return None  # gone, or going (released by the culler or an admin): nothing to heal
        if self.kernel_host is not None:
            await self.kernel_host.ensure_secret(claim)
        await self._ensure_holder(fresh=True, claim=claim)
        return "recreated"

    async def _check_offered(self) -> None:
        for dc in self.request.device_classes():
            if self.class_seen is not None and self.class_seen(dc):
                continue  # the shared watch shows it: no read
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
                self.emit("Your previous GPU is still being released (its kernels are saved first) ...")
                await self._wait_claim_gone(self.release_wait())
                return False
            if C.claim_matches(existing, self.request):
                taints = self.broken(existing) if self.broken is not None else []
                if taints:
                    self.emit(P.broken_gpu(taints))
                    self.log.warning("%s/%s is on a tainted device: %s", n.namespace, n.claim, taints)
                    await self.release(wait=True)
                    return False
                await self._relabel(existing)
                return True
            self.emit("You picked another GPU size: releasing the GPU you had ...")
            await self.release(wait=True)
            return False

        async def create() -> Obj:
            # The team's queue may refuse a new claim (its quota), or the user's session limit;
            # a kept one is never refused. One admission at a time per user and team (admit,
            # then create), so concurrent spawns cannot both pass a limit one of them fills.
            admission = self.admission
            async with admission.hold() if admission is not None else contextlib.nullcontext():
                annotations = await admission.admit(self.request) if admission is not None else {}
                body = C.build_claim(
                    n.claim,
                    n.namespace,
                    self.request,
                    n.username,
                    n.servername,
                    n.profile,
                    self.extra_labels,
                    parks=self.kernels is not None and self.kernels.park,
                )
                body["metadata"]["annotations"].update(annotations)
                self.log.info("Creating ResourceClaim %s/%s (%s)", n.namespace, n.claim, self.what)
                created = await self.api.create_claim(body)
                if admission is not None:
                    admission.created(created)
                return created

        return await self._adopt_or_create(
            "ResourceClaim",
            "GPU claim",
            n.claim,
            "claim-conflict",
            lambda: self.api.get_claim(n.namespace, n.claim),
            adopt,
            create,
            create_first=self.claim_seen is not None and self.claim_seen(n.namespace, n.claim) is False,
        )

    async def _ensure_holder(self, fresh: bool = False, claim: Obj | None = None) -> Obj:
        """The holder pod of the claim; `fresh`: most likely none exists (a new claim, a lost
        holder), so it is created first (a 409 reads and decides again). `claim`: an allocated
        claim, whose session annotation the new holder gets at once."""
        n = self.n

        async def adopt(pod: Obj) -> bool:
            ann = (pod["metadata"].get("annotations") or {}).get(L.CLAIM_ANNOTATION)
            if pod["metadata"].get("deletionTimestamp"):
                # Going (a release, a drain, KAI's reclaim): its kernels park in its grace
                # period; a forced delete would lose them. Wait for it.
                self.emit("Your previous GPU holder is stopping (its kernels are saved first) ...")
                await self._wait_pod_gone(self.release_wait())
                return False
            if C.holder_lost(pod) or ann != n.claim:
                ended = C.holder_lost(pod)  # Succeeded or Failed: nothing runs in it to park
                await self.api.delete_pod(n.namespace, n.holder, grace_seconds=0 if ended else None)
                await self._wait_pod_gone(self.release_wait())
                return False
            return True

        async def create() -> Obj:
            if self.holder.agent_token_secret:
                await agenttoken.ensure(self.api, n.namespace, self.holder.agent_token_secret)
            body = C.build_holder_pod(
                n.holder,
                n.namespace,
                n.claim,
                self.holder,
                n.username,
                n.servername,
                self.extra_labels,
                self.kernels,
                session=self._session_json(claim) if claim is not None and C.allocation(claim) else None,
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
            fresh,
        )
        return dict(pod)

    async def _wait_allocated(self, timeout: float) -> Obj:
        last_msg = P.waiting(self.what, None)  # ensure() said it already
        claim: Obj | None = None
        holder: Obj | None = None

        async def attempt() -> tuple[bool, Obj | None]:
            nonlocal claim, holder, last_msg
            # The watch's copy when it has this very claim (it is what woke us), else a read.
            claim = self._seen("claim") or await self.api.get_claim(self.n.namespace, self.n.claim)
            if claim is None:
                raise Refused(
                    "Your GPU claim was deleted while waiting (released by an admin?).",
                    reason="claim-deleted",
                )
            if C.allocation(claim) and self.n.holder in C.reserved_for(claim):
                return True, claim
            holder = self._seen("holder") or await self.api.get_pod(self.n.namespace, self.n.holder)
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
    async def release(self, wait: bool = False, park: bool = True) -> bool:
        """Delete holder and claim (404 is fine). True if anything was there.

        The holder goes with its own grace period: with kept kernels and parking on, that is
        the park budget (the kernels' namespaces are saved to the user's home in it); the
        claim stays until its last pod is gone (its delete-protection finalizer). `park`
        False (the user or server is deleted for good): at once, nothing parked."""
        had_holder = await self.api.delete_pod(self.n.namespace, self.n.holder, None if park else 0)
        had_claim = await self.api.delete_claim(self.n.namespace, self.n.claim)
        # The gateway token goes with the session (404 when it never had one).
        await self.api.delete_secret(self.n.namespace, K.secret_name(self.n.holder))
        if wait:
            await self._wait_pod_gone(self.release_wait())
            await self._wait_claim_gone(self.release_wait())
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
