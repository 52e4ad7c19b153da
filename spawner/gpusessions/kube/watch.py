"""Shared list+watch caches of ResourceSlices, ResourceClaims (all namespaces)
and DeviceClasses, one set per hub process, and the availability figures
computed from them; a watch of the holder pods per namespace (`holder_watch`)
for the spawner's poll; and a watch of KAI Scheduler's Queues (`queue_watch`) for
the picker's team line (none on a cluster without KAI: the kind is not served).

Figures are recomputed when a watched object changed, at most once per
`min_interval`, by a callback the change schedules on the event loop (not by
the page view that comes next): the counts of the sizes views asked for lately
(`ClusterView.figures`, a `FiguresCache`) are ready before the next view, which reads them. A view finds
them stale only for a size nobody asked for since the last change, or while a
recount is not yet due (then it recounts itself, once per version).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from jupyterhub.utils import exponential_backoff
from kubernetes_asyncio import watch as k8s_watch
from kubernetes_asyncio.client import ApiException
from kubespawner.clients import load_config, shared_client

from gpusessions.core import labels as L
from gpusessions.core.availability import FiguresCache, Inventory, allocated_devices, remaining_counters

Obj = dict[str, Any]
log = logging.getLogger("gpusessions.kube.watch")


def _key(obj: Obj) -> str:
    md = obj["metadata"]
    return f"{md.get('namespace', '')}/{md['name']}"


ABSENT_RECHECK = 60  # seconds between two looks for a kind the apiserver does not serve


class NotServed(Exception):
    """The apiserver does not serve the kind (404 on its list)."""


class Gone(Exception):
    """The watch's resourceVersion is older than the apiserver keeps (410 Gone): list again."""


WATCH_SECONDS = 300  # the apiserver ends each watch after this long; it is resumed at once
RETRY_WINDOW = 120.0  # seconds of back-off before the failing watch is reported again


def _status_error(status: int, body: Any) -> Exception:
    message = body.get("message", status) if isinstance(body, dict) else body
    if status == 410:
        return Gone(message)
    return RuntimeError(f"{status}: {message}")


