"""The hub side's Prometheus metrics, served by JupyterHub's own /hub/metrics (prometheus_client's
default registry, which JupyterHub exports): how long spawns wait for a GPU, and how many wait now."""

from __future__ import annotations

from prometheus_client import Gauge, Histogram

GPU_WAIT = Histogram(
    "gpusessions_gpu_wait_seconds",
    "Seconds a spawn waited for its GPU: from the claim's creation to its allocation "
    "(outcome allocated, timeout or refused); a kept GPU counts 0 (outcome kept).",
    ["profile", "outcome"],
    buckets=(0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, float("inf")),
)
WAITING = Gauge(
    "gpusessions_spawns_waiting_for_gpu",
    "Spawns waiting now for their GPU to be allocated, by profile.",
    ["profile"],
)
