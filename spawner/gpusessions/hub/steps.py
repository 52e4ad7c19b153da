"""The two building blocks of a session's steps (`session.py`, `kernelhost.py`): one object
adopted or created (a 409 decides again), and a poll until done (woken sooner by a watch)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from gpusessions.core.progress import Refused
from gpusessions.kube.api import Conflict

Obj = dict[str, Any]
T = TypeVar("T")


async def adopt_or_create(
    kind: str,
    what: str,
    name: str,
    namespace: str,
    reason: str,
    owned: Callable[[Obj], bool],
    get: Callable[[], Awaitable[Obj | None]],
    adopt: Callable[[Obj], Awaitable[bool]],
    create: Callable[[], Awaitable[Any]],
    create_first: bool = False,
) -> tuple[Any, bool]:
    """One object of a session: (object, True) when an existing one of ours is adopted
    (`adopt` says yes; when it says no it has cleared the object away, and the decision is
    made again), (created, False) when made; someone else's is refused and left alone. A 409
    on create (made meanwhile, by another hub process or a retried request) decides again.

    `create_first`: the object is most likely absent (a watch shows none, or its owner was
    just made), so the create is tried before any read: one request instead of two."""
    for _ in range(3):
        existing = None if create_first else await get()
        create_first = False
        if existing is not None:
            if not owned(existing):
                raise Refused(
                    f"A {kind} named {name} already exists in {namespace} and does not "
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


async def poll(
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