class Cache:
    """One kind, listed once, then watched: a watch that ends (the apiserver's timeout, a lost
    connection, an apiserver restart) is resumed from the last resourceVersion it saw (events
    and bookmarks), so nothing is listed again; only a resourceVersion the apiserver no longer
    has (410 Gone) lists again, `resourceVersionMatch=NotOlderThan` that version (served from
    the apiserver's cache). Reconnects back off with `jupyterhub.utils.exponential_backoff`;
    while the watch is down the last data stays and `error` says why."""

    def __init__(self, kind: str, list_method: Callable[..., Any], on_change: Callable[[], None]):
        self.kind = kind
        self.list_method = list_method
        self.on_change = on_change
        self.objects: dict[str, Obj] = {}
        self.version = 0
        self.ready = asyncio.Event()
        self.error: str | None = None
        self.absent = False  # the apiserver does not serve this kind (404: e.g. no KAI CRDs)
        self._waiters: dict[str, list[asyncio.Event]] = {}
        self.resource_version: str | None = None  # the last one seen (None: list first)
        self._listed = False  # the objects are a list's, kept up to date since
        self._connected_at: float | None = None  # when the current watch got its answer
        self.lists = 0  # lists made (the first, and one per 410 Gone)
        self.watches = 0  # watches started (a resume is one more, not a list)

    async def run(self) -> None:
        while True:
            try:
                await exponential_backoff(
                    self._list_and_watch,
                    f"the watch of {self.kind} keeps failing",
                    start_wait=0.5,
                    max_wait=30,
                    timeout=RETRY_WINDOW,
                )
            except asyncio.CancelledError:
                raise
            except NotServed:
                # Not an error of ours: the cluster has no such kind (yet). Look again now and
                # then, quietly, in case it is installed later.
                if not self.absent:
                    log.info(
                        "%s are not served by this cluster; looking again every %ds",
                        self.kind,
                        ABSENT_RECHECK,
                    )
                self.absent = True
                self.objects = {}
                self.resource_version = None
                self.ready.set()
                await asyncio.sleep(ABSENT_RECHECK)
            except TimeoutError:
                log.warning("watch of %s still failing (%s); trying on", self.kind, self.error)

    async def _list_and_watch(self) -> bool:
        """List if there is nothing to resume from, then watch until the watch ends. True: go on
        at once (the watch ran, or a 410 asks for a list); False: it failed, back off."""
        self._connected_at = None
        try:
            if self.resource_version is None or not self._listed:
                try:
                    self.resource_version = await self._list(self.resource_version)
                except Exception:
                    # Not that version either (an apiserver on a new etcd answers "too large"):
                    # the next list is a plain one, of what is there now.
                    self.resource_version = None
                    raise
            await self._watch()
            return True
        except (asyncio.CancelledError, NotServed):
            raise
        except Gone as e:
            log.info("watch of %s: %s; listing again", self.kind, e)
            self._listed = False  # list NotOlderThan the version we had
            return True
        except Exception as e:  # the apiserver may restart; keep the last data, say so, retry
            self.error = f"{type(e).__name__}: {e}"
            log.warning("watch of %s failed (%s); resuming it", self.kind, self.error)
            # A watch that was up a while resumes at once; one that cannot connect backs off.
            up = self._connected_at is not None and time.monotonic() - self._connected_at >= 1.0
            return up

    async def _watch_call(self, **kwargs: Any) -> Any:
        """The watch request (the Watch calls it again to resume): an error status is an error."""
        resp = await self.list_method(**kwargs)
        if resp.status >= 400:
            try:
                body = json.loads(await resp.read())
            except ValueError:
                body = {}
            raise _status_error(resp.status, body)
        self._connected_at = time.monotonic()
        self.error = None
        return resp

    async def _watch(self) -> None:
        """Watch from `resource_version` until the apiserver ends the watch."""
        w = k8s_watch.Watch()
        self.watches += 1
        async with w.stream(
            self._watch_call,
            resource_version=self.resource_version,
            timeout_seconds=WATCH_SECONDS,
            allow_watch_bookmarks=True,
        ) as stream:
            try:
                async for event in stream:
                    if event["type"] != "BOOKMARK":
                        obj = event["raw_object"]
                        if event["type"] == "DELETED":
                            self.objects.pop(_key(obj), None)
                        else:
                            self.objects[_key(obj)] = obj
                        self.version += 1
                        self._wake(_key(obj))
                        self.on_change()
                    if w.resource_version:
                        self.resource_version = str(w.resource_version)
            except ApiException as e:  # an ERROR event in the stream
                if e.status == 410:
                    raise Gone(e.reason) from None
                raise
            finally:
                if w.resource_version:
                    self.resource_version = str(w.resource_version)

    def _wake(self, key: str) -> None:
        for ev in self._waiters.pop(key, ()):
            ev.set()

    async def wait_change(self, key: str, seen_version: str | None, timeout: float) -> None:
        """Return when the object `namespace/name` changes (or is listed again), or after
        `timeout`; at once if the cache already holds a newer version than `seen_version`."""
        cur = self.objects.get(key)
        if cur is not None and seen_version is not None:
            try:
                if int(cur["metadata"]["resourceVersion"]) > int(seen_version):
                    return
            except (KeyError, ValueError):
                pass  # resourceVersions are opaque; only wait
        ev = asyncio.Event()
        self._waiters.setdefault(key, []).append(ev)
        try:
            await asyncio.wait_for(ev.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            left = [e for e in self._waiters.get(key, []) if e is not ev]
            if left:
                self._waiters[key] = left
            else:
                self._waiters.pop(key, None)

    async def _list(self, not_older_than: str | None = None) -> str:
        """List every object (`not_older_than`: at least as new as that resourceVersion, from the
        apiserver's cache, after a 410 Gone)."""
        kwargs: dict[str, Any] = {"_preload_content": False}
        if not_older_than:
            kwargs.update(resource_version=not_older_than, resource_version_match="NotOlderThan")
        self.lists += 1
        resp = await self.list_method(**kwargs)
        body = json.loads(await resp.read())
        if resp.status == 404:
            raise NotServed(body.get("message", resp.status))
        if resp.status >= 400:
            raise RuntimeError(body.get("message", resp.status))
        self.absent = False
        self.error = None
        self.objects = {_key(o): o for o in body["items"]}
        self._listed = True
        self.version += 1
        self.ready.set()
        for key in list(self._waiters):
            self._wake(key)
        self.on_change()
        return str(body["metadata"]["resourceVersion"])


VIEWS_RECENT = 60.0  # seconds after a page view during which changes are recounted ahead of views


class ClusterView:
    """Slices, claims and device classes, and the derived inventory."""

    def __init__(self, min_interval: float = 0.5, api: Any = None, start: bool = True):
        if api is None:
            load_config()
            api = shared_client("ResourceV1Api")
        self.version = 0
        self._computed_version = -1
        self._computed_at = 0.0
        self.min_interval = min_interval
        self.slices = Cache("resourceslices", api.list_resource_slice, self._changed)
        self.claims = Cache("resourceclaims", api.list_resource_claim_for_all_namespaces, self._changed)
        self.classes = Cache("deviceclasses", api.list_device_class, self._changed)
        self._tasks = (
            [asyncio.ensure_future(c.run()) for c in (self.slices, self.claims, self.classes)]
            if start
            else []
        )
        self._derived: tuple[Inventory, set[Any], dict[Any, Any], dict[str, Obj]] | None = None
        # The picker's figures of this data: kept per version, and the sizes views asked for
        # lately, counted again after each change, so the next view reads figures already made.
        self.figures = FiguresCache()
        self._shape_version: tuple[int, int] = (-1, -1)
        self._recount: asyncio.TimerHandle | None = None
        self.recounts = 0  # recounts made after a change (not inside a view)
        self.last_view = 0.0  # monotonic time of the last page view (`viewed`)
        self._recount_cost = 0.0  # seconds the last recount took
        self.computed_from = (0, 0)  # (slices, claims) the derived data was made from

    @property
    def computed_version(self) -> int:
        return self._computed_version

    def _changed(self) -> None:
        self.version += 1
        self._schedule_recount()

    def viewed(self) -> None:
        """A page view came: changes are recounted ahead of views for a while (`VIEWS_RECENT`)."""
        self.last_view = time.monotonic()

    def _schedule_recount(self, at_least: float = 0.0) -> None:
        if self._recount is None:
            # At most once per min_interval, and the loop gets at least twice a recount's
            # time to itself between two (a 1,000-node slice change takes over a second).
            gap = max(self.min_interval, 2 * self._recount_cost, at_least)
            delay = max(0.0, gap - (time.monotonic() - self._computed_at))
            self._recount = asyncio.get_running_loop().call_later(delay, self._recount_now)

    def _recount_now(self) -> None:
        """Recount after a change (scheduled by `_changed`), while someone looks at the picker."""
        self._recount = None
        if not all(c.ready.is_set() for c in (self.slices, self.claims, self.classes)):
            return  # still listing: the last list's change schedules the recount
        if time.monotonic() - self.last_view > VIEWS_RECENT:
            self.figures.forget_recent()  # nobody looked lately: the next view counts what it needs
            return
        version = self.version
        started = time.monotonic()
        try:
            self.figures.warm(self.derived(), self.computed_version)
            self.recounts += 1
        except Exception:  # the figures stay as they were; the next view recounts and says why
            log.exception("recounting the picker's figures failed")
            self._computed_at = time.monotonic()
            if self.version != version:  # retry only for new data, and not at once
                self._schedule_recount(at_least=self.min_interval)
            return
        finally:
            self._recount_cost = time.monotonic() - started
        if self._computed_version != self.version:  # changed again within min_interval
            self._schedule_recount()

    async def wait_ready(self, timeout: float = 10) -> bool:
        try:
            await asyncio.wait_for(
                asyncio.gather(self.slices.ready.wait(), self.claims.ready.wait(), self.classes.ready.wait()),
                timeout,
            )
            return True
        except TimeoutError:
            return False

    @property
    def errors(self) -> list[str]:
        return [f"{c.kind}: {c.error}" for c in (self.slices, self.claims, self.classes) if c.error]

    def derived(self) -> tuple[Inventory, set[Any], dict[Any, Any], dict[str, Obj]]:
        """(inventory, allocated devices, counters left, device classes by name), cached per change.

        The inventory is rebuilt only when slices change; a claim change only recounts
        allocations and counters."""
        now = time.monotonic()
        stale = self._computed_version != self.version
        if self._derived is None or (stale and now - self._computed_at >= self.min_interval):
            version = self.version
            shape_version = (self.slices.version, self.classes.version)
            if self._derived is None or shape_version != self._shape_version:
                inv = Inventory.from_slices(self.slices.objects.values())
                classes = {o["metadata"]["name"]: o for o in self.classes.objects.values()}
                self.figures.new_shape()
                self._shape_version = shape_version
            else:
                inv, _, _, classes = self._derived
            allocated = allocated_devices(self.claims.objects.values())
            left = remaining_counters(inv, allocated)
            self._derived = (inv, allocated, left, classes)
            self._computed_version = version
            self.computed_from = (len(self.slices.objects), len(self.claims.objects))
            self._computed_at = time.monotonic()  # when the work ended: min_interval is idle time
        return self._derived

    def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        if self._recount is not None:
            self._recount.cancel()


_views: dict[int, ClusterView] = {}


def cluster_view() -> ClusterView:
    """The hub's shared view (one per event loop), started on first use."""
    loop = asyncio.get_running_loop()
    view = _views.get(id(loop))
    if view is None:
        view = _views[id(loop)] = ClusterView()
    return view


async def claim_changed(namespace: str, name: str, seen: str | None, timeout: float) -> None:
    """Return when the shared claim watch sees `namespace/name` change (at most `timeout`)."""
    claims = cluster_view().claims
    if claims.ready.is_set() and not claims.error:
        await claims.wait_change(f"{namespace}/{name}", seen, timeout)
    else:
        await asyncio.sleep(timeout)


async def holder_changed(namespace: str, name: str, seen: str | None, timeout: float) -> None:
    """Return when the shared holder watch sees the pod `namespace/name` change (at most
    `timeout`); while the watch is not listing (it starts on first use), after half a second."""
    holders = holder_watch(namespace)
    if holders.ready.is_set() and not holders.error:
        await holders.wait_change(f"{namespace}/{name}", seen, timeout)
    else:
        await asyncio.sleep(min(timeout, 0.5))


def claim_seen(namespace: str, name: str) -> bool | None:
    """Whether the shared claim watch shows the claim; None when it cannot tell (listing, failing)."""
    claims = cluster_view().claims
    if not claims.ready.is_set() or claims.error:
        return None
    return f"{namespace}/{name}" in claims.objects


def cached(kind: str, namespace: str, name: str) -> Obj | None:
    """A claim or holder pod ("claim", "holder") as the shared watch last saw it; None when it
    shows none or cannot tell."""
    cache = cluster_view().claims if kind == "claim" else holder_watch(namespace)
    if not cache.ready.is_set() or cache.error:
        return None
    return cache.objects.get(f"{namespace}/{name}")


def class_seen(name: str) -> bool | None:
    """Whether the shared watch shows the DeviceClass; None when it cannot tell."""
    classes = cluster_view().classes
    if not classes.ready.is_set() or classes.error:
        return None
    return f"/{name}" in classes.objects


_holder_watches: dict[tuple[int, str], tuple[Cache, asyncio.Future[None]]] = {}


def holder_watch(namespace: str) -> Cache:
    """The hub's shared watch of the holder pods in one namespace (started on first use), so
    checking every running server's holder at each poll costs no API call."""
    loop = asyncio.get_running_loop()
    key = (id(loop), namespace)
    if key not in _holder_watches:
        load_config()
        core = shared_client("CoreV1Api")
        lister = partial(core.list_namespaced_pod, namespace, label_selector=L.HOLDERS)
        cache = Cache("pods", lister, lambda: None)
        _holder_watches[key] = (cache, asyncio.ensure_future(cache.run()))
    return _holder_watches[key][0]


KAI_QUEUES = ("scheduling.run.ai", "v2", "queues")
_queue_watches: dict[int, tuple[Cache, asyncio.Future[None]]] = {}


def queue_watch() -> Cache:
    """The hub's shared watch of KAI Scheduler's Queues (cluster-scoped, started on first use):
    the picker's team line reads KAI's own quota, limit and allocation from them. On a cluster
    without KAI the watch finds the kind not served (`absent`) and looks again every minute."""
    loop = asyncio.get_running_loop()
    key = id(loop)
    if key not in _queue_watches:
        load_config()
        custom = shared_client("CustomObjectsApi")
        lister = partial(custom.list_cluster_custom_object, *KAI_QUEUES)
        cache = Cache("queues.scheduling.run.ai", lister, lambda: None)
        _queue_watches[key] = (cache, asyncio.ensure_future(cache.run()))
    return _queue_watches[key][0]


async def kai_queue(name: str, timeout: float = 2.0) -> Obj | None:
    """KAI's Queue `name` from the shared watch; None when the cluster has no KAI, the queue does
    not exist, or the watch has not listed within `timeout` (the picker then counts itself)."""
    cache = queue_watch()
    if not cache.ready.is_set() and cache.error is None:
        try:
            await asyncio.wait_for(cache.ready.wait(), timeout)
        except TimeoutError:
            return None
    if cache.absent or not cache.ready.is_set():
        return None
    return cache.objects.get(f"/{name}")
