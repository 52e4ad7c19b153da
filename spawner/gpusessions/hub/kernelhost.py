"""The kernel host of one GPU session (kept kernels): its gateway token (a Secret) and
NetworkPolicy, both owned by the claim, and the gateway in the holder pod, first its address
(the notebook pod can be made then) and then its readiness (the spawn waits for it while the
notebook pod starts)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from gpusessions.core import kernels as K
from gpusessions.core import labels as L
from gpusessions.core import progress as P
from gpusessions.core.progress import Refused
from gpusessions.hub import steps

Obj = dict[str, Any]

STARTING = "Starting your kernel host beside the GPU (kernels there survive restarts) ..."
NO_KERNEL_HOST = (
    "Your kept GPU session has no kernel host (it was started before kept kernels "
    "were turned on): kernels run in the notebook this time. Release the GPU to change that."
)


class KernelHost:
    def __init__(
        self,
        api: Any,
        namespace: str,
        holder: str,
        username: str,
        servername: str,
        settings: K.KernelSettings,
        emit: Callable[[str], None],
        poll_interval: float = 0.5,
        holder_changed: Callable[[str, str, str | None, float], Awaitable[None]] | None = None,
        holder_seen: Callable[[], Obj | None] | None = None,
    ):
        self.api = api
        self.namespace = namespace
        self.holder = holder
        self.username = username
        self.servername = servername
        self.settings = settings
        self.emit = emit
        self.poll = poll_interval
        # (namespace, pod, resourceVersion seen, timeout): returns when the holder changed (the
        # shared holder watch); None: read it every `poll_interval` or so.
        self.holder_changed = holder_changed
        # The holder as the watch shows it, when it is the one this start made (else None):
        # read instead of the API.
        self.holder_seen = holder_seen
        self._said = False
        self.is_ready = False  # the gateway answered (its container is ready)

    def _owned(self, obj: Obj) -> bool:
        return L.owned_by(obj.get("metadata") or {}, self.username, self.servername)

    async def ensure_secret(self, claim: Obj, fresh: bool = False) -> None:
        """The gateway's token: kept with the claim (a notebook restart must not change it).
        `fresh`: the claim was just made, so no object of it can exist yet."""
        name = self.settings.secret
        await self._ensure_claim_child(
            "Secret",
            name,
            claim,
            self.api.get_secret_metadata,
            lambda: self.api.create_secret(
                K.build_secret(name, self.namespace, K.new_token(), self.username, self.servername, claim)
            ),
            self.api.delete_secret,
            fresh,
        )

    async def ensure_network_policy(self, claim: Obj, fresh: bool = False) -> None:
        """Only this session's notebook pod may reach the gateway (owned by the claim)."""
        k = self.settings
        name = K.network_policy_name(self.holder)

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
                    name,
                    self.namespace,
                    claim,
                    k.port,
                    k.agent_port,
                    self.username,
                    self.servername,
                    k.agent_peers,
                )
            ),
            self.api.delete_network_policy,
            fresh,
        )

    async def _ensure_claim_child(
        self,
        kind: str,
        name: str,
        claim: Obj,
        get_metadata: Callable[[str, str], Awaitable[Obj | None]],
        create: Callable[[], Awaitable[Any]],
        delete: Callable[[str, str], Awaitable[bool]],
        fresh: bool,
    ) -> None:
        """An object of this session that the claim owns: adopted if ours and of this claim,
        replaced if left from an earlier claim (the collector will take that one), refused if
        someone else's."""

        async def get() -> Obj | None:
            md = await get_metadata(self.namespace, name)
            return None if md is None else {"metadata": md}

        async def adopt(existing: Obj) -> bool:
            if K.owned_by_claim(existing["metadata"], claim):
                return True
            await delete(self.namespace, name)
            return False

        await steps.adopt_or_create(
            kind,
            kind,
            name,
            self.namespace,
            "kernels-object-conflict",
            self._owned,
            get,
            adopt,
            create,
            fresh,
        )

    async def address(self, timeout: float) -> str | None:
        """The gateway's URL as soon as the holder pod has its IP (the gateway may still be
        starting: `ready` waits for it); None when the holder has no kernel host."""
        return await self._wait(timeout, ready=False)

    async def ready(self, timeout: float) -> str | None:
        """The gateway's URL once it answers (the readiness probe of its container)."""
        return await self._wait(timeout, ready=True)

    async def _wait(self, timeout: float, ready: bool) -> str | None:
        port = self.settings.port
        holder: Obj | None = None

        async def attempt() -> tuple[bool, str | None]:
            nonlocal holder
            holder = (self.holder_seen and self.holder_seen()) or await self.api.get_pod(
                self.namespace, self.holder
            )
            if holder is None:
                raise Refused(
                    "Your GPU holder pod disappeared while starting (released by an admin?).",
                    reason="holder-gone",
                )
            if not K.has_gateway(holder):
                # A holder kept from before persist_kernels was on: it has no kernel host.
                self.emit(NO_KERNEL_HOST)
                return True, None
            url = K.gateway_url(holder, port)
            if url:
                self.is_ready = True
                return True, url
            if not self._said:
                self.emit(STARTING)
                self._said = True
            address = K.gateway_address(holder, port)
            return (True, address) if address and not ready else (False, None)

        async def expired() -> Exception:
            return Refused(P.gateway_timeout(timeout, holder), reason="kernels-timeout")

        async def pause(interval: float) -> None:
            if self.holder_changed is None:
                await asyncio.sleep(interval)
                return
            # Woken by the watch when the holder changes; the interval bounds a missed event.
            seen = ((holder or {}).get("metadata") or {}).get("resourceVersion")
            await self.holder_changed(self.namespace, self.holder, seen, interval)

        # The kernel host takes seconds, not minutes: read often (the wait used to back off to
        # 2 s and added about 1.5 s to a cold start); with the watch, only when the pod changed.
        longest = 0.5 if self.holder_changed is None else 2.0
        return await steps.poll(attempt, timeout, expired, min(self.poll, 0.25), 1.2, longest, pause)
