"""GET /hub/api/gpusessions/availability: the picker's figures for the logged-in user, as JSON.

The figures and their words are the picker's (`picker.figures_for`): the same as the spawn form
shows, for a script or a page that wants them without the form. The caller must be able to
access their own servers (`access:servers` on the user, or on one of their servers).
"""

from __future__ import annotations

from typing import Any

from jupyterhub.scopes import has_scope
from tornado import web

from gpusessions.core.scopes import ACCESS_SERVERS as ACCESS
from gpusessions.hub.base import GPUSessionsAPIHandler
from gpusessions.hub.picker import figures_for


class AvailabilityHandler(GPUSessionsAPIHandler):
    """GET /hub/api/gpusessions/availability: the picker's figures for the logged-in user."""

    async def get(self) -> None:
        user = self.current_user
        if user is None:
            raise web.HTTPError(403, "Log in (or use a user's API token) to see GPU availability.")
        if not hasattr(user, "spawners"):
            raise web.HTTPError(403, "Availability is shown to users; use a user's token.")
        # What the form shows a user who may start and use their own servers: a token that can
        # only read names (read:users:name) sees nothing of the team's quota or the cluster.
        wanted = [f"{ACCESS}!user={user.name}"] + [
            f"{ACCESS}!server={user.name}/{n}" for n in user.orm_spawners
        ]
        if not any(has_scope(w, self.parsed_scopes, db=self.db) for w in wanted):
            raise web.HTTPError(
                403,
                f"Availability needs a token that may access your servers ({ACCESS}); this one may not.",
            )
        spawner = self.require_gpusessions(user.spawners[""])
        body = await figures_for(spawner, await spawner._profile_list_for_user())
        self.write_json(body, no_store=True)


default_handlers: list[tuple[str, Any]] = [(r"/api/gpusessions/availability", AvailabilityHandler)]
