"""Benchmark: the culler reads 5,000 agents over HTTP on loopback, every one in every cycle.

    .venv/bin/python tests/bench/bench_agents.py [--sessions 5000] [--concurrency 100,250]
        [--latency 0.02,0.1] [--cycles 2] [--json out.json]

5,000 agents answer on their own loopback addresses (127.240.0.1 ... : one listening socket
each, in a second process, so the culler's CPU is its own), each request after a latency drawn
uniformly from 20-100 ms, with a body shaped like a real agent's. The culler runs whole cycles
(`Culler.cycle()`: join, read every agent, decide, act) on in-memory stand-ins for the watches
and the hub, with its real `AgentReader` at each concurrency given.

Reported per concurrency: the cycle's wall time against the physical limit of that concurrency
(sessions x mean latency / concurrency: what reads in flight, never more, can do), the culler's
CPU per cycle (and per read) against the cycle time, and the sessions whose GPU was not read
(must be 0). The "before" line is the read as it was: every agent at once through tornado's
shared client (10 connections), each request timing out 2 s after it was queued.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster"), str(Path(__file__).parent)]

from bench_culler import FakeCluster, FakeHub  # noqa: E402  (the culler benchmark's cluster and hub)
from tornado.httpclient import AsyncHTTPClient, HTTPRequest  # noqa: E402

from gpusessions.core.timestamps import rfc3339 as iso  # noqa: E402
from gpusessions.culler.agents import AgentReader  # noqa: E402
from gpusessions.culler.cycle import Culler  # noqa: E402
from gpusessions.culler.policy import Policy, Rules  # noqa: E402

NET = "127.240"  # above every block the local clusters use (127.1 ... 127.196)


def address(i: int) -> str:
    return f"{NET}.{i // 250}.{i % 250 + 1}"


def body(i: int, now: float) -> bytes:
    """What an agent answers (one MIG slice, a kept kernel), about 600 bytes."""
    doc = {
        "nvml": {"ok": True, "error": None},
        "busy_threshold_percent": 5.0,
        "devices": [
            {
                "uuid": f"MIG-{i:08d}-0000-0000-0000-000000000000",
                "kind": "mig",
                "name": "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
                "memory_used": 2**30,
                "memory_total": 10 * 2**30,
                "processes": 1,
                "activity": 0.0 if i % 3 else 42.0,
                "activity_source": "gpm-sm-activity",
                "busy": i % 3 == 0,
                "last_busy": now if i % 3 == 0 else now - 5000,
                "error": None,
            }
        ],
        "kernels": [{"id": f"k{i}", "execution_state": "idle", "gpu_memory": 2**30}],
        "kernels_error": None,
    }
    return json.dumps(doc).encode()


# -- the agents (a second process) ---------------------------------------------------------------


class _Agent(asyncio.Protocol):
    """A minimal HTTP/1.1 server: one answer per connection, after its latency."""

    def __init__(self, answer: bytes, low: float, high: float, served: list[int]) -> None:
        self.answer, self.low, self.high, self.served = answer, low, high, served
        self.buf = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if b"\r\n\r\n" in self.buf:
            delay = random.uniform(self.low, self.high)
            asyncio.get_running_loop().call_later(delay, self._answer)

    def _answer(self) -> None:
        if self.transport.is_closing():
            return
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(self.answer)}\r\n"
        self.transport.write(head.encode() + b"Connection: close\r\n\r\n" + self.answer)
        self.transport.close()
        self.served[0] += 1


def _agents_main(n: int, port: int, low: float, high: float, ready: Any, stop: Any, out: Any) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        served = [0]
        now = time.time()
        servers = []
        for i in range(n):
            answer = body(i, now)
            s = await loop.create_server(
                lambda a=answer: _Agent(a, low, high, served),
                address(i),
                port,
                backlog=64,
                reuse_address=True,
            )
            servers.append(s)
        ready.set()
        await asyncio.to_thread(stop.wait)
        out.put({"served": served[0], "cpu_s": time.process_time()})
        for s in servers:
            s.close()

    asyncio.run(main())


# -- the culler's side -----------------------------------------------------------------------------


def world(n: int, now: float) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    claims, holders, users = {}, {}, []
    for i in range(n):
        user = f"user{i:05d}"
        claims[f"jhub/gpu-{user}"] = {
            "metadata": {
                "namespace": "jhub",
                "name": f"gpu-{user}",
                "creationTimestamp": iso(now - 3600),
                "labels": {"app.kubernetes.io/managed-by": "gpusessions"},
                "annotations": {"gpusessions.io/user": user, "gpusessions.io/server": ""},
            },
            "status": {},
        }
        holders[f"jhub/gpu-holder-{user}"] = {
            "metadata": {
                "namespace": "jhub",
                "name": f"gpu-holder-{user}",
                "annotations": {"gpusessions.io/claim": f"gpu-{user}"},
            },
            "status": {"podIP": address(i), "containerStatuses": [{"restartCount": 0}]},
        }
        # An open tab: the notebook active, so no cull or warning (this measures the reads).
        users.append({"name": user, "servers": {"": {"ready": True, "last_activity": iso(now)}}})
    return claims, holders, users


async def _cycles(n: int, port: int, concurrency: int, cycles: int) -> dict[str, Any]:
    now = time.time()
    claims, holders, users = world(n, now)
    reader = AgentReader(timeout=2.0, concurrency=concurrency, retry_timeout=10.0, port=port)
    culler = Culler(
        FakeCluster(claims, holders),
        FakeHub(users),
        Policy(Rules(gpu_idle_limit=0, gpu_idle_limit_contended=0)),
        agents=reader,
    )  # type: ignore[arg-type]
    walls, cpus, unread = [], [], []
    for _ in range(cycles):
        c0, w0 = time.process_time(), time.monotonic()
        await culler.cycle()
        walls.append(time.monotonic() - w0)
        cpus.append(time.process_time() - c0)
        unread.append(culler.unread)
    reader.close()
    return {"walls": walls, "cpus": cpus, "unread": unread, "reads": reader.reads, "retries": reader.retries}


async def _before(n: int, port: int) -> dict[str, Any]:
    """The read as it was: all at once through tornado's shared client, 2 s per request."""
    client = AsyncHTTPClient()
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        req = HTTPRequest(f"http://{address(i)}:{port}/api/status", request_timeout=2.0, connect_timeout=2.0)
        try:
            json.loads((await client.fetch(req)).body)
        except Exception:
            failed += 1

    w0 = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(n)))
    return {"wall_s": time.monotonic() - w0, "unread": failed}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((address(0), 0))
        return int(s.getsockname()[1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=5000)
    ap.add_argument("--concurrency", default="100,250", help="comma-separated")
    ap.add_argument("--latency", default="0.02,0.1", help="low,high seconds (uniform)")
    ap.add_argument("--cycles", type=int, default=2, help="cycles per concurrency")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    low, high = (float(x) for x in args.latency.split(","))
    mean = (low + high) / 2
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.sessions + 4096)), hard))
    port = _free_port()
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    agents = ctx.Process(target=_agents_main, args=(args.sessions, port, low, high, ready, stop, out))
    t0 = time.monotonic()
    agents.start()
    if not ready.wait(300):
        raise SystemExit("the agents did not start listening within 300 s")
    print(f"{args.sessions} agents listening on {NET}.x:{port} in {time.monotonic() - t0:.1f} s", flush=True)
    runs: list[dict[str, Any]] = []
    try:
        before = asyncio.run(_before(args.sessions, port))
        for conc in [int(c) for c in args.concurrency.split(",")]:
            r = asyncio.run(_cycles(args.sessions, port, conc, args.cycles))
            limit = args.sessions * mean / conc
            wall, cpu = min(r["walls"]), min(r["cpus"])
            runs.append(
                {
                    "concurrency": conc,
                    "cycle_s": [round(w, 2) for w in r["walls"]],
                    "physical_limit_s": round(limit, 2),
                    "cycle_vs_limit": round(wall / limit, 2),
                    "culler_cpu_s": [round(c, 2) for c in r["cpus"]],
                    "culler_cpu_vs_cycle": round(cpu / wall, 2),
                    "culler_cpu_ms_per_read": round(1000 * cpu / args.sessions, 3),
                    "unread": r["unread"],
                    "reads": r["reads"],
                    "retries": r["retries"],
                }
            )
    finally:
        stop.set()
        agent_side = out.get(timeout=60)
        agents.join(60)
    print(f"before (tornado's shared client, 10 connections, all at once): {before}")
    print(
        "| concurrency | cycle | limit (n x mean latency / concurrency) | cycle / limit | culler CPU "
        "| CPU / cycle | CPU per read | not read |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in runs:
        print(
            f"| {r['concurrency']} | {' / '.join(f'{w} s' for w in r['cycle_s'])} "
            f"| {r['physical_limit_s']} s "
            f"| {r['cycle_vs_limit']} | {' / '.join(f'{c} s' for c in r['culler_cpu_s'])} "
            f"| {r['culler_cpu_vs_cycle']} | {r['culler_cpu_ms_per_read']} ms | {r['unread']} |"
        )
    print(f"agents' process: {agent_side}; cores: {os.cpu_count()}")
    if args.json:
        doc = {
            "command": f"tests/bench/bench_agents.py --sessions {args.sessions} "
            f"--concurrency {args.concurrency} --latency {args.latency} --cycles {args.cycles}",
            "date": time.strftime("%Y-%m-%d"),
            "figures": {
                "sessions": args.sessions,
                "latency_s": [low, high],
                "before": {k: round(v, 2) if isinstance(v, float) else v for k, v in before.items()},
                "runs": runs,
                "agents_process": agent_side,
            },
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0 if all(not any(r["unread"]) for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
