"""The culler's Prometheus metrics, read from the culler's current state at each scrape.

A custom collector on a registry made for the scrape (not the process-wide one):
the values are what the last cycle saw, and prometheus_client writes the text
format (label escaping included).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from gpusessions.culler.cycle import Culler

# The content type the culler has always served (the text format 0.0.4, which generate_latest writes).
CONTENT_TYPE = "text/plain; version=0.0.4"


class CullerCollector(Collector):
    def __init__(self, culler: Culler) -> None:
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
        yield CounterMetricFamily("gpusessions_culler_cycles", "Culler cycles run.", value=c.cycles)
        if c.last_cycle_seconds is not None:
            yield GaugeMetricFamily(
                "gpusessions_culler_last_cycle_seconds",
                "Wall time of the last cycle.",
                value=round(c.last_cycle_seconds, 3),
            )


def exposition(culler: Culler) -> str:
    """The text /metrics serves for this culler's state now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CullerCollector(culler))
    from gpusessions.culler.jobs import JobsCollector

    registry.register(JobsCollector(culler))  # notebook jobs (none without the culler's Job watch)
    return generate_latest(registry).decode()
