"""What the admin page and /metrics say about idle and reclaimed GPU time, and the reclaim policy (pure).

From the culler's own record (history.py, kept in a file across culler restarts): per profile
and queue, GPU-equivalent-hours held, busy, idle, kept (server stopped) and reclaimed, with the
counts of reclaims, culls and warnings, today (since midnight UTC) and over the last 7 days.

"Reclaimed" is what the reclaim-while-someone-waits rules gave back ahead of the rule that
applies when nobody waits: a GPU culled by `gpu_idle_limit_contended` counts the time left to
its plain GPU-idle (or idle) limit, a kept GPU released by `stopped_keep_contended` the time
left of `stopped_keep`; each times the session's GPU-equivalents (N/7 per MIG slice Ng).
Other culls count as culls, not as reclaimed time: nobody knows how long those GPUs would
have stayed idle.
"""

from __future__ import annotations

from typing import Any

from gpusessions.culler.history import History
from gpusessions.culler.model import Session
from gpusessions.culler.policy import PARKING, Decision, Policy, Rules, _dur, gpu_idle_since

WEEK = 7 * 86400.0
KINDS = ("held", "busy", "idle", "kept", "reclaimed")
COUNTS = ("reclaims", "culls", "warnings")


def reclaimed_seconds(s: Session, d: Decision, now: float, rules: Rules) -> float:
    """Seconds (per GPU-equivalent) a contended rule's cull or release came ahead of the plain rule."""
    if d.rule == "stopped-contended" and s.stopped_since is not None:
        return max(0.0, s.stopped_since + rules.stopped_keep - now)
    if d.rule == "gpu-idle-contended":
        since = gpu_idle_since(s)
        if since is None:
            return 0.0
        limits = [x for x in (rules.gpu_idle_limit, rules.idle_limit) if x > 0]
        return max(0.0, since + min(limits) - now) if limits else 0.0
    return 0.0


def _rows(totals: dict[tuple[str, str], dict[str, float]]) -> list[dict[str, Any]]:
    rows = []
    for (profile, queue), c in sorted(totals.items()):
        row: dict[str, Any] = {"profile": profile, "queue": queue}
        row.update({k: round(c.get(k, 0.0) / 3600, 3) for k in KINDS})
        row.update({k: int(c.get(k, 0)) for k in COUNTS})
        rows.append(row)
    return rows


def _sum(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {k: round(sum(r[k] for r in rows), 3) for k in (*KINDS, *COUNTS)}


def record(history: History, now: float) -> dict[str, Any]:
    """{"today": {"since", "rows", "total"}, "7d": {...}}: GPU-hours per (profile, queue), and counts."""
    out: dict[str, Any] = {}
    for window, since in (("today", history.day_start(now)), ("7d", now - WEEK)):
        rows = _rows(history.totals(since))
        out[window] = {"since": since, "rows": rows, "total": _sum(rows)}
    return out


def _limit(seconds: float) -> str:
    return "off" if seconds <= 0 else _dur(seconds)


def unread_rule(p: Policy) -> str:
    """What happens to a session whose GPU could not be read, as the settings make it work."""
    r = p.rules
    line = (
        "A GPU whose agent does not answer (also when asked again within the cycle), or whose "
        "reading failed, is never counted as idle: no rule that needs an idle GPU culls it"
    )
    if r.cull_unread_on_hub_idle:
        line += (
            f"; the idle limit ({_limit(r.idle_limit)}) still culls it on the notebook's activity "
            "alone (as the hub sees it)"
        )
    else:
        line += ", not even the idle limit"
    if r.max_age > 0:
        line += f"; the maximum age ({_dur(r.max_age)}) still ends it"
    line += "."
    differ = sorted(
        name
        for name, o in p.per_profile.items()
        if bool(o.get("cull_unread_on_hub_idle", r.cull_unread_on_hub_idle)) != r.cull_unread_on_hub_idle
    )
    if differ:
        other = "may" if not r.cull_unread_on_hub_idle else "may not"
        line += f" Sessions of {', '.join(differ)} {other} be culled on the notebook's activity alone."
    return line


def policy(p: Policy) -> dict[str, Any]:
    """The reclaim policy in words, with this culler's settings, for the admin page."""
    r = p.rules
    lines = [
        f"A running session is culled (server stopped, GPU released) after its notebook AND its GPU "
        f"were idle {_limit(r.idle_limit)}, or its GPU alone {_limit(r.gpu_idle_limit)} "
        "(an open tab keeps the notebook active).",
    ]
    if r.gpu_idle_limit_contended > 0:
        lines.append(
            "While another user waits for a GPU of the same size and no kept GPU can serve them, the "
            f"session whose GPU has been idle longest is culled after {_dur(r.gpu_idle_limit_contended)} "
            "of GPU idleness instead: one per waiter."
        )
    if r.keep_contended > 0:
        lines.append(
            f"While someone waits for that size, a user's Keep my GPU holds {_dur(r.keep_contended)} "
            "(then, if the GPU is still idle, a new warning); an admin's keep always holds."
        )
    keep = f"A stopped server keeps its GPU {_limit(r.stopped_keep)}"
    if 0 < r.stopped_keep_contended < r.stopped_keep:
        keep += f"; only {_dur(r.stopped_keep_contended)} while someone waits for that size"
    lines += [
        keep + ".",
        f"Every cull is announced {_limit(r.warn_before)} ahead (less for the shorter rules, never "
        "more than their limit) on the hub home page and in JupyterLab; Keep my GPU holds it off.",
        "A busy GPU (an agent reading at or above the busy threshold) is never culled.",
        unread_rule(p),
    ]
    if r.max_age > 0:
        lines.append(f"Any session older than {_dur(r.max_age)} is ended.")
    return {
        "lines": lines,
        "settings": {
            "idle_limit": r.idle_limit,
            "gpu_idle_limit": r.gpu_idle_limit,
            "gpu_idle_limit_contended": r.gpu_idle_limit_contended,
            "stopped_keep": r.stopped_keep,
            "stopped_keep_contended": r.stopped_keep_contended,
            "keep_contended": r.keep_contended,
            "warn_before": r.warn_before,
            "max_age": r.max_age,
            "cull_unread_on_hub_idle": r.cull_unread_on_hub_idle,
        },
        "per_profile": p.per_profile,
        "dry_run": p.dry_run,
        "parking": parking(p),
    }


def parking(p: Policy) -> dict[str, Any]:
    """What a cull means for a session that parks (its claim says so), in words, with its rules."""
    r = p.for_profile("", parks=True)
    keep = (
        f"a Keep my GPU holds {_dur(r.keep_limit)}"
        if r.keep_limit > 0
        else "a Keep my GPU holds its full length"
    )
    return {
        "lines": [
            "A cull parks the session: its kernels' variables are saved to the user's home, the GPU goes "
            "to the next user, and the next start restores them (on any free GPU of the same size).",
            "So a session that parks is culled sooner: after its GPU alone was idle "
            f"{_limit(r.gpu_idle_limit)}, its notebook and GPU {_limit(r.idle_limit)}, a stopped "
            f"server's GPU after {_limit(r.stopped_keep)}; warned {_limit(r.warn_before)} ahead; "
            f"{keep} ({_dur(r.keep_contended)} while someone waits for that size).",
            "A park that fails or runs over its time falls back to a plain cull, and the user is told what "
            "was lost. Sessions that do not park keep the rules above.",
        ],
        "settings": {k: getattr(r, k) for k in PARKING},
    }
