"""The culler's stop of a server, decided in the hub, where "Keep my GPU" is answered.

    POST /hub/api/gpusessions/users/{user}/cull                 (default server)
    POST /hub/api/gpusessions/users/{user}/servers/{name}/cull
    body: {"since": <unix time of the warning the cull acts on>, "reason": "..."}

The culler decides a cull from a snapshot; the user may click Keep my GPU (KeepHandler, in this
same process) while the cull is on its way. Both are answered here, in the hub's one event loop,
and each checks the other before its first `await`:

- a cull finds a keep the hub received after `since` (the warning it acts on): 409 `kept`,
  nothing stopped;
- a keep finds the server's cull begun: 409 with a message the user reads ("your GPU is being
  released"), nothing kept, so the user knows their GPU is going before they start work on it.

So a user's answer to a warning is never lost to a cull that crossed it. The hub keeps the
record in memory: a hub restart forgets it, and the claim's `kept-at` annotation (the keep's
lasting record) is read as well.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from jupyterhub.scopes import needs_scope
from tornado import web

from gpusessions.core import labels as L
from gpusessions.core import scopes
from gpusessions.core.timestamps import epoch
from gpusessions.hub.base import GPUSessionsAPIHandler
from gpusessions.kube.watch import cluster_view

Key = tuple[str, str]  # (user, server name)
_kept: dict[Key, float] = {}  # when the hub last received a keep for that server
_culled: dict[Key, float] = {}  # when the hub began a cull of that server


def note_keep(user: str, server: str, at: float) -> None:
    _kept[(user, server)] = at


def kept_after(user: str, server: str, since: float, claim: dict[str, Any] | None) -> bool:
    """A keep received (by this hub, or as the claim records it) after `since`."""
    ann = (claim or {}).get("metadata", {}).get("annotations") or {}
    try:
        on_claim = float(ann.get(L.KEPT_AT) or "nan")
    except ValueError:
        on_claim = math.nan
    return _kept.get((user, server), -math.inf) > since or on_claim > since


def culled_since_start(user: str, server: str, started: float | None) -> bool:
    """The hub began a cull of this server and it has not been started again since."""
    at = _culled.get((user, server))
    return at is not None and (started is None or started < at)


def started_at(spawner: Any) -> float | None:
    """When the hub started this server (None: not running)."""
    orm = getattr(spawner, "orm_spawner", None)
    return epoch(getattr(orm, "started", None))  # the hub's database: a naive UTC datetime


def _claim_of(spawner: Any) -> dict[str, Any] | None:
    """The server's claim as the hub's shared watch holds it now (no API call)."""
    state = spawner.get_state().get("gpusessions") or {}
    if not state.get("claim"):
        return None
    return cluster_view().claims.objects.get(f"{state.get('namespace')}/{state['claim']}")


class CullHandler(GPUSessionsAPIHandler):
    @needs_scope(scopes.SERVERS)
    async def post(self, user_name: str, server_name: str = "") -> None:
        body = self.json_body()
        try:
            since = float(body.get("since"))
            reason = str(body.get("reason") or "idle")[:200]
        except (ValueError, TypeError, AttributeError):
            wanted = '{"since": <unix time>, "reason": "..."}'
            raise web.HTTPError(400, f"The body must be JSON: {wanted}") from None
        if not math.isfinite(since):
            raise web.HTTPError(400, "since must be a finite unix time")
        user, spawner = self.user_and_spawner(user_name, server_name)
        out: dict[str, Any] = {"server": server_name}
        # Everything up to the stop's start runs without an await: a keep cannot slip in between.
        if spawner.pending:
            raise web.HTTPError(409, f"The server is busy ({spawner.pending}); the culler tries again.")
        if not spawner.active:
            out["outcome"] = "not-running"
        elif kept_after(user.name, server_name, since, _claim_of(spawner)):
            out["outcome"] = "kept"
            self.log.info("Cull of %s/%s called off: kept after the warning", user.name, server_name)
        else:
            _culled[(user.name, server_name)] = time.time()
            self.log.info("Culling %s/%s: %s", user.name, server_name, reason)
            # The stop runs on (it may take many seconds); the answer says it began.
            stop = asyncio.ensure_future(self.stop_single_user(user, server_name))
            log = self.log

            def done(f: asyncio.Future[Any]) -> None:
                if not f.cancelled() and f.exception() is not None:
                    log.error("Cull of %s/%s: the stop failed: %s", user_name, server_name, f.exception())

            stop.add_done_callback(done)
            await asyncio.sleep(0)
            out["outcome"] = "stopping"
        status = 202 if out["outcome"] == "stopping" else 409 if out["outcome"] == "kept" else 200
        self.write_json(out, status)


default_handlers: list[tuple[str, Any]] = [
    (r"/api/gpusessions/users/([^/]+)/cull", CullHandler),
    (r"/api/gpusessions/users/([^/]+)/servers/([^/]+)/cull", CullHandler),
]
