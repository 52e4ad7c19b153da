"""The base of this extension's handlers: a request body is bounded before anything reads it.

None of the /gpusessions/ routes of the notebook server takes a body; one past
`c.ServerApp.tornado_settings["gpusessions_max_body_bytes"]` (default 64 KiB, `core.bodies`)
is answered 413 in words, before the login is checked and before the body is read
(jupyter_server's own limit is 512 MB, for its file uploads).
"""

from __future__ import annotations

from jupyter_server.base.handlers import APIHandler
from tornado import web

from gpusessions.core import bodies


@web.stream_request_body
class BoundedAPIHandler(APIHandler):
    """Streams the body (tornado would buffer up to jupyter_server's 512 MB first): the
    connection takes at most the limit; a larger declared Content-Length is a 413 in words
    before a byte of the body is read, a chunked body past it is cut by tornado (400)."""

    async def prepare(self) -> None:  # type: ignore[override]
        limit = int(self.settings.get("gpusessions_max_body_bytes", bodies.MAX_BODY_BYTES))
        try:
            bodies.start_streamed(self.request, limit)
        except bodies.BadBody as e:
            raise web.HTTPError(e.status, str(e)) from None
        await super().prepare()

    def data_received(self, chunk: bytes) -> None:
        self.request.body += chunk
