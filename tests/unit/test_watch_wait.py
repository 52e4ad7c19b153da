"""Waiting on the shared watch for one object's change (the spawner's allocation wait)."""

from __future__ import annotations

import asyncio
import json
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


class _Stream:
    """A watch response: its lines, then an answer that never comes (the watch stays open)."""

    def __init__(self, lines: list[dict]) -> None:
        self.status = 200
        self.lines = [(json.dumps(x) + "\n").encode() for x in lines]
        self.content = self

    async def readline(self) -> bytes:
        if self.lines:
            return self.lines.pop(0)
        await asyncio.Event().wait()
        return b""

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


def _obj(name: str, rv: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def test_a_watch_that_ends_resumes_and_only_410_gone_lists_again_not_older_than_its_version() -> None:
    """The apiserver ends the first watch (its timeout): resumed from the last version seen, no
    list. The second answers 410 Gone: one list, NotOlderThan that version, then a watch from
    the list's version."""

    async def run() -> list[dict]:
        calls: list[dict] = []
        answers: list[object] = [
            _Response(200, json.dumps({"metadata": {"resourceVersion": "10"}, "items": [_obj("a", "10")]})),
            _Stream([{"type": "ADDED", "object": _obj("b", "11")}]),  # then the apiserver ends it
            _Stream([{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]),
            _Stream([{"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}]),
            _Response(
                200,
                json.dumps(
                    {"metadata": {"resourceVersion": "20"}, "items": [_obj("a", "10"), _obj("c", "19")]}
                ),
            ),
            _Stream([]),
        ]

        async def api(**kw: object) -> object:
            calls.append(kw)
            answer = answers.pop(0)
            if isinstance(answer, _Stream) and len(calls) == 2:
                answer.lines.append(b"")  # the first watch: ended by the apiserver after its event
            if isinstance(answer, _Stream) and len(calls) == 3:
                answer.lines.append(b"")
            return answer

        cache = Cache("resourceclaims", api, lambda: None)
        task = asyncio.ensure_future(cache.run())
        deadline = time.monotonic() + 5
        while len(calls) < 6:  # a witness: the calls the cache made
            assert time.monotonic() < deadline, calls
            await asyncio.sleep(0.01)
        task.cancel()
        assert sorted(cache.objects) == ["ns/a", "ns/c"] and cache.lists == 2 and cache.watches == 4
        return calls

    calls = asyncio.run(run())
    versions = [
        (c.get("watch", False), c.get("resource_version"), c.get("resource_version_match")) for c in calls
    ]
    assert versions == [
        (False, None, None),  # the first list
        (True, "10", None),  # watch from the list's version
        (True, "11", None),  # resumed after the apiserver ended it: from the event's version
        (True, "15", None),  # ... and from a bookmark's
        (False, "15", "NotOlderThan"),  # 410 Gone: one list, not older than the version it had
        (True, "20", None),
    ]
