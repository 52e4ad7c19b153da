"""The agent's HTTP side: sampling loop and the /api/status, /metrics, /healthz handlers."""

from __future__ import annotations

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

from gpusessions.agent import guard
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
    fresh: guard.FreshLimiter = field(default_factory=guard.FreshLimiter)

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


@web.stream_request_body
class _NoBody(web.RequestHandler):
    """Takes no request body: one is refused from the headers (413), never read. The server's
    `max_body_size` (guard.server_options) bounds what a client can push before that."""

    def prepare(self) -> None:
        self._refuse_body()

    def _refuse_body(self) -> None:
        h = self.request.headers
        if h.get("Content-Length", "0").strip() not in ("", "0") or "Transfer-Encoding" in h:
            self.set_header("Connection", "close")
            raise web.HTTPError(413, "the agent takes no request body")

    def data_received(self, chunk: bytes) -> None:  # never kept
        return None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        e = (kwargs.get("exc_info") or (None, None, None))[1]
        message = e.log_message if isinstance(e, web.HTTPError) and e.log_message else self._reason
        if status_code == 401:
            self.set_header("WWW-Authenticate", 'Bearer realm="gpusessions-agent"')
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": message}))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        if isinstance(value, web.HTTPError):
            return  # a refusal: counted by `log_request`, not a line per request of a flood
        super().log_exception(typ, value, tb)


class _Base(_NoBody):
    def initialize(self, state: AgentState, token: str | None, session_token: str | None = None) -> None:
        self.state = state
        self.token = token
        # The session's own kernel-gateway token (a Secret owned by the claim, also given to
        # its notebook pod) reads this one agent: the notebook's GPU panel uses it.
        self.session_token = session_token
        self.caller = "open"

    def prepare(self) -> None:
        # The token first, from the headers alone: a stranger learns nothing else.
        if self.token:
            tokens = {"culler": self.token, "session": self.session_token or ""}
            who = guard.caller(self.request.headers.get("Authorization", ""), tokens)
            if who is None:
                raise web.HTTPError(401, "missing or wrong agent token")
            self.caller = who
        self._refuse_body()


class NotFoundHandler(_Base):
    def get(self) -> None:
        raise web.HTTPError(404, "no such page on the GPU agent (/api/status, /metrics, /healthz)")

    post = put = patch = delete = head = options = get


class StatusHandler(_Base):
    def get(self) -> None:
        status = self.state.status()
        if self.get_argument("fresh", "") in ("1", "true"):
            # The culler's last look before a cull: read NVML now, not the last periodic sample;
            # at most once a second per caller (a caller asking more often gets the last one).
            key = f"{self.caller}:{self.request.remote_ip}"
            now = time.time()
            granted = self.state.fresh.allow(key, now)
            if granted:
                sampled = self.state.sampled_at
                if sampled is None or now - sampled >= FRESH_MIN_SECONDS:
                    self.state.sample()
                status = self.state.status()
            status["fresh"] = granted
            if not granted:
                status["fresh_refused"] = (
                    f"at most one fresh read per {self.state.fresh.interval:g} s per caller: "
                    "this is the last sample (see sampled_at)"
                )
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(status))


class MetricsHandler(_Base):
    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; version=0.0.4")
        self.write(prometheus(self.state))


class HealthHandler(_NoBody):
    def get(self) -> None:
        self.write("ok")


def make_app(state: AgentState, token: str | None, session_token: str | None = None) -> web.Application:
    kw = {"state": state, "token": token, "session_token": session_token}
    return web.Application(
        [
            (r"/api/status", StatusHandler, kw),
            (r"/metrics", MetricsHandler, kw),
            (r"/healthz", HealthHandler),
        ],
        default_handler_class=NotFoundHandler,
        default_handler_args=kw,
        log_function=log_request,
    )


_refusals = {"count": 0}


def log_request(handler: web.RequestHandler) -> None:
    """Answers at debug level, failures as warnings, refusals (4xx) counted: the first and then
    every 100th is logged, so that a flood of refused requests cannot fill the log."""
    status = handler.get_status()
    line = f"{status} {handler._request_summary()} {1000 * handler.request.request_time():.2f}ms"
    if status >= 500:
        log.warning("%s", line)
    elif status >= 400:
        _refusals["count"] += 1
        n = _refusals["count"]
        if n == 1 or n % 100 == 0:
            log.warning("%s (%d refused requests so far)", line, n)
    else:
        log.debug("%s", line)


def listen(
    app: web.Application, port: int, address: str, own: frozenset[str] = frozenset()
) -> guard.AgentHTTPServer:
    """Serve `app` with the agent's limits (guard.py): small headers, no body, idle connections
    closed, connections per peer capped (`own`: the pod's IPs, whose connections and loopback's
    count as one peer)."""
    server = guard.AgentHTTPServer(app, own_addresses=own, **guard.server_options())
    server.listen(port, address=address)
    return server


def start_sampling(state: AgentState, interval: float) -> PeriodicCallback:
    async def tick() -> None:
        state.sample()
        await state.refresh_kernels()

    state.sample()
    pc = PeriodicCallback(tick, interval * 1000)
    pc.start()
    return pc
