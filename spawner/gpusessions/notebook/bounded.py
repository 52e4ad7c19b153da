"""The base of this extension's handlers: a request body is bounded before anything reads it.

None of the /gpusessions/ routes of the notebook server takes a body; one past
`c.ServerApp.tornado_settings["gpusessions_max_body_bytes"]` (default 64 KiB, `core.bodies`)
is answered 413 in words, before the login is checked (jupyter_server's own limit is 512 MB).
"""

from __future__ import annotations

from jupyter_server.base.handlers import APIHandler
from tornado import web

from gpusessions.core import bodies


class BoundedAPIHandler(APIHandler):
    async def prepare(self) -> None:  # type: ignore[override]
        try:
            bodies.check_size(
                self.request.headers.get("Content-Length"),
                len(self.request.body or b""),
                int(self.settings.get("gpusessions_max_body_bytes", bodies.MAX_BODY_BYTES)),
            )
        except bodies.BadBody as e:
            raise web.HTTPError(e.status, str(e)) from None
        await super().prepare()
