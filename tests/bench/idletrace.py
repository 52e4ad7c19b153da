"""Notebook session traces for the idle-reclaim bench (bench_idle.py): generators, JSON, validation.

Two generated profiles (times in simulated hours):

- `workday` (`TraceParams`): a working day of 8 users, as the bench always had;
- `notebook` (`NotebookParams`): calibrated to the published figures of a production
  notebook service (Adobe, June 2021, 59 sessions over 48 hours, as analysed for the
  NotebookOS paper, ASPLOS '26): long-lived sessions, short GPU bursts, heavy-tailed pauses,
  tabs left open overnight, some sessions that run a long job.

A trace is a list of `Session`s; `dump`/`load` write and read the JSON format

    {"sessions": [{"user": "u7", "start": 1.25, "tab_open": true, "end": "leave",
                   "phases": [["work", 0.1], ["cpu", 0.05], ["pause", 0.6], ["job", 2.0]]}]}

(unknown keys ignored). Phases: `work` GPU busy with the user at the notebook (hub
activity); `cpu` the user at the notebook, GPU idle; `pause` neither (hub activity goes on
only if `tab_open`); `job` GPU busy with nobody at the notebook. `end`: `stop` (the user
stops the server) or `leave` (walks away). A user's sessions must not overlap.
"""

from __future__ import annotations

import bisect
import json
import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

KINDS = ("work", "cpu", "pause", "job")
ENDS = ("stop", "leave")


@dataclass
class Phase:
    kind: str  # one of KINDS
    hours: float


@dataclass
class Session:
    user: str
    start: float
    kind: str  # "interactive" | "batch" (a session with a job phase); informative only
    tab_open: bool
    end: str  # "stop" | "leave"
    phases: list[Phase] = field(default_factory=list)

    @property
    def hours(self) -> float:
        return sum(p.hours for p in self.phases)


# --- the working day (the bench's first profile) ---------------------------------------------
@dataclass(frozen=True)
class TraceParams:
    """The working-day profile; times in simulated hours."""

    users: int = 8
    hours: float = 8.0  # the span of the trace (a working day)
    arrival_rate: float = 0.25  # sessions per user per hour (Poisson), started before hours - 0.5
    first_within: float = 2.0  # each user's first session starts uniformly in [0, first_within)
    active_median: float = 0.5  # interactive GPU work: lognormal, this median ...
    active_sigma: float = 0.6  # ... and this sigma (of the log)
    idle_median: float = 0.75  # a pause inside a session (meeting, lunch): lognormal
    idle_sigma: float = 0.8
    phases_mean: float = 3.0  # work phases per interactive session: 1 + geometric with this mean
    batch_share: float = 0.25  # sessions that set up (one work phase) and then run one long GPU job
    job_median: float = 2.5  # the job's length: lognormal, UI untouched, GPU busy throughout
    job_sigma: float = 0.5
    tab_open_share: float = 0.3  # sessions whose tab stays open while idle and after the user leaves
    stop_share: float = 0.35  # sessions whose user stops the server at the end (the rest walk away)
    activity_every: float = 0.1  # hub activity reports while at work (or a tab is open): every 6 min
    seed: int = 3  # its trace is the closest to the nominal shares above (chosen before any replay)


def _logn(rng: random.Random, median: float, sigma: float) -> float:
    return rng.lognormvariate(math.log(median), sigma)


def generate(p: TraceParams) -> list[Session]:
    rng = random.Random(p.seed)
    out: list[Session] = []
    for i in range(p.users):
        user = f"user{i}"
        t = rng.uniform(0, p.first_within)
        while t < p.hours - 0.5:
            kind = "batch" if rng.random() < p.batch_share else "interactive"
            s = Session(user, round(t, 4), kind, rng.random() < p.tab_open_share, "")
            s.end = "stop" if rng.random() < p.stop_share else "leave"
            if kind == "batch":
                setup = _logn(rng, 0.25, 0.5)  # drawn before the job: the traces stay as they were
                s.phases = [Phase("work", setup), Phase("job", _logn(rng, p.job_median, p.job_sigma))]
            else:
                n = 1
                while rng.random() > 1 / p.phases_mean:
                    n += 1
                for k in range(n):
                    if k:
                        s.phases.append(Phase("pause", _logn(rng, p.idle_median, p.idle_sigma)))
                    s.phases.append(Phase("work", _logn(rng, p.active_median, p.active_sigma)))
            for ph in s.phases:
                ph.hours = round(ph.hours, 4)
            out.append(s)
            t += s.hours + rng.expovariate(p.arrival_rate)
    return sorted(out, key=lambda s: (s.start, s.user))


