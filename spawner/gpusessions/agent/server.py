"""The agent's HTTP side: sampling loop and the /api/status, /metrics, /healthz handlers."""

from __future__ import annotations

import hmac
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector
from tornado import web
from tornado.ioloop import PeriodicCallback

from gpusessions.agent.collect import Collector, Reading, discover
from gpusessions.agent.kernels import KernelView

log = logging.getLogger("gpusessions.agent")
NVML_RETRY_SECONDS = 30.0
# `/api/status?fresh=1` reads NVML then and there, at most this often (a reading younger than
# this is served as it is): the culler's last look before a cull must not act on a sample up to
# one sampling interval old, in which the user may have started GPU work.
FRESH_MIN_SECONDS = 0.01


@dataclass
class AgentState:
    """What the agent knows; updated by `sample()`, read by the handlers."""

    load_nvml: Any  # () -> module; may raise
    visible: str | None
    busy_threshold: float
    nvml: ModuleType | None = None
    collector: Collector | None = None
    nvml_error: str | None = None
    next_init: float = 0.0
    readings: list[Reading] = field(default_factory=list)
    sampled_at: float | None = None
    problem: str | None = None
    kernels: KernelView = field(default_factory=KernelView)

    def _init(self, now: float) -> None:
        if self.nvml is not None or now < self.next_init:
            return
        try:
            nvml = self.load_nvml()
            nvml.nvmlInit()
        except Exception as e:  # ImportError, OSError, NVMLError: say it, retry later
            self.nvml_error = f"NVML is not available: {e}"
            self.next_init = now + NVML_RETRY_SECONDS
            log.warning("%s; retrying in %.0fs", self.nvml_error, NVML_RETRY_SECONDS)
            return
        try:
            uuids, self.problem = discover(nvml, self.visible)
        except Exception as e:  # NVMLError while enumerating: say it, retry later
            self.nvml_error = f"NVML cannot list the devices: {e}"
            self.next_init = now + NVML_RETRY_SECONDS
            log.warning("%s; retrying in %.0fs", self.nvml_error, NVML_RETRY_SECONDS)
            return
        self.nvml, self.nvml_error = nvml, None
        self.collector = Collector(nvml, uuids, self.busy_threshold)

    def sample(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self._init(now)
        if self.collector is None:
            return
        try:
            self.readings = self.collector.read(now)
            self.sampled_at = now
        except Exception as e:  # never let a bad sample stop the loop
            self.nvml_error = f"NVML failed: {e}"
            log.exception("sampling failed")

    def status(self) -> dict[str, Any]:
        return {
            "agent": "gpusessions",
            "nvml": {"ok": self.nvml is not None and self.nvml_error is None, "error": self.nvml_error},
            "problem": self.problem,
            "visible_devices": self.visible,
            "busy_threshold_percent": self.busy_threshold,
            "sampled_at": self.sampled_at,
            "claim": os.environ.get("GPUSESSIONS_CLAIM"),
            "user": os.environ.get("GPUSESSIONS_USER"),
            "server": os.environ.get("GPUSESSIONS_SERVER"),
            "devices": [r.as_dict() for r in self.readings],
            "kernels": self.kernels.kernels if self.kernels.enabled else None,
            "kernels_error": self.kernels.error,
        }

    async def refresh_kernels(self) -> None:
        memory: dict[int, int] = {}
        for r in self.readings:
            for pid, used in r.process_memory.items():
                memory[pid] = memory.get(pid, 0) + used
        await self.kernels.refresh(memory)


# name, help, value of a reading (None: no sample for that device)
_GAUGES: list[tuple[str, str, Callable[[Reading], float | int | None]]] = [
    ("gpusessions_gpu_memory_used_bytes", "GPU memory in use.", lambda r: r.memory_used),
    ("gpusessions_gpu_memory_total_bytes", "GPU memory of the device.", lambda r: r.memory_total),
    ("gpusessions_gpu_processes", "Compute processes on the device.", lambda r: r.processes),
    (
        "gpusessions_gpu_activity_percent",
        "Utilization (whole GPU) or GPM SM activity (MIG); absent when NVML cannot tell.",
        lambda r: r.activity,
    ),
    (
        "gpusessions_gpu_busy",
        "1 if activity (or, when unknown, a process) is at the busy threshold.",
        lambda r: int(r.busy),
    ),
    (
        "gpusessions_gpu_last_busy_timestamp_seconds",
        "When the device was last busy (unix time).",
        lambda r: r.last_busy,
    ),
]


class AgentCollector(PromCollector):
    """The agent's gauges, read from its state at each scrape."""

    def __init__(self, state: AgentState) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        ok = self.state.status()["nvml"]["ok"]
        yield GaugeMetricFamily(
            "gpusessions_nvml_up", "Whether the agent can read NVML.", value=1 if ok else 0
        )
        for name, help_text, get in _GAUGES:
            family = GaugeMetricFamily(name, help_text, labels=["uuid", "kind", "source"])
            for r in self.state.readings:
                v = get(r)
                if v is not None:
                    family.add_metric([r.uuid, r.kind, r.activity_source], v)
            yield family


def prometheus(state: AgentState) -> str:
    """The text /metrics serves (a registry per scrape: the values are the state's now)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AgentCollector(state))
    return generate_latest(registry).decode()


class _Base(web.RequestHandler):
    def initialize(self, state: AgentState, token: str | None, session_token: str | None = None) -> None:
        self.state = state
        self.token = token
        # The session's own kernel-gateway token (a Secret owned by the claim, also given to
        # its notebook pod) reads this one agent: the notebook's GPU panel uses it.
        self.session_token = session_token

    def prepare(self) -> None:
        if not self.token:
            return
        auth = self.request.headers.get("Authorization", "")
        scheme, _, given = auth.partition(" ")
        allowed = [t for t in (self.token, self.session_token) if t]
        if scheme.lower() not in ("bearer", "token") or not any(
            hmac.compare_digest(given.strip().encode(), t.encode()) for t in allowed
        ):
            raise web.HTTPError(401, "missing or wrong agent token")

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": self._reason}))


class StatusHandler(_Base):
    def get(self) -> None:
        if self.get_argument("fresh", "") in ("1", "true"):
            # The culler's last look before a cull: read NVML now, not the last periodic sample.
            sampled = self.state.sampled_at
            if sampled is None or time.time() - sampled >= FRESH_MIN_SECONDS:
                self.state.sample()
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(self.state.status()))


class MetricsHandler(_Base):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; version=0.0.4")
        self.write(prometheus(self.state))


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        self.write("ok")


def make_app(state: AgentState, token: str | None, session_token: str | None = None) -> web.Application:
    kw = {"state": state, "token": token, "session_token": session_token}
    return web.Application(
        [
            (r"/api/status", StatusHandler, kw),
            (r"/metrics", MetricsHandler, kw),
            (r"/healthz", HealthHandler),
        ]
    )


def start_sampling(state: AgentState, interval: float) -> PeriodicCallback:
    async def tick() -> None:
        state.sample()
        await state.refresh_kernels()

    state.sample()
    pc = PeriodicCallback(tick, interval * 1000)
    pc.start()
    return pc
