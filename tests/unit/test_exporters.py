"""Both exporters (the culler's and the agent's) write with prometheus_client what they wrote by
hand before: the same families, help, types, series and values for the same state. The
hand-written writers are kept here as the reference; the text differs only in what the format
leaves free (label order, `2` written as `2.0`)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpusessions.agent.collect import Reading
from gpusessions.agent.server import AgentState, prometheus
from gpusessions.culler.cycle import Culler
from gpusessions.culler.history import History
from gpusessions.culler.model import Session
from promtext import families, value


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def old_culler_text(c: Any) -> str:
    """The culler's /metrics as written by hand up to 5d28c76 (service.py)."""
    lines = [
        "# HELP gpusessions_held_gpus Sessions holding a claim, by state, profile and queue.",
        "# TYPE gpusessions_held_gpus gauge",
    ]
    held = Counter((s.state, s.profile, s.queue) for s in c.sessions)
    for (state, profile, queue), n in sorted(held.items()):
        labels = f'state="{state}",profile="{_label(profile)}",queue="{_label(queue)}"'
        lines.append(f"gpusessions_held_gpus{{{labels}}} {n}")
    lines += [
        "# HELP gpusessions_culler_actions_total Actions taken, by action.",
        "# TYPE gpusessions_culler_actions_total counter",
    ]
    for action, n in sorted(c.actions.items()):
        lines.append(f'gpusessions_culler_actions_total{{action="{action}"}} {n}')
    lines += [
        "# HELP gpusessions_culls_total GPUs released by the culler (or an admin), by reason.",
        "# TYPE gpusessions_culls_total counter",
    ]
    lines += [f'gpusessions_culls_total{{reason="{r}"}} {n}' for r, n in sorted(c.culls.items())]
    lines += [
        "# HELP gpusessions_idle_gpu_seconds_total GPU-seconds held while the GPU was idle, by profile.",
        "# TYPE gpusessions_idle_gpu_seconds_total counter",
    ]
    lines += [
        f'gpusessions_idle_gpu_seconds_total{{profile="{_label(p)}"}} {v:.1f}'
        for p, v in sorted(c.idle_gpu_seconds.items())
    ]
    lines += [
        "# HELP gpusessions_culler_cycles_total Culler cycles run.",
        "# TYPE gpusessions_culler_cycles_total counter",
        f"gpusessions_culler_cycles_total {c.cycles}",
    ]
    if c.last_cycle_seconds is not None:
        lines += [
            "# HELP gpusessions_culler_last_cycle_seconds Wall time of the last cycle.",
            "# TYPE gpusessions_culler_last_cycle_seconds gauge",
            f"gpusessions_culler_last_cycle_seconds {c.last_cycle_seconds:.3f}",
        ]
    return "\n".join(lines) + "\n"


def old_agent_text(state: AgentState) -> str:
    """The agent's /metrics as written by hand up to 5d28c76 (agent/server.py)."""
    lines = [
        "# HELP gpusessions_nvml_up Whether the agent can read NVML.",
        "# TYPE gpusessions_nvml_up gauge",
        f"gpusessions_nvml_up {1 if state.status()['nvml']['ok'] else 0}",
    ]
    metrics: list[tuple[str, str, Any]] = [
        ("gpusessions_gpu_memory_used_bytes", "GPU memory in use.", lambda r: r.memory_used),
        ("gpusessions_gpu_memory_total_bytes", "GPU memory of the device.", lambda r: r.memory_total),
        ("gpusessions_gpu_processes", "Compute processes on the device.", lambda r: r.processes),
        (
            "gpusessions_gpu_activity_percent",
            "Utilization (whole GPU) or GPM SM activity (MIG); absent when NVML cannot tell.",
            lambda r: r.activity,
        ),
        (
            "gpusessions_gpu_busy",
            "1 if activity (or, when unknown, a process) is at the busy threshold.",
            lambda r: int(r.busy),
        ),
        (
            "gpusessions_gpu_last_busy_timestamp_seconds",
            "When the device was last busy (unix time).",
            lambda r: r.last_busy,
        ),
    ]
    for name, help_text, get in metrics:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for r in state.readings:
            v = get(r)
            if v is not None:
                labels = (
                    f'uuid="{_label(r.uuid)}",kind="{_label(r.kind)}",source="{_label(r.activity_source)}"'
                )
                lines.append(f"{name}{{{labels}}} {v}")
    return "\n".join(lines) + "\n"


