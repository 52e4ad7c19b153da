"""Everything the admin page shows, in one JSON document (`api/page`): the sessions,
the totals and fleet map (fleet.py), the chart (chart.py).

The page makes this one request every few seconds and no other (no request per
cell). The fleet's layout is rebuilt only when slices or nodes change; the whole
document is built at most once per `ttl` seconds and per culler cycle, and
kept serialized and gzipped, so several admins polling cost one build.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import json
import operator
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from gpusessions.core.timestamps import rfc3339
from gpusessions.culler import jobs as culler_jobs
from gpusessions.culler.chart import charts
from gpusessions.culler.fleet import Layout, fleet, layout, pool_of
from gpusessions.culler.history import IDLE

Obj = dict[str, Any]


def idle_gpu_hours_today(history: Any, now: float) -> float:
    """GPU-equivalent-hours held idle since midnight UTC, all profiles and queues."""
    return sum(c.get(IDLE, 0.0) for c in history.totals(history.day_start(now)).values()) / 3600.0


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The collector paused while a document is built: the build makes tens of thousands of
    small lists (no cycles), and a collection then walks the culler's whole heap (every watched
    slice), which took longer than the build itself at 1,000 nodes."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def columns(rows: list[Obj], leave_out: tuple[str, ...] = ()) -> Obj:
    """Rows of one shape as {"columns": [keys], "rows": [[values]]}: the keys once, not per row
    (a third of the bytes at 5,000 sessions); the page makes them objects again."""
    keys: list[str] = [k for k in (rows[0] if rows else ()) if k not in leave_out]
    if any(len(r) != len(rows[0]) for r in rows):  # rows of other shapes: every key, slowly
        for r in rows:
            keys += [k for k in r if k not in keys and k not in leave_out]
        return {"columns": keys, "rows": [[r.get(k) for k in keys] for r in rows]}
    if not keys:
        return {"columns": [], "rows": [[] for _ in rows]}
    get = operator.itemgetter(*keys)
    if len(keys) == 1:
        return {"columns": keys, "rows": [[get(r)] for r in rows]}
    return {"columns": keys, "rows": [list(get(r)) for r in rows]}


GZIP_LEVEL = 1
# Fields of a session the page does not read (still in api/sessions).
NOT_SHOWN = ("holder", "holder_restarts", "waiters", "cull_at")
_NODES = "\u0000nodes\u0000"  # stands for the fleet's nodes until they are spliced in


def nodes_json(lay: Layout, nodes: list[Any]) -> str:
    """The fleet's nodes as JSON, each GPU nothing is held on serialized once per layout (most
    of a large fleet's bytes; json.dumps of them all again took a third of a build)."""
    out = []
    for node, entry in zip(lay.nodes, nodes, strict=True):
        gpus = []
        for g, e in zip(node.gpus, entry[2], strict=True):
            if e is g.free:
                if not g.free_json:
                    g.free_json = json.dumps(g.free, separators=(",", ":"))
                gpus.append(g.free_json)
            else:
                gpus.append(json.dumps(e, separators=(",", ":")))
        out.append(f"[{json.dumps(entry[0])},{entry[1]},[{','.join(gpus)}]]")
    return "[" + ",".join(out) + "]"


def fleet_problem(cluster: Any) -> str | None:
    """Why the fleet map cannot be drawn (None: it can), in words for the page."""
    slices = getattr(cluster, "slices", None)
    if slices is None:
        return "this culler does not watch the cluster's ResourceSlices"
    if slices.error and not slices.objects:
        return (
            f"the culler cannot read the cluster's ResourceSlices ({slices.error}); it needs "
            "list and watch on resourceslices (the chart's culler ClusterRole grants them)"
        )
    if not slices.ready.is_set():
        return "reading the cluster's GPUs (ResourceSlices) ..."
    return None


