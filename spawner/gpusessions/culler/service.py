"""The culler service: one cycle (inventory -> decisions -> actions), and its HTTP API.

Runs as the JupyterHub service `gpusessions` (hub-managed or external): its
JSON list of sessions is at /services/gpusessions/api/sessions, metrics at
/services/gpusessions/metrics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from gpusessions.core.claims import AGENT_PORT
from gpusessions.culler.contention import mark_contention
from gpusessions.culler.hub import HubAPI
from gpusessions.culler.kube import ClusterSide
from gpusessions.culler.model import (
    CULL_AT,
    CULL_REASON,
    KEEP_UNTIL,
    STOPPED_SINCE,
    WARNED_AT,
    Session,
    iso,
    join,
    parse_time,
)
from gpusessions.culler.policy import (
    CLEAR_STOPPED,
    CULL,
    MARK_STOPPED,
    NODE_GONE,
    NONE,
    ORPHAN,
    RELEASE,
    UNWARN,
    WARN,
    Decision,
    Policy,
    decide,
)

log = logging.getLogger("gpusessions.culler")
Obj = dict[str, Any]


@dataclass
class Culler:
    cluster: ClusterSide
    hub: HubAPI
    policy: Policy
    agent_token: str | None = None
    agent_timeout: float = 2.0
    sessions: list[Session] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    actions: Counter[str] = field(default_factory=Counter)
    # by reason: idle, gpu-idle, max-age, stopped, stopped-contended, orphan, node-gone, admin
    culls: Counter[str] = field(default_factory=Counter)
    idle_gpu_seconds: dict[str, float] = field(default_factory=dict)  # by profile
    cycles: int = 0
    last_cycle: float | None = None
    last_cycle_seconds: float | None = None  # wall time of the last cycle
    last_error: str | None = None

    async def _agent(self, s: Session) -> None:
        if not s.holder_ip:
            s.gpu_error = "no holder pod"
            return
        headers = {"Authorization": f"Bearer {self.agent_token}"} if self.agent_token else {}
        req = HTTPRequest(
            f"http://{s.holder_ip}:{AGENT_PORT}/api/status",
            headers=headers,
            request_timeout=self.agent_timeout,
            connect_timeout=self.agent_timeout,
        )
        try:
            resp = await AsyncHTTPClient().fetch(req)
            body = json.loads(resp.body)
        except Exception as e:
            s.gpu_error = f"agent unreachable: {e}"
            return
        s.gpu = body.get("devices") or []
        s.kernels = body.get("kernels")
        s.kernels_error = body.get("kernels_error")
        if not (body.get("nvml") or {}).get("ok"):
            s.gpu_error = (body.get("nvml") or {}).get("error") or "NVML not available"

    async def cycle(self, now: float | None = None) -> list[tuple[Session, Decision]]:
        """One pass: inventory, decisions, actions. Returns what was decided."""
        started = time.monotonic()
        users = await self.hub.users()
        sessions, orphan_holders = join(
            list(self.cluster.claims.objects.values()), list(self.cluster.holders.objects.values()), users
        )
        nodes = self.cluster.node_names()
        if nodes is not None:
            for s in sessions:
                s.node_gone = s.node is not None and s.node not in nodes
        await asyncio.gather(*(self._agent(s) for s in sessions if not s.node_gone))
        now = time.time() if now is None else now
        if self.last_cycle is not None:
            # GPU-seconds held while idle since the last cycle (bounded, in case cycles stalled).
            dt = min(max(0.0, now - self.last_cycle), 600.0)
            for s in sessions:
                if s.allocated and not s.gpu_busy_now:
                    held = dt * max(1, len(s.devices))
                    self.idle_gpu_seconds[s.profile] = self.idle_gpu_seconds.get(s.profile, 0.0) + held
        mark_contention(sessions, now)
        out = []
        for s in sessions:
            d = decide(s, now, self.policy)
            out.append((s, d))
            if d.action != NONE:
                await self._act(s, d, now)
        for h in orphan_holders:
            md = h["metadata"]
            self._log("orphan-holder", f"{md['namespace']}/{md['name']}", "holder pod without its claim")
            if not self.policy.dry_run:
                await self.cluster.delete_holder(md["namespace"], md["name"])
        self.sessions = sessions
        self.decisions = {s.key: d for s, d in out}
        self.cycles += 1
        self.last_cycle = now
        self.last_cycle_seconds = time.monotonic() - started
        log.info("cycle %d: %d sessions in %.3fs", self.cycles, len(sessions), self.last_cycle_seconds)
        return out

    def _log(self, action: str, what: str, reason: str) -> None:
        self.actions[action] += 1
        prefix = "DRY RUN: would " if self.policy.dry_run else ""
        log.info("%s%s %s: %s", prefix, action, what, reason)

    async def _act(self, s: Session, d: Decision, now: float) -> None:
        who = f"{s.key} ({s.user}/{s.server or ''})"
        if d.action in (MARK_STOPPED, CLEAR_STOPPED, UNWARN):
            # Bookkeeping, not a cull: kept in the claim's annotations so a restart loses nothing.
            if not self.policy.dry_run:
                values: dict[str, str | None] = (
                    {STOPPED_SINCE: str(now)}
                    if d.action == MARK_STOPPED
                    else {STOPPED_SINCE: None, WARNED_AT: None}
                    if d.action == CLEAR_STOPPED
                    else {WARNED_AT: None, CULL_AT: None, CULL_REASON: None}
                )
                await self.cluster.annotate(s.namespace, s.claim, values)
            return
        self._log(d.action, who, d.reason)
        if self.policy.dry_run:
            return
        if d.action == WARN:
            # What the user reads on the hub home page (and can answer with "keep").
            await self.cluster.annotate(
                s.namespace,
                s.claim,
                {WARNED_AT: str(now), CULL_AT: str(d.at or now), CULL_REASON: d.reason[:200]},
            )
        elif d.action == CULL:
            self.culls[d.rule or "idle"] += 1
            await self.hub.stop_server(s.user or "", s.server or "")
            await self.cluster.release(s.namespace, s.claim, s.holder)
        elif d.action == NODE_GONE:
            self.culls["node-gone"] += 1
            if s.running or s.pending:
                await self.hub.stop_server(s.user or "", s.server or "")
            await self.cluster.release(s.namespace, s.claim, s.holder)
        elif d.action in (RELEASE, ORPHAN):
            self.culls[(d.rule or "stopped") if d.action == RELEASE else "orphan"] += 1
            await self.cluster.release(s.namespace, s.claim, s.holder)

    def describe(self, now: float | None = None) -> list[Obj]:
        now = time.time() if now is None else now
        out = []
        for s in self.sessions:
            d = self.decisions.get(s.key, Decision(NONE, ""))
            last_busy = s.gpu_last_busy
            out.append(
                {
                    "namespace": s.namespace,
                    "claim": s.claim,
                    "holder": s.holder,
                    "user": s.user,
                    "server": s.server,
                    "profile": s.profile,
                    "node": s.node,
                    "devices": s.devices,
                    "state": s.state,
                    "gpu": s.gpu,
                    "gpu_error": s.gpu_error,
                    "kernels": s.kernels,
                    "kernels_error": s.kernels_error,
                    "holder_restarts": s.holder_restarts,
                    "notebook_idle_seconds": None
                    if s.notebook_last_activity is None
                    else max(0.0, now - s.notebook_last_activity),
                    "gpu_idle_seconds": 0.0
                    if s.gpu_busy_now
                    else (
                        None if (last_busy or s.created) is None else now - (last_busy or s.created or now)
                    ),
                    "queue": s.queue or None,
                    "keep_until": iso(s.keep_until),
                    "warned_at": iso(s.warned_at),
                    "waiters": s.waiters,
                    "decision": d.action,
                    "reason": d.reason,
                    "cull_at": iso(d.at),
                    "seconds_left": None if d.at is None else max(0.0, d.at - now),
                }
            )
        return out

    def metrics(self) -> str:
        lines = [
            "# HELP gpusessions_held_gpus Sessions holding a claim, by state, profile and queue.",
            "# TYPE gpusessions_held_gpus gauge",
        ]
        held = Counter((s.state, s.profile, s.queue) for s in self.sessions)
        for (state, profile, queue), n in sorted(held.items()):
            labels = f'state="{state}",profile="{_label(profile)}",queue="{_label(queue)}"'
            lines.append(f"gpusessions_held_gpus{{{labels}}} {n}")
        lines += [
            "# HELP gpusessions_culler_actions_total Actions taken, by action.",
            "# TYPE gpusessions_culler_actions_total counter",
        ]
        for action, n in sorted(self.actions.items()):
            lines.append(f'gpusessions_culler_actions_total{{action="{action}"}} {n}')
        lines += [
            "# HELP gpusessions_culls_total GPUs released by the culler (or an admin), by reason.",
            "# TYPE gpusessions_culls_total counter",
        ]
        lines += [f'gpusessions_culls_total{{reason="{r}"}} {n}' for r, n in sorted(self.culls.items())]
        lines += [
            "# HELP gpusessions_idle_gpu_seconds_total GPU-seconds held while the GPU was idle, by profile.",
            "# TYPE gpusessions_idle_gpu_seconds_total counter",
        ]
        lines += [
            f'gpusessions_idle_gpu_seconds_total{{profile="{_label(p)}"}} {v:.1f}'
            for p, v in sorted(self.idle_gpu_seconds.items())
        ]
        lines += [
            "# HELP gpusessions_culler_cycles_total Culler cycles run.",
            "# TYPE gpusessions_culler_cycles_total counter",
            f"gpusessions_culler_cycles_total {self.cycles}",
        ]
        if self.last_cycle_seconds is not None:
            lines += [
                "# HELP gpusessions_culler_last_cycle_seconds Wall time of the last cycle.",
                "# TYPE gpusessions_culler_last_cycle_seconds gauge",
                f"gpusessions_culler_last_cycle_seconds {self.last_cycle_seconds:.3f}",
            ]
        return "\n".join(lines) + "\n"

    async def keep(self, namespace: str, claim: str, until: float) -> None:
        await self.cluster.annotate(
            namespace, claim, {KEEP_UNTIL: str(until), WARNED_AT: None, CULL_AT: None, CULL_REASON: None}
        )

    async def release(self, namespace: str, claim: str) -> bool:
        s = next((x for x in self.sessions if x.namespace == namespace and x.claim == claim), None)
        if s is None:
            return False
        self._log("release-by-admin", s.key, "released from the admin page")
        self.culls["admin"] += 1
        if s.running:
            await self.hub.stop_server(s.user or "", s.server or "")
        await self.cluster.release(namespace, claim, s.holder)
        return True


def _label(value: str) -> str:
    """A Prometheus label value, escaped as the text format asks."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# -- HTTP ------------------------------------------------------------------------------------
