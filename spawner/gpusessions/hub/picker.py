"""The GPU-size picker: availability figures per profile in words, and the spawn form (the
same figures as JSON: `GET /hub/api/gpusessions/availability`, in `availabilityapi.py`).

Counting is `core.availability`'s (`Figures`, kept per data version by the view's
`FiguresCache`); the team's figures are `core.queues.QueuePolicy`'s, with KAI's own figures of
the team's Queue where the cluster runs KAI (`core.queues.KaiQueue`, from the hub's watch of
Queues); this module puts them in words and in the JSON."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import jinja2

from gpusessions.core import queues as Q
from gpusessions.core.availability import Derived, Figures, FiguresCache
from gpusessions.core.claims import GPURequest
from gpusessions.core.requests import profile_settings, request_from
from gpusessions.kube.watch import cluster_view, kai_queue

Obj = dict[str, Any]
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
    autoescape=True,
)


def profile_request(spawner: Any, profile: Obj) -> GPURequest:
    """The GPU request a profile makes (its overrides over the spawner's settings), checked as
    the spawner checks it: `InvalidSettings` (a ValueError) when the spawner would refuse it."""
    return request_from(profile_settings(spawner, profile))


# -- words --------------------------------------------------------------------------------
def describe_availability(f: Figures) -> str:
    state = f.state
    if state == "cpu":
        return "No GPU: starts right away."
    if state == "free":
        return f"{f.free} of {f.total} free now."
    if state == "none-free":
        return (
            f"None free now (all {f.total} in use). You can still start: you will wait in line "
            "and this page tells you when a GPU is yours."
        )
    if state == "not-offered":
        return "Not offered on this cluster right now."
    if (f.note or "").startswith("this size's selector fails"):
        return f"Availability unknown: {f.note}. Ask your admin to fix this size."
    return "Availability unknown (this size uses a custom selector)."


def memory_text(least: int | None, most: int | None = None) -> str:
    """'9.8 GiB', or '39.5-79.6 GiB' when the size matches devices of different memory."""
    if not least:
        return ""
    if most and most != least:
        return f"{least / 2**30:.1f}-{most / 2**30:.1f} GiB"
    return f"{least / 2**30:.1f} GiB"


def compute_text(f: Figures) -> str:
    """A session's share of compute: '1/7 of a GPU', '2 x 3/7 of a GPU', '1 whole GPU'."""
    if f.device == "mig":
        share = f"{f.slices}/7 of a GPU"
        return share if f.count == 1 else f"{f.count} x {share}"
    if f.device == "gpu":
        return "1 whole GPU" if f.count == 1 else f"{f.count} whole GPUs"
    return ""


@dataclass(frozen=True)
class Row:
    """One profile in the picker: its figures and the words shown for them."""

    profile: Obj
    figures: Figures
    availability: str
    queue: Obj | None  # the team's figures for this size (None without team queues)
    memory_text: str | None = None  # None: not said (the profile's settings are invalid)
    described: bool = False  # the profile's description and default are given

    def json(self) -> Obj:
        """The profile's entry in the availability JSON (and the form)."""
        f, p = self.figures, self.profile
        out: Obj = {"slug": p["slug"], "display_name": p.get("display_name", p["slug"])}
        if self.described:
            out["description"] = p.get("description", "")
            out["default"] = bool(p.get("default"))
        out.update(gpu=f.gpu, state=f.state, free=f.free, total=f.total, memory=f.memory)
        if f.counted:
            out["memory_max"] = f.memory_max
        out["compute"] = compute_text(f)
        if f.note is not None:
            out["note"] = f.note
        if self.memory_text is not None:
            out["memory_text"] = self.memory_text
        out["availability"] = self.availability
        out["queue"] = self.queue
        return out


def _invalid(profile: Obj, error: Exception, team: Q.Team | None) -> Row:
    figures = Figures("unknown", note=f"invalid profile settings: {error}")
    return Row(profile, figures, "Availability unknown.", team.figure(Fraction(0)) if team else None)


# -- counting -----------------------------------------------------------------------------
def compute_figures(
    spawner: Any,
    profile_list: list[Obj],
    derived: Derived,
    cache: FiguresCache | None = None,
    version: int = 0,
    team: Q.Team | None = None,
) -> list[Obj]:
    """Figures for each profile from the view's derived data; `cache` keeps them per data
    version, so a page view costs a lookup, not a count over every device, and remembers the
    sizes asked for, which the watch counts again after each change (`FiguresCache.warm`)."""
    cache = cache if cache is not None else FiguresCache()
    policy = Q.QueuePolicy.of(spawner)
    inv, _, _, classes = derived
    out = []
    for p in profile_list:
        try:
            request = profile_request(spawner, p)
        except (TypeError, ValueError) as e:
            out.append(_invalid(p, e, team).json())
            continue
        f = cache.figures(request, derived, version)
        cache.viewed(request)
        queue = team.figure(_equivalent(policy, request, inv, classes, cache)) if team else None
        row = Row(
            p,
            f,
            describe_availability(f),
            queue,
            memory_text(f.memory, f.memory_max),
            described=True,
        )
        out.append(row.json())
    return out


def _equivalent(
    policy: Q.QueuePolicy, request: GPURequest, inv: Any, classes: dict[str, Obj], cache: FiguresCache
) -> Fraction:
    """GPU-equivalents a size counts against the team's quota (kept until the slices change)."""
    if not request.wants_gpu:
        return Fraction(0)
    return cache.for_shape(
        ("equivalents", request.hash(), request.count), lambda: policy.charge(request, inv, classes)
    )


def _counted_team(
    spawner: Any, policy: Q.QueuePolicy, team: Q.Team | None, view: Any, version: int
) -> Q.Team | None:
    """The team with its use counted from the view's claims (kept per data version)."""
    if team is None or team.queue is None:
        return team
    queue = team.queue
    inv = view.derived()[0]
    claims = view.claims.objects
    use = view.figures.for_version(version, ("team", queue), lambda: Q.team_use(claims.values(), queue, inv))
    mine = None
    names = getattr(spawner, "_names", None)
    if names is not None:
        n = names()
        mine = claims.get(f"{n.namespace}/{n.claim}")
    return policy.counted(team, claims.values(), inv, mine, use)


async def figures_for(spawner: Any, profile_list: list[Obj]) -> Obj:
    view = cluster_view()
    ready = await view.wait_ready(timeout=5)
    policy = Q.QueuePolicy.of(spawner)
    groups = [g.name for g in getattr(spawner.user, "groups", []) or []]
    team = await policy.team_of(spawner, groups, spawner.log, spawner.user.name)
    if team is not None and team.queue is not None:
        # KAI's own figures of the team's queue (its Queue's spec and status), where the cluster
        # runs KAI; without them the line is the hub's own count.
        queue = await kai_queue(team.queue)
        if queue is not None:
            team = replace(team, kai=Q.KaiQueue.of(queue))
    # From here on nothing awaits: the figures are made from one version of the data.
    derived = view.derived()
    version, computed_from = view.computed_version, view.computed_from
    view.viewed()
    if ready:
        team = _counted_team(spawner, policy, team, view, version)
        profiles = compute_figures(spawner, profile_list, derived, view.figures, version, team)
    else:
        profiles = []
        for p in profile_list:
            try:
                wants = profile_request(spawner, p).wants_gpu
            except (TypeError, ValueError) as e:
                profiles.append(_invalid(p, e, team).json())
                continue
            f = Figures("unknown" if wants else "cpu")
            row = Row(p, f, describe_availability(f), team.figure(Fraction(0)) if team else None, "")
            profiles.append(row.json())
    return {
        "profiles": profiles,
        "updated": time.time(),
        "errors": view.errors,
        "complete": ready,
        # What the figures were computed from (not what the watch holds now: a recount may be
        # due), so a script can tell they caught up.
        "seen": {
            "slices": computed_from[0],
            "claims": computed_from[1],
            "allocated_devices": len(derived[1]),
        },
    }


def render_form(profile_list: list[Obj], figures: Obj, base_url: str) -> str:
    by_slug = {f["slug"]: f for f in figures["profiles"]}
    team = next((f["queue"] for f in figures["profiles"] if f.get("queue")), None)
    return _ENV.get_template("picker.html").render(
        profiles=[(p, by_slug.get(p["slug"], {})) for p in profile_list],
        team=team,
        base_url=base_url,
    )
