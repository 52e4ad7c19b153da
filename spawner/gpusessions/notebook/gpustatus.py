"""The GPU panel's data and actions, served by the notebook server.

    GET  <base>/gpusessions/gpu           this session's GPU now (JSON)
    GET  <base>/gpusessions/gpu/events    the same, pushed every STREAM_SECONDS (text/event-stream)
    POST <base>/gpusessions/gpu/release   "Release my GPU" (through the hub)

The data comes from three places, none with admin rights:
- the notebook pod's own environment (GPUSESSIONS_GPU, _NODE, _DEVICES, _CLAIM);
- the holder's GPU agent (GPUSESSIONS_AGENT_URL, read with the session's own gateway
  token): memory, utilization and the GPU memory of each kernel;
- the hub (`/hub/api/gpusessions/users/<user>/gpu`, with this server's token): the claim,
  kept across stops or not, the culler's warning, a "keep" in force, the hub's notices.

Neither GET counts as activity: jupyter_server does not track them (`_track_activity`),
and the browser does not poll. It holds one event stream open, and the proxy
(configurable-http-proxy) records a request's activity when its response finishes, which an
open stream never does; JupyterHub's `last_activity` stays where the user left it. One
reading is shared by every open tab (it is at most STREAM_SECONDS old).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.iostream import StreamClosedError

from gpusessions.notebook.bounded import BoundedAPIHandler
from gpusessions.notebook.hubrelay import HubRelay

# Set by the spawner where the holder parks the kernels (core.kernels.PARKS_ENV; core is not
# imported here: its labels need kubespawner, which a notebook image does not have).
PARKS_ENV = "GPUSESSIONS_PARK_KERNELS"

STREAM_SECONDS = 5.0
NO_AGENT = (
    "No GPU readings: they come from the GPU holder, known here only with kept kernels (persist_kernels)."
)
NO_AGENT = (
    "No GPU readings: they come from the GPU holder, known here only with kept kernels (persist_kernels)."
)
RELEASE_WAIT = 3.0  # the hub stops this server before it answers: do not wait for that


def session_from_env(env: dict[str, str]) -> dict[str, Any]:
    return {
        "gpu": env.get("GPUSESSIONS_GPU", ""),
        "profile": env.get("GPUSESSIONS_PROFILE", ""),
        "node": env.get("GPUSESSIONS_NODE", ""),
        "claim": env.get("GPUSESSIONS_CLAIM", ""),
        "devices": [d for d in env.get("GPUSESSIONS_DEVICES", "").split(",") if d],
    }


def devices_from_agent(status: dict[str, Any]) -> list[dict[str, Any]]:
    keep = ("uuid", "kind", "name", "memory_used", "memory_total", "activity", "activity_source", "processes")
    return [{k: d.get(k) for k in keep} for d in status.get("devices") or []]


def kernels_from_agent(status: dict[str, Any], paths: dict[str, str]) -> list[dict[str, Any]] | None:
    """The agent's kernels (with their GPU memory) and the notebook each belongs to."""
    kernels = status.get("kernels")
    if kernels is None:
        return None
    return [
        {
            "id": k.get("id"),
            "name": k.get("name"),
            "path": paths.get(str(k.get("id")), ""),
            "execution_state": k.get("execution_state"),
            "gpu_memory": k.get("gpu_memory"),
        }
        for k in kernels
    ]


def summary(out: dict[str, Any]) -> dict[str, Any]:
    """Used and total GPU memory over the session's devices (None when the agent has no reading)."""
    devs = out.get("devices") or []
    used = [d["memory_used"] for d in devs if d.get("memory_used") is not None]
    total = [d["memory_total"] for d in devs if d.get("memory_total") is not None]
    acts = [d["activity"] for d in devs if d.get("activity") is not None]
    return {
        "memory_used": sum(used) if used else None,
        "memory_total": sum(total) if total else None,
        "utilization": max(acts) if acts else None,
    }