ADMIN_SCOPE = "custom:gpusessions:admin"


class _Admin(HubOAuthenticated, web.RequestHandler):
    """Admins only: the custom scope (or admin:users, which hub admins hold)."""

    hub_scopes = {ADMIN_SCOPE, "admin:users"}

    def initialize(self, culler: Culler) -> None:
        self.culler = culler

    def check_xsrf_cookie(self) -> None:
        """Browser (cookie) requests need the page's XSRF token; token requests carry no cookie risk."""
        if self.request.headers.get("Authorization", "").lower().startswith(("token ", "bearer ")):
            return
        super().check_xsrf_cookie()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": self._reason}))


_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")), autoescape=True
)
COLUMNS = [
    ("user", "User"),
    ("server", "Server"),
    ("profile", "Profile"),
    ("queue", "Queue"),
    ("node", "Node / device"),
    ("state", "State"),
    ("gpu", "GPU memory and activity"),
    ("kernels", "Kernels"),
    ("notebook_idle_seconds", "Notebook idle"),
    ("gpu_idle_seconds", "GPU idle"),
    ("decision", "Culler"),
    ("seconds_left", "Time left"),
]


class PageHandler(_Admin):
    @web.authenticated
    def get(self) -> None:
        html = _TEMPLATES.get_template("admin.html").render(
            sessions=self.culler.describe(),
            columns=COLUMNS,
            dry_run=self.culler.policy.dry_run,
            xsrf=self.xsrf_token.decode(),
        )
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(html)


