"""The culling policy, decision by decision (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from gpusessions.culler.contention import mark_contention
from gpusessions.culler.model import Session, join
from gpusessions.culler.policy import (
    CLEAR_STOPPED,
    CULL,
    FINISH_RELEASE,
    MARK_STOPPED,
    NONE,
    ORPHAN,
    PARKING,
    RELEASE,
    UNWARN,
    WARN,
    Policy,
    Rules,
    decide,
    gpu_idle_since,
)
from promtext import value

from .sessionfactory import make_session

H = 3600.0
RULES = Rules(
    stopped_keep=H, idle_limit=2 * H, max_age=0, warn_before=600, orphan_grace=300, gpu_idle_limit=4 * H
)
POLICY = Policy(RULES)
T0 = 1_000_000.0


def running(**kw: object) -> Session:
    return make_session(T0, **{"running": True, "notebook_last_activity": T0, **kw})


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


def test_notebook_activity_alone_keeps_it_up_to_the_gpu_idle_limit() -> None:
    s = running(gpu=gpu(last_busy=T0), notebook_last_activity=T0 + 3 * H)
    assert decide(s, T0 + 3.5 * H, POLICY).action == NONE  # GPU idle 3.5 h < 4 h


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
            "status": {
                "podIP": "127.1.0.5",
                "phase": "Running",
                "containerStatuses": [
                    {"restartCount": 2, "state": {"running": {"startedAt": "2026-11-29T10:30:00Z"}}}
                ],
            },
        },
        {"metadata": {"namespace": "ns", "name": "stray", "annotations": {"gpusessions.io/claim": "gone"}}},
    ]
    users = [{"name": "a.b", "servers": {"exp": {"ready": True, "last_activity": "2026-11-29T11:00:00Z"}}}]
    [s], orphans = join(claims, holders, users)
    assert (s.user, s.server, s.profile, s.node, s.devices) == ("a.b", "exp", "mig", "n1", ["n1/d1"])
    assert s.queue == "team-a"
    assert (s.holder, s.holder_ip, s.holder_restarts) == ("gpu-holder-a", "127.1.0.5", 2)
    assert s.holder_phase == "Running" and s.holder_started == s.created + 1800 and not s.deleting
    assert s.hub_user and s.hub_server and s.running and s.state == "running"
    assert s.notebook_last_activity == s.created + 3600
    assert [o["metadata"]["name"] for o in orphans] == ["stray"]
    [s], _ = join(claims, holders, [])
    assert not s.hub_user


def test_metrics_carry_the_queue_and_escape_label_values() -> None:
    from gpusessions.culler.cycle import Culler
    from gpusessions.culler.history import History

    c = Culler.__new__(Culler)
    c.history = History()  # what the metrics of the record read (an empty record)
    c.sessions = [running(queue="team-a"), running(claim="gpu-b", queue="team-a"), running(profile='x"y')]
    c.actions, c.culls, c.idle_gpu_seconds, c.cycles = {}, {}, {'x"y': 2.0}, 1
    from gpusessions.culler.history import History

    c.history = History(None)  # the record (main's metrics read it)
    text = c.metrics()
    assert value(text, "gpusessions_held_gpus", state="running", profile="", queue="team-a") == 2
    assert 'profile="x\\"y"' in text  # escaped as the text format asks
    assert value(text, "gpusessions_held_gpus", state="running", profile='x"y', queue="") == 1
    assert value(text, "gpusessions_idle_gpu_seconds_total", profile='x"y') == 2.0


def test_a_session_whose_node_is_gone_is_released_at_once_even_if_kept() -> None:
    s = running(node="n7", node_gone=True, keep_until=T0 + 10 * H)
    d = decide(s, T0 + 1, POLICY)
    assert d.action == "node-gone" and "n7" in d.reason
    assert s.state == "node gone"


# -- the GPU idle alone (an open tab keeps reporting notebook activity) --------------------------
def test_gpu_idle_alone_is_warned_then_culled_although_the_notebook_is_open() -> None:
    # The notebook reports activity every few minutes (an open tab); the GPU has been idle since T0.
    s = running(gpu=gpu(last_busy=T0), notebook_last_activity=T0 + 4 * H - 900)
    assert decide(s, T0 + 4 * H - 601, POLICY).action == NONE
    d = decide(s, T0 + 4 * H - 600, POLICY)
    assert d.action == WARN and d.at == T0 + 4 * H and d.rule == "gpu-idle"
    assert d.reason == "GPU idle for 3.8 h although the notebook was active 5 min ago"
    s.warned_at = T0 + 4 * H - 600
    s.notebook_last_activity = T0 + 4 * H  # the tab goes on polling: no help
    d = decide(s, T0 + 4 * H, POLICY)
    assert d.action == CULL and d.rule == "gpu-idle"
    assert d.reason == "GPU idle for 4.0 h although the notebook was active 0 s ago"


def test_gpu_idle_alone_never_culls_a_busy_gpu() -> None:
    s = running(gpu=gpu(busy=True, last_busy=T0 + 9 * H), notebook_last_activity=T0 + 9 * H)
    assert decide(s, T0 + 9 * H, POLICY).action == NONE
    # GPU work after the warning clears it.
    s.warned_at = T0 + 8 * H
    assert decide(s, T0 + 9 * H, POLICY).action == UNWARN


def test_gpu_idle_alone_needs_a_reading() -> None:
    for s in (
        running(gpu=[], notebook_last_activity=T0 + 9 * H),  # no agent answer
        running(gpu=gpu(last_busy=T0), gpu_error="agent unreachable", notebook_last_activity=T0 + 9 * H),
        running(gpu=[{"uuid": "x", "busy": False, "error": "NVML: lost"}], notebook_last_activity=T0 + 9 * H),
    ):
        assert decide(s, T0 + 9 * H, POLICY).action == NONE


def test_gpu_idle_alone_counts_from_the_agents_restart() -> None:
    # The agent forgets its last busy time when it restarts: no cull on that account.
    s = running(gpu=gpu(last_busy=None), holder_started=T0 + 8 * H, notebook_last_activity=T0 + 9 * H)
    assert decide(s, T0 + 9 * H, POLICY).action == NONE


def test_gpu_idle_alone_honours_keep_until_and_can_be_off() -> None:
    s = running(gpu=gpu(last_busy=T0), notebook_last_activity=T0 + 9 * H, keep_until=T0 + 10 * H)
    assert decide(s, T0 + 9 * H, POLICY).action == NONE
    s.keep_until = None
    off = Policy(RULES.merged({"gpu_idle_limit": 0}))
    assert decide(s, T0 + 9 * H, off).action == NONE
    per = Policy(RULES, per_profile={"big": {"gpu_idle_limit": 0}})
    assert (
        decide(
            running(profile="big", gpu=gpu(last_busy=T0), notebook_last_activity=T0 + 9 * H), T0 + 9 * H, per
        ).action
        == NONE
    )
    assert decide(s, T0 + 9 * H, per).action == WARN


def test_both_idle_keeps_the_idle_reason() -> None:
    s = running(gpu=gpu(last_busy=T0), notebook_last_activity=T0, warned_at=T0 + 2 * H - 600)
    d = decide(s, T0 + 2 * H, POLICY)
    assert d.action == CULL and d.rule == "idle" and d.reason.startswith("notebook and GPU idle")


# -- a stopped server's kept GPU while others wait for that size ---------------------------------
def stopped(**kw: object) -> Session:
    base: dict[str, object] = dict(
        profile="mig-1g-10gb", request="h1g", size="MIG 1g.10gb", running=False, stopped_since=T0
    )
    base.update(kw)
    return running(**base)


def waiter(user: str = "b", profile: str = "mig-1g-10gb", request: str = "h1g", **kw: object) -> Session:
    base: dict[str, object] = dict(
        claim=f"gpu-{user}",
        user=user,
        profile=profile,
        request=request,
        size="MIG 1g.10gb",
        allocated=False,
        running=False,
        pending="spawn",
        holder=f"gpu-holder-{user}",
        holder_phase="Pending",
        created=T0 + 100,
    )
    base.update(kw)
    return running(**base)


def test_no_waiter_keeps_the_full_stopped_keep() -> None:
    s = stopped()
    mark_contention([s], T0 + 400)
    assert s.waiters == 0
    assert decide(s, T0 + 400, POLICY).action == NONE


def test_a_waiter_for_the_same_profile_shortens_the_keep() -> None:
    s, w = stopped(), waiter()
    mark_contention([s, w], T0 + 10)
    assert s.waiters == 1
    # The warning stands min(warn_before, stopped_keep_contended) = 300 s.
    d = decide(s, T0 + 10, POLICY)
    assert d.action == WARN and d.rule == "stopped-contended" and d.at == T0 + 310
    assert d.reason == "stopped 10 s while 1 user waits for MIG 1g.10gb"
    s.warned_at = T0 + 10
    assert decide(s, T0 + 309, POLICY).action == NONE
    d = decide(s, T0 + 310, POLICY)
    assert d.action == RELEASE and d.rule == "stopped-contended"


def test_a_session_stopped_long_ago_is_still_warned_first() -> None:
    s, w = stopped(), waiter()
    mark_contention([s, w], T0 + 2000)
    d = decide(s, T0 + 2000, POLICY)
    assert d.action == WARN and d.at == T0 + 2300
    assert d.reason == "stopped 33 min while 1 user waits for MIG 1g.10gb"


def test_a_waiter_for_another_size_does_not_count() -> None:
    s = stopped()
    mark_contention([s, waiter(profile="whole-gpu", request="hwhole")], T0 + 400)
    assert s.waiters == 0
    # Same profile, another request (a profile option chose 2 devices): not the same size either.
    mark_contention([s, waiter(request="h1g-x2")], T0 + 400)
    assert s.waiters == 0


def test_the_request_not_the_profile_name_decides() -> None:
    # A spawn without options (the default profile) leaves the profile annotation empty.
    s, w = stopped(profile=""), waiter(profile="")
    mark_contention([s, w], T0 + 10)
    assert s.waiters == 1
    # Claims without the request hash fall back on the profile.
    s, w = stopped(request=""), waiter(request="")
    mark_contention([s, w], T0 + 10)
    assert s.waiters == 1
    s, w = stopped(request="", profile=""), waiter(request="", profile="")
    mark_contention([s, w], T0 + 10)
    assert s.waiters == 0
    assert decide(s, T0 + 400, POLICY).action == NONE


def test_only_real_waiters_count() -> None:
    s = stopped()
    not_waiting = [
        waiter(holder_phase="Running"),  # scheduled: about to be allocated
        waiter(allocated=True),
        waiter(pending=None),  # the hub does not start it (a stale claim)
        waiter(holder=None, holder_phase=None),
        waiter(deleting=True),  # the request is being withdrawn
    ]
    mark_contention([s, *not_waiting], T0 + 400)
    assert s.waiters == 0


def test_a_waiter_that_goes_away_lifts_the_warning() -> None:
    s, w = stopped(), waiter()
    mark_contention([s, w], T0 + 10)
    assert decide(s, T0 + 10, POLICY).action == WARN
    s.warned_at = T0 + 10
    mark_contention([s], T0 + 200)  # b gave up (or got another device)
    d = decide(s, T0 + 200, POLICY)
    assert d.action == UNWARN and "nobody waits" in d.reason
    s.warned_at = None
    assert decide(s, T0 + 400, POLICY).action == NONE


def test_one_waiter_costs_one_kept_gpu_the_longest_stopped_first() -> None:
    old, new, w = stopped(claim="gpu-old", stopped_since=T0 - 600), stopped(claim="gpu-new"), waiter()
    mark_contention([new, old, w], T0 + 10)
    assert (old.waiters, new.waiters) == (1, 0)
    two = waiter(user="c")
    mark_contention([new, old, w, two], T0 + 10)
    assert (old.waiters, new.waiters) == (2, 2)
    assert decide(new, T0 + 10, POLICY).reason == "stopped 10 s while 2 users wait for MIG 1g.10gb"


def test_keep_until_is_honoured_and_does_not_use_up_a_waiter() -> None:
    kept = stopped(claim="gpu-kept", stopped_since=T0 - 600, keep_until=T0 + H)
    other, w = stopped(claim="gpu-other"), waiter()
    mark_contention([kept, other, w], T0 + 10)
    assert (kept.waiters, other.waiters) == (0, 1)
    assert decide(kept, T0 + 10, POLICY).action == NONE


def test_contended_keep_off_or_per_profile() -> None:
    s, w = stopped(), waiter()
    mark_contention([s, w], T0 + 400)
    off = Policy(RULES.merged({"stopped_keep_contended": 0}))
    assert decide(s, T0 + 400, off).action == NONE
    per = Policy(RULES, per_profile={"mig-1g-10gb": {"stopped_keep_contended": 1800}})
    assert decide(s, T0 + 400, per).action == NONE
    assert decide(s, T0 + 1500, per).action == WARN


def test_the_size_in_words_comes_from_the_claim_spec() -> None:
    from gpusessions.core.claims import Alternative, GPURequest, build_claim, describe_spec

    one_g = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"
    for req in (
        GPURequest("mig.nvidia.com", 1, (one_g,)),
        GPURequest("gpu.nvidia.com", 2),
        GPURequest(
            first_available=(Alternative("mig.nvidia.com", 1, (one_g,)), Alternative("gpu.nvidia.com"))
        ),
    ):
        claim = build_claim("gpu-a", "ns", req, "a", "")
        assert describe_spec(claim["spec"]) == req.describe()
        s = join([claim], [], [])[0][0]
        assert (s.request, s.size) == (req.hash(), req.describe())
    assert describe_spec({}) == ""


# --- reclaim of an idle running GPU while someone waits for its size (gpu_idle_limit_contended) ---
def idle_running(user: str = "a", idle_since: float = T0, **kw: object) -> Session:
    base: dict[str, object] = dict(
        claim=f"gpu-{user}",
        user=user,
        profile="mig-1g-10gb",
        request="h1g",
        size="MIG 1g.10gb",
        gpu=gpu(last_busy=idle_since),
        notebook_last_activity=T0 + 10 * H,  # an open tab: the hub sees activity all along
    )
    base.update(kw)
    return running(**base)


CONTENDED = Policy(
    Rules(idle_limit=2 * H, gpu_idle_limit=4 * H, gpu_idle_limit_contended=1800, warn_before=900)
)


def test_an_idle_gpu_is_reclaimed_sooner_only_while_someone_waits_for_its_size() -> None:
    s = idle_running()
    now = T0 + 1200  # GPU idle 20 min: past the warning lead of the 30 min contended limit
    mark_contention([s], now)
    assert s.waiters == 0
    assert decide(s, now, CONTENDED).action == NONE  # nobody waits: the 4 h GPU-idle limit applies
    w = waiter()
    mark_contention([s, w], now)
    assert s.waiters == 1
    d = decide(s, now, CONTENDED)
    assert d.action == WARN and d.rule == "gpu-idle-contended"
    assert d.at == T0 + 1800 + 300  # the warning stands its full 15 min
    assert "GPU idle for 20 min while 1 user waits for MIG 1g.10gb" in d.reason
    s.warned_at = now
    assert decide(s, T0 + 2099, CONTENDED).action == NONE
    d = decide(s, T0 + 2100, CONTENDED)
    assert d.action == CULL and d.rule == "gpu-idle-contended"


def test_a_server_just_ready_counts_its_gpu_idle_time_from_then_not_from_its_spawn() -> None:
    """A spawn that waited an hour for a GPU began an hour before the user could use it: the
    contended limit counts from when the server was seen ready, so the user has all of it."""
    now = T0 + 2 * H
    s = idle_running(idle_since=T0, server_started=T0 + H, server_ready=now - 60, holder_started=T0 + H)
    w = waiter()
    mark_contention([s, w], now)
    ready = now - 60
    d = decide(s, now, CONTENDED)
    assert d.action == NONE and d.at == ready + 1800  # 30 min from ready, not from the spawn
    d = decide(s, ready + 900, CONTENDED)  # the warning's 15 min lead
    assert d.action == WARN and "GPU idle for 15 min" in d.reason
    s.warned_at = ready + 900
    assert decide(s, ready + 1799, CONTENDED).action == NONE
    assert decide(s, ready + 1800, CONTENDED).action == CULL
    # Without the culler's sight of the start (it was restarted): from the spawn's start, as before.
    s2 = idle_running(idle_since=T0, server_started=T0 + H, holder_started=T0 + H)
    mark_contention([s2, waiter()], now)
    s2.warned_at = now - 900
    assert decide(s2, now, CONTENDED).action == CULL


def test_a_busy_gpu_is_never_reclaimed_for_a_waiter() -> None:
    s = idle_running(gpu=[{"uuid": "MIG-x", "busy": True, "last_busy": T0 + 5 * H}])
    w = waiter()
    mark_contention([s, w], T0 + 5 * H)
    assert s.waiters == 0
    s.waiters = 1  # even if marked: a busy GPU has no idle time
    assert decide(s, T0 + 5 * H, CONTENDED).action == NONE


def test_a_gpu_without_a_reading_is_not_reclaimed_for_a_waiter() -> None:
    s = idle_running(gpu=[{"uuid": "MIG-x", "busy": False, "last_busy": T0, "error": "NVML gone"}])
    mark_contention([s, waiter()], T0 + H)
    assert s.waiters == 0 and decide(s, T0 + H, CONTENDED).action == NONE
    s = idle_running(gpu=[], gpu_error="agent unreachable")
    mark_contention([s, waiter()], T0 + H)
    assert decide(s, T0 + H, CONTENDED).action == NONE


def test_a_kept_gpu_serves_the_waiter_before_a_running_one_is_reclaimed() -> None:
    kept = stopped(claim="gpu-k", user="k", profile="mig-1g-10gb", request="h1g")
    s = idle_running()
    mark_contention([kept, s, waiter()], T0 + H)
    assert kept.waiters == 1 and s.waiters == 0
    mark_contention([kept, s, waiter(), waiter("c")], T0 + H)  # a second waiter: the running one too
    assert kept.waiters == 2 and s.waiters == 2


def test_one_waiter_costs_one_idle_gpu_the_one_idle_longest() -> None:
    a = idle_running("a", idle_since=T0 + 600)
    b = idle_running("b2", idle_since=T0)
    c = idle_running("c", idle_since=T0 + 300, request="h3g")  # another size
    mark_contention([a, b, c, waiter()], T0 + H)
    assert (a.waiters, b.waiters, c.waiters) == (0, 1, 0)


def test_an_exempt_session_is_not_reclaimed_and_does_not_use_up_a_waiter() -> None:
    a = idle_running("a", idle_since=T0, keep_until=T0 + 5 * H)
    b = idle_running("b2", idle_since=T0 + 600)
    mark_contention([a, b, waiter()], T0 + H)
    assert (a.waiters, b.waiters) == (0, 1)
    assert decide(a, T0 + H, CONTENDED).action == NONE


def test_the_warning_is_lifted_when_the_waiter_goes_away_or_the_gpu_works_again() -> None:
    s = idle_running(warned_at=T0 + 1200)
    mark_contention([s], T0 + 1500)
    assert decide(s, T0 + 1500, CONTENDED).action == UNWARN
    s = idle_running(warned_at=T0 + 1200, gpu=gpu(busy=True, last_busy=T0 + 1500))
    mark_contention([s, waiter()], T0 + 1500)
    assert decide(s, T0 + 1500, CONTENDED).action == UNWARN


def test_contended_gpu_idle_limit_off_or_per_profile() -> None:
    off = Policy(Rules(gpu_idle_limit=4 * H, gpu_idle_limit_contended=0))
    s = idle_running()
    mark_contention([s, waiter()], T0 + H)
    assert decide(s, T0 + H, off).action == NONE
    per = Policy(CONTENDED.rules, per_profile={"mig-1g-10gb": {"gpu_idle_limit_contended": 7200}})
    assert decide(s, T0 + H, per).action == NONE
    assert decide(s, T0 + 2 * H, per).action == WARN


# --- a user's "Keep my GPU" while someone waits for its size (keep_contended) ---
KEEPING = Policy(
    Rules(
        idle_limit=2 * H,
        gpu_idle_limit=4 * H,
        gpu_idle_limit_contended=1800,
        keep_contended=1800,
        warn_before=900,
    )
)


def test_a_users_keep_holds_only_keep_contended_while_someone_waits() -> None:
    # anna clicked Keep my GPU at T0 + 1 h (4 h keep); her GPU stays idle; bob waits.
    a = idle_running("anna", idle_since=T0, keep_until=T0 + 5 * H, kept_at=T0 + H)
    now = T0 + H + 1200  # 20 min after the click: the keep holds, and does not use up the waiter
    b = idle_running("bob", idle_since=T0 + H)
    mark_contention([a, b, waiter()], now, KEEPING)
    assert (a.waiters, b.waiters) == (0, 1)
    assert decide(a, now, KEEPING).action == NONE
    now = T0 + H + 1800  # 30 min after the click: anna is the one idle longest
    a.waiters = b.waiters = 0
    mark_contention([a, b, waiter()], now, KEEPING)
    assert (a.waiters, b.waiters) == (1, 0)
    # Her keep answered a warning: that warning counts as given, the cull follows (no second one).
    d = decide(a, now, KEEPING)
    assert d.action == CULL and d.rule == "gpu-idle-contended"


def test_a_contended_keep_counts_from_its_warning_not_from_the_click() -> None:
    # Warned at T0 + 1 h, anna clicked Keep 14 min later; bob waits (keep_contended 30 min).
    warned = T0 + H
    a = idle_running("anna", idle_since=T0, keep_until=warned + 840 + 4 * H, kept_at=warned + 840)
    a.keep_from = warned
    a.waiters = 1
    assert decide(a, warned + 1700, KEEPING).action == NONE  # within 30 min of the warning
    assert decide(a, warned + 1801, KEEPING).action == CULL  # not 30 min from the click


def test_keep_pressed_again_gains_nothing_while_someone_waits() -> None:
    # A script's second keep (the hub refuses it without a new warning; were one written, it
    # would carry the same warning): the cull comes when the first keep's time is up.
    warned = T0 + H
    for click in (warned + 10, warned + 1000, warned + 1700):
        a = idle_running("anna", idle_since=T0, keep_until=click + 4 * H, kept_at=click)
        a.keep_from, a.waiters = warned, 1
        assert decide(a, warned + 1801, KEEPING).action == CULL


def test_a_keep_that_ran_out_with_nobody_waiting_is_followed_by_a_new_warning() -> None:
    a = idle_running("anna", idle_since=T0, keep_until=T0 + 5 * H, kept_at=T0 + H)
    a.keep_from = T0 + H - 60
    d = decide(a, T0 + 5 * H + 1, KEEPING)
    assert d.action == WARN


def test_a_keep_of_an_earlier_idle_stretch_does_not_count_as_a_warning() -> None:
    # anna kept at T0 + 1 h, then used her GPU until T0 + 3 h: a new stretch needs a new warning.
    a = idle_running("anna", idle_since=T0 + 3 * H, keep_until=T0 + 2 * H, kept_at=T0 + H)
    a.keep_from, a.waiters = T0 + H - 60, 1
    d = decide(a, T0 + 3 * H + 1800, KEEPING)
    assert d.action == WARN


def test_a_users_keep_holds_its_full_length_when_nobody_waits() -> None:
    a = idle_running("anna", idle_since=T0, keep_until=T0 + 5 * H, kept_at=T0 + H)
    mark_contention([a], T0 + 4 * H, KEEPING)
    assert a.waiters == 0
    assert decide(a, T0 + 4 * H, KEEPING).action == NONE


def test_an_admins_keep_holds_even_while_someone_waits() -> None:
    a = idle_running("anna", idle_since=T0, keep_until=T0 + 24 * H)  # no kept_at: an admin's keep
    mark_contention([a, waiter()], T0 + 5 * H, KEEPING)
    assert a.waiters == 0
    a.waiters = 1  # even if marked
    assert decide(a, T0 + 5 * H, KEEPING).action == NONE


def test_keep_contended_off_or_per_profile() -> None:
    off = Policy(dataclasses.replace(KEEPING.rules, keep_contended=0))
    a = idle_running("anna", idle_since=T0, keep_until=T0 + 5 * H, kept_at=T0 + H)
    mark_contention([a, waiter()], T0 + 3 * H, off)
    assert a.waiters == 0 and decide(a, T0 + 3 * H, off).action == NONE
    per = Policy(KEEPING.rules, per_profile={"mig-1g-10gb": {"keep_contended": 3 * H}})
    mark_contention([a, waiter()], T0 + 3 * H, per)
    assert a.waiters == 0 and decide(a, T0 + 3 * H, per).action == NONE
    mark_contention([a, waiter()], T0 + 4 * H, per)
    # 3 h after the keep's warning (the click here): that warning counts as given, the cull follows.
    assert a.waiters == 1 and decide(a, T0 + 4 * H, per).action == CULL


def test_a_stopped_servers_user_keep_also_yields_to_a_waiter_after_keep_contended() -> None:
    kept = stopped(
        claim="gpu-k", user="k", profile="mig-1g-10gb", request="h1g", keep_until=T0 + 10 * H, kept_at=T0
    )
    mark_contention([kept, waiter()], T0 + 600, KEEPING)
    assert kept.waiters == 0 and decide(kept, T0 + 600, KEEPING).action == NONE
    mark_contention([kept, waiter()], T0 + 1800, KEEPING)
    assert kept.waiters == 1
    assert decide(kept, T0 + 1800, KEEPING).action in (WARN, RELEASE)


def test_a_kept_session_that_stops_is_still_noted_stopped_and_yields_after_keep_contended() -> None:
    # user6 clicked Keep (4 h), then stopped her server while others wait: the stop is noted at
    # once (before issue 17's fix the keep hid it, and her GPU stayed 4 h while others waited).
    s = stopped(claim="gpu-k", user="k", stopped_since=None, keep_until=T0 + 4 * H, kept_at=T0)
    d = decide(s, T0 + 60, KEEPING)
    assert d.action == MARK_STOPPED
    s.stopped_since = T0 + 60
    mark_contention([s, waiter()], T0 + 120, KEEPING)
    assert s.waiters == 0 and decide(s, T0 + 120, KEEPING).action == NONE  # within keep_contended
    mark_contention([s, waiter()], T0 + 1800, KEEPING)
    assert s.waiters == 1
    d = decide(s, T0 + 1800, KEEPING)
    assert d.action == WARN and d.rule == "stopped-contended"
    again = running(keep_until=T0 + 4 * H, kept_at=T0, stopped_since=T0 + 60)  # started again
    assert decide(again, T0 + 1800, KEEPING).action == CLEAR_STOPPED


def test_a_server_started_on_a_kept_gpu_counts_its_gpu_idle_time_from_the_start() -> None:
    # The GPU was last busy 5 h ago (kept while the server was stopped); the server started
    # 1 min ago: its GPU has been idle 1 min for the culler, not 5 h.
    s = idle_running(idle_since=T0, server_started=T0 + 5 * H - 60)
    mark_contention([s], T0 + 5 * H, CONTENDED)
    assert decide(s, T0 + 5 * H, CONTENDED).action == NONE  # not the 4 h GPU-idle limit
    s.waiters = 1
    d = decide(s, T0 + 5 * H, CONTENDED)
    assert d.action == NONE and d.at == T0 + 5 * H - 60 + 1800  # 30 min from the start
    s.running = False  # stopped again: the start no longer counts
    assert gpu_idle_since(s) == T0


def test_a_session_being_released_is_left_alone() -> None:
    """A released claim waits for its holder, whose kernels park in its grace period (up to
    park_timeout + 15 s): the culler neither releases it again nor counts a second cull (the
    make test of ba1c1cd counted two "stopped" culls of one session)."""
    long_stopped = stopped(stopped_since=T0 - 10 * H)
    assert decide(long_stopped, T0, POLICY).action == WARN  # then released, had it not been
    d = decide(dataclasses.replace(long_stopped, deleting=True, holder=None), T0, POLICY)
    assert d.action == NONE and "being released" in d.reason
    # Its holder still runs (the release's holder delete was lost): deleted again, not culled.
    lost = decide(dataclasses.replace(long_stopped, deleting=True, holder="gpu-holder-x"), T0, POLICY)
    assert lost.action == FINISH_RELEASE
    idle = running(
        notebook_last_activity=T0 - 10 * H, gpu=gpu(last_busy=T0 - 10 * H), deleting=True, holder=None
    )
    assert decide(idle, T0, POLICY).action == NONE


# -- parking (issue 27): a cull of a session that parks loses nothing, so its GPU goes sooner ------
def parking(user: str = "anna", idle_since: float = T0, **kw: object) -> Session:
    """A running session that parks (its claim says so), GPU idle since `idle_since`, notebook
    active (a tab left open)."""
    return idle_running(user, idle_since=idle_since, parks=True, **kw)


def test_a_parking_session_is_culled_by_the_parking_rules_and_a_plain_one_is_not() -> None:
    p = Policy()  # the defaults: plain gpu_idle_limit 1 h, parking 15 min warned 2 min ahead
    assert PARKING["gpu_idle_limit"] == 900 and PARKING["warn_before"] == 120
    a = parking()
    assert decide(a, T0 + 779, p).action == NONE
    d = decide(a, T0 + 780, p)
    assert (d.action, d.rule, d.at) == (WARN, "gpu-idle", T0 + 900)
    a.warned_at = T0 + 780
    assert decide(a, T0 + 899, p).action == NONE
    d = decide(a, T0 + 901, p)
    assert (d.action, d.rule) == (CULL, "gpu-idle")
    # The same session without parking keeps today's rules: nothing for an hour.
    b = idle_running("bob", idle_since=T0)
    assert not b.parks
    assert decide(b, T0 + 901, p).action == NONE
    assert decide(b, T0 + H - 900, p).action == WARN


def test_a_parking_sessions_stopped_server_gives_its_gpu_back_after_15_minutes() -> None:
    p = Policy()
    s = stopped(parks=True, stopped_since=T0)
    assert decide(s, T0 + 700, p).action == NONE
    assert decide(s, T0 + 790, p).action == WARN
    s.warned_at = T0 + 790
    assert decide(s, T0 + 910, p).action == RELEASE
    plain = stopped(stopped_since=T0)
    assert decide(plain, T0 + 910, p).action == NONE  # plain: kept an hour


def test_a_keep_of_a_parking_session_holds_half_an_hour_then_it_is_warned_again() -> None:
    p = Policy()
    warned = T0 + 780
    # anna answered the warning with Keep my GPU (the hub's keep: 4 h); nobody waits.
    a = parking(keep_until=warned + 60 + 4 * H, kept_at=warned + 60, keep_from=warned)
    assert decide(a, warned + 1799, p).action == NONE
    d = decide(a, warned + 1801, p)
    assert d.action == WARN  # a new warning, a new Keep: not the 4 h of a plain session's keep
    plain = idle_running("bob", idle_since=T0, keep_until=warned + 60 + 4 * H, kept_at=warned + 60)
    plain.keep_from = warned
    assert decide(plain, warned + 1801, p).action == NONE
    # While someone waits for its size, a parking session's keep holds 2 min from its warning.
    a.waiters = 1
    assert decide(a, warned + 119, p).action == NONE
    assert decide(a, warned + 121, p).action == CULL  # the kept warning counts as given


def test_parking_rules_are_settings_and_per_profile_overrides_still_apply_last() -> None:
    p = Policy(Rules(), {"mig-1g-10gb": {"gpu_idle_limit": 7200}}, parking={**PARKING, "gpu_idle_limit": 300})
    assert p.for_profile("other", parks=True).gpu_idle_limit == 300
    assert p.for_profile("other").gpu_idle_limit == Rules().gpu_idle_limit
    assert p.for_profile("mig-1g-10gb", parks=True).gpu_idle_limit == 7200
    assert p.for_profile("other", parks=True).warn_before == PARKING["warn_before"]
    with pytest.raises(ValueError, match="unknown culler settings"):
        Policy(parking={"gpu_idle": 1}).for_profile("x", parks=True)


def test_the_claim_says_whether_its_session_parks() -> None:
    from gpusessions.core import labels as L
    from gpusessions.core.claims import GPURequest, build_claim
    from gpusessions.culler.model import session_from_claim

    req = GPURequest(device_class="mig.nvidia.com")
    parks = build_claim("gpu-a", "ns", req, "a", "", parks=True)
    plain = build_claim("gpu-b", "ns", req, "b", "")
    assert parks["metadata"]["annotations"][L.PARKS] == "true"
    assert L.PARKS not in plain["metadata"]["annotations"]
    for claim in (parks, plain):
        claim["metadata"]["creationTimestamp"] = "2026-12-02T10:00:00Z"
    assert session_from_claim(parks).parks and not session_from_claim(plain).parks
    assert not L.parks({"annotations": {L.PARKS: "false"}}) and not L.parks({})


def test_a_parking_rule_is_never_longer_than_the_plain_one() -> None:
    # An admin who shortens a plain limit shortens it for sessions that park too (the tests'
    # hubs: --idle-limit 20), and a plain rule that is off does not turn a parking one off.
    p = Policy(Rules(idle_limit=20, warn_before=5, stopped_keep=3, gpu_idle_limit=0, keep_contended=0))
    r = p.for_profile("x", parks=True)
    assert (r.idle_limit, r.warn_before, r.stopped_keep) == (20, 5, 3)
    assert (r.gpu_idle_limit, r.keep_contended, r.keep_limit) == (900, 120, 1800)
    # A parking rule set to 0 ("off") leaves the plain one.
    r = Policy(parking={**PARKING, "gpu_idle_limit": 0, "keep_limit": 0}).for_profile("x", parks=True)
    assert (r.gpu_idle_limit, r.keep_limit) == (Rules().gpu_idle_limit, 0)
