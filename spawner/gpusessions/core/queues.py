"""Team queues (KAI Scheduler) and a GPU quota that means something for MIG (pure).

- `resolve`: which queue a user's sessions go to: a fixed name, the first of the user's
  hub groups found in a mapping (group -> queue, `"*"` for everyone else), or a callable.
- GPU-equivalents: a MIG slice `Ng.XXgb` is N/7 of its GPU (the 7 compute slices of an
  A100 or H100), a whole GPU is 1. KAI charges a claim as one whole GPU whatever its size
  (and only for device classes named "...gpu..."), so a team quota in KAI cannot tell a
  1g.10gb slice from a GPU; the spawner enforces a per-team quota in GPU-equivalents
  before it creates a claim, from the claims it sees in its shared watch.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpusessions.core import labels as L
from gpusessions.core.availability import Inventory, size_match
from gpusessions.core.claims import Alternative, GPURequest

Obj = dict[str, Any]
EQUIVALENTS_ANNOTATION = "gpusessions.io/gpu-equivalents"
_MIG = re.compile(r"^(\d+)g\.(\d+)gb(\+[a-z.]+)?$")  # "+me": a profile with the media engines


async def resolve(setting: Any, spawner: Any, groups: Iterable[str], default: str = "") -> str | None:
    """The queue of this user's sessions, or None when the user has none."""
    if callable(setting):
        value = setting(spawner)
        if inspect.isawaitable(value):
            value = await value
        return str(value) if value else (default or None)
    if isinstance(setting, dict):
        mine = set(groups)
        for group, queue in setting.items():
            if group != "*" and group in mine:
                return str(queue)
        return str(setting["*"]) if setting.get("*") else (default or None)
    return str(setting) if setting else (default or None)


def device_equivalent(device: Obj | None) -> Fraction:
    """GPU-equivalents of one device: N/7 for a MIG slice Ng.*, 1 for a whole GPU."""
    profile = (((device or {}).get("attributes") or {}).get("profile") or {}).get("string", "")
    m = _MIG.match(profile)
    return Fraction(int(m.group(1)), 7) if m else Fraction(1)


def request_equivalent(request: GPURequest, inv: Inventory, classes: dict[str, Obj]) -> Fraction:
    """The most a request can take: over its alternatives, count x the largest matching device
    (1 per device when the size cannot be read: never less than it may take)."""
    alts = request.first_available or (Alternative(request.device_class, request.count, request.selectors),)
    most = Fraction(0)
    for a in alts:
        match = size_match([a.device_class], list(a.selectors), classes)
        per = Fraction(1)
        if match is not None:
            eqs = [device_equivalent(inv.by_key[k]) for k in inv.candidates(match)]
            per = max(eqs) if eqs else Fraction(1)
        most = max(most, per * a.count)
    return most


def claim_equivalent(claim: Obj, inv: Inventory) -> Fraction:
    """What a claim holds: its allocated devices; before allocation, what it was charged."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or []
    if results:
        return sum(
            (device_equivalent(inv.by_key.get((r["driver"], r["pool"], r["device"]))) for r in results),
            Fraction(0),
        )
    charged = (claim["metadata"].get("annotations") or {}).get(EQUIVALENTS_ANNOTATION)
    try:
        return Fraction(charged) if charged else Fraction(1)
    except (ValueError, ZeroDivisionError):
        return Fraction(1)


@dataclass(frozen=True)
class TeamUse:
    queue: str
    used: Fraction
    sessions: int


def team_use(
    claims: Iterable[Obj], queue: str, inv: Inventory, exclude: tuple[str, str] | None = None
) -> TeamUse:
    used, n = Fraction(0), 0
    for c in claims:
        md = c["metadata"]
        if (md.get("labels") or {}).get(L.QUEUE_LABEL) != queue or md.get("deletionTimestamp"):
            continue
        if exclude is not None and (md.get("namespace"), md.get("name")) == exclude:
            continue
        used += claim_equivalent(c, inv)
        n += 1
    return TeamUse(queue, used, n)


def fmt(x: Fraction | float) -> str:
    x = Fraction(x).limit_denominator(1000)
    if x.denominator == 1:
        return f"{x.numerator} GPU" if x.numerator == 1 else f"{x.numerator} GPUs"
    return f"{float(x):.2f} GPU"


def over_quota(use: TeamUse, limit: float, want: Fraction, what: str) -> str | None:
    """The refusal when `want` more would pass the team's quota, else None."""
    if use.used + want <= Fraction(limit).limit_denominator(1000):
        return None
    return (
        f"Your team's queue {use.queue} may hold {fmt(limit)} (a 1g.10gb slice counts 1/7); "
        f"its {use.sessions} session(s) hold {fmt(use.used)} now, and {what} ({fmt(want)}) would pass "
        "that. Wait until a colleague releases a GPU, or pick a smaller size."
    )


def _num(x: Fraction | float) -> str:
    x = Fraction(x).limit_denominator(1000)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.2f}"


def team_text(use: TeamUse, limit: float | None) -> str:
    """The team's line in the picker: "Team team-a: 3 of 8 GPUs in use." (GPU-equivalents)."""
    if limit is None:
        return f"Team {use.queue}: {_num(use.used)} GPUs in use (no team limit)."
    return f"Team {use.queue}: {_num(use.used)} of {_num(limit)} GPUs in use."


def team_figure(use: TeamUse, limit: float | None, want: Fraction, own: Fraction = Fraction(0)) -> Obj:
    """The picker's team figures for one size: the team's use and limit (GPU-equivalents) and
    whether starting this size would pass the limit, as the spawner's check decides it (`own`:
    what the user's own kept claim holds, which a restart reuses rather than adds)."""
    exceeds = (
        limit is not None and over_quota(TeamUse(use.queue, use.used - own, 0), limit, want, "") is not None
    )
    note = ""
    if exceeds:
        note = (
            f"This size counts {fmt(want)}: with it your team would pass its limit of {fmt(limit or 0)}, "
            "so starting it is refused until a colleague releases a GPU."
        )
    return {
        "name": use.queue,
        "used": float(use.used),
        "sessions": use.sessions,
        "limit": None if limit is None else float(limit),
        "size": float(want),
        "exceeds": exceeds,
        "text": team_text(use, limit),
        "note": note,
    }
