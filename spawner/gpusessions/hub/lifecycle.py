"""A server's GPU session at its start and at its end, in plain objects: what the spawner's
`get_pod_manifest` asks before the notebook pod (`prepare`: the size checked against the
cluster, a CPU profile's leftover GPU released, claim, holder and allocation through
`GPUSession`, the state to save), and what `delete_forever` removes besides the GPU (the
user's notebook jobs).

Nothing here knows JupyterHub or KubeSpawner: the spawner passes its request, its session
(`GPUSession`), its saved state and the settings to keep, and turns a `Refused` into the
spawn page's refusal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from jupyterhub.utils import can_connect, exponential_backoff

from gpusessions.core import claims as C
from gpusessions.core.availability import size_figures, size_problems
from gpusessions.core.progress import Refused
from gpusessions.hub.jobcleanup import delete_user_jobs as delete_jobs
from gpusessions.hub.jobsettings import NotebookJobDefinitions, NotebookJobs
from gpusessions.hub.session import Allocation, GPUSession
from gpusessions.kube.api import KubeError

Log = logging.Logger | logging.LoggerAdapter[Any]
T = TypeVar("T")


class ClusterPicture(Protocol):
    """The hub's shared view of slices, claims and device classes (`kube.watch.ClusterView`)."""

    figures: Any

    @property
    def errors(self) -> list[str]: ...

    async def wait_ready(self, timeout: float = 10) -> bool: ...

    def derived(self) -> tuple[Any, set[Any], dict[Any, Any], dict[str, Any]]: ...


@dataclass
class Prepared:
    """What a start's GPU phase gives the notebook pod: the allocation (None: no GPU) and the
    state the spawner saves (empty: no GPU kept)."""

    alloc: Allocation | None
    state: dict[str, str]


async def refuse_if_size_missing(request: C.GPURequest, view: Callable[[], ClusterPicture], log: Log) -> None:
    """Refuse at once when no device of this size exists at all (not merely all in use), or
    when the scheduler would fail the claim; say nothing without a reliable picture."""
    try:
        v = view()
        if not await v.wait_ready(timeout=5) or v.errors:
            return  # no reliable picture: let the scheduler decide
        inv, allocated, left, classes = v.derived()
    except Exception as e:  # the picture is an optimisation, never a reason to fail
        log.warning("No cluster view for the size check: %s", e)
        return
    if any(dc not in classes for dc in request.device_classes()):
        return  # GPUSession explains a missing DeviceClass
    f = size_figures(request, inv, allocated, classes, left, v.figures.by_shape)
    if f.state == "not-offered":
        raise Refused(
            f"No GPU of this size ({request.describe()}) exists on this cluster, so waiting "
            "would not help. Pick another size or ask your admin.",
            reason="gpu-size-missing",
        )
    problems = size_problems(request, inv, classes)
    if problems:
        # A claim the scheduler would fail (or could place on a GPU cut into MIG devices):
        # say why now instead of letting the user wait.
        raise Refused(
            f"This GPU size cannot be used on this cluster: {problems[0]}. Ask your admin.",
            reason="gpu-size-broken",
        )


async def release_for_cpu_profile(
    session: GPUSession, state: dict[str, str], emit: Callable[[str], None], log: Log, who: str
) -> None:
    """A server that switches to a CPU-only profile gives back the GPU it kept (also one the
    hub's state lost: a hub that died after creating the claim never saved it)."""
    if not state:
        try:
            if await session.release_if_ours():
                emit("You picked a profile without a GPU: released a GPU left from an earlier start.")
        except KubeError as e:  # best effort: the culler releases orphans anyway
            log.warning("Could not look for a GPU left by an earlier start of %s: %s", who, e)
        return
    emit("You picked a profile without a GPU: releasing the GPU you had ...")
    await session.release(wait=False)


