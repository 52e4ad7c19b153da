"""The GPU-size picker: availability figures per profile, the spawn form, and
`GET /hub/api/gpusessions/availability`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jinja2
from jupyterhub.apihandlers.base import APIHandler
from tornado import web

from .availability import profile_figures
from .claims import Alternative, GPURequest
from .sizes import size_selectors
from .watch import cluster_view

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
    return "Availability unknown (this size uses a custom selector)."


def _gib(n: int | None) -> str:
    return f"{n / 2**30:.1f} GiB" if n else ""


def compute_figures(
    spawner: Any,
    profile_list: list[Obj],
    derived: tuple[Any, ...],
    memo: dict[Any, Obj] | None = None,
    version: int = 0,
    slice_memo: dict[Any, Any] | None = None,
) -> list[Obj]:
    """Figures for each profile from the view's derived data; `memo` keeps them per data version,
    so a page view costs a lookup, not a count over every device."""
    inv, allocated, left, classes = derived
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
                }
            )
            continue
        key = (version, request.hash(), request.count)
        base = memo.get(key) if memo is not None else None
        if base is None:
            base = profile_figures({"slug": "-"}, request, inv, allocated, classes, left, slice_memo)
            if memo is not None:
                if len(memo) > 256:
                    memo.clear()
                memo[key] = base
        f = {
            **base,
            "slug": p["slug"],
            "display_name": p.get("display_name", p["slug"]),
            "description": p.get("description", ""),
            "default": bool(p.get("default")),
        }
        f["memory_text"] = _gib(f.get("memory"))
        f["availability"] = describe_availability(f)
        f["queue"] = None  # team queue use and limit: with KAI queues
        out.append(f)
    return out


async def figures_for(spawner: Any, profile_list: list[Obj]) -> Obj:
    view = cluster_view()
    ready = await view.wait_ready(timeout=5)
    derived = view.derived()
    if ready:
        profiles = compute_figures(
            spawner, profile_list, derived, view.memo, view.computed_version, view.slice_memo
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
                "queue": None,
            }
            f["availability"] = describe_availability(f)
            profiles.append(f)
    return {
        "profiles": profiles,
        "updated": time.time(),
        "errors": view.errors,
        "complete": ready,
        # What the figures were computed from, so a script can tell they caught up.
        "seen": {
            "slices": len(view.slices.objects),
            "claims": len(view.claims.objects),
            "allocated_devices": len(derived[1]),
        },
    }


def render_form(profile_list: list[Obj], figures: Obj, base_url: str) -> str:
    by_slug = {f["slug"]: f for f in figures["profiles"]}
    return _ENV.get_template("picker.html").render(
        profiles=[(p, by_slug.get(p["slug"], {})) for p in profile_list],
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
