"""GET /hub/api/gpusessions/availability: the picker's figures for the logged-in user, as JSON.

The figures and their words are the picker's (`picker.figures_for`): the same as the spawn form
shows, for a script or a page that wants them without the form.
"""

from __future__ import annotations

from typing import Any

from tornado import web

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
        spawner = self.require_gpusessions(user.spawners[""])
        body = await figures_for(spawner, await spawner._profile_list_for_user())
        self.write_json(body, no_store=True)


default_handlers: list[tuple[str, Any]] = [(r"/api/gpusessions/availability", AvailabilityHandler)]
