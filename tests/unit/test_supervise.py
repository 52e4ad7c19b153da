"""The control-plane supervisor, on real processes: restarts a crash, not a start-up failure,
and never what it was told to stop."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from localcluster import procs, supervise

from .supervisetools import run_supervised, terminate


def wait_file(path: Path, lines: int, timeout: float = 20) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and len(got := path.read_text().split()) >= lines:
            return got
        time.sleep(0.05)
    raise AssertionError(f"{path} never had {lines} lines: {path.read_text() if path.exists() else None}")


def test_a_start_up_failure_is_not_restarted_and_keeps_its_code(tmp_path: Path) -> None:
    p = run_supervised(tmp_path, "echo started >> runs; exit 3", grace=5)
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 3
    assert (tmp_path / "runs").read_text().split() == ["started"]
    assert "exited with code 3" in out and "not restarting" in out


def test_a_crash_after_start_up_is_restarted_with_a_line_in_the_log(tmp_path: Path) -> None:
    # First run outlives the grace and crashes; every later run just stays up.
    script = "echo $$ >> runs; if [ $(wc -l < runs) -eq 1 ]; then sleep 0.6; exit 1; fi; sleep 60"
    p = run_supervised(tmp_path, script, grace=0.3)
    try:
        first, second = wait_file(tmp_path / "runs", 2)
        assert first != second
    finally:
        terminate(p)
        out, _ = p.communicate(timeout=20)
    assert "comp exited with code 1 after 1s; starting it again in 1s (restart 1)" in out
    assert out.count("starting it again") == 1, "the stopped second run was not restarted"
    assert not procs.alive(int(second)), "SIGTERM stopped the component too"


def test_sigterm_stops_the_component_once_and_nothing_restarts(tmp_path: Path) -> None:
    # The component counts the SIGTERMs it gets and takes a moment to shut down, as
    # kube-apiserver does (a second signal would make it exit at once, uncleanly).
    script = "echo $$ > pid; trap 'echo term >> terms; sleep 0.5; exit 0' TERM; while :; do sleep 0.1; done"
    p = run_supervised(tmp_path, script, grace=0.1)
    (pid,) = wait_file(tmp_path / "pid", 1)
    time.sleep(0.3)
    terminate(p)
    time.sleep(0.1)  # a second signal, later (a delivered one, not merged with the first)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=20)
    assert p.returncode == 0
    assert (tmp_path / "terms").read_text().split() == ["term"]
    assert "starting it again" not in out
    assert not procs.alive(int(pid))


def test_the_component_dies_with_a_killed_supervisor(tmp_path: Path) -> None:
    p = run_supervised(tmp_path, "echo $$ > pid; exec sleep 60", grace=0.1)
    (pid,) = wait_file(tmp_path / "pid", 1)
    p.kill()
    p.wait(timeout=10)
    deadline = time.monotonic() + 10
    while procs.alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not procs.alive(int(pid))


@pytest.mark.parametrize(
    ("previous", "ran_for", "expected"),
    [(0.0, 5.0, 1.0), (1.0, 5.0, 2.0), (8.0, 5.0, 10.0), (10.0, 5.0, 10.0), (10.0, 61.0, 1.0)],
)
def test_backoff_doubles_to_a_cap_and_resets_after_a_stable_run(
    previous: float, ran_for: float, expected: float
) -> None:
    assert supervise.next_backoff(previous, ran_for) == expected
