"""The culling policy, decision by decision (pure)."""

from __future__ import annotations

import pytest

from gpusessions.culler.model import Session, join
from gpusessions.culler.policy import (
    CLEAR_STOPPED,
    CULL,
    MARK_STOPPED,
    NONE,
    ORPHAN,
    RELEASE,
    UNWARN,
    WARN,
    Policy,
    Rules,
    decide,
)

H = 3600.0
RULES = Rules(stopped_keep=H, idle_limit=2 * H, max_age=0, warn_before=600, orphan_grace=300)
POLICY = Policy(RULES)
T0 = 1_000_000.0


def running(**kw: object) -> Session:
    base = dict(
        namespace="ns",
        claim="gpu-a",
        user="a",
        server="",
        created=T0,
        allocated=True,
        hub_user=True,
        hub_server=True,
        running=True,
        notebook_last_activity=T0,
    )
    base.update(kw)
    return Session(**base)  # type: ignore[arg-type]


def gpu(busy: bool = False, last_busy: float | None = None) -> list[dict]:
    return [{"uuid": "MIG-x", "busy": busy, "last_busy": last_busy}]


def test_busy_gpu_with_idle_browser_is_never_culled() -> None:
    s = running(gpu=gpu(busy=True, last_busy=T0 + 10 * H))
    assert decide(s, T0 + 10 * H, POLICY).action == NONE


def test_recent_gpu_activity_counts_as_activity() -> None:
    s = running(gpu=gpu(busy=False, last_busy=T0 + 5 * H))
    assert decide(s, T0 + 6 * H, POLICY).action == NONE  # idle 1 h < 2 h


def test_idle_on_both_counts_is_warned_then_culled() -> None:
    s = running(gpu=gpu(last_busy=T0))
    d = decide(s, T0 + 2 * H - 900, POLICY)
    assert d.action == NONE and d.at == T0 + 2 * H
    d = decide(s, T0 + 2 * H - 300, POLICY)
    # The cull comes no sooner than warn_before after the warning.
    assert d.action == WARN and d.at == T0 + 2 * H + 300
    s.warned_at = T0 + 2 * H - 300
    assert decide(s, T0 + 2 * H - 1, POLICY).action == NONE
    assert decide(s, T0 + 2 * H + 299, POLICY).action == NONE  # the warning has not stood long enough
    d = decide(s, T0 + 2 * H + 300, POLICY)
    assert d.action == CULL and "idle" in d.reason


def test_a_session_found_long_idle_is_warned_before_it_is_culled() -> None:
    s = running(gpu=gpu(last_busy=T0))
    d = decide(s, T0 + 10 * H, POLICY)
    assert d.action == WARN and d.at == T0 + 10 * H + 600


def test_activity_after_a_warning_clears_it() -> None:
    s = running(gpu=gpu(busy=True, last_busy=T0 + 2 * H), warned_at=T0 + 2 * H - 300)
    assert decide(s, T0 + 2 * H, POLICY).action == UNWARN


def test_notebook_activity_alone_keeps_it() -> None:
    s = running(gpu=gpu(last_busy=T0), notebook_last_activity=T0 + 3 * H)
    assert decide(s, T0 + 4 * H, POLICY).action == NONE


def test_stopped_server_gpu_is_released_after_the_keep_time() -> None:
    s = running(running=False)
    assert decide(s, T0, POLICY).action == MARK_STOPPED
    s.stopped_since = T0
    assert decide(s, T0 + H - 601, POLICY).action == NONE
    assert decide(s, T0 + H - 600, POLICY).action == WARN
    s.warned_at = T0 + H - 600
    assert decide(s, T0 + H, POLICY).action == RELEASE
    s.running = True
    assert decide(s, T0 + H, POLICY).action == CLEAR_STOPPED


def test_exemption_holds_everything() -> None:
    s = running(gpu=gpu(last_busy=T0), keep_until=T0 + 100 * H, warned_at=T0)
    assert decide(s, T0 + 50 * H, POLICY).action == NONE
    assert decide(s, T0 + 101 * H, POLICY).action == CULL


