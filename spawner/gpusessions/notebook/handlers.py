"""Notebook-server handlers that relay the culler's warning and the "keep" request to the hub."""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.utils import url_path_join
from tornado import web

from gpusessions.notebook import gpustatus
from gpusessions.notebook.bounded import BoundedAPIHandler
from gpusessions.notebook.hubrelay import HubRelay
from gpusessions.notebook.kernels import LOST_REASON, PersistentGatewayKernelManager

POLL_SECONDS = 30


class WarningsHandler(BoundedAPIHandler):
    # An open tab polls this: that is not the user being active.
    _track_activity = False

    @web.authenticated
    async def get(self) -> None:
        relay = HubRelay()
        out: dict[str, Any] = {"enabled": relay.enabled, "poll_seconds": POLL_SECONDS, "warnings": []}
        if relay.enabled:
            code, body = await relay.call("GET", "warnings")
            if code == 200:
                out["warnings"] = body.get("warnings", [])
                out["notices"] = body.get("notices", [])
            elif code == 404:
                out["enabled"] = False  # this hub has no gpusessions endpoints
            else:
                out["error"] = body.get("message") or f"hub answered {code}"
        out.update(await self._kernel_notices())
        self.finish(json.dumps(out))

    async def _kernel_notices(self) -> dict[str, Any]:
        """Kernels kept in the GPU holder, and any that were lost (holder restart, GPU released)."""
        km = self.settings.get("kernel_manager")
        if not isinstance(km, PersistentGatewayKernelManager):
            return {"kernels_in_holder": False}
        try:
            await km.list_kernels()
        except Exception as e:  # the gateway is away: say so, do not fail the poll
            return {"kernels_in_holder": True, "kernels_error": f"the kernel host does not answer ({e})"}
        return {
            "kernels_in_holder": True,
            "lost_kernels": [{**ev, "reason": LOST_REASON} for ev in km.lost],
        }


class RestoreHandler(BoundedAPIHandler):
    """The parked session's restore: none, pending, restoring, restored or failed, in words
    ("Restored your session from 14:02 UTC: 3 variables, 1 not kept (f: open file)")."""

    _track_activity = False

    @web.authenticated
    async def get(self) -> None:
        km = self.settings.get("kernel_manager")
        restore = getattr(km, "restore", None)  # kernels in the holder, or parked in this server
        if restore is None:
            self.finish(json.dumps({"state": "none", "kernels_in_holder": False}))
            return
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(restore.status()))


class KeepHandler(BoundedAPIHandler):
    @web.authenticated
    async def post(self) -> None:
        relay = HubRelay()
        if not relay.enabled:
            raise web.HTTPError(404, "This notebook server does not run under gpusessions.")
        code, body = await relay.call("POST", "keep")
        self.set_status(code)
        self.finish(json.dumps(body))


def setup_handlers(web_app: Any) -> None:
    base = web_app.settings["base_url"]
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "gpusessions", "warnings"), WarningsHandler),
            (url_path_join(base, "gpusessions", "keep"), KeepHandler),
            (url_path_join(base, "gpusessions", "restore"), RestoreHandler),
            *gpustatus.handlers(base),
        ],
    )
