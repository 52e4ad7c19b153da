"""Waiting on the shared watch for one object's change (the spawner's allocation wait)."""

from __future__ import annotations

import asyncio
import time

from gpusessions.kube.watch import Cache


def _cache() -> Cache:
    async def never(**_: object) -> None:
        raise AssertionError("not listed in this test")

    return Cache("resourceclaims", never, lambda: None)


def test_wait_change_wakes_on_the_objects_event_only() -> None:
    async def run() -> None:
        cache = _cache()
        cache.objects["ns/a"] = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "5"}}
        t0 = time.monotonic()
        waiter = asyncio.ensure_future(cache.wait_change("ns/a", "5", 5.0))
        for _ in range(5):  # the waiter runs up to its wait
            await asyncio.sleep(0)
        assert "ns/a" in cache._waiters
        cache._wake("ns/b")  # another claim: still waiting
        for _ in range(5):  # a woken waiter would finish within these turns of the loop
            await asyncio.sleep(0)
        assert not waiter.done()
        cache._wake("ns/a")
        await asyncio.wait_for(waiter, 1.0)
        assert time.monotonic() - t0 < 1.0
        assert cache._waiters == {}

    asyncio.run(run())


def test_wait_change_returns_at_once_for_a_newer_cached_version_and_times_out_otherwise() -> None:
    async def run() -> None:
        cache = _cache()
        cache.objects["ns/a"] = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7"}}
        t0 = time.monotonic()
        await cache.wait_change("ns/a", "5", 5.0)  # the watch already saw a later change
        assert time.monotonic() - t0 < 0.5
        t0 = time.monotonic()
        await cache.wait_change("ns/a", "7", 0.2)  # nothing new: the timeout bounds the wait
        assert 0.15 < time.monotonic() - t0 < 1.0
        assert cache._waiters == {}

    asyncio.run(run())


class _Response:
    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self._body = body.encode()

    async def read(self) -> bytes:
        return self._body


def test_a_kind_the_cluster_does_not_serve_is_absent_not_an_error() -> None:
    """A cluster without KAI answers 404 for Queues: the cache is ready, empty and `absent`
    (the picker then counts itself), with no error and no fast retry loop."""

    async def run() -> None:
        calls = []

        async def not_served(**kw: object) -> _Response:
            calls.append(kw)
            return _Response(
                404, '{"kind": "Status", "message": "the server could not find the requested resource"}'
            )

        cache = Cache("queues.scheduling.run.ai", not_served, lambda: None)
        task = asyncio.ensure_future(cache.run())
        await asyncio.wait_for(cache.ready.wait(), 1.0)
        await asyncio.sleep(0.2)
        assert cache.absent and cache.objects == {} and cache.error is None
        assert len(calls) == 1  # looked once; the next look is a minute away
        task.cancel()

    asyncio.run(run())