class GPUStatus:
    """Gathers the panel's data; one reading at a time, shared for `ttl` seconds."""

    def __init__(self, env: dict[str, str] | None = None, ttl: float = STREAM_SECONDS) -> None:
        self.env = dict(os.environ) if env is None else env
        self.relay = HubRelay(self.env)
        self.agent_url = self.env.get("GPUSESSIONS_AGENT_URL", "").rstrip("/")
        self.agent_token = self.env.get("JUPYTER_GATEWAY_AUTH_TOKEN", "")
        self.ttl = ttl
        self._last: tuple[float, dict[str, Any]] | None = None
        self._lock = asyncio.Lock()

    @property
    def enabled(self) -> bool:
        return bool(self.env.get("GPUSESSIONS_CLAIM"))

    async def get(self, paths: Callable[[], Awaitable[dict[str, str]]]) -> dict[str, Any]:
        """The reading, refreshed when older than `ttl`; `paths` (kernel id -> notebook) is
        asked only then: with kernels in the gateway, listing sessions asks the gateway."""
        async with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self.ttl:
                self._last = (now, await self.read(await paths()))
            return self._last[1]

    async def read(self, paths: dict[str, str]) -> dict[str, Any]:
        out: dict[str, Any] = {"enabled": self.enabled, "at": time.time(), "stream_seconds": self.ttl}
        if not self.enabled:
            return out
        # Kernels parked, not ended, when the GPU goes: the panel offers "Park my session".
        out["parks"] = self.env.get(PARKS_ENV) == "1"
        out["session"] = session_from_env(self.env)
        agent, hub = await asyncio.gather(self._agent(), self._hub())
        out.update(agent if "agent_error" in agent else {})
        if "status" in agent:
            out["devices"] = devices_from_agent(agent["status"])
            out["kernels"] = kernels_from_agent(agent["status"], paths)
            out["kernels_error"] = agent["status"].get("kernels_error")
            nvml = agent["status"].get("nvml") or {}
            if not nvml.get("ok", True):
                out["agent_error"] = nvml.get("error") or "NVML is not available"
        out["summary"] = summary(out)
        out["state"] = hub
        return out

    async def _agent(self) -> dict[str, Any]:
        if not self.agent_url:
            return {"agent_error": NO_AGENT}
        headers = {"Authorization": f"token {self.agent_token}"} if self.agent_token else {}
        req = HTTPRequest(
            self.agent_url + "/api/status", headers=headers, request_timeout=3, connect_timeout=2
        )
        try:
            resp = await AsyncHTTPClient().fetch(req)
            return {"status": json.loads(resp.body)}
        except Exception as e:  # the holder restarting, a network policy: say so, do not fail
            return {"agent_error": f"The GPU agent does not answer ({e})."}

    async def _hub(self) -> dict[str, Any]:
        if not self.relay.enabled:
            return {"error": "not under JupyterHub"}
        code, body = await self.relay.call("GET", "gpu")
        if code != 200:
            return {"error": body.get("message") or f"the hub answered {code}"}
        return body


_STATUS: GPUStatus | None = None


def status() -> GPUStatus:
    global _STATUS
    if _STATUS is None:
        _STATUS = GPUStatus()
    return _STATUS


class _StatusBase(BoundedAPIHandler):
    # Reading the GPU's state is not the user being active.
    _track_activity = False

    async def _paths(self) -> dict[str, str]:
        sm = self.settings.get("session_manager")
        if sm is None:
            return {}
        try:
            sessions = await sm.list_sessions()
        except Exception:  # the kernel host away: the panel says so from the agent's side
            return {}
        return {s["kernel"]["id"]: s.get("path", "") for s in sessions if s.get("kernel")}

    def _with_restore(self, data: dict[str, Any]) -> dict[str, Any]:
        """The reading with the parked session's restore (none, pending, restoring, restored,
        failed, in words), which the kernel manager keeps when kernels run in the holder."""
        restore = getattr(self.settings.get("kernel_manager"), "restore", None)
        if restore is None or not data.get("enabled"):
            return data
        return {**data, "restore": restore.status()}


class GPUHandler(_StatusBase):
    @web.authenticated
    async def get(self) -> None:
        self.finish(json.dumps(self._with_restore(await status().get(self._paths))))


class GPUEventsHandler(_StatusBase):
    @web.authenticated
    async def get(self) -> None:
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        st = status()
        try:
            self.write(f"retry: {int(st.ttl * 2000)}\n\n")
            while True:
                data = self._with_restore(await st.get(self._paths))
                self.write(f"data: {json.dumps(data)}\n\n")
                await self.flush()
                if not data.get("enabled"):
                    break  # not under gpusessions: nothing will change
                await asyncio.sleep(st.ttl)
        except StreamClosedError:
            return  # the tab went away
        self.finish()


class GPUReleaseHandler(BoundedAPIHandler):
    @web.authenticated
    async def post(self) -> None:
        relay = HubRelay()
        if not relay.enabled:
            raise web.HTTPError(404, "This notebook server does not run under gpusessions.")
        call = asyncio.ensure_future(relay.call("POST", "gpu/release"))
        try:
            code, body = await asyncio.wait_for(asyncio.shield(call), RELEASE_WAIT)
        except TimeoutError:
            # The hub is stopping this server first; it goes on without us.
            code, body = 202, {"releasing": True}
        self.set_status(code)
        self.finish(json.dumps(body))


def handlers(base: str) -> list[tuple[str, Any]]:
    return [
        (url_path_join(base, "gpusessions", "gpu"), GPUHandler),
        (url_path_join(base, "gpusessions", "gpu", "events"), GPUEventsHandler),
        (url_path_join(base, "gpusessions", "gpu", "release"), GPUReleaseHandler),
    ]
