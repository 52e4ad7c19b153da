"""The culler's record of GPU time (culler/history.py): what it counts, its windows, and that a
restarted culler keeps it."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gpusessions.culler.cycle import Culler
from gpusessions.culler.history import History, session_equivalent
from gpusessions.culler.model import Session
from promtext import value

DAY = 86400.0
T0 = 20 * DAY + 3600.0  # 01:00 UTC on some day


def _s(size: str = "MIG 1g.10gb", **kw: object) -> Session:
    base: dict[str, object] = dict(
        namespace="ns", claim="c", user="u", server="", profile="p", queue="q", size=size,
        allocated=True, running=True, hub_user=True, hub_server=True, devices=["pool/d0"],
    )  # fmt: skip
    base.update(kw)
    return Session(**base)  # type: ignore[arg-type]


def _busy(busy: bool) -> list[dict[str, object]]:
    return [{"uuid": "MIG-1", "busy": busy}]


def test_equivalents_of_sizes() -> None:
    assert session_equivalent(_s("MIG 1g.10gb")) == pytest.approx(1 / 7)
    assert session_equivalent(_s("MIG 3g.40gb")) == pytest.approx(3 / 7)
    assert session_equivalent(_s("2 x MIG 2g.20gb", devices=["p/a", "p/b"])) == pytest.approx(4 / 7)
    assert session_equivalent(_s("whole GPU")) == 1
    assert session_equivalent(_s("2 x whole GPU", devices=["p/a", "p/b"])) == 2
    # Alternatives: what was allocated is not in the words; one per device, never less.
    assert session_equivalent(_s("MIG 1g.10gb or whole GPU")) == 1


def test_observe_counts_held_busy_idle_kept_and_waiting() -> None:
    h = History()
    h.observe(T0, [_s(gpu=_busy(True), profile="mig", queue="a")], 700.0)
    h.observe(T0, [_s(gpu=_busy(False), profile="mig", queue="a")], 700.0)
    h.observe(T0, [_s("whole GPU", gpu=_busy(False), running=False, profile="h100", queue="b")], 3600.0)
    h.observe(T0, [_s(allocated=False, devices=[], profile="h100", queue="b")], 60.0)
    h.observe(T0, [_s(deleting=True, profile="h100", queue="b")], 60.0)  # being released: nothing
    # The agent did not answer: held, but neither busy nor idle (unknown is not idle).
    h.observe(T0, [_s(gpu=[], gpu_error="agent unreachable: refused", profile="mig", queue="a")], 700.0)
    t = h.totals(T0 - 10)
    assert t[("mig", "a")] == pytest.approx({"held": 300.0, "busy": 100.0, "idle": 100.0})
    assert t[("h100", "b")] == pytest.approx(
        {"held": 3600.0, "idle": 3600.0, "kept": 3600.0, "waiting": 60.0}
    )


def test_totals_windows_and_series() -> None:
    h = History(bucket_seconds=300)
    h.add(T0 - 2 * DAY, "p", "a", idle=10.0)  # before today, inside 7 days
    h.add(T0 - 9 * DAY, "p", "a", idle=99.0)  # older than 7 days
    h.add(T0, "p", "a", idle=1.0, reclaimed=5.0)
    h.add(T0 + 299, "p", "b", busy=2.0)
    assert h.day_start(T0) == 20 * DAY
    assert h.totals(h.day_start(T0))[("p", "a")] == {"idle": 1.0, "reclaimed": 5.0}
    assert h.totals(T0 - 7 * DAY)[("p", "a")] == {"idle": 11.0, "reclaimed": 5.0}
    assert h.totals(T0 - 10 * DAY, until=T0)[("p", "a")] == {"idle": 109.0}
    pts = h.series(T0 - 600, T0 + 600, 300)
    assert [p["t"] for p in pts] == [T0 - 600, T0 - 300, T0, T0 + 300]
    assert pts[0]["values"] == {} and pts[3]["values"] == {}
    assert pts[2]["values"] == {"a": {"idle": 1.0, "reclaimed": 5.0}, "b": {"busy": 2.0}}
    assert h.series(T0, T0 + 300, 300, by="all")[0]["values"] == {
        "all": {"idle": 1.0, "reclaimed": 5.0, "busy": 2.0}
    }
    with pytest.raises(ValueError, match="by must be"):
        h.series(T0, T0 + 1, 1, by="user")


def test_a_restarted_culler_keeps_its_record(tmp_path: Path) -> None:
    path = tmp_path / "record" / "history.json"
    h = History(str(path), save_every=60)
    h.add(T0, "mig", "a", idle=7.0)
    h.save(T0)
    h.add(T0 + 10, "mig", "a", idle=1.0)
    h.save(T0 + 10)  # too soon: not written
    assert History(str(path)).totals(0)[("mig", "a")] == {"idle": 7.0}
    h.save(T0 + 10, force=True)
    again = History(str(path))
    assert again.totals(0)[("mig", "a")] == {"idle": 8.0}
    assert again.load_error is None
    # Old buckets are dropped when saved.
    again.save(T0 + 9 * DAY, force=True)
    assert History(str(path)).totals(0) == {}


def test_an_unreadable_record_is_set_aside_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / "history.json"
    path.write_text("{not json")
    h = History(str(path))
    assert h.totals(0) == {}
    assert h.load_error is not None and "could not be read" in h.load_error
    assert (tmp_path / "history.json.unreadable").read_text() == "{not json"
    path.write_text(json.dumps({"format": 99, "buckets": []}))
    assert "format 99" in (History(str(path)).load_error or "")


def test_the_metric_reports_today_and_seven_days() -> None:
    c = Culler.__new__(Culler)
    c.sessions, c.actions, c.culls, c.idle_gpu_seconds, c.cycles = [], Counter(), Counter(), {}, 0
    c.last_cycle_seconds = None
    c.history = History()
    now = __import__("time").time()
    c.history.add(now, "mig", "a", idle=3600.0, reclaimed=1800.0)
    c.history.add(now - 3 * DAY, "mig", "a", idle=7200.0)
    text = c.metrics()
    assert value(text, "gpusessions_gpu_hours", kind="idle", window="today", profile="mig", queue="a") == 1.0
    assert value(text, "gpusessions_gpu_hours", kind="idle", window="7d", profile="mig", queue="a") == 3.0
    assert (
        value(text, "gpusessions_gpu_hours", kind="reclaimed", window="7d", profile="mig", queue="a") == 0.5
    )
    assert value(text, "gpusessions_gpu_hours", kind="busy", window="7d", profile="mig", queue="a") is None
