"""The GPU agent answers only the culler and its own session: the real agent app and server
(guard.py's limits) on the simulated NVML, and the agent process itself under a flood."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.testing import AsyncHTTPTestCase, gen_test

from gpusessions.agent import fakenvml, guard
from gpusessions.agent.server import AgentState, make_app
from gpusessions.core.claims import AGENT_PORT
from gpusessions.culler.agents import AgentReader
from gpusessions.culler.cycle import Culler
from gpusessions.culler.model import Session
from gpusessions.culler.policy import Policy, Rules
from gpusessions.hub.spawnersettings import GPUSessionSettings

GPU = "GPU-11111111-1111-1111-1111-111111111111"
CULLER, SESSION = "culler-token", "session-token"


def _nvml(tmp: Path) -> tuple[Path, Path]:
    control = tmp / "load.json"
    control.write_text("{}")
    cfg = {"control": str(control), "gpus": [{"uuid": GPU, "name": "H100", "arch": "hopper"}]}
    (tmp / "nvml.json").write_text(json.dumps(cfg))
    return tmp / "nvml.json", control


class _AgentServerCase(AsyncHTTPTestCase):
    """The real agent app on the simulated NVML, served by the agent's own HTTP server."""

    def setUp(self) -> None:
        import tempfile

        config, self.load = _nvml(Path(tempfile.mkdtemp()))
        fakenvml.configure(str(config))
        self.state = AgentState(load_nvml=lambda: fakenvml, visible=GPU, busy_threshold=5)
        self.state.sample()
        super().setUp()

    def get_app(self) -> Any:
        return make_app(self.state, token=CULLER, session_token=SESSION)

    def get_http_server(self) -> HTTPServer:
        return guard.AgentHTTPServer(self._app, **guard.server_options())

    def _get(self, path: str, token: str | None = None, **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        return self.fetch(path, headers=headers, **kw)


class AgentGuardTest(_AgentServerCase):
    def test_a_missing_or_wrong_token_is_refused_on_every_page_but_healthz(self) -> None:
        for path in ("/api/status", "/api/status?fresh=1", "/metrics", "/nope"):
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": CULLER}):
                r = self.fetch(path, headers=headers)
                assert r.code == 401, (path, headers, r.code)
                assert json.loads(r.body) == {"status": 401, "message": "missing or wrong agent token"}
                assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert self.fetch("/healthz").body == b"ok"
        assert self._get("/nope", CULLER).code == 404
        assert b"no such page on the GPU agent" in self._get("/nope", CULLER).body

    def test_the_agent_takes_no_body(self) -> None:
        sampled = self.state.sampled_at
        for token, code in ((None, 401), ("wrong", 401), (CULLER, 413), (SESSION, 413)):
            r = self._get("/api/status?fresh=1", token, method="POST", body=b"x" * 100)
            assert r.code == code, (token, r.code)
        r = self._get("/metrics", CULLER, method="PUT", body=b"{}")
        assert (r.code, json.loads(r.body)["message"]) == (413, "the agent takes no request body")
        assert self.fetch("/healthz", method="POST", body=b"x").code == 413
        assert self.state.sampled_at == sampled, "a refused request reads nothing"
        # A body the server may not even buffer (over guard.MAX_BODY_BYTES): still 401 or 413.
        big = b"x" * (guard.MAX_BODY_BYTES * 4)
        assert self._get("/api/status", None, method="POST", body=big).code == 401
        assert self._get("/api/status", CULLER, method="POST", body=big).code == 413

    def test_fresh_reads_are_limited_per_caller(self) -> None:
        self.load.write_text(json.dumps({GPU: {"activity": 90, "processes": 1}}))
        self.state.sampled_at = (self.state.sampled_at or 0) - 5  # the last sample is old
        first = json.loads(self._get("/api/status?fresh=1", SESSION).body)
        assert first["fresh"] is True and first["devices"][0]["busy"] is True
        self.load.write_text(json.dumps({GPU: {"activity": 0}}))
        again = json.loads(self._get("/api/status?fresh=1", SESSION).body)
        assert again["fresh"] is False and again["devices"][0]["busy"] is True, "the last sample"
        assert "at most one fresh read per 1 s per caller" in again["fresh_refused"]
        # The culler is another caller: its fresh read is its own.
        self.state.sampled_at -= 1
        culler = json.loads(self._get("/api/status?fresh=1", CULLER).body)
        assert culler["fresh"] is True and culler["devices"][0]["busy"] is False
        plain = json.loads(self._get("/api/status", SESSION).body)
        assert "fresh" not in plain

    @gen_test
    async def test_connections_per_peer_are_capped(self) -> None:
        from tornado.iostream import IOStream

        streams = []
        for _ in range(guard.MAX_CONNECTIONS_PER_PEER):
            s = IOStream(socket.socket())
            await s.connect(("127.0.0.1", self.get_http_port()))
            streams.append(s)
        over = IOStream(socket.socket())
        await over.connect(("127.0.0.1", self.get_http_port()))
        await over.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await over.read_until_close() == b"", "closed at once, unanswered"
        streams.pop().close()  # one goes: a new one is served
        for _ in range(50):
            server: Any = self.http_server
            if sum(server.per_peer.values()) < guard.MAX_CONNECTIONS_PER_PEER:
                break
            await _sleep(0.02)
        ok = IOStream(socket.socket())
        await ok.connect(("127.0.0.1", self.get_http_port()))
        await ok.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert (await ok.read_until_close()).endswith(b"ok")
        for s in streams:
            s.close()


class HolderPeersTest(_AgentServerCase):
    """On a real cluster (the pod's IP is not loopback), every loopback address and the pod's
    own IP are one peer, "self": the user's cells in the holder's kernels cannot flood their own
    agent past one peer's share (an unread GPU is never culled, so that would make the session
    immune to the culler)."""

    def get_http_server(self) -> HTTPServer:
        own = frozenset({"10.1.2.3"})
        return guard.AgentHTTPServer(self._app, own_addresses=own, **guard.server_options())

    @gen_test
    async def test_loopback_addresses_share_the_holders_quota(self) -> None:
        from tornado.iostream import IOStream

        streams = []
        for i in range(guard.MAX_CONNECTIONS_PER_PEER):
            sock = socket.socket()
            sock.bind((f"127.0.0.{2 + i}", 0))  # a new source address each time
            s = IOStream(sock)
            await s.connect(("127.0.0.1", self.get_http_port()))
            streams.append(s)
        sock = socket.socket()
        sock.bind(("127.0.0.200", 0))
        over = IOStream(sock)
        await over.connect(("127.0.0.1", self.get_http_port()))
        await over.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert await over.read_until_close() == b"", "closed at once: loopback is one peer here"
        server: Any = self.http_server
        assert server.per_peer == {"self": guard.MAX_CONNECTIONS_PER_PEER}
        for s in streams:
            s.close()


def test_peer_key_groups_the_holders_own_addresses() -> None:
    own = frozenset({"10.1.2.3"})
    assert guard.peer_key("127.0.0.1", own) == guard.peer_key("127.9.9.9", own) == "self"
    assert guard.peer_key("::1", own) == guard.peer_key("10.1.2.3", own) == "self"
    assert guard.peer_key("10.1.2.4", own) == "10.1.2.4"  # the culler, the notebook: their own
    # The local cluster: pods on 127.x, the culler on loopback too: each address its own.
    local = frozenset({"127.0.5.3"})
    assert guard.peer_key("127.0.0.1", local) == "127.0.0.1"
    assert guard.peer_key("127.0.5.3", local) == "self"
    assert guard.peer_key("127.0.0.1", frozenset()) == "127.0.0.1"
    assert guard.peer_key("not an ip", own) == "not an ip"


async def _sleep(seconds: float) -> None:
    import asyncio

    await asyncio.sleep(seconds)


def test_the_fresh_limiter_forgets_the_oldest_callers() -> None:
    f = guard.FreshLimiter(interval=1.0, max_callers=2)
    assert f.allow("a", 0) and not f.allow("a", 0.5) and f.allow("a", 1.0)
    assert f.allow("b", 1.0) and f.allow("c", 1.0)
    assert f.allow("a", 1.1), "'a' was forgotten (three callers, two kept)"


def test_caller_names_the_token_shown() -> None:
    tokens = {"culler": CULLER, "session": SESSION}
    assert guard.caller(f"Bearer {CULLER}", tokens) == "culler"
    assert guard.caller(f"token {SESSION}", tokens) == "session"
    assert guard.caller("Basic abc", tokens) is None
    assert guard.caller("Bearer ", {"culler": CULLER, "session": ""}) is None


# -- the agent process under a flood ------------------------------------------------------


def _agent_ip() -> str:
    """A loopback address of this test's own (the culler reads port AGENT_PORT of a pod IP)."""
    base = int(os.environ.get("DEVCLUSTER_PORT_BASE", "7443"))
    return f"127.254.{base % 250}.{os.getpid() % 250 + 1}"


def _flood(ip: str, stop: threading.Event, counts: dict[str, int], kind: str) -> None:
    """One flooding caller from 127.0.0.2: huge bodies, idle connections, fresh reads."""
    while not stop.is_set():
        s = socket.socket()
        s.settimeout(2)
        try:
            s.bind(("127.0.0.2", 0))
            s.connect((ip, AGENT_PORT))
            if kind == "body":
                s.sendall(
                    b"POST /api/status HTTP/1.1\r\nHost: a\r\nContent-Length: 100000000\r\n"
                    + f"Authorization: Bearer {SESSION}\r\n\r\n".encode()
                    + b"x" * 65536
                )
            elif kind == "idle":
                stop.wait(0.5)  # holds a connection, sends nothing
            else:
                s.sendall(
                    b"GET /api/status?fresh=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
                    + f"Authorization: Bearer {SESSION}\r\n\r\n".encode()
                )
            head = s.recv(64)
            counts[head[9:12].decode() or "closed"] = counts.get(head[9:12].decode() or "closed", 0) + 1
        except OSError:
            counts["error"] = counts.get("error", 0) + 1
        finally:
            s.close()


def _rss_peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_the_culler_reads_its_agent_while_another_caller_floods_it(tmp_path: Path) -> None:
    """A flood of huge bodies, idle connections and fresh reads from another caller: the
    culler's read (its own code, its timeout) still answers, fresh, every time; the agent's
    memory stays far below the holder container's limit."""
    import asyncio

    config, _ = _nvml(tmp_path)
    ip = _agent_ip()
    env = {
        **os.environ,
        "GPUSESSIONS_FAKE_NVML": str(config),
        "NVIDIA_VISIBLE_DEVICES": GPU,
        "GPUSESSIONS_AGENT_TOKEN": CULLER,
        "GPUSESSIONS_KERNELS_TOKEN": SESSION,
    }
    log = (tmp_path / "agent.log").open("wb")
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpusessions.agent", "--ip", ip, "--port", str(AGENT_PORT)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    stop = threading.Event()
    counts: dict[str, int] = {}
    threads = []
    try:
        deadline = time.monotonic() + 20
        while True:  # the witness: the agent answers its health check
            try:
                with socket.create_connection((ip, AGENT_PORT), timeout=1) as s:
                    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                    if s.recv(64).startswith(b"HTTP/1.1 200"):
                        break
            except OSError:
                assert agent.poll() is None, (tmp_path / "agent.log").read_text()
                assert time.monotonic() < deadline, "the agent did not start"
                time.sleep(0.1)
        threads = [
            threading.Thread(target=_flood, args=(ip, stop, counts, kind), daemon=True)
            for kind in ["body"] * 8 + ["idle"] * 40 + ["fresh"] * 8
        ]
        for t in threads:
            t.start()
        culler = Culler(None, None, Policy(Rules()), agents=AgentReader(token=CULLER))  # type: ignore[arg-type]

        async def reads() -> list[tuple[float, Session]]:
            out = []
            for _ in range(10):
                s = Session("ns", "gpu-x", "x", "", holder_ip=ip)
                started = time.monotonic()
                await culler._agent(s, fresh=True)  # the culler's last look before a cull
                out.append((time.monotonic() - started, s))
                await asyncio.sleep(0.2)
            return out

        results = asyncio.run(reads())
    finally:
        stop.set()
        for t in threads:
            t.join(5)
        peak = _rss_peak_kib(agent.pid) if agent.poll() is None else 0
        agent.terminate()
        agent.wait(10)
        log.close()
    for took, s in results:
        assert s.gpu_error is None and s.gpu and s.gpu[0]["uuid"] == GPU, s.gpu_error
        assert took < culler.agents.timeout, took
    flooded = sum(counts.values())
    assert counts.get("413", 0) > 0 and counts.get("200", 0) > 0, counts  # the flood was answered
    print(
        f"\nflood: {flooded} requests {counts}; culler reads {max(t for t, _ in results):.3f}s at most; "
        f"agent RSS peak {peak / 1024:.1f} MiB"
    )
    limit = GPUSessionSettings.class_traits()["holder_resources"].default()["limits"]["memory"]
    assert limit.endswith("Mi") and 0 < peak < int(limit[:-2]) * 1024 / 2, (
        f"RSS peak {peak} KiB, limit {limit}"
    )
