"""The admin page's chart data (pure): GPU-equivalents held and busy per queue over time,
from the culler's own record (`History.series`).

A step's value is the average over the step: GPU-equivalent-seconds / step seconds.
The page draws it as plain SVG (templates/chart.html); nothing here needs Prometheus.
"""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]

# (name, span, step) of the ranges the page offers.
RANGES = (("24h", 86400.0, 300.0), ("7d", 7 * 86400.0, 3600.0))
COUNTERS = ("held", "busy")
NO_QUEUE = "(no queue)"


def chart(series: list[Obj], since: float, step: float) -> Obj:
    """{"t0", "step", "queues": {queue: {"held": [...], "busy": [...]}}}: one value per step
    (None where the record has nothing for the step: the culler was not running)."""
    queues: dict[str, dict[str, list[float | None]]] = {}
    n = len(series)
    for i, point in enumerate(series):
        for group, counters in (point.get("values") or {}).items():
            q = queues.setdefault(group or NO_QUEUE, {c: [None] * n for c in COUNTERS})
            for c in COUNTERS:
                q[c][i] = round(float(counters.get(c, 0.0)) / step, 3)
    # A step with data for some queue but not this one: that queue held nothing then.
    seen = [bool(p.get("values")) for p in series]
    for q in queues.values():
        for c in COUNTERS:
            q[c] = [0.0 if (v is None and seen[i]) else v for i, v in enumerate(q[c])]
    return {"t0": since, "step": step, "queues": dict(sorted(queues.items()))}


def charts(history: Any, now: float) -> Obj:
    """Both ranges of the chart, by queue, from a `History` (anything with `series`)."""
    out = {}
    for name, span, step in RANGES:
        until = (now // step + 1) * step
        since = until - span
        out[name] = chart(history.series(since, until, step, by="queue"), since, step)
    return out
