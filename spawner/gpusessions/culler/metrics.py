"""The culler's Prometheus metrics, read from the culler's current state at each scrape.

A custom collector on a registry made for the scrape (not the process-wide one):
the values are what the last cycle saw, and prometheus_client writes the text
format (label escaping included).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpusessions.core import health
from gpusessions.culler.fleet import cell_state
from gpusessions.culler.history import History, session_equivalent
from gpusessions.culler.jobs import JobsCollector
from gpusessions.culler.model import Session


class CullerState(Protocol):
    """What the exporter reads of the culler's state (`cycle.Culler` has it): the exporter
    depends on this, not on the cycle that writes it."""

    sessions: list[Session]
    actions: Counter[str]
    culls: Counter[str]
    idle_gpu_seconds: dict[str, float]
    history: History
    cycles: int
    last_cycle_seconds: float | None


# The content type the culler has always served (the text format 0.0.4, which generate_latest writes).
CONTENT_TYPE = "text/plain; version=0.0.4"


class CullerCollector(Collector):
    def __init__(self, culler: CullerState) -> None:
        self.culler = culler

    def collect(self) -> Iterator[Metric]:
        c = self.culler
        held = GaugeMetricFamily(
            "gpusessions_held_gpus",
            "Sessions holding a claim, by state, profile and queue.",
            labels=["state", "profile", "queue"],
        )
        for (state, profile, queue), n in sorted(
            Counter((s.state, s.profile, s.queue) for s in c.sessions).items()
        ):
            held.add_metric([state, profile, queue], n)
        yield held
        actions = CounterMetricFamily(
            "gpusessions_culler_actions", "Actions taken, by action.", labels=["action"]
        )
        for action, n in sorted(c.actions.items()):
            actions.add_metric([action], n)
        yield actions
        culls = CounterMetricFamily(
            "gpusessions_culls", "GPUs released by the culler (or an admin), by reason.", labels=["reason"]
        )
        for reason, n in sorted(c.culls.items()):
            culls.add_metric([reason], n)
        yield culls
        idle = CounterMetricFamily(
            "gpusessions_idle_gpu_seconds",
            "GPU-seconds held while the GPU was idle, by profile.",
            labels=["profile"],
        )
        for profile, v in sorted(c.idle_gpu_seconds.items()):
            idle.add_metric([profile], round(v, 1))
        yield idle
        yield gpu_hours(c)
        yield equivalents(c)
        yield tainted_devices(c)
        yield CounterMetricFamily("gpusessions_culler_cycles", "Culler cycles run.", value=c.cycles)
        if c.last_cycle_seconds is not None:
            yield GaugeMetricFamily(
                "gpusessions_culler_last_cycle_seconds",
                "Wall time of the last cycle.",
                value=round(c.last_cycle_seconds, 3),
            )


def equivalents(c: CullerState) -> GaugeMetricFamily:
    """GPU-equivalents held now, by state (busy, idle, kept, pending: the admin page's colours),
    profile and queue."""
    g = GaugeMetricFamily(
        "gpusessions_gpu_equivalents",
        "GPU-equivalents held now (a MIG slice Ng is N/7), by state (busy, idle, kept: server "
        "stopped, pending: starting), profile and queue.",
        labels=["state", "profile", "queue"],
    )
    sums: dict[tuple[str, str, str], float] = {}
    for s in c.sessions:
        if s.allocated and not s.deleting:
            key = (cell_state(s), s.profile, s.queue)
            sums[key] = sums.get(key, 0.0) + session_equivalent(s)
    for key, v in sorted(sums.items()):
        g.add_metric(list(key), round(v, 4))
    return g


def tainted_devices(c: CullerState) -> GaugeMetricFamily:
    """Devices with a NoSchedule or NoExecute taint (the driver reported the GPU broken, or an
    admin's DeviceTaintRule), one series per device and taint, 1; `held`: a session holds it."""
    g = GaugeMetricFamily(
        "gpusessions_tainted_devices",
        "Devices tainted NoSchedule or NoExecute (a broken GPU: gpu.nvidia.com/xid with the XID "
        "as value, gpu.nvidia.com/gpu-lost; or an admin's taint), by node, pool, device, taint "
        "key, value and effect, and whether a session holds it (held: true/false).",
        labels=["node", "pool", "device", "key", "value", "effect", "held"],
    )
    slices = getattr(getattr(c, "cluster", None), "slices", None)
    if slices is None:
        return g
    held = {d for s in c.sessions if s.allocated for d in s.devices}
    nodes = {
        (sl["spec"]["driver"], sl["spec"]["pool"]["name"]): sl["spec"].get("nodeName") or ""
        for sl in slices.objects.values()
    }
    for (driver, pool, device), taints in sorted(health.tainted_devices(slices.objects.values()).items()):
        for t in taints:
            g.add_metric(
                [
                    nodes.get((driver, pool), ""),
                    pool,
                    device,
                    t.get("key", ""),
                    t.get("value", ""),
                    t.get("effect", ""),
                    "true" if f"{pool}/{device}" in held else "false",
                ],
                1,
            )
    return g


# The kinds of GPU time the record keeps that the metric reports.
GPU_HOUR_KINDS = ("held", "busy", "idle", "kept", "reclaimed")


def gpu_hours(c: CullerState, now: float | None = None) -> GaugeMetricFamily:
    """GPU-equivalent-hours from the culler's record, today (UTC) and over the last 7 days."""
    now = time.time() if now is None else now
    g = GaugeMetricFamily(
        "gpusessions_gpu_hours",
        "GPU-equivalent-hours by kind (held, busy, idle, kept, reclaimed), window (today: since "
        "midnight UTC; 7d: the last 7 days), profile and queue, from the culler's own record.",
        labels=["kind", "window", "profile", "queue"],
    )
    windows = {"today": c.history.day_start(now), "7d": now - 7 * 86400.0}
    for window, since in windows.items():
        for (profile, queue), counters in sorted(c.history.totals(since).items()):
            for kind in GPU_HOUR_KINDS:
                if kind in counters:
                    g.add_metric([kind, window, profile, queue], round(counters[kind] / 3600.0, 4))
    return g


def exposition(culler: CullerState) -> str:
    """The text /metrics serves for this culler's state now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CullerCollector(culler))
    registry.register(JobsCollector(culler))  # notebook jobs (none without the culler's Job watch)
    return generate_latest(registry).decode()