# --- the calibrated profile ------------------------------------------------------------------
# Published figures (Adobe notebook service, June 2021, 59 sessions / 48 h; NotebookOS, ASPLOS '26).
PUBLISHED = {
    "sessions": 59,
    "hours": 48,
    "session_hours_median": 21.0,
    "session_hours_q1": 3.0,
    "session_hours_q3": 36.0,
    "task_minutes_median": 6.0,
    "task_minutes_p90": 32.0,
    "task_minutes_mean": 27.0,
    "pause_minutes_median": 3.0,
    "pause_minutes_p90": 38.0,
    "pause_minutes_mean": 29.0,
    "pause_hours_max": 23.0,
    "cpu_task_share": 0.33,
    "gpu_busy_share_mean": 0.22,
    "gpu_busy_share_median": 0.14,
    "reserved_gpu_idle_share": 0.74,
}


@dataclass(frozen=True)
class NotebookParams:
    """The calibrated ("notebook") profile; times in simulated hours, the trace starts at 09:00."""

    users: int = 36
    hours: float = 48.0  # the span of the trace (two days)
    first_within: float = 30.0  # a user's first session starts uniformly in [0, first_within)
    gap_mean: float = 8.0  # next session of a user: exponential gap after the last one ends
    # session lifetime: log-linear between these published quantiles (q0 and q100 our choice)
    life_quantiles: tuple[tuple[float, float], ...] = (
        (0.0, 0.3),
        (0.25, 3.0),
        (0.5, 21.0),
        (0.75, 36.0),
        (1.0, 48.0),
    )
    task_median: float = 0.1  # a cell task: lognormal, median 6 min ...
    task_sigma: float = 1.31  # ... p90 32 min
    cpu_share: float = 1 / 3  # cell tasks that use no GPU (`cpu` phases)
    pause_median: float = 0.05  # a pause between cell tasks: lognormal, median 3 min ...
    pause_sigma: float = 1.98  # ... p90 38 min
    pause_max: float = 23.0  # longest pause (published)
    night_start: float = 10.0  # 19:00: a pause ending at night ...
    night_end: float = 24.0  # ... 09:00 next day ...
    night_share: float = 0.4  # ... is stretched to the next morning (plus up to 1 h) for 40 % of sessions
    job_share: float = 0.15  # sessions that run one long GPU job (nobody at the notebook) ...
    job_median: float = 3.0  # ... lognormal, median 3 h ...
    job_sigma: float = 0.6
    tab_open_share: float = 0.5  # sessions whose tab stays open in pauses and after the user leaves
    stop_share: float = 0.3  # sessions that end with the user stopping the server
    activity_every: float = 0.1  # hub activity every 6 min while at the notebook or a tab is open
    seed: int = (
        9  # of seeds 1-10, its trace is the closest to the published figures (chosen before any replay)
    )


def _quantile(rng: random.Random, points: tuple[tuple[float, float], ...]) -> float:
    """A draw from the distribution whose quantiles are `points`, log-linear in between."""
    u = rng.random()
    qs = [q for q, _ in points]
    i = max(1, min(len(points) - 1, bisect.bisect_right(qs, u)))
    (q0, v0), (q1, v1) = points[i - 1], points[i]
    f = (u - q0) / (q1 - q0)
    return math.exp(math.log(v0) + f * (math.log(v1) - math.log(v0)))


