"""The GPU-size picker: availability figures per profile, the spawn form, and
`GET /hub/api/gpusessions/availability`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import jinja2
from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from gpusessions.core import labels as L
from gpusessions.core import queues as Q
from gpusessions.core.availability import profile_figures
from gpusessions.core.claims import Alternative, GPURequest
from gpusessions.core.sizes import size_selectors
from gpusessions.kube.watch import cluster_view

Obj = dict[str, Any]
_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
    autoescape=True,
)


def profile_request(spawner: Any, profile: Obj) -> GPURequest:
    """The GPU request a profile makes: its overrides (and default choices') over the spawner's settings."""
    ov: dict[str, Any] = dict(profile.get("kubespawner_override") or {})
    for option in (profile.get("profile_options") or {}).values():
        choices = option.get("choices") or {}
        default: Obj = next(
            (c for c in choices.values() if c.get("default")), next(iter(choices.values()), {})
        )
        ov.update(default.get("kubespawner_override") or {})

    def get(name: str) -> Any:
        v = ov.get(name, getattr(spawner, name))
        return v(spawner) if callable(v) else v

    alts = tuple(
        Alternative(str(a.get("device_class", "")), int(a.get("count", 1)), tuple(a.get("selectors") or ()))
        for a in get("gpu_first_available") or []
    )
    return GPURequest(
        device_class=str(get("gpu_device_class") or "") if not alts else "",
        count=int(get("gpu_count")),
        selectors=tuple(get("gpu_selectors") or ()) + size_selectors(get("gpu_size")),
        first_available=alts,
    )


def describe_availability(f: Obj) -> str:
    state = f["state"]
    if state == "cpu":
        return "No GPU: starts right away."
    if state == "free":
        return f"{f['free']} of {f['total']} free now."
    if state == "none-free":
        return (
            f"None free now (all {f['total']} in use). You can still start: you will wait in line "
            "and this page tells you when a GPU is yours."
        )
    if state == "not-offered":
        return "Not offered on this cluster right now."
    if f.get("note", "").startswith("this size's selector fails"):
        return f"Availability unknown: {f['note']}. Ask your admin to fix this size."
    return "Availability unknown (this size uses a custom selector)."


@dataclass(frozen=True)
class Team:
    """The user's team queue (KAI) as the picker shows it; `use` is None while unknown."""

    queue: str | None  # None: the user is in no team
    use: Q.TeamUse | None = None
    limit: float | None = None
    own: Fraction = Fraction(0)  # what the user's own kept claim holds (a restart reuses it)


NO_TEAM = {
    "name": None,
    "used": None,
    "sessions": None,
    "limit": None,
    "size": None,
    "exceeds": False,
    "text": (
        "You are in no team with a GPU queue, so your server cannot start. "
        "Ask your admin to add you to a team."
    ),
    "note": "",
}


async def user_queue(spawner: Any) -> Team | None:
    """The user's team queue (use not counted yet), or None when KAI queues are not configured."""
    setting = getattr(spawner, "kai_queue", None)
    if not setting:
        return None
    groups = [g.name for g in getattr(spawner.user, "groups", []) or []]
    try:
        queue = await Q.resolve(setting, spawner, groups, getattr(spawner, "kai_default_queue", ""))
    except Exception as e:  # a kai_queue callable that fails: the sizes still show, the team not
        spawner.log.warning("kai_queue failed for %s in the picker: %s", spawner.user.name, e)
        return None
    if not queue:
        return Team(None)
    limit = (getattr(spawner, "kai_gpu_quota", None) or {}).get(queue)
    return Team(queue, None, None if limit is None else float(limit))


def team_of(
    spawner: Any, team: Team | None, view: Any, inv: Any, memo: dict[Any, Any] | None, version: int
) -> Team | None:
    """The team with its use counted from the view's claims (kept per data version)."""
    if team is None or team.queue is None:
        return team
    queue = team.queue
    key = ("team", version, queue)
    use = memo.get(key) if memo is not None else None
    if use is None:
        use = Q.team_use(view.claims.objects.values(), queue, inv)
        if memo is not None:
            memo[key] = use
    own = Fraction(0)
    names = getattr(spawner, "_names", None)
    if names is not None:
        n = names()
        mine = view.claims.objects.get(f"{n.namespace}/{n.claim}")
        md = (mine or {}).get("metadata") or {}
        if (md.get("labels") or {}).get(L.QUEUE_LABEL) == queue and not md.get("deletionTimestamp"):
            own = Q.claim_equivalent(mine or {}, inv)
    return Team(queue, use, team.limit, own)


def team_figure(team: Team | None, want: Fraction) -> Obj | None:
    if team is None:
        return None
    if team.queue is None:
        return dict(NO_TEAM)
    if team.use is None:
        return {
            **NO_TEAM,
            "name": team.queue,
            "limit": team.limit,
            "text": f"Team {team.queue}: GPU use unknown right now.",
        }
    return Q.team_figure(team.use, team.limit, want, team.own)


def memory_text(least: int | None, most: int | None = None) -> str:
    """'9.8 GiB', or '39.5-79.6 GiB' when the size matches devices of different memory."""
    if not least:
        return ""
    if most and most != least:
        return f"{least / 2**30:.1f}-{most / 2**30:.1f} GiB"
    return f"{least / 2**30:.1f} GiB"


def base_figures(
    request: GPURequest,
    derived: tuple[Any, ...],
    memo: dict[Any, Obj] | None,
    version: int,
    slice_memo: dict[Any, Any] | None,
) -> Obj:
    """The figures of one request for one version of the data, kept in `memo`."""
    key = (version, request.hash(), request.count)
    base = memo.get(key) if memo is not None else None
    if base is None:
        inv, allocated, left, classes = derived
        base = profile_figures({"slug": "-"}, request, inv, allocated, classes, left, slice_memo)
        if memo is not None:
            if len(memo) > 256:
                memo.clear()
            memo[key] = base
    return base


def warm(view: Any) -> None:
    """Count the sizes views asked for lately, for the view's current data: the watch calls this
    after a change, so the next page view finds its figures ready instead of counting."""
    derived = view.derived()
    for request in list(view.recent.values()):
        base_figures(request, derived, view.memo, view.computed_version, view.slice_memo)


def compute_figures(
    spawner: Any,
    profile_list: list[Obj],
    derived: tuple[Any, ...],
    memo: dict[Any, Obj] | None = None,
    version: int = 0,
    slice_memo: dict[Any, Any] | None = None,
    team: Team | None = None,
    recent: dict[Any, GPURequest] | None = None,
) -> list[Obj]:
    """Figures for each profile from the view's derived data; `memo` keeps them per data version,
    so a page view costs a lookup, not a count over every device. The requests go into `recent`,
    which the watch counts again after each change (`warm`)."""
    inv, _, _, classes = derived
    out = []
    for p in profile_list:
        try:
            request = profile_request(spawner, p)
        except (TypeError, ValueError) as e:
            out.append(
                {
                    "slug": p["slug"],
                    "display_name": p.get("display_name", p["slug"]),
                    "state": "unknown",
                    "free": None,
                    "total": None,
                    "gpu": None,
                    "memory": None,
                    "compute": "",
                    "availability": "Availability unknown.",
                    "note": f"invalid profile settings: {e}",
                    "queue": team_figure(team, Fraction(0)),
                }
            )
            continue
        base = base_figures(request, derived, memo, version, slice_memo)
        if recent is not None:
            if len(recent) > 64:
                recent.clear()
            recent[(request.hash(), request.count)] = request
        f = {
            **base,
            "slug": p["slug"],
            "display_name": p.get("display_name", p["slug"]),
            "description": p.get("description", ""),
            "default": bool(p.get("default")),
        }
        f["memory_text"] = memory_text(f.get("memory"), f.get("memory_max"))
        f["availability"] = describe_availability(f)
        f["queue"] = team_figure(team, _equivalent(request, inv, classes, slice_memo)) if team else None
        out.append(f)
    return out


def _equivalent(
    request: GPURequest, inv: Any, classes: dict[str, Obj], slice_memo: dict[Any, Any] | None
) -> Fraction:
    """GPU-equivalents a size counts against the team's quota (kept until the slices change)."""
    if not request.wants_gpu:
        return Fraction(0)
    key = ("equivalents", request.hash(), request.count)
    want = slice_memo.get(key) if slice_memo is not None else None
    if want is None:
        want = Q.request_equivalent(request, inv, classes)
        if slice_memo is not None:
            slice_memo[key] = want
    return want


async def figures_for(spawner: Any, profile_list: list[Obj]) -> Obj:
    view = cluster_view()
    ready = await view.wait_ready(timeout=5)
    team = await user_queue(spawner)
    # From here on nothing awaits: the figures are made from one version of the data.
    derived = view.derived()
    version, computed_from = view.computed_version, view.computed_from
    view.warm = warm
    view.viewed()
    if ready:
        team = team_of(spawner, team, view, derived[0], view.memo, version)
        profiles = compute_figures(
            spawner, profile_list, derived, view.memo, version, view.slice_memo, team, view.recent
        )
    else:
        profiles = []
        for p in profile_list:
            wants = profile_request(spawner, p).wants_gpu
            f = {
                "slug": p["slug"],
                "display_name": p.get("display_name", p["slug"]),
                "state": "unknown" if wants else "cpu",
                "free": None,
                "total": None,
                "gpu": None,
                "memory": None,
                "compute": "",
                "memory_text": "",
                "queue": team_figure(team, Fraction(0)),
            }
            f["availability"] = describe_availability(f)
            profiles.append(f)
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


class AvailabilityHandler(APIHandler):
    """GET /hub/api/gpusessions/availability: the picker's figures for the logged-in user."""

    async def get(self) -> None:
        user = self.current_user
        if user is None:
            raise web.HTTPError(403, "Log in (or use a user's API token) to see GPU availability.")
        if not hasattr(user, "spawners"):
            raise web.HTTPError(403, "Availability is shown to users; use a user's token.")
        spawner = user.spawners[""]
        profiles = getattr(spawner, "_profile_list_for_user", None)
        if profiles is None:
            raise web.HTTPError(400, "This hub's spawner is not gpusessions.")
        body = await figures_for(spawner, await profiles())
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(body))