@dataclass
class PageData:
    culler: Any
    ttl: float = 5.0
    builds: int = 0
    invalidations: int = 0
    _layout: Layout | None = None
    _layout_key: tuple[Any, ...] | None = None
    _body: bytes = b""
    _gzipped: bytes | None = None
    _body_key: tuple[Any, ...] | None = field(default=None)

    def layout(self) -> Layout:
        cluster = self.culler.cluster
        slices, nodes = cluster.slices, getattr(cluster, "nodes", None)
        by_name = {n["metadata"]["name"]: n for n in nodes.objects.values()} if nodes is not None else {}
        # Nodes change at every status update: only their pools (the grouping) count here.
        key = (slices.version, tuple(sorted((k, pool_of(n) or "") for k, n in by_name.items())))
        if self._layout is None or key != self._layout_key:
            with no_gc():
                self._layout = layout(slices.objects.values(), by_name)
            self._layout_key = key
        return self._layout

    def build(self, now: float | None = None) -> Obj:
        now = time.time() if now is None else now
        c = self.culler
        problem = fleet_problem(c.cluster)
        fleet_doc = None
        if problem is None:
            fleet_doc = fleet(self.layout(), c.sessions, idle_gpu_hours_today(c.history, now))
        self.builds += 1
        slices = getattr(c.cluster, "slices", None)
        # The fleet first: its nodes are spliced in at the first placeholder (serialize).
        return {
            "generated": rfc3339(now),
            # What changed since the last document: the page redraws a section only then (a
            # 1,000-node map or 5,000 rows every 5 s would keep a browser busy).
            "versions": {
                "fleet": f"{c.cycles}.{slices.version if slices is not None else 0}.{self.invalidations}",
                "sessions": f"{c.cycles}.{self.invalidations}",
            },
            "fleet": fleet_doc,
            "fleet_error": problem,
            "cycles": c.cycles,
            "last_cycle": rfc3339(c.last_cycle),
            "dry_run": c.policy.dry_run,
            "error": c.last_error,
            "chart": charts(c.history, now),
            "sessions": columns(c.describe(now), NOT_SHOWN),
            # Notebook jobs (culler --jobs): None when the culler does not watch them.
            "jobs": None if (watched := culler_jobs.watched(c)) is None else culler_jobs.rows(watched, now),
        }

    def serialize(self, doc: Obj) -> bytes:
        """`doc` as compact JSON, the fleet's nodes through `nodes_json`."""
        fleet_doc = doc.get("fleet")
        if not fleet_doc or self._layout is None:
            return json.dumps(doc, separators=(",", ":")).encode()
        nodes = fleet_doc["nodes"]
        fleet_doc["nodes"] = _NODES
        try:
            text = json.dumps(doc, separators=(",", ":"))
        finally:
            fleet_doc["nodes"] = nodes
        return text.replace(json.dumps(_NODES), nodes_json(self._layout, nodes), 1).encode()

    def invalidate(self) -> None:
        """After an action: the next request builds afresh."""
        self._body_key = None
        self.invalidations += 1

    def body(self, now: float | None = None) -> bytes:
        """The serialized document, rebuilt when the culler cycled, the slices changed or
        `ttl` passed."""
        now = time.time() if now is None else now
        cluster = self.culler.cluster
        slices = getattr(cluster, "slices", None)
        key = (
            self.culler.cycles,
            slices.version if slices is not None else None,
            getattr(getattr(cluster, "nodes", None), "version", None),
            int(now // self.ttl),
        )
        if key != self._body_key:
            with no_gc():
                self._body = self.serialize(self.build(now))
            self._gzipped = None
            self._body_key = key
        return self._body

    def gzipped(self, now: float | None = None) -> bytes:
        """`body()` gzipped, made once per body (level 1: a fifth of level 6's CPU here, and
        the fleet's repetition still shrinks 20-fold)."""
        body = self.body(now)
        if self._gzipped is None:
            with no_gc():
                self._gzipped = gzip.compress(body, compresslevel=GZIP_LEVEL)
        return self._gzipped
