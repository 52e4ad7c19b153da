"""Hub endpoints of gpusessions: the culler's warnings, and "Keep my GPU".

    GET  /hub/api/gpusessions/users/{user}/warnings[?server=<name>]
    POST /hub/api/gpusessions/users/{user}/keep[?server=<name>]

The culler writes its warning on the claim (`core.labels.WARNED_AT`, when and why it will cull);
the user's Keep holds the culler off for `gpu_keep_extension` seconds, answered together with
the culler's cull in this same process (`cull.py`). A notebook server's own token is enough
for its own server (`core.scopes.SERVER_TOKEN`); the user's own token or an admin's works too.
"""

from __future__ import annotations

import time
from typing import Any

from tornado import web

from gpusessions.core import labels as L
from gpusessions.core import scopes
from gpusessions.hub import cull, health, notices
from gpusessions.hub.base import GPUSessionsAPIHandler
from gpusessions.kube.api import SessionAPI
from gpusessions.kube.watch import cluster_view


class WarningsHandler(GPUSessionsAPIHandler):
    """GET /hub/api/gpusessions/users/<user>/warnings[?server=<name>]: the culler's warnings.

    Without `server`, every server of the user (needs read:servers on the user); with it,
    that server only (its own notebook token is enough).
    """

    async def get(self, user_name: str) -> None:
        server = self.get_argument("server", None)
        self.authorize(scopes.READ_SERVERS, user_name, server)
        await cluster_view().wait_ready(timeout=5)
        out = []
        for c in self.claims_of(user_name):
            ann = c["metadata"].get("annotations") or {}
            if server is not None and ann.get(L.SERVER_ANNOTATION, "") != server:
                continue
            if ann.get(L.WARNED_AT) and not ann.get(L.KEEP_UNTIL):
                out.append(
                    {
                        "server": ann.get(L.SERVER_ANNOTATION, ""),
                        "claim": c["metadata"]["name"],
                        "profile": ann.get(L.PROFILE_ANNOTATION, ""),
                        "cull_at": float(ann.get(L.CULL_AT) or 0) or None,
                        "reason": ann.get(L.CULL_REASON, ""),
                    }
                )
        told = health.for_claims(self.claims_of(user_name), server) + notices.for_user(user_name, server)
        self.write_json({"warnings": out, "notices": told})


class KeepHandler(GPUSessionsAPIHandler):
    """POST /hub/api/gpusessions/users/<user>/keep[?server=<name>]: hold off the culler for a while."""

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
        cull.note_keep(user.name, server, now)
        until = now + float(getattr(spawner, "gpu_keep_extension", 4 * 3600))
        ok = await SessionAPI().annotate_claim(
            state["namespace"],
            state["claim"],
            {
                L.KEEP_UNTIL: str(until),
                L.KEPT_AT: str(now),
                L.WARNED_AT: None,
                L.CULL_AT: None,
                L.CULL_REASON: None,
            },
        )
        if not ok:
            raise web.HTTPError(404, "The GPU was already released.")
        self.write_json({"claim": state["claim"], "kept_until": until})


default_handlers: list[tuple[str, Any]] = [
    (r"/api/gpusessions/users/([^/]+)/warnings", WarningsHandler),
    (r"/api/gpusessions/users/([^/]+)/keep", KeepHandler),
]