def generate_notebook(p: NotebookParams) -> list[Session]:
    rng = random.Random(p.seed)
    out: list[Session] = []
    for i in range(p.users):
        user = f"user{i}"
        t = rng.uniform(0, p.first_within)
        while t < p.hours - 0.5:
            life = _quantile(rng, p.life_quantiles)
            s = Session(user, round(t, 4), "interactive", rng.random() < p.tab_open_share, "")
            s.end = "stop" if rng.random() < p.stop_share else "leave"
            sleeps = rng.random() < p.night_share
            job_at = rng.uniform(0, life) if rng.random() < p.job_share else None
            now = 0.0
            while now < life:
                if job_at is not None and now >= job_at:
                    s.kind, job_at = "batch", None
                    s.phases.append(Phase("job", _logn(rng, p.job_median, p.job_sigma)))
                else:
                    task = _logn(rng, p.task_median, p.task_sigma)
                    s.phases.append(Phase("cpu" if rng.random() < p.cpu_share else "work", task))
                now += s.phases[-1].hours
                if now >= life:
                    break
                pause = min(p.pause_max, _logn(rng, p.pause_median, p.pause_sigma))
                clock = (t + now + pause) % 24
                if sleeps and p.night_start <= clock < p.night_end:
                    pause += p.night_end - clock + rng.uniform(0, 1)
                s.phases.append(Phase("pause", min(p.pause_max, pause)))
                now += s.phases[-1].hours
            for ph in s.phases:
                ph.hours = round(max(ph.hours, 0.001), 4)
            out.append(s)
            t += s.hours + rng.expovariate(1 / p.gap_mean)
    return sorted(out, key=lambda s: (s.start, s.user))


PROFILES = ("workday", "notebook")


def params_for(profile: str, **over: Any) -> TraceParams | NotebookParams:
    cls = TraceParams if profile == "workday" else NotebookParams
    return cls(**{k: v for k, v in over.items() if v is not None})


def generate_any(p: TraceParams | NotebookParams) -> list[Session]:
    return generate(p) if isinstance(p, TraceParams) else generate_notebook(p)


# --- statistics ----------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def trace_summary(trace: list[Session], span: float | None = None) -> dict[str, Any]:
    """What the trace holds, in the published figures' terms (within `span` hours if given)."""

    def hours(kind: str) -> float:
        return round(sum(ph.hours for s in trace for ph in s.phases if ph.kind == kind), 2)

    lives = [s.hours if span is None else min(s.hours, span - s.start) for s in trace]
    tasks = [ph.hours * 60 for s in trace for ph in s.phases if ph.kind in ("work", "cpu")]
    pauses = [ph.hours * 60 for s in trace for ph in s.phases if ph.kind == "pause"]
    busy_shares = []
    for s, life in zip(trace, lives, strict=True):
        busy, t = 0.0, 0.0
        for ph in s.phases:
            if ph.kind in ("work", "job"):
                busy += max(0.0, min(ph.hours, life - t))
            t += ph.hours
        busy_shares.append(busy / life if life > 0 else 0.0)
    held = sum(lives)
    busy_total = sum(b * life for b, life in zip(busy_shares, lives, strict=True))
    r = lambda x: round(x, 2)  # noqa: E731
    return {
        "sessions": len(trace),
        "users": len({s.user for s in trace}),
        "batch_sessions": sum(s.kind == "batch" for s in trace),
        "tab_open_sessions": sum(s.tab_open for s in trace),
        "stopped_at_end": sum(s.end == "stop" for s in trace),
        "gpu_work_hours": r(hours("work") + hours("job")),
        "job_hours": hours("job"),
        "cpu_hours": hours("cpu"),
        "pause_hours": hours("pause"),
        "session_hours_median": r(statistics.median(lives)) if lives else 0.0,
        "session_hours_q1": r(_pct(lives, 0.25)),
        "session_hours_q3": r(_pct(lives, 0.75)),
        "task_minutes_median": r(statistics.median(tasks)) if tasks else 0.0,
        "task_minutes_p90": r(_pct(tasks, 0.9)),
        "task_minutes_mean": r(statistics.fmean(tasks)) if tasks else 0.0,
        "pause_minutes_median": r(statistics.median(pauses)) if pauses else 0.0,
        "pause_minutes_p90": r(_pct(pauses, 0.9)),
        "pause_minutes_mean": r(statistics.fmean(pauses)) if pauses else 0.0,
        "pause_hours_max": r(max(pauses, default=0.0) / 60),
        "cpu_task_share": r(sum(ph.kind == "cpu" for s in trace for ph in s.phases) / max(1, len(tasks))),
        "gpu_busy_share_mean": r(statistics.fmean(busy_shares)) if busy_shares else 0.0,
        "gpu_busy_share_median": r(statistics.median(busy_shares)) if busy_shares else 0.0,
        "reserved_gpu_idle_share": r(1 - busy_total / held) if held else 0.0,
    }


