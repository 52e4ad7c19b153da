"""What the admin page and metrics say about idle and reclaimed GPU time (summary.py, pure)."""

from __future__ import annotations

from gpusessions.culler.history import History
from gpusessions.culler.model import Session
from gpusessions.culler.policy import PARKING, Decision, Policy, Rules
from gpusessions.culler.summary import policy, reclaimed_seconds, record

from .sessionfactory import make_session

H = 3600.0
T0 = 1_000_000_000.0
RULES = Rules(idle_limit=2 * H, gpu_idle_limit=4 * H, gpu_idle_limit_contended=1800, stopped_keep=H)


def session(**kw: object) -> Session:
    return make_session(T0, **kw)


def test_a_contended_cull_counts_the_time_left_to_the_plain_limit() -> None:
    s = session(running=True, gpu=[{"uuid": "MIG-x", "busy": False, "last_busy": T0}])
    d = Decision("cull", "", rule="gpu-idle-contended")
    # idle 40 min: the plain limits were notebook AND GPU idle 2 h, GPU alone 4 h: 80 min ahead.
    assert reclaimed_seconds(s, d, T0 + 2400, RULES) == 2 * H - 2400
    no_idle = Rules(idle_limit=0, gpu_idle_limit=0, gpu_idle_limit_contended=1800)
    assert reclaimed_seconds(s, d, T0 + 2400, no_idle) == 0.0


def test_a_contended_release_counts_the_rest_of_the_keep_and_other_culls_nothing() -> None:
    s = session(running=False, stopped_since=T0)
    assert reclaimed_seconds(s, Decision("release", "", rule="stopped-contended"), T0 + 300, RULES) == H - 300
    assert reclaimed_seconds(s, Decision("release", "", rule="stopped"), T0 + H, RULES) == 0.0
    busy = session(running=True, gpu=[{"uuid": "MIG-x", "busy": True, "last_busy": T0}])
    assert reclaimed_seconds(busy, Decision("cull", "", rule="gpu-idle-contended"), T0 + H, RULES) == 0.0


def test_the_record_in_gpu_hours_today_and_over_seven_days() -> None:
    h = History(None)
    now = History.day_start(T0) + 10 * H
    h.add(now - 2 * 86400, "mig-1g-10gb", "team-a", held=7200, idle=3600)  # two days ago
    h.add(now, "mig-1g-10gb", "team-a", held=3600, busy=1800, idle=1800, reclaimed=900, reclaims=1, culls=1)
    h.add(now, "a100", "", held=3600, kept=3600, warnings=2)
    rec = record(h, now)
    today = {(r["profile"], r["queue"]): r for r in rec["today"]["rows"]}
    assert today[("mig-1g-10gb", "team-a")]["idle"] == 0.5
    assert today[("mig-1g-10gb", "team-a")]["reclaimed"] == 0.25
    assert today[("a100", "")]["kept"] == 1.0 and today[("a100", "")]["warnings"] == 2
    assert rec["today"]["total"]["held"] == 2.0 and rec["today"]["total"]["reclaims"] == 1
    week = {(r["profile"], r["queue"]): r for r in rec["7d"]["rows"]}
    assert week[("mig-1g-10gb", "team-a")]["idle"] == 1.5 and week[("mig-1g-10gb", "team-a")]["held"] == 3.0
    assert rec["today"]["since"] == History.day_start(now)


def test_the_policy_in_words_carries_this_cullers_settings() -> None:
    p = policy(Policy(RULES, per_profile={"a100": {"gpu_idle_limit_contended": 600}}))
    text = " ".join(p["lines"])
    assert "GPU alone 4.0 h" in text and "culled after 30 min of GPU idleness" in text
    assert p["settings"]["gpu_idle_limit_contended"] == 1800
    assert p["per_profile"] == {"a100": {"gpu_idle_limit_contended": 600}}
    off = " ".join(policy(Policy(Rules(gpu_idle_limit_contended=0)))["lines"])
    assert "culled after off" not in off and "while another user waits" not in off.lower()


def test_the_policy_in_words_says_how_long_a_users_keep_holds_while_someone_waits() -> None:
    p = policy(Policy(Rules(keep_contended=900)))
    assert "a user's Keep my GPU holds 15 min" in " ".join(p["lines"])
    assert p["settings"]["keep_contended"] == 900
    off = " ".join(policy(Policy(Rules(keep_contended=0)))["lines"])
    assert "a user's Keep my GPU holds" not in off


def test_the_page_says_what_a_cull_means_for_a_session_that_parks() -> None:
    p = policy(Policy(RULES, parking={**PARKING, "gpu_idle_limit": 600}))["parking"]
    text = " ".join(p["lines"])
    assert text.startswith("A cull parks the session: its kernels' variables are saved")
    assert "the GPU goes to the next user, and the next start restores them" in text
    assert "after its GPU alone was idle 10 min" in text and "warned 2 min ahead" in text
    assert "a Keep my GPU holds 30 min (2 min while someone waits" in text
    assert p["settings"]["gpu_idle_limit"] == 600 and p["settings"]["keep_limit"] == PARKING["keep_limit"]
