"""The one place where gpusessions talks to the Kubernetes API for a session.

Thin async wrappers over kubernetes_asyncio (the client KubeSpawner uses) that
take and return plain dicts, give every call a timeout, and turn "not found"
into None and "already exists" into `Conflict`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
from jupyterhub.utils import exponential_backoff
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client import ApiException
from kubespawner.clients import shared_client

Obj = dict[str, Any]
T = TypeVar("T")
log = logging.getLogger("gpusessions")


class Conflict(Exception):
    """The object already exists (409)."""


class KubeError(Exception):
    """Any other API error, with the apiserver's message."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


def _message(e: ApiException) -> str:
    try:
        return str(json.loads(e.body or b"{}").get("message", e.reason))
    except (TypeError, ValueError, AttributeError):
        return str(e.reason)


class SessionAPI:
    """API calls for claims, holder pods and device classes (one per spawner)."""

    # Answers that mean "the API is restarting or busy": try again.
    RETRY_STATUS = frozenset({429, 500, 502, 503, 504})

    def __init__(self, timeout: float = 10.0, retry_timeout: float = 30.0):
        self.retry_timeout = retry_timeout
        self.core = shared_client("CoreV1Api")
        self.resource = shared_client("ResourceV1Api")
        self.networking = shared_client("NetworkingV1Api")
        self.timeout = timeout

    def _dict(self, model: Any) -> Obj:
        out = self.core.api_client.sanitize_for_serialization(model)
        assert isinstance(out, dict)
        return out

    @classmethod
    def of(cls, spawner: Any) -> SessionAPI:
        """The API as a spawner's settings make it: KubeSpawner's `k8s_api_request_timeout` for
        each try, `k8s_api_request_retry_timeout` for all the tries of one call."""
        return cls(
            timeout=float(getattr(spawner, "k8s_api_request_timeout", 10.0)),
            retry_timeout=float(getattr(spawner, "k8s_api_request_retry_timeout", 30.0)),
        )

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One API call, each try given `timeout` seconds, tried again with
        `jupyterhub.utils.exponential_backoff` (as KubeSpawner does) while the API is away (a
        restart, etcd busy: no answer, 429 or 5xx) for up to `retry_timeout` seconds.

        A create retried after a lost answer may find its own object (409): callers adopt it."""
        answer: list[Any] = []
        last: list[tuple[int, str]] = []

        async def attempt() -> bool:
            try:
                answer.append(await asyncio.wait_for(fn(*args, **kwargs), self.timeout))
                return True
            except ApiException as e:
                if e.status == 404:
                    answer.append(None)
                    return True
                if e.status == 409:
                    raise Conflict(_message(e)) from None
                if e.status not in self.RETRY_STATUS:
                    raise KubeError(e.status, _message(e)) from None
                last.append((e.status, _message(e)))
            except (TimeoutError, aiohttp.ClientError, OSError) as e:
                last.append((0, str(e) or type(e).__name__))
            log.info("Kubernetes API unavailable (%s); trying again", last[-1][1])
            return False

        try:
            await exponential_backoff(
                attempt, "the Kubernetes API did not answer", max_wait=4.0, timeout=self.retry_timeout
            )
        except TimeoutError:
            status, problem = last[-1] if last else (0, "no answer")
            if status:
                raise KubeError(status, problem) from None
            raise KubeError(
                503,
                f"the Kubernetes API did not answer for {self.retry_timeout:.0f} s ({problem}); "
                "try again in a minute",
            ) from None
        return answer[-1]

    # -- claims ----------------------------------------------------------------
    async def get_claim(self, namespace: str, name: str) -> Obj | None:
        r = await self._call(self.resource.read_namespaced_resource_claim, name, namespace)
        return self._dict(r) if r is not None else None

    async def create_claim(self, body: Obj) -> Obj:
        ns = body["metadata"]["namespace"]
        return self._dict(await self._call(self.resource.create_namespaced_resource_claim, ns, body))

    async def delete_claim(self, namespace: str, name: str) -> bool:
        """Delete; False if it was already gone."""
        r = await self._call(self.resource.delete_namespaced_resource_claim, name, namespace)
        return r is not None

    async def annotate_claim(self, namespace: str, name: str, values: dict[str, str | None]) -> bool:
        """Merge-patch the claim's annotations (None removes one); False if the claim is gone."""
        r = await self._call(
            self.resource.patch_namespaced_resource_claim,
            name,
            namespace,
            {"metadata": {"annotations": values}},
            _content_type="application/merge-patch+json",
        )
        return r is not None

    async def label_claim(self, namespace: str, name: str, labels: dict[str, str | None]) -> bool:
        """Merge-patch the claim's labels; False if the claim is gone."""
        r = await self._call(
            self.resource.patch_namespaced_resource_claim,
            name,
            namespace,
            {"metadata": {"labels": labels}},
            _content_type="application/merge-patch+json",
        )
        return r is not None

    async def list_claims(self, namespace: str, label_selector: str) -> list[Obj]:
        r = await self._call(
            self.resource.list_namespaced_resource_claim, namespace, label_selector=label_selector
        )
        return [self._dict(i) for i in (r.items if r is not None else [])]

    async def get_device_class(self, name: str) -> Obj | None:
        r = await self._call(self.resource.read_device_class, name)
        return self._dict(r) if r is not None else None

    # -- pods ------------------------------------------------------------------
    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        r = await self._call(self.core.read_namespaced_pod, name, namespace)
        return self._dict(r) if r is not None else None

    async def create_pod(self, body: Obj) -> Obj:
        ns = body["metadata"]["namespace"]
        return self._dict(await self._call(self.core.create_namespaced_pod, ns, body))

    async def annotate_pod(self, namespace: str, name: str, values: dict[str, str | None]) -> bool:
        """Merge-patch the pod's annotations (the holder's session file); False if it is gone."""
        r = await self._call(
            self.core.patch_namespaced_pod,
            name,
            namespace,
            {"metadata": {"annotations": values}},
            _content_type="application/merge-patch+json",
        )
        return r is not None

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> bool:
        """Delete; `grace_seconds` None: the pod's own terminationGracePeriodSeconds (a holder
        parks its kernels in it). False if it was already gone."""
        kwargs: dict[str, Any] = {}
        if grace_seconds is not None:
            kwargs["grace_period_seconds"] = grace_seconds
        r = await self._call(self.core.delete_namespaced_pod, name, namespace, **kwargs)
        return r is not None

    # -- secrets (the kernel gateway's token) --------------------------------------
    async def get_secret_metadata(self, namespace: str, name: str) -> Obj | None:
        """The Secret's metadata only: the hub never needs the value."""
        r = await self._call(self.core.read_namespaced_secret, name, namespace)
        return self._dict(r.metadata) if r is not None else None

    async def secret_value(self, namespace: str, name: str, key: str) -> str | None:
        """One key of a Secret, decoded (the culler's agent token); None when the Secret or the
        key is missing or the value is not UTF-8 base64."""
        r = await self._call(self.core.read_namespaced_secret, name, namespace)
        value = ((r.data or {}) if r is not None else {}).get(key)
        try:
            return base64.b64decode(value).decode() if value else None
        except ValueError:
            return None

    async def create_secret(self, body: Obj) -> None:
        await self._call(self.core.create_namespaced_secret, body["metadata"]["namespace"], body)

    async def delete_secret(self, namespace: str, name: str) -> bool:
        r = await self._call(self.core.delete_namespaced_secret, name, namespace)
        return r is not None

    # -- network policies (who may reach the kernel gateway) ------------------------
    async def get_network_policy(self, namespace: str, name: str) -> Obj | None:
        r = await self._call(self.networking.read_namespaced_network_policy, name, namespace)
        return self._dict(r) if r is not None else None

    async def create_network_policy(self, body: Obj) -> None:
        ns = body["metadata"]["namespace"]
        await self._call(self.networking.create_namespaced_network_policy, ns, body)

    async def delete_network_policy(self, namespace: str, name: str) -> bool:
        r = await self._call(self.networking.delete_namespaced_network_policy, name, namespace)
        return r is not None

    async def events(self, namespace: str, field_selector: str) -> list[Obj]:
        r = await self._call(self.core.list_namespaced_event, namespace, field_selector=field_selector)
        return [self._dict(i) for i in (r.items if r is not None else [])]

    async def wait_events(
        self, namespace: str, field_selector: str, found: Callable[[list[Obj]], T | None], timeout: float
    ) -> T | None:
        """The events `field_selector` selects in `namespace`, listed and then watched for at
        most `timeout` seconds, until `found(events)` gives an answer; that answer, or None.

        A witness, not a sleep: the answer comes as soon as its event is written."""
        deadline = time.monotonic() + timeout
        r = await self._call(self.core.list_namespaced_event, namespace, field_selector=field_selector)
        events = [self._dict(i) for i in (r.items if r is not None else [])]
        answer = found(events)
        if answer is not None or timeout <= 0:
            return answer
        rv = r.metadata.resource_version if r is not None else None
        left = deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(left, 0.0)):
                w = k8s_watch.Watch()
                async with w.stream(
                    self.core.list_namespaced_event,
                    namespace,
                    field_selector=field_selector,
                    resource_version=rv,
                    timeout_seconds=max(1, math.ceil(left)),
                ) as stream:
                    async for event in stream:
                        if event["type"] == "ERROR":
                            break
                        if event["type"] in ("ADDED", "MODIFIED"):
                            events.append(event["raw_object"])
                            answer = found(events)
                            if answer is not None:
                                return answer
        except TimeoutError:
            return None
        except (ApiException, aiohttp.ClientError, OSError) as e:
            log.info("watching events in %s failed (%s); listing them again", namespace, e)
        # The watch ended early (an error, or the apiserver closed it): list once more at the end.
        await asyncio.sleep(max(deadline - time.monotonic(), 0.0))
        r = await self._call(self.core.list_namespaced_event, namespace, field_selector=field_selector)
        return found([self._dict(i) for i in (r.items if r is not None else [])])

    async def pod_events(self, namespace: str, name: str) -> list[Obj]:
        sel = f"involvedObject.kind=Pod,involvedObject.name={name}"
        r = await self._call(self.core.list_namespaced_event, namespace, field_selector=sel)
        return [self._dict(i) for i in (r.items if r is not None else [])]