def _session(claim: str, profile: str, queue: str = "", running: bool = True) -> Session:
    return Session(
        namespace="ns",
        claim=claim,
        user="u",
        server="",
        profile=profile,
        queue=queue,
        hub_user=True,
        hub_server=True,
        running=running,
        allocated=True,
    )


def _culler(**state: Any) -> Culler:
    c = Culler.__new__(Culler)
    c.sessions, c.actions, c.culls, c.idle_gpu_seconds, c.cycles = [], Counter(), Counter(), {}, 0
    c.last_cycle_seconds = None
    c.history = History()
    for k, v in state.items():
        setattr(c, k, v)
    return c


CULLER_STATES = {
    "fresh": {},
    "busy": {
        "sessions": [
            _session("a", "mig-1g-10gb", "team-a"),
            _session("b", "mig-1g-10gb", "team-a"),
            _session("c", 'odd "profile" \\ with\nnewline', ""),
            _session("d", "h100", "team-b", running=False),
        ],
        "actions": Counter({"cull": 3, "warn": 5, "release-by-admin": 1}),
        "culls": Counter({"idle": 2, "stopped-contended": 1, "admin": 1}),
        "idle_gpu_seconds": {"mig-1g-10gb": 1234.56, 'odd "profile" \\ with\nnewline': 2.0},
        "cycles": 42,
        "last_cycle_seconds": 0.01234,
    },
}


def test_culler_exposition_matches_the_hand_written_text() -> None:
    for name, state in CULLER_STATES.items():
        c = _culler(**state)
        new, old = c.metrics(), old_culler_text(c)
        # The record's GPU-hours, the GPU-equivalents by state (test_history.py, test_grafana.py) and
        # the tainted devices (test_gpu_health.py) came later: the rest is unchanged.
        later = ("gpusessions_gpu_hours", "gpusessions_gpu_equivalents", "gpusessions_tainted_devices")
        assert [f for f in families(new) if f[0] not in later] == families(old), name
        assert new.startswith("# HELP gpusessions_held_gpus "), "the same families, in the same order"


def test_culler_exposition_escapes_label_values() -> None:
    text = _culler(**CULLER_STATES["busy"]).metrics()
    assert 'profile="odd \\"profile\\" \\\\ with\\nnewline"' in text
    assert value(text, "gpusessions_held_gpus", state="running", profile="mig-1g-10gb", queue="team-a") == 2
    assert value(text, "gpusessions_held_gpus", state="kept", profile="h100", queue="team-b") == 1
    assert value(text, "gpusessions_culler_last_cycle_seconds") == 0.012


def _agent(readings: list[Reading], ok: bool = True) -> AgentState:
    state = AgentState(load_nvml=lambda: None, visible="x", busy_threshold=5)
    state.readings = readings
    state.nvml = object() if ok else None  # type: ignore[assignment]
    state.nvml_error = None if ok else "NVML is not available: gone"
    return state


def test_agent_exposition_matches_the_hand_written_text() -> None:
    readings = [
        Reading("GPU-1", "gpu", "H100", 1 << 30, 80 << 30, 2, {}, 55.5, "utilization", True, 1000.0),
        Reading("MIG-2", "mig", "1g.10gb", 0, 10 << 30, 0, {}, 0.0, "gpm-sm-activity", False, None),
        Reading("MIG-3", "mig", "1g.10gb", 5, 9 << 30, 1, {}, None, "unknown", True, 12.5),
        Reading('odd"uuid\\', "gpu", error="NVML: Not Found"),
    ]
    for state in (_agent(readings), _agent([], ok=False), _agent(readings[:1])):
        new, old = prometheus(state), old_agent_text(state)
        assert families(new) == families(old)
    text = prometheus(_agent(readings))
    assert 'uuid="odd\\"uuid\\\\"' in text
    assert value(text, "gpusessions_gpu_activity_percent", uuid="MIG-3", kind="mig", source="unknown") is None
