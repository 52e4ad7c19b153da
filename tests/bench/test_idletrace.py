"""The idle bench's traces (tests/bench/idletrace.py): generators, JSON round trip, validation."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import idletrace
from idletrace import NotebookParams, TraceError, TraceParams


def good() -> dict[str, Any]:
    return {
        "sessions": [
            {
                "user": "u7",
                "start": 1.25,
                "tab_open": True,
                "end": "leave",
                "phases": [["work", 0.1], ["cpu", 0.05], ["pause", 0.6], ["job", 2.0]],
                "comment": "unknown keys are ignored",
            },
            {"user": "u7", "start": 5.0, "end": "stop", "phases": [["work", 1]]},
        ],
        "source": "recorded elsewhere",
    }


def test_the_issues_example_is_read() -> None:
    trace = idletrace.from_json(good())
    assert [s.user for s in trace] == ["u7", "u7"]
    first = trace[0]
    assert first.tab_open and first.end == "leave" and first.kind == "batch"
    assert [(p.kind, p.hours) for p in first.phases] == [
        ("work", 0.1),
        ("cpu", 0.05),
        ("pause", 0.6),
        ("job", 2.0),
    ]
    assert trace[1].tab_open is False  # the default


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("sessions"), 'a JSON object with a "sessions" list'),
        (lambda d: d.update(sessions=[]), '"sessions" is empty'),
        (lambda d: d["sessions"].__setitem__(1, 3), "session 1: not an object"),
        (lambda d: d["sessions"][0].pop("user"), 'session 0: "user" must be a non-empty string'),
        (lambda d: d["sessions"][1].update(user="a b"), 'session 1 (user a b): "user" may hold letters'),
        (
            lambda d: d["sessions"][0].update(start=-1),
            'session 0 (user u7): "start" must be a number of hours >= 0',
        ),
        (lambda d: d["sessions"][0].update(start="9:00"), "got '9:00'"),
        (
            lambda d: d["sessions"][1].update(tab_open="yes"),
            'session 1 (user u7): "tab_open" must be true or false',
        ),
        (
            lambda d: d["sessions"][1].update(end="quit"),
            'session 1 (user u7): "end" must be "stop" or "leave"',
        ),
        (
            lambda d: d["sessions"][1].update(phases=[]),
            'session 1 (user u7): "phases" must be a non-empty list',
        ),
        (
            lambda d: d["sessions"][0]["phases"].append(["sleep", 1]),
            '"phases"[4]: kind must be one of work, cpu',
        ),
        (lambda d: d["sessions"][0]["phases"].append(["work", 0]), '"phases"[4]: hours must be a number > 0'),
        (lambda d: d["sessions"][0]["phases"].append(["work"]), '"phases"[4] must be [kind, hours]'),
        (lambda d: d["sessions"][1].update(phases=[["pause", 1]]), '"phases"[0] is a pause'),
        (lambda d: d["sessions"][1].update(start=2.0), 'session 1 (user u7): "start" 2 is before the end'),
    ],
)
def test_a_bad_trace_is_refused_naming_the_session_and_field(change: Any, message: str) -> None:
    doc = good()
    change(doc)
    with pytest.raises(TraceError) as e:
        idletrace.from_json(doc)
    assert message in str(e.value)


def test_a_file_round_trips_and_file_errors_name_the_file(tmp_path: Path) -> None:
    trace = idletrace.generate_notebook(NotebookParams(users=4, hours=12))
    path = tmp_path / "t.json"
    idletrace.dump(trace, path, 12.0)
    again = idletrace.load(path)
    assert idletrace.to_json(again) == idletrace.to_json(trace)
    assert idletrace.span(path) == 12.0  # the replay covers the generated span, not the last end
    path.write_text("{not json")
    with pytest.raises(TraceError, match=r"t\.json: not JSON"):
        idletrace.load(path)
    path.write_text(json.dumps({"sessions": [{"user": "x", "start": 0, "phases": [["nap", 1]]}]}))
    with pytest.raises(TraceError, match=r"t\.json: session 0 \(user x\).*kind must be one of"):
        idletrace.load(path)
    with pytest.raises(TraceError, match="cannot read"):
        idletrace.load(tmp_path / "missing.json")


def test_generated_traces_validate_and_are_seeded() -> None:
    for trace in (idletrace.generate(TraceParams()), idletrace.generate_notebook(NotebookParams())):
        assert idletrace.from_json(json.loads(json.dumps(idletrace.to_json(trace))))
    a = idletrace.to_json(idletrace.generate_notebook(NotebookParams()))
    assert a == idletrace.to_json(idletrace.generate_notebook(NotebookParams()))
    assert a != idletrace.to_json(idletrace.generate_notebook(NotebookParams(seed=2)))


def test_the_calibrated_trace_is_near_the_published_figures() -> None:
    p = NotebookParams()
    s = idletrace.trace_summary(idletrace.generate_notebook(p), p.hours)
    assert 50 <= s["sessions"] <= 70  # published: 59 over 48 hours
    assert 15 <= s["session_hours_median"] <= 25  # 21 h
    assert 4.5 <= s["task_minutes_median"] <= 7.5 and 25 <= s["task_minutes_p90"] <= 40  # 6, 32 min
    assert 2 <= s["pause_minutes_median"] <= 4 and 30 <= s["pause_minutes_p90"] <= 50  # 3, 38 min
    assert 20 <= s["pause_minutes_mean"] <= 40 and s["pause_hours_max"] <= 23  # 29 min, 23 h
    assert 0.28 <= s["cpu_task_share"] <= 0.38  # a third
    assert 0.15 <= s["gpu_busy_share_mean"] <= 0.3 and 0.1 <= s["gpu_busy_share_median"] <= 0.22  # 22 %, 14 %
    assert 0.65 <= s["reserved_gpu_idle_share"] <= 0.85  # 74 %
    assert s["tab_open_sessions"] and s["batch_sessions"]


def test_the_working_day_trace_is_the_one_docs_benchmarks_describes() -> None:
    s = idletrace.trace_summary(idletrace.generate(TraceParams()))
    assert (s["sessions"], s["batch_sessions"], s["tab_open_sessions"], s["stopped_at_end"]) == (11, 3, 3, 4)
    assert (s["gpu_work_hours"], s["job_hours"], s["pause_hours"]) == (20.92, 5.56, 18.81)
