"""Hub endpoints of gpusessions: "Release my GPU".

    POST /hub/api/gpusessions/users/{user}/release              (default server)
    POST /hub/api/gpusessions/users/{user}/servers/{name}/release

Stops the server if it runs, then deletes its holder pod and claim so the GPU
goes back to the pool. Allowed for the user themself and for anyone holding the
`servers` scope on that user (admins). The home page gets a "Release my GPU"
button (templates/home.html) that calls it.

Enable in jupyterhub_config.py:

    from gpusessions.hub.handlers import configure_hub
    configure_hub(c)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import needs_scope
from tornado import web

from gpusessions.core import labels as L
from gpusessions.hub import cull

TEMPLATES = str(Path(__file__).parent / "templates")


def _user_and_spawner(handler: APIHandler, user_name: str, server_name: str) -> tuple[Any, Any]:
    """The user and the spawner of one of their servers, or a 404 that says which is missing."""
    user = handler.find_user(user_name)
    if user is None:
        raise web.HTTPError(404, f"No such user: {user_name}")
    if server_name and server_name not in user.orm_spawners:
        raise web.HTTPError(404, f"{user_name} has no server named {server_name}")
    return user, user.spawners[server_name]


class ReleaseGPUHandler(APIHandler):
    @needs_scope("servers")
    async def post(self, user_name: str, server_name: str = "") -> None:
        user, spawner = _user_and_spawner(self, user_name, server_name)
        if spawner.pending:
            raise web.HTTPError(409, f"The server is busy ({spawner.pending}); try again in a moment.")
        release = getattr(spawner, "release_gpu", None)
        if release is None:
            raise web.HTTPError(400, "This hub's spawner does not hold GPUs (not gpusessions).")
        was_running = bool(spawner.active)
        if was_running:
            await self.stop_single_user(user, server_name)
        spawner = user.spawners[server_name]
        claim = (spawner.get_state().get("gpusessions") or {}).get("claim", "")
        had = await spawner.release_gpu()
        spawner.orm_spawner.state = spawner.get_state()
        self.db.commit()
        self.log.info("Released the GPU of %s/%s (claim %s, existed: %s)", user_name, server_name, claim, had)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"released": had, "stopped": was_running, "claim": claim}))


def _my_claims(user_name: str) -> list[dict[str, Any]]:
    """This user's claims, from the hub's shared watch (no API call)."""
    from gpusessions.kube.watch import cluster_view

    view = cluster_view()
    return [
        c
        for c in view.claims.objects.values()
        if (c["metadata"].get("annotations") or {}).get(L.USER_ANNOTATION) == user_name
        and (c["metadata"].get("labels") or {}).get(L.MANAGED_BY) == L.MANAGER
    ]


def _authorize(handler: APIHandler, scope: str, user_name: str, server: str | None) -> None:
    """Allow `scope` on the user or, when `server` is given, on just that server.

    A notebook server's own token holds its scopes on that one server only (see
    GPUSessionSpawner.server_token_scopes), which is enough for its own warning and "keep".
    """
    from jupyterhub.scopes import has_scope

    if handler.current_user is None:
        raise web.HTTPError(403, "Not authenticated.")
    wanted = [f"{scope}!user={user_name}"]
    if server is not None:
        wanted.append(f"{scope}!server={user_name}/{server}")
    if any(has_scope(w, handler.parsed_scopes, db=handler.db) for w in wanted):
        return
    raise web.HTTPError(404, f"No access to the servers of {user_name}.")


class WarningsHandler(APIHandler):
    """GET /hub/api/gpusessions/users/<user>/warnings[?server=<name>]: the culler's warnings.

    Without `server`, every server of the user (needs read:servers on the user); with it,
    that server only (its own notebook token is enough).
    """

    async def get(self, user_name: str) -> None:
        from gpusessions.kube.watch import cluster_view

        server = self.get_argument("server", None)
        if server is None:
            _authorize(self, "read:servers", user_name, None)
        else:
            _authorize(self, "read:servers", user_name, server)
        await cluster_view().wait_ready(timeout=5)
        out = []
        for c in _my_claims(user_name):
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
        from gpusessions.hub import notices

        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"warnings": out, "notices": notices.for_user(user_name, server)}))


class KeepHandler(APIHandler):
    """POST /hub/api/gpusessions/users/<user>/keep[?server=<name>]: hold off the culler for a while."""

    async def post(self, user_name: str) -> None:
        import time

        from gpusessions.kube.api import SessionAPI

        server = self.get_argument("server", "")
        _authorize(self, "servers", user_name, server)
        user, spawner = _user_and_spawner(self, user_name, server)
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
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"claim": state["claim"], "kept_until": until}))


def handlers() -> list[tuple[str, Any]]:
    """Routes under the hub prefix (/hub/)."""
    from gpusessions.hub import gpustate
    from gpusessions.hub.jobs import handlers as job_handlers
    from gpusessions.hub.noticepage import NoticesPage
    from gpusessions.hub.picker import AvailabilityHandler

    return [
        *gpustate.handlers(),
        (r"/gpusessions/notices", NoticesPage),
        (r"/api/gpusessions/availability", AvailabilityHandler),
        (r"/api/gpusessions/users/([^/]+)/warnings", WarningsHandler),
        (r"/api/gpusessions/users/([^/]+)/keep", KeepHandler),
        (r"/api/gpusessions/users/([^/]+)/release", ReleaseGPUHandler),
        (r"/api/gpusessions/users/([^/]+)/servers/([^/]+)/release", ReleaseGPUHandler),
        *cull.handlers(),  # the culler's stops, answered with the keeps (hub/cull.py)
        *job_handlers(),  # notebook jobs (hub/jobs.py)
    ]


def configure_hub(c: Any) -> None:
    """Add the gpusessions endpoints and page templates to a JupyterHub config object."""
    c.JupyterHub.extra_handlers = [*list(c.JupyterHub.get("extra_handlers", []) or []), *handlers()]
    c.JupyterHub.template_paths = [TEMPLATES, *list(c.JupyterHub.get("template_paths", []) or [])]
    from gpusessions.hub import sizecheck

    sizecheck.schedule(c)