async def prepare(
    request: C.GPURequest,
    session: Callable[[C.GPURequest | None], GPUSession],
    state: dict[str, str],
    *,
    timeout: float,
    queue: str | None,
    kept_settings: dict[str, Any],
    view: Callable[[], ClusterPicture],
    emit: Callable[[str], None],
    log: Log,
    who: str = "",
) -> Prepared:
    """A start's GPU phase, before the notebook pod: `Refused` for what the user is told.

    `session(request)` makes the session of this request (`session(None)`: of no request, to
    release); `state` is the one saved at the last start ({} for none)."""
    if not request.wants_gpu:
        await release_for_cpu_profile(session(None), state, emit, log, who)
        return Prepared(None, {})
    await refuse_if_size_missing(request, view, log)
    s = session(request)
    try:
        alloc = await s.ensure(timeout)
    except KubeError as e:
        raise Refused(f"The cluster refused the GPU request: {e.message}", reason="gpu-api-error") from None
    n = s.n
    saved = {
        "namespace": n.namespace,
        "claim": n.claim,
        "holder": n.holder,
        "request_hash": request.hash(),
        "profile": n.profile,
        "describe": request.describe(),
        "kernels": "1" if s.kernels is not None else "",
        # ... and they park when the holder is deleted (a reclaim's notice says so).
        "park": "1" if s.kernels is not None and s.kernels.park else "",
        "queue": queue or "",
        # When this start began: older Evict events of KAI are not about this session.
        "since": f"{time.time():.0f}",
        # default=str: a toleration given as a V1Toleration rather than a dict is kept
        # as text (and ignored after a restart) instead of failing the start.
        "settings": json.dumps(kept_settings, sort_keys=True, default=str),
    }
    return Prepared(alloc, saved)


async def with_kernel_host(
    started: Awaitable[T], kernel_host: Callable[[], asyncio.Future[str | None] | None]
) -> T:
    """A start (`started`: the notebook pod's), then the kernel host that was still starting
    when the notebook pod was made (`kernel_host()` gives its wait, None when there is none):
    the two start side by side and the spawn is done when both are. `Refused` when the kernel
    host does not start; a failed start cancels the kernel host's wait."""
    try:
        result = await started
    except BaseException:
        host = kernel_host()
        if host is not None:
            host.cancel()
        raise
    host = kernel_host()
    if host is not None:
        try:
            await host
        except KubeError as e:
            raise Refused(
                f"The cluster refused the GPU request: {e.message}", reason="gpu-api-error"
            ) from None
    return result


async def notebook_listening(url: Any, timeout: float, interval: float) -> None:
    """Until the notebook server at `url` (KubeSpawner's start result: a URL, or JupyterHub's
    older `(ip, port)`) accepts a connection, looked at every `interval` seconds (jupyterhub's
    backoff, capped there) for `timeout` seconds (`interval` 0, or no address: not looked for).
    `Refused` when it does not listen in time: its pod runs but the server inside does not
    answer."""
    if isinstance(url, tuple) and len(url) == 2:
        host, port = str(url[0]), int(url[1])
    elif isinstance(url, str) and url:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
    else:
        return
    if interval <= 0 or not host:
        return
    try:
        await exponential_backoff(
            lambda: can_connect(host, port),
            "",
            start_wait=interval,
            scale_factor=1,
            max_wait=interval,
            timeout=timeout,
        )
    except TimeoutError:
        raise Refused(
            f"Your notebook server's pod started, but the server in it did not answer within "
            f"{timeout:g} s. Its log (the admin page, or kubectl logs) says why; start again.",
            reason="notebook-not-listening",
        ) from None


async def delete_user_jobs(config: Any, namespace: str, user: str, log: Log) -> None:
    """The user is deleted (with their default server): so are their notebook jobs, when the
    hub runs them (`c.NotebookJobs`), and their job definitions."""
    if NotebookJobs(config=config).enabled:
        definitions = NotebookJobDefinitions(config=config).enabled
        await delete_jobs(namespace, user, log, definitions)
