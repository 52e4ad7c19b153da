"""Hub endpoints of gpusessions: "Release my GPU".

    POST /hub/api/gpusessions/users/{user}/release              (default server)
    POST /hub/api/gpusessions/users/{user}/servers/{name}/release

Stops the server if it runs, then deletes its holder pod and claim so the GPU
goes back to the pool. Allowed for the user themself and for anyone holding the
`servers` scope on that user (admins). The home page gets a "Release my GPU"
button (templates/home.html) that calls it. (The notebook's GPU panel releases
with the server's own token: `gpustate.py`.)
"""

from __future__ import annotations

from typing import Any

from jupyterhub.scopes import needs_scope

from gpusessions.core import scopes
from gpusessions.hub.base import GPUSessionsAPIHandler


class ReleaseGPUHandler(GPUSessionsAPIHandler):
    @needs_scope(scopes.SERVERS)
    async def post(self, user_name: str, server_name: str = "") -> None:
        self.write_json(await self.release(user_name, server_name))


default_handlers: list[tuple[str, Any]] = [
    (r"/api/gpusessions/users/([^/]+)/release", ReleaseGPUHandler),
    (r"/api/gpusessions/users/([^/]+)/servers/([^/]+)/release", ReleaseGPUHandler),
]
