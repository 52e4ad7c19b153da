"""Everything the admin page shows, in one JSON document (`api/page`): the sessions,
the totals and fleet map (fleet.py), the chart (chart.py).

The page makes this one request every few seconds and no other (no request per
cell). The fleet's layout is rebuilt only when slices or nodes change; the whole
document is built at most once per `ttl` seconds and per culler cycle, and
kept serialized, so several admins polling cost one build.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from gpusessions.culler.chart import charts
from gpusessions.culler.fleet import Layout, fleet, layout
from gpusessions.culler.history import IDLE
from gpusessions.culler.model import iso

Obj = dict[str, Any]


def idle_gpu_hours_today(history: Any, now: float) -> float:
    """GPU-equivalent-hours held idle since midnight UTC, all profiles and queues."""
    return sum(c.get(IDLE, 0.0) for c in history.totals(history.day_start(now)).values()) / 3600.0


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
    _layout: Layout | None = None
    _layout_key: tuple[int, int] | None = None
    _body: bytes = b""
    _body_key: tuple[Any, ...] | None = field(default=None)

    def layout(self) -> Layout:
        cluster = self.culler.cluster
        slices, nodes = cluster.slices, getattr(cluster, "nodes", None)
        key = (slices.version, nodes.version if nodes is not None else 0)
        if self._layout is None or key != self._layout_key:
            by_name = {n["metadata"]["name"]: n for n in nodes.objects.values()} if nodes is not None else {}
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
        return {
            "generated": iso(now),
            "sessions": c.describe(now),
            "cycles": c.cycles,
            "last_cycle": iso(c.last_cycle),
            "dry_run": c.policy.dry_run,
            "error": c.last_error,
            "fleet": fleet_doc,
            "fleet_error": problem,
            "chart": charts(c.history, now),
        }

    def invalidate(self) -> None:
        """After an action: the next request builds afresh."""
        self._body_key = None

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
            self._body = json.dumps(self.build(now), separators=(",", ":")).encode()
            self._body_key = key
        return self._body
