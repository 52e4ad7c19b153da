"""The base of the hub's gpusessions API handlers, as JupyterHub's own `APIHandler` is theirs.

`GPUSessionsAPIHandler` holds what the endpoints share: finding a user and one of their
servers, "is this our spawner" (the one check, `is_gpusessions`), the authorization of a user's
or a single server's token, the user's claims from the hub's shared watch, JSON replies, and
the release of a server's GPU as a plain method (the two release endpoints differ only in who
may call them). Each endpoint module ends with its `default_handlers`; `routes` lists them all.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.apihandlers.base import APIHandler
from jupyterhub.scopes import has_scope
from tornado import web

from gpusessions.core import bodies, scopes
from gpusessions.core import labels as L
from gpusessions.hub.apisettings import api_settings
from gpusessions.hub.spawner import GPUSessionSpawner
from gpusessions.kube.watch import cluster_view

Obj = dict[str, Any]


def is_gpusessions(spawner: Any) -> bool:
    """Whether a server's spawner is ours (a hub may run another spawner class)."""
    return isinstance(spawner, GPUSessionSpawner)


@web.stream_request_body
class GPUSessionsAPIHandler(APIHandler):
    """The helpers of every /hub/api/gpusessions/ endpoint.

    The body is streamed, not buffered by tornado (whose own limit is 100 MB): the connection
    takes at most `c.GPUSessionsAPI.max_body_bytes`. A larger declared Content-Length is a 413
    in words before a byte of the body is read; a chunked body that runs past the limit is cut
    by tornado itself (400, connection closed)."""

    async def prepare(self) -> None:
        """Every route: the body's limit is set and its declared size checked before anything
        else, even before the login is looked up."""
        try:
            bodies.start_streamed(self.request, api_settings(self).max_body_bytes)
        except bodies.BadBody as e:
            raise web.HTTPError(e.status, str(e)) from None
        await super().prepare()

    def data_received(self, chunk: bytes) -> None:
        """A piece of the body (tornado stops the connection before the pieces pass the limit)."""
        self.request.body += chunk

    def json_body(self, empty: Any = None) -> Any:
        """The request's JSON, bounded (size, depth, no NaN or Infinity: `core.bodies`); a 400
        or 413 in words otherwise."""
        try:
            return bodies.parse_json(self.request.body, empty=empty, limit=api_settings(self).max_body_bytes)
        except bodies.BadBody as e:
            raise web.HTTPError(e.status, str(e)) from None

    def user_and_spawner(self, user_name: str, server_name: str) -> tuple[Any, Any]:
        """The user and the spawner of one of their servers, or a 404 that says which is missing."""
        user = self.find_user(user_name)
        if user is None:
            raise web.HTTPError(404, f"No such user: {user_name}")
        if server_name and server_name not in user.orm_spawners:
            raise web.HTTPError(404, f"{user_name} has no server named {server_name}")
        return user, user.spawners[server_name]

    def require_gpusessions(self, spawner: Any) -> GPUSessionSpawner:
        """The spawner, when it is ours; a 400 otherwise."""
        if not is_gpusessions(spawner):
            raise web.HTTPError(400, "This hub's spawner is not gpusessions.")
        return spawner

    def authorize(self, scope: str, user_name: str, server: str | None) -> None:
        """Allow `scope` on the user or, when `server` is given, on just that server.

        A notebook server's own token holds its scopes on that one server only (see
        `core.scopes.SERVER_TOKEN`), which is enough for its own warning and "keep"."""
        if self.current_user is None:
            raise web.HTTPError(403, "Not authenticated.")
        wanted = scopes.on_user_or_server(scope, user_name, server)
        if any(has_scope(w, self.parsed_scopes, db=self.db) for w in wanted):
            return
        raise web.HTTPError(404, f"No access to the servers of {user_name}.")

    @staticmethod
    def claims_of(user_name: str) -> list[Obj]:
        """This user's claims, from the hub's shared watch (no API call)."""
        return [
            c
            for c in cluster_view().claims.objects.values()
            if (c["metadata"].get("annotations") or {}).get(L.USER_ANNOTATION) == user_name
            and (c["metadata"].get("labels") or {}).get(L.MANAGED_BY) == L.MANAGER
        ]

    def write_json(self, body: Any, status: int = 200, *, no_store: bool = False) -> None:
        """Answer `body` as JSON (`no_store`: never cached, for answers that change by the second)."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        if no_store:
            self.set_header("Cache-Control", "no-store")
        self.write(json.dumps(body))

    async def release(self, user_name: str, server_name: str) -> Obj:
        """Stop the server if it runs, then delete its holder pod and claim (the GPU goes back
        to the pool). The caller has authorized the request. Returns the answer's body."""
        user, spawner = self.user_and_spawner(user_name, server_name)
        if spawner.pending:
            raise web.HTTPError(409, f"The server is busy ({spawner.pending}); try again in a moment.")
        self.require_gpusessions(spawner)
        was_running = bool(spawner.active)
        if was_running:
            await self.stop_single_user(user, server_name)
        spawner = user.spawners[server_name]
        claim = (spawner.get_state().get("gpusessions") or {}).get("claim", "")
        had = await spawner.release_gpu()
        spawner.orm_spawner.state = spawner.get_state()
        self.db.commit()
        self.log.info("Released the GPU of %s/%s (claim %s, existed: %s)", user_name, server_name, claim, had)
        return {"released": had, "stopped": was_running, "claim": claim}
