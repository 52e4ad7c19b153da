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
    """The hub's answer to a cull: it stops the server unless it had the user's keep first."""

    def __init__(self, answer: str = "stopping") -> None:
        self.stopped: list[str] = []
        self.asked: list[tuple[str, float]] = []
        self.answer = answer

    async def cull_server(self, user: str, server: str, since: float, reason: str) -> str:
        self.asked.append((user, since))
        if self.answer == "stopping":
            self.stopped.append(user)
        return self.answer


class Claims:
    """The culler's claim watch as it holds the claims now."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}


class Cluster:
    def __init__(self) -> None:
        self.released: list[str] = []
        self.annotations: list[dict[str, Any]] = []
        self.claims = Claims()

    async def release(self, namespace: str, claim: str, holder: str | None) -> None:
        self.released.append(claim)

    async def annotate(self, namespace: str, claim: str, values: dict[str, Any]) -> None:
        self.annotations.append(values)


def session(**kw: Any) -> Session:
    a_mig_slice = dict(profile="p", request="h", size="MIG 1g.10gb")
    gpu = [{"uuid": "MIG-x", "busy": False, "last_busy": T0}]
    return make_session(T0, **{"running": True, **a_mig_slice, "gpu": gpu, **kw})


def culler(busy_on_second_look: bool, hub_answer: str = "stopping") -> tuple[Culler, Hub, Cluster]:
    hub, cluster = Hub(hub_answer), Cluster()
    c = Culler(cluster=cluster, hub=hub, policy=Policy())  # type: ignore[arg-type]

    async def agent(s: Session, fresh: bool = False) -> None:  # what the agent answers now
        # The last look asks the agent to read NVML now: a stale sample would not show the work.
        busy = busy_on_second_look and fresh
        s.gpu = [{"uuid": "MIG-x", "busy": busy, "last_busy": T0 + 100}]

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
    # idle since T0 + 100 (the last look), culled at T0 + 1800: ahead of the cull nobody waiting
    # would have made (the 1 h GPU-idle limit, at T0 + 3700) by 1900 s, times 1/7 of a GPU
    assert abs(rec["reclaimed"] - 1900 / 7) < 1e-6


def test_the_cull_acts_on_its_warning_and_a_keep_the_hub_had_first_calls_it_off() -> None:
    """The keep crossed the cull on its way (not yet in the culler's watch): the hub, which
    answers both, says `kept`; nothing is released or recorded, and the hub was asked with the
    time of the warning the cull acts on."""
    c, hub, cluster = culler(busy_on_second_look=False, hub_answer="kept")
    s = session(warned_at=T0 + 900)
    asyncio.run(c._act(s, Decision(CULL, "GPU idle", rule="gpu-idle-contended"), T0 + 1800))
    assert hub.asked == [("a", T0 + 900)]
    assert hub.stopped == [] and cluster.released == []
    assert c.actions["cull-called-off"] == 1 and not c.culls and not c.history.totals(0)
    # A server starting or stopping: put off to the next cycle, nothing released.
    c, hub, cluster = culler(busy_on_second_look=False, hub_answer="busy")
    asyncio.run(c._act(session(), Decision(CULL, "GPU idle", rule="gpu-idle-contended"), T0 + 1800))
    assert cluster.released == [] and not c.culls
    # A server already stopped by its user: the GPU is released all the same.
    c, hub, cluster = culler(busy_on_second_look=False, hub_answer="not-running")
    asyncio.run(c._act(session(), Decision(CULL, "GPU idle", rule="gpu-idle-contended"), T0 + 1800))
    assert cluster.released == ["gpu-a"] and c.culls["gpu-idle-contended"] == 1


def test_a_keep_clicked_after_the_cycles_snapshot_calls_the_cull_off() -> None:
    """The user answered the warning while the cycle's actions ran: the claim in the watch has a
    newer keep than the session the decision was made from."""
    c, hub, cluster = culler(busy_on_second_look=False)
    s = session()
    now = T0 + 1800
    ann = {"gpusessions.io/keep-until": str(now + 600), "gpusessions.io/kept-at": str(now - 1)}
    cluster.claims.objects[f"{s.namespace}/{s.claim}"] = {"metadata": {"annotations": ann}}
    asyncio.run(c._act(s, Decision(CULL, "GPU idle", rule="gpu-idle-contended"), now))
    assert hub.stopped == [] and cluster.released == []
    assert c.actions["cull-called-off"] == 1 and not c.culls


def test_a_keep_the_decision_already_knew_of_does_not_call_the_cull_off() -> None:
    """A keep that no longer holds (its keep_contended ran out while someone waits) is the one
    the session was decided with: the cull goes on."""
    c, hub, cluster = culler(busy_on_second_look=False)
    now = T0 + 1800
    s = session(keep_until=now + 3000, kept_at=now - 900)
    ann = {"gpusessions.io/keep-until": str(now + 3000), "gpusessions.io/kept-at": str(now - 900)}
    cluster.claims.objects[f"{s.namespace}/{s.claim}"] = {"metadata": {"annotations": ann}}
    asyncio.run(c._act(s, Decision(CULL, "GPU idle", rule="gpu-idle-contended"), now))
    assert hub.stopped == ["a"] and cluster.released == ["gpu-a"]


def test_the_culler_notes_when_a_server_it_saw_spawning_became_ready() -> None:
    c, _, _ = culler(busy_on_second_look=False)
    spawning = session(running=False, pending="spawn", server_started=T0 + 10)
    c._note_ready([spawning], T0 + 20)
    assert spawning.server_ready is None
    ready = session(server_started=T0 + 10)
    c._note_ready([ready], T0 + 50)
    assert ready.server_ready == T0 + 50
    later = session(server_started=T0 + 10)
    c._note_ready([later], T0 + 90)
    assert later.server_ready == T0 + 50, "the first sight of it ready, not each cycle's"
    # A server already running when the culler started: no sight of its start, no note.
    fresh, _, _ = culler(busy_on_second_look=False)
    running = session(server_started=T0 + 10)
    fresh._note_ready([running], T0 + 90)
    assert running.server_ready is None