# --- JSON ----------------------------------------------------------------------------------
class TraceError(ValueError):
    """A trace file that cannot be replayed; the message names the session and the field."""


def to_json(trace: list[Session], hours: float | None = None) -> dict[str, Any]:
    """The JSON document; `hours` (optional) is the span the replay covers (default: the last end)."""
    return {
        **({"hours": hours} if hours else {}),
        "sessions": [
            {
                "user": s.user,
                "start": s.start,
                "tab_open": s.tab_open,
                "end": s.end,
                "phases": [[ph.kind, ph.hours] for ph in s.phases],
            }
            for s in trace
        ],
    }


def dump(trace: list[Session], path: Path, hours: float | None = None) -> None:
    path.write_text(json.dumps(to_json(trace, hours), indent=1) + "\n")


def span(path: Path) -> float | None:
    """The file's optional "hours": the span to replay (a generated trace's own)."""
    try:
        v = json.loads(path.read_text()).get("hours")
    except (OSError, ValueError, AttributeError):
        return None
    return float(v) if _number(v) and v > 0 else None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def from_json(doc: Any) -> list[Session]:
    """Sessions from the JSON document; raises TraceError naming the session and field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("sessions"), list):
        raise TraceError('a trace is a JSON object with a "sessions" list')
    if not doc["sessions"]:
        raise TraceError('"sessions" is empty: nothing to replay')
    out = []
    for i, raw in enumerate(doc["sessions"]):
        where = f"session {i}"
        if not isinstance(raw, dict):
            raise TraceError(f"{where}: not an object")
        user = raw.get("user")
        if not isinstance(user, str) or not user:
            raise TraceError(f'{where}: "user" must be a non-empty string, got {user!r}')
        where = f"session {i} (user {user})"
        if not (user[0].isalnum() and all(c.isalnum() or c in "-_." for c in user) and len(user) <= 40):
            raise TraceError(f'{where}: "user" may hold letters, digits, "-", "_", "." (40 at most)')
        start: Any = raw.get("start")
        if not _number(start) or start < 0:
            raise TraceError(f'{where}: "start" must be a number of hours >= 0, got {start!r}')
        tab = raw.get("tab_open", False)
        if not isinstance(tab, bool):
            raise TraceError(f'{where}: "tab_open" must be true or false, got {tab!r}')
        end = raw.get("end", "stop")
        if end not in ENDS:
            raise TraceError(f'{where}: "end" must be "stop" or "leave", got {end!r}')
        phases = raw.get("phases")
        if not isinstance(phases, list) or not phases:
            raise TraceError(f'{where}: "phases" must be a non-empty list of [kind, hours]')
        s = Session(user, float(start), "interactive", tab, end)
        for k, ph in enumerate(phases):
            if not (isinstance(ph, list) and len(ph) == 2):
                raise TraceError(f'{where}: "phases"[{k}] must be [kind, hours], got {ph!r}')
            kind, hours = ph
            if kind not in KINDS:
                kinds = ", ".join(KINDS)
                raise TraceError(f'{where}: "phases"[{k}]: kind must be one of {kinds}, got {kind!r}')
            if not _number(hours) or hours <= 0:
                raise TraceError(f'{where}: "phases"[{k}]: hours must be a number > 0, got {hours!r}')
            s.phases.append(Phase(kind, float(hours)))
            if kind == "job":
                s.kind = "batch"
        if s.phases[0].kind == "pause":
            raise TraceError(f'{where}: "phases"[0] is a pause: a session starts with the user at it')
        out.append((i, s))
    last: dict[str, tuple[int, Session]] = {}
    for i, s in sorted(out, key=lambda x: (x[1].start, x[0])):
        prev = last.get(s.user)
        if prev is not None and prev[1].start + prev[1].hours > s.start:
            raise TraceError(
                f'session {i} (user {s.user}): "start" {s.start:g} is before the end of the same '
                f"user's session {prev[0]} ({prev[1].start + prev[1].hours:g}): "
                "a user's sessions run one after another"
            )
        last[s.user] = (i, s)
    return sorted((s for _, s in out), key=lambda s: (s.start, s.user))


def load(path: Path) -> list[Session]:
    try:
        doc = json.loads(path.read_text())
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"{path}: not JSON: {e}") from None
    try:
        return from_json(doc)
    except TraceError as e:
        raise TraceError(f"{path}: {e}") from None
