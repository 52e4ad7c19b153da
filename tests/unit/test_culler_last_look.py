"""The culler looks at a session's GPU once more just before a cull, and records what it did."""

from __future__ import annotations

import asyncio
from typing import Any

from gpusessions.culler.cycle import Culler
from gpusessions.culler.model import Session
from gpusessions.culler.policy import CULL, WARN, Decision, Policy

from .sessionfactory import make_session

T0 = 1_000_000_000.0


class Hub:
    def __init__(self) -> None:
        self.stopped: list[str] = []

    async def stop_server(self, user: str, server: str) -> None:
        self.stopped.append(user)


class Cluster:
    def __init__(self) -> None:
        self.released: list[str] = []
        self.annotations: list[dict[str, Any]] = []

    async def release(self, namespace: str, claim: str, holder: str | None) -> None:
        self.released.append(claim)

    async def annotate(self, namespace: str, claim: str, values: dict[str, Any]) -> None:
        self.annotations.append(values)


def session(**kw: Any) -> Session:
    a_mig_slice = dict(profile="p", request="h", size="MIG 1g.10gb")
    gpu = [{"uuid": "MIG-x", "busy": False, "last_busy": T0}]
    return make_session(T0, **{"running": True, **a_mig_slice, "gpu": gpu, **kw})


def culler(busy_on_second_look: bool) -> tuple[Culler, Hub, Cluster]:
    hub, cluster = Hub(), Cluster()
    c = Culler(cluster=cluster, hub=hub, policy=Policy())  # type: ignore[arg-type]

    async def agent(s: Session) -> None:  # what the agent answers now
        s.gpu = [{"uuid": "MIG-x", "busy": busy_on_second_look, "last_busy": T0 + 100}]

    c._agent = agent  # type: ignore[method-assign]
    return c, hub, cluster


def test_a_gpu_busy_again_at_the_last_look_is_not_culled() -> None:
    c, hub, cluster = culler(busy_on_second_look=True)
    asyncio.run(c._act(session(), Decision(CULL, "GPU idle", rule="gpu-idle-contended"), T0 + 3600))
    assert hub.stopped == [] and cluster.released == []
    assert c.actions["cull-called-off"] == 1 and not c.culls
    assert not c.history.totals(0)


def test_a_gpu_still_idle_is_culled_and_the_reclaim_recorded() -> None:
    c, hub, cluster = culler(busy_on_second_look=False)
    s = session()
    asyncio.run(c._act(s, Decision(WARN, "GPU idle", T0 + 1800, rule="gpu-idle-contended"), T0 + 900))
    asyncio.run(c._act(s, Decision(CULL, "GPU idle", rule="gpu-idle-contended"), T0 + 1800))
    assert hub.stopped == ["a"] and cluster.released == ["gpu-a"]
    assert c.culls["gpu-idle-contended"] == 1
    rec = c.history.totals(0)[("p", "")]
    assert rec["warnings"] == 1 and rec["culls"] == 1 and rec["reclaims"] == 1
    # idle since T0 + 100 (the last look), culled at T0 + 1800: 2 h (the plain idle limit) ahead
    # of it by 5500 s, times 1/7 of a GPU
    assert abs(rec["reclaimed"] - 5500 / 7) < 1e-6