def test_max_age() -> None:
    p = Policy(Rules(idle_limit=100 * H, max_age=8 * H, warn_before=600))
    s = running(gpu=gpu(busy=True, last_busy=T0 + 9 * H), warned_at=T0 + 8 * H - 600)
    d = decide(s, T0 + 9 * H, p)
    assert d.action == CULL and "maximum age" in d.reason


def test_orphans_after_the_grace() -> None:
    s = running(hub_user=False)
    assert decide(s, T0 + 100, POLICY).action == NONE
    assert decide(s, T0 + 300, POLICY).action == ORPHAN
    s = running(hub_server=False, server="exp")
    assert "no such server" in decide(s, T0 + 300, POLICY).reason


def test_per_profile_overrides() -> None:
    p = Policy(RULES, per_profile={"mig-1g-10gb": {"idle_limit": 600}})
    s = running(profile="mig-1g-10gb", gpu=gpu(last_busy=T0), warned_at=T0)
    assert decide(s, T0 + 700, p).action == CULL
    assert decide(running(gpu=gpu(last_busy=T0), warned_at=T0), T0 + 700, p).action not in (CULL, WARN)
    with pytest.raises(ValueError, match="unknown culler settings"):
        Policy(RULES, per_profile={"x": {"idle": 1}}).for_profile("x")


def test_join_claims_holders_and_hub() -> None:
    ann = {"gpusessions.io/user": "a.b", "gpusessions.io/server": "exp", "gpusessions.io/profile": "mig"}
    claims = [
        {
            "metadata": {
                "namespace": "ns",
                "name": "gpu-a",
                "labels": {"app.kubernetes.io/managed-by": "gpusessions", "kai.scheduler/queue": "team-a"},
                "annotations": ann,
                "creationTimestamp": "2026-11-29T10:00:00Z",
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "d1"}
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                        ]
                    },
                }
            },
        },
        {"metadata": {"namespace": "ns", "name": "foreign", "labels": {}}},
    ]
    holders = [
        {
            "metadata": {
                "namespace": "ns",
                "name": "gpu-holder-a",
                "annotations": {"gpusessions.io/claim": "gpu-a"},
            },
            "status": {"podIP": "127.1.0.5", "containerStatuses": [{"restartCount": 2}]},
        },
        {"metadata": {"namespace": "ns", "name": "stray", "annotations": {"gpusessions.io/claim": "gone"}}},
    ]
    users = [{"name": "a.b", "servers": {"exp": {"ready": True, "last_activity": "2026-11-29T11:00:00Z"}}}]
    [s], orphans = join(claims, holders, users)
    assert (s.user, s.server, s.profile, s.node, s.devices) == ("a.b", "exp", "mig", "n1", ["n1/d1"])
    assert s.queue == "team-a"
    assert (s.holder, s.holder_ip, s.holder_restarts) == ("gpu-holder-a", "127.1.0.5", 2)
    assert s.hub_user and s.hub_server and s.running and s.state == "running"
    assert s.notebook_last_activity == s.created + 3600
    assert [o["metadata"]["name"] for o in orphans] == ["stray"]
    [s], _ = join(claims, holders, [])
    assert not s.hub_user


def test_metrics_carry_the_queue_and_escape_label_values() -> None:
    from gpusessions.culler.service import Culler

    c = Culler.__new__(Culler)
    c.sessions = [running(queue="team-a"), running(claim="gpu-b", queue="team-a"), running(profile='x"y')]
    c.actions, c.culls, c.idle_gpu_seconds, c.cycles = {}, {}, {'x"y': 2.0}, 1
    text = c.metrics()
    assert 'gpusessions_held_gpus{state="running",profile="",queue="team-a"} 2' in text
    assert 'gpusessions_held_gpus{state="running",profile="x\\"y",queue=""} 1' in text
    assert 'gpusessions_idle_gpu_seconds_total{profile="x\\"y"} 2.0' in text


def test_a_session_whose_node_is_gone_is_released_at_once_even_if_kept() -> None:
    s = running(node="n7", node_gone=True, keep_until=T0 + 10 * H)
    d = decide(s, T0 + 1, POLICY)
    assert d.action == "node-gone" and "n7" in d.reason
    assert s.state == "node gone"
