"""The culler never culls on a guess: every rule with a GPU that could not be read, the last
look before a cull, the agents read at a bounded concurrency and again within the cycle, and the
admin page's words for it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest
from tornado import web
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from gpusessions.culler.agents import AgentReader
from gpusessions.culler.contention import mark_contention
from gpusessions.culler.cycle import Culler
from gpusessions.culler.model import Session
from gpusessions.culler.policy import (
    CULL,
    NONE,
    RELEASE,
    UNWARN,
    WARN,
    Decision,
    Policy,
    Rules,
    decide,
)
from gpusessions.culler.summary import policy as policy_words

from .sessionfactory import make_session

H = 3600.0
T0 = 1_000_000.0
RULES = Rules(idle_limit=2 * H, gpu_idle_limit=4 * H, gpu_idle_limit_contended=1800, warn_before=600)
POLICY = Policy(RULES)
HUB_IDLE = Policy(dataclasses.replace(RULES, cull_unread_on_hub_idle=True))
IDLE_GPU = [{"uuid": "MIG-x", "busy": False, "last_busy": T0}]

# Every way a GPU goes unread: the agent did not answer, there is no holder, NVML failed, a
# device had no reading, the agent listed no device.
UNREAD: dict[str, dict[str, Any]] = {
    "agent unreachable": dict(gpu=[], gpu_error="agent unreachable: HTTP 599: Timeout"),
    "no holder": dict(gpu=[], gpu_error="no holder pod"),
    "nvml failed": dict(gpu=list(IDLE_GPU), gpu_error="NVML failed: lost"),
    "device error": dict(gpu=[{**IDLE_GPU[0], "error": "NVML: GPU is lost"}]),
    "no device": dict(gpu=[]),
}


def session(**kw: Any) -> Session:
    base: dict[str, Any] = dict(
        running=True,
        notebook_last_activity=T0,
        profile="mig-1g-10gb",
        request="h1g",
        size="MIG 1g.10gb",
        gpu=list(IDLE_GPU),
    )
    return make_session(T0, **{**base, **kw})


@pytest.fixture(params=sorted(UNREAD))
def unread(request: pytest.FixtureRequest) -> dict[str, Any]:
    return UNREAD[request.param]


def test_the_plain_idle_rule_needs_a_reading(unread: dict[str, Any]) -> None:
    """Notebook idle 10 h, warned long ago: with a reading it is culled, without one it is not."""
    now = T0 + 10 * H
    read = session(warned_at=T0 + 9 * H)
    assert read.gpu_read and decide(read, now, POLICY).action == CULL
    s = session(**unread)
    assert not s.gpu_read
    d = decide(s, now, POLICY)
    assert d.action == NONE and "could not be read" in d.reason
    # found warned (by a reading an earlier cycle had): the warning goes, no cull
    s.warned_at = T0 + 9 * H
    d = decide(s, now, POLICY)
    assert d.action == UNWARN and "could not be read" in d.reason


def test_the_gpu_idle_rule_needs_a_reading(unread: dict[str, Any]) -> None:
    """A tab open (notebook active), the GPU idle 5 h: only a read GPU is culled for it."""
    now = T0 + 5 * H
    read = session(notebook_last_activity=now, warned_at=now - H)
    d = decide(read, now, POLICY)
    assert d.action == CULL and d.rule == "gpu-idle"
    s = session(notebook_last_activity=now, **unread)
    assert decide(s, now, POLICY).action == NONE


def test_the_contended_rule_needs_a_reading(unread: dict[str, Any]) -> None:
    waiter = session(
        claim="gpu-b",
        user="b",
        allocated=False,
        running=False,
        pending="spawn",
        holder="gpu-holder-b",
        holder_phase="Pending",
        created=T0 + H,
    )
    now = T0 + H
    read = session(notebook_last_activity=now)
    mark_contention([read, waiter], now)
    assert read.waiters == 1 and decide(read, now, POLICY).rule == "gpu-idle-contended"
    s = session(notebook_last_activity=now, **unread)
    mark_contention([s, waiter], now)
    assert s.waiters == 0, "an unread GPU is not offered to a waiter"
    s.waiters = 1  # even if it were
    assert decide(s, now, POLICY).action == NONE


def test_hub_activity_alone_culls_an_unread_session_only_when_set(unread: dict[str, Any]) -> None:
    now = T0 + 2 * H - 300
    s = session(**unread)
    assert decide(s, now, POLICY).action == NONE  # the default: off
    d = decide(s, now, HUB_IDLE)
    assert d.action == WARN and d.rule == "idle-unread" and "could not be read" in d.reason
    s.warned_at = now
    d = decide(s, T0 + 2 * H + 300, HUB_IDLE)
    assert d.action == CULL and d.rule == "idle-unread"
    # activity on the hub's side keeps it
    active = session(notebook_last_activity=T0 + 2 * H, warned_at=now, **unread)
    assert decide(active, T0 + 2 * H + 300, HUB_IDLE).action == UNWARN
    # per profile, either way
    p = Policy(RULES, per_profile={"mig-1g-10gb": {"cull_unread_on_hub_idle": True}})
    assert decide(session(**unread), now, p).action == WARN
    assert decide(session(profile="other", **unread), now, p).action == NONE


def test_the_hub_idle_setting_changes_nothing_for_a_read_gpu() -> None:
    """A busy GPU with an idle notebook stays, the setting on or off."""
    busy = session(gpu=[{"uuid": "MIG-x", "busy": True, "last_busy": T0 + 10 * H}])
    assert decide(busy, T0 + 10 * H, HUB_IDLE).action == NONE


def test_rules_that_need_no_gpu_reading_still_apply(unread: dict[str, Any]) -> None:
    # the maximum age
    p = Policy(dataclasses.replace(RULES, max_age=8 * H))
    s = session(warned_at=T0 + 8 * H - 600, **unread)
    d = decide(s, T0 + 8 * H, p)
    assert d.action == CULL and d.rule == "max-age"
    # a stopped server's kept GPU
    s = session(running=False, stopped_since=T0, warned_at=T0 + H - 600, **unread)
    assert decide(s, T0 + H, POLICY).action == RELEASE


# -- the last look before a cull ---------------------------------------------------------------


class _Hub:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    async def cull_server(self, user: str, server: str, since: float, reason: str) -> str:
        self.stopped.append(user)
        return "stopping"


class _Cluster:
    def __init__(self) -> None:
        self.released: list[str] = []
        self.annotations: list[dict[str, Any]] = []
        self.claims = type("Claims", (), {"objects": {}})()

    async def release(self, namespace: str, claim: str, holder: str | None) -> None:
        self.released.append(claim)

    async def annotate(self, namespace: str, claim: str, values: dict[str, Any]) -> None:
        self.annotations.append(values)


@pytest.mark.parametrize(
    ("rule", "culled"),
    [
        ("idle", False),
        ("gpu-idle", False),
        ("gpu-idle-contended", False),
        ("idle-unread", True),
        ("max-age", True),
    ],
)
def test_a_gpu_unread_at_the_last_look_is_culled_only_by_a_rule_that_needs_no_reading(
    rule: str, culled: bool
) -> None:
    hub, cluster = _Hub(), _Cluster()
    c = Culler(cluster=cluster, hub=hub, policy=Policy())  # type: ignore[arg-type]
    c.agents = AgentReader(retry_timeout=0)  # the holder has no address: nothing to read
    s = session(holder="gpu-holder-a", holder_ip=None)
    asyncio.run(c._act(s, Decision(CULL, "idle", rule=rule), T0 + 10 * H))
    assert (cluster.released == ["gpu-a"]) is culled and (hub.stopped == ["a"]) is culled
    assert c.actions["cull-called-off"] == (0 if culled else 1)


# -- reading the agents ------------------------------------------------------------------------


class _Agents(web.RequestHandler):
    """Agents on loopback: `script` answers per address (a list of status codes, then 200)."""

    def initialize(self, state: dict[str, Any]) -> None:
        self.state = state

    async def get(self) -> None:
        st = self.state
        st["in_flight"] += 1
        st["most"] = max(st["most"], st["in_flight"])
        try:
            await asyncio.sleep(st["latency"])  # the agent's answer takes this long
            host = self.request.host.split(":")[0]
            codes = st["script"].get(host) or []
            st["asked"][host] = st["asked"].get(host, 0) + 1
            if codes:
                self.set_status(codes.pop(0))
                self.finish("busy")
                return
            body = {"nvml": {"ok": True}, "devices": [{"uuid": host, "busy": False, "last_busy": T0}]}
            self.finish(json.dumps(body))
        finally:
            st["in_flight"] -= 1


async def _serve(state: dict[str, Any], agents: int) -> tuple[HTTPServer, int]:
    """One server for `agents` agents at 127.0.0.1 ... 127.0.0.<agents>, all on one port."""
    server = HTTPServer(web.Application([(r"/api/status", _Agents, {"state": state})]))
    sock, port = bind_unused_port()  # a free port on 127.0.0.1, then the same on the others
    server.add_socket(sock)
    for i in range(2, agents + 1):
        server.listen(port, address=f"127.0.0.{i}")
    return server, port


def _state(latency: float, script: dict[str, list[int]] | None = None) -> dict[str, Any]:
    return {"latency": latency, "script": script or {}, "asked": {}, "in_flight": 0, "most": 0}


def _sessions(n: int) -> list[Session]:
    return [session(claim=f"gpu-{i}", holder=f"h{i}", holder_ip=f"127.0.0.{i + 1}", gpu=[]) for i in range(n)]


def test_every_agent_is_read_at_the_concurrency_set_and_no_read_times_out_in_a_queue() -> None:
    """60 agents answering in 0.1 s, 4 at once, each read given 0.8 s: all 60 read (1.5 s in
    all; a read that counted its time in a queue would time out past the 8th agent). The 0.8 s
    leaves a loaded 2-core machine room (0.3 s did not, in one CI run of make test)."""

    async def main() -> tuple[dict[str, Any], list[Session], AgentReader]:
        state = _state(0.1)
        server, port = await _serve(state, 60)
        reader = AgentReader(timeout=0.8, concurrency=4, retry_timeout=0, port=port)
        sessions = _sessions(60)
        try:
            await asyncio.gather(*(reader.read(s) for s in sessions))
        finally:
            server.stop()
            reader.close()
        return state, sessions, reader

    state, sessions, reader = asyncio.run(main())
    assert [s.gpu_error for s in sessions if not s.gpu_read] == []
    assert state["most"] == 4 and reader.reads == 60


def test_a_failing_agent_is_read_again_within_the_cycle_and_one_that_never_answers_is_unread() -> None:
    async def main() -> tuple[dict[str, Any], list[Session], AgentReader]:
        flaky, down = "127.0.0.1", "127.0.0.2"
        state = _state(0.0, {flaky: [503, 429], down: [503] * 1000})
        server, port = await _serve(state, 3)
        reader = AgentReader(timeout=1.0, concurrency=2, retry_timeout=1.0, port=port)
        sessions = _sessions(3)
        try:
            await asyncio.gather(*(reader.read(s) for s in sessions))
        finally:
            server.stop()
            reader.close()
        return state, sessions, reader

    state, (flaky, down, fine), _ = asyncio.run(main())
    assert flaky.gpu_read and state["asked"]["127.0.0.1"] == 3
    assert fine.gpu_read and state["asked"]["127.0.0.3"] == 1
    assert not down.gpu_read and "503" in (down.gpu_error or "") and state["asked"]["127.0.0.2"] > 2


def test_a_cycle_with_an_agent_that_does_not_answer_warns_nobody() -> None:
    """The whole cycle: the idle session whose agent answers is warned; the one whose agent
    refuses connections (nothing listens) is not, and the admin rows say why."""

    class Hub(_Hub):
        async def users(self) -> list[Any]:
            idle = {"ready": True, "last_activity": "1970-01-01T00:00:00Z"}
            return [{"name": u, "servers": {"": idle}} for u in ("a", "b")]

    class Cluster(_Cluster):
        def __init__(self, port_holders: dict[str, str]) -> None:
            super().__init__()
            claims, holders = {}, {}
            for user, ip in port_holders.items():
                ann = {"gpusessions.io/user": user, "gpusessions.io/server": ""}
                md = {"namespace": "ns", "name": f"gpu-{user}", "annotations": ann}
                md["labels"] = {"app.kubernetes.io/managed-by": "gpusessions"}
                md["creationTimestamp"] = "1970-01-01T00:00:00Z"
                claims[f"ns/gpu-{user}"] = {"metadata": md, "status": {}}
                on_claim = {"gpusessions.io/claim": f"gpu-{user}"}
                holders[f"ns/h-{user}"] = {
                    "metadata": {"namespace": "ns", "name": f"h-{user}", "annotations": on_claim},
                    "status": {"podIP": ip},
                }
            self.claims = type("C", (), {"objects": claims})()
            self.holders = type("C", (), {"objects": holders})()

        def node_names(self) -> None:
            return None

    async def main() -> tuple[Culler, _Cluster]:
        state = _state(0.0, {"127.0.0.3": [503] * 1000})  # b's agent answers 503 to every read
        server, port = await _serve(state, 3)
        cluster = Cluster({"a": "127.0.0.1", "b": "127.0.0.3"})
        c = Culler(cluster=cluster, hub=Hub(), policy=Policy(RULES))  # type: ignore[arg-type]
        c.agents = AgentReader(timeout=1.0, retry_timeout=0.3, port=port)
        try:
            await c.cycle(now=T0 + 10 * H)
        finally:
            server.stop()
            c.agents.close()
        return c, cluster

    c, cluster = asyncio.run(main())
    assert c.decisions["ns/gpu-a"].action == WARN
    assert c.decisions["ns/gpu-b"].action == NONE and "could not be read" in c.decisions["ns/gpu-b"].reason
    assert len(cluster.annotations) == 1 and c.unread == 1
    rows = {r["user"]: r for r in c.describe(T0 + 10 * H)}
    assert rows["b"]["gpu_idle_seconds"] is None and "503" in rows["b"]["gpu_error"]


# -- the admin page says the rule as it works -------------------------------------------------


def test_the_admin_page_states_the_unread_rule_from_the_settings() -> None:
    off = " ".join(policy_words(POLICY)["lines"])
    assert "never counted as idle" in off and "not even the idle limit" in off
    on = " ".join(policy_words(HUB_IDLE)["lines"])
    assert "not even the idle limit" not in on
    assert "the idle limit (2.0 h) still culls it on the notebook's activity alone" in on
    aged = " ".join(policy_words(Policy(Rules(max_age=86400)))["lines"])
    assert "the maximum age (24.0 h) still ends it" in aged
    per = " ".join(policy_words(Policy(RULES, {"a100": {"cull_unread_on_hub_idle": True}}))["lines"])
    assert "Sessions of a100 may be culled on the notebook's activity alone." in per
