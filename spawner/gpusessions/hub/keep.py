"""Hub endpoints of gpusessions: the culler's warnings, and "Keep my GPU".

    GET  /hub/api/gpusessions/users/{user}/warnings[?server=<name>]
    POST /hub/api/gpusessions/users/{user}/keep[?server=<name>]

The culler writes its warning on the claim (`core.labels.WARNED_AT`, when and why it will cull);
the user's Keep (accepted only while a warning stands, or from an admin) holds the culler off
for `gpu_keep_extension` seconds (while someone waits for that size: the culler's
`keep_contended` from the warning), answered together with
the culler's cull in this same process (`cull.py`). A notebook server's own token is enough
for its own server (`core.scopes.SERVER_TOKEN`); the user's own token or an admin's works too.
"""

from __future__ import annotations

import math
import time
from typing import Any

from tornado import web

from gpusessions.core import labels as L
from gpusessions.core import scopes
from gpusessions.hub import cull, health, notices
from gpusessions.hub.base import GPUSessionsAPIHandler
from gpusessions.kube.api import SessionAPI
from gpusessions.kube.watch import cluster_view


def _time(v: Any) -> float | None:
    try:
        t = float(v)
    except (TypeError, ValueError):
        return None
    return t if math.isfinite(t) else None


def standing_warning(claim: dict[str, Any] | None, now: float) -> float | None:
    """When the culler's warning on this claim was given, while it stands unanswered: set, and no
    keep holds (a keep clears it; each warning takes one keep). None: no warning stands."""
    ann = (claim or {}).get("metadata", {}).get("annotations") or {}
    warned = _time(ann.get(L.WARNED_AT))
    until = _time(ann.get(L.KEEP_UNTIL))
    if warned is None or (until is not None and until > now):
        return None
    return warned


def contended_until(claim: dict[str, Any] | None, warned: float | None) -> float | None:
    """Until when a keep of this warning holds while someone waits for that size (the culler
    writes its `keep_contended` with each warning; None: no such limit)."""
    ann = (claim or {}).get("metadata", {}).get("annotations") or {}
    seconds = _time(ann.get(L.KEEP_CONTENDED))
    if warned is None or not seconds or seconds <= 0:
        return None
    return warned + seconds


def keep_seconds(spawner: Any) -> float:
    """How long a keep holds with nobody waiting (the spawner's bounded `gpu_keep_extension`)."""
    return float(getattr(spawner, "gpu_keep_extension", 4 * 3600))


class WarningsHandler(GPUSessionsAPIHandler):
    """GET /hub/api/gpusessions/users/<user>/warnings[?server=<name>]: the culler's warnings.

    Without `server`, every server of the user (needs read:servers on the user); with it,
    that server only (its own notebook token is enough). Each warning says what a keep now
    would give: `keep_until` (nobody waiting) and `keep_contended_until` (while someone waits).
    """

    async def get(self, user_name: str) -> None:
        server = self.get_argument("server", None)
        self.authorize(scopes.READ_SERVERS, user_name, server)
        await cluster_view().wait_ready(timeout=5)
        user = self.find_user(user_name)
        now = time.time()
        out = []
        for c in self.claims_of(user_name):
            ann = c["metadata"].get("annotations") or {}
            if server is not None and ann.get(L.SERVER_ANNOTATION, "") != server:
                continue
            warned = standing_warning(c, now)
            if warned is None:
                continue
            spawner = (user.spawners.get(ann.get(L.SERVER_ANNOTATION, "")) if user else None) or None
            out.append(
                {
                    "server": ann.get(L.SERVER_ANNOTATION, ""),
                    "claim": c["metadata"]["name"],
                    "profile": ann.get(L.PROFILE_ANNOTATION, ""),
                    "cull_at": _time(ann.get(L.CULL_AT)) or None,
                    "reason": ann.get(L.CULL_REASON, ""),
                    "warned_at": warned,
                    "keep_until": now + keep_seconds(spawner),
                    "keep_contended_until": contended_until(c, warned),
                }
            )
        told = health.for_claims(self.claims_of(user_name), server) + notices.for_user(user_name, server)
        self.write_json({"warnings": out, "notices": told})


class KeepHandler(GPUSessionsAPIHandler):
    """POST /hub/api/gpusessions/users/<user>/keep[?server=<name>]: answer the culler's warning.

    Accepted only while a warning stands for the server (409 otherwise), or from an admin; it
    holds `gpu_keep_extension` seconds, and while someone waits for that size only the culler's
    `keep_contended` from the warning (policy.py). So a keep pressed again gains nothing."""

    async def post(self, user_name: str) -> None:
        server = self.get_argument("server", "")
        self.authorize(scopes.SERVERS, user_name, server)
        user, spawner = self.user_and_spawner(user_name, server)
        state = spawner.get_state().get("gpusessions") or {}
        if not state.get("claim"):
            raise web.HTTPError(404, "This server holds no GPU.")
        now = time.time()
        # Answered in one step with the culler's cull (hub/cull.py): no await before the record.
        if cull.culled_since_start(user.name, server, cull.started_at(spawner)):
            raise web.HTTPError(
                409,
                "Your GPU is being released: the culler stopped this server before your Keep "
                "arrived. Start it again from the hub home page.",
            )
        claim = cluster_view().claims.objects.get(f"{state['namespace']}/{state['claim']}")
        warned = standing_warning(claim, now)
        if warned is not None and cull.kept_after(user.name, server, warned, None):
            warned = None  # this hub took a keep of that warning already (the watch lags the write)
        if warned is None:
            if not self._is_admin():
                raise web.HTTPError(
                    409,
                    "There is no warning to answer: Keep my GPU holds off the culler only after it "
                    "warns that it will release this GPU (you see the warning here and on the hub "
                    "home page). Nothing was changed.",
                )
            warned = now  # an admin's keep through the hub: counts from now
        cull.note_keep(user.name, server, now)
        until = now + keep_seconds(spawner)
        ok = await SessionAPI.of(spawner).annotate_claim(
            state["namespace"],
            state["claim"],
            {
                L.KEEP_UNTIL: str(until),
                L.KEPT_AT: str(now),
                L.KEEP_FROM: str(warned),
                L.WARNED_AT: None,
                L.CULL_AT: None,
                L.CULL_REASON: None,
            },
        )
        if not ok:
            raise web.HTTPError(404, "The GPU was already released.")
        self.write_json(
            {
                "claim": state["claim"],
                "kept_until": until,
                "contended_until": contended_until(claim, warned),
            }
        )

    def _is_admin(self) -> bool:
        """A hub admin (or a token with admin:servers on everyone), not a server's own token."""
        return "admin:servers" in self.parsed_scopes


default_handlers: list[tuple[str, Any]] = [
    (r"/api/gpusessions/users/([^/]+)/warnings", WarningsHandler),
    (r"/api/gpusessions/users/([^/]+)/keep", KeepHandler),
]
