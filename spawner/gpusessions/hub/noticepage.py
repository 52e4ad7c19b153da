"""GET /hub/gpusessions/notices[?server=<name>]: the logged-in user's notices (hub/notices.py) as
JSON, for a JupyterLab tab whose server is gone.

JupyterLab talks to its own server, which relays the hub's warnings endpoint; once that server
is stopped (KAI Scheduler took its GPU back), the tab can reach only the hub, with the hub's
login cookie and no token. The hub's API checks an XSRF token on every cookie-authenticated
request, GET included, and the hub's XSRF cookie is not readable from a page under /user/; a
hub page handler is not checked on GET. So this is a page route: read-only, the logged-in
user's own notices only, never another user's.
"""

from __future__ import annotations

import json
from typing import Any

from jupyterhub.handlers.base import BaseHandler
from tornado import web

from gpusessions.hub import health, notices
from gpusessions.hub.base import GPUSessionsAPIHandler


class NoticesPage(BaseHandler):
    @web.authenticated
    def get(self) -> None:
        user = self.current_user
        server = self.get_argument("server", None)
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        told = health.for_claims(GPUSessionsAPIHandler.claims_of(user.name), server)
        self.write(json.dumps({"notices": told + notices.for_user(user.name, server)}))


default_handlers: list[tuple[str, Any]] = [(r"/gpusessions/notices", NoticesPage)]
