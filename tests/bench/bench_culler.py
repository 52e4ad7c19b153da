"""Benchmark: one culler cycle over 10,000 GPU sessions.

    .venv/bin/python tests/bench/bench_culler.py [--sessions 10000] [--json out.json]

Runs `Culler.cycle()` (join claims, holders and hub users; decide; act) on
in-memory stand-ins for the watch caches, the hub API (pages of 200 users,
counted) and the agents (answering at once), so the figure is the culler's own
CPU per cycle and the number of API calls it makes. A third of the sessions
are running and busy, a third running and idle past the limit, a third stopped
past the keep time: the cycle warns 6,667 of them (one annotation patch each).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT / "devcluster")]

from gpusessions.core.timestamps import rfc3339 as iso  # noqa: E402
from gpusessions.culler.cycle import Culler  # noqa: E402
from gpusessions.culler.policy import Policy, Rules  # noqa: E402
from localcluster.testing import allocation_status  # noqa: E402


class Cache:
    def __init__(self, objects: dict[str, Any]):
        self.objects = objects


class FakeCluster:
    def __init__(self, claims: dict[str, Any], holders: dict[str, Any]):
        self.claims, self.holders = Cache(claims), Cache(holders)
        self.calls = 0

    def node_names(self) -> set[str] | None:
        return None  # every node is there

    async def annotate(self, *a: Any) -> None:
        self.calls += 1

    async def release(self, *a: Any) -> None:
        self.calls += 2

    async def delete_holder(self, *a: Any) -> None:
        self.calls += 1


class FakeHub:
    def __init__(self, users: list[Any], page: int = 200):
        self._users, self.page, self.calls = users, page, 0

    async def users(self) -> list[Any]:
        self.calls += -(-len(self._users) // self.page)
        return self._users

    async def stop_server(self, *a: Any) -> bool:
        self.calls += 1
        return True

    async def cull_server(self, *a: Any) -> str:
        self.calls += 1
        return "stopping"


def world(n: int, now: float) -> tuple[dict[str, Any], dict[str, Any], list[Any], dict[str, Any]]:
    claims, holders, users, gpu = {}, {}, [], {}
    for i in range(n):
        user, ns = f"user{i:05d}", "jhub"
        kind = i % 3
        ann = {
            "gpusessions.io/user": user,
            "gpusessions.io/server": "",
            "gpusessions.io/profile": "mig-1g-10gb",
        }
        if kind == 2:
            ann["gpusessions.io/stopped-since"] = str(now - 4000)
        claims[f"{ns}/gpu-{user}"] = {
            "metadata": {
                "namespace": ns,
                "name": f"gpu-{user}",
                "creationTimestamp": iso(now - 3600),
                "labels": {"app.kubernetes.io/managed-by": "gpusessions"},
                "annotations": ann,
            },
            "status": allocation_status(f"n{i // 50}", f"d{i % 50}", f"n{i // 50}"),
        }
        holders[f"{ns}/gpu-holder-{user}"] = {
            "metadata": {
                "namespace": ns,
                "name": f"gpu-holder-{user}",
                "annotations": {"gpusessions.io/claim": f"gpu-{user}"},
            },
            "status": {
                "podIP": f"127.1.{i // 250}.{i % 250 + 1}",
                "containerStatuses": [{"restartCount": 0}],
            },
        }
        users.append({"name": user, "servers": {"": {"ready": kind != 2, "last_activity": iso(now - 5000)}}})
        gpu[user] = [{"uuid": f"MIG-{i}", "busy": kind == 0, "last_busy": now if kind == 0 else now - 5000}]
    return claims, holders, users, gpu


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", type=int, default=10000)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    now = time.time()
    claims, holders, users, gpu = world(args.sessions, now)
    cluster, hub = FakeCluster(claims, holders), FakeHub(users)
    culler = Culler(cluster, hub, Policy(Rules(stopped_keep=3600, idle_limit=3600, warn_before=900)))  # type: ignore[arg-type]

    async def agent(s: Any) -> None:  # the agents answer at once
        s.gpu = gpu[s.user]

    culler._agent = agent  # type: ignore[method-assign]
    t0 = time.process_time()
    decided = asyncio.run(culler.cycle(now))
    cpu = time.process_time() - t0
    t0 = time.process_time()
    rows = culler.describe(now)
    describe_cpu = time.process_time() - t0
    actions = {a: n for a, n in culler.actions.items()}
    print(
        "| sessions | culler CPU per cycle | hub API calls | Kubernetes API calls | actions | sessions JSON |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {len(decided)} | {cpu * 1000:.0f} ms | {hub.calls} | {cluster.calls} (no list: watches) "
        f"| {actions} | {describe_cpu * 1000:.0f} ms for {len(rows)} rows |"
    )
    if args.json:
        figures = {
            "sessions": len(decided),
            "cycle_cpu_ms": round(cpu * 1000, 1),
            "hub_api_calls": hub.calls,
            "kubernetes_api_calls": cluster.calls,
            "actions": actions,
            "sessions_json_ms": round(describe_cpu * 1000, 1),
            "sessions_json_rows": len(rows),
        }
        doc = {
            "command": f"tests/bench/bench_culler.py --sessions {args.sessions}",
            "date": time.strftime("%Y-%m-%d"),
            "figures": figures,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