class SessionsHandler(_Admin):
    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(
            json.dumps(
                {
                    "sessions": self.culler.describe(),
                    "cycles": self.culler.cycles,
                    "last_cycle": iso(self.culler.last_cycle),
                    "dry_run": self.culler.policy.dry_run,
                    "error": self.culler.last_error,
                }
            )
        )


class ActionHandler(_Admin):
    @web.authenticated
    async def post(self, namespace: str, claim: str, action: str) -> None:
        if action == "release":
            if not await self.culler.release(namespace, claim):
                raise web.HTTPError(404, f"no session {namespace}/{claim}")
            body: Obj = {"released": True}
        elif action == "keep":
            data = json.loads(self.request.body or b"{}")
            until = data.get("until")
            ts = float(until) if isinstance(until, (int, float)) else parse_time(until)
            if ts is None:
                raise web.HTTPError(400, 'give "until" as unix seconds or an ISO time')
            await self.culler.keep(namespace, claim, ts)
            body = {"kept_until": iso(ts)}
        else:
            raise web.HTTPError(404)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(body))


class MetricsHandler(web.RequestHandler):
    def initialize(self, culler: Culler) -> None:
        self.culler = culler

    def get(self) -> None:
        self.set_header("Content-Type", "text/plain; version=0.0.4")
        self.write(self.culler.metrics())


def make_app(culler: Culler, prefix: str) -> web.Application:
    kw = {"culler": culler}
    return web.Application(
        [
            (prefix, PageHandler, kw),
            (url_path_join(prefix, "api/sessions"), SessionsHandler, kw),
            (url_path_join(prefix, r"api/sessions/([^/]+)/([^/]+)/(release|keep)"), ActionHandler, kw),
            (url_path_join(prefix, "metrics"), MetricsHandler, kw),
            (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
        ],
        cookie_secret=os.urandom(32),
        xsrf_cookies=True,
    )


async def run_forever(culler: Culler, interval: float) -> None:
    while True:
        started = time.monotonic()
        try:
            await culler.cycle()
            culler.last_error = None
        except Exception as e:  # the hub or the apiserver may be restarting: report, go on
            culler.last_error = f"{type(e).__name__}: {e}"
            log.warning("culler cycle failed: %s", culler.last_error)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
