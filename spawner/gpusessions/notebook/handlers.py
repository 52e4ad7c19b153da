"""Notebook-server handlers that relay the culler's warning and the "keep" request to the hub."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

POLL_SECONDS = 30


class HubRelay:
    """Where this server's hub is and who this server is, from the JupyterHub environment."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if env is None else env
        self.api_url = env.get("JUPYTERHUB_API_URL", "").rstrip("/")
        self.token = env.get("JUPYTERHUB_API_TOKEN", "")
        self.user = env.get("JUPYTERHUB_USER", "")
        self.server = env.get("JUPYTERHUB_SERVER_NAME", "")

    @property
    def enabled(self) -> bool:
        return bool(self.api_url and self.token and self.user)

    def url(self, action: str) -> str:
        base = f"{self.api_url}/gpusessions/users/{quote(self.user, safe='')}/{action}"
        return f"{base}?server={quote(self.server, safe='')}"

    async def call(self, method: str, action: str) -> tuple[int, dict[str, Any]]:
        req = HTTPRequest(
            self.url(action),
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
            body=b"{}" if method == "POST" else None,
            request_timeout=10,
        )
        try:
            resp = await AsyncHTTPClient().fetch(req)
        except HTTPClientError as e:
            body = e.response.body if e.response is not None else b""
            return e.code, _json_or_message(body)
        except OSError as e:
            return 502, {"message": f"The hub could not be reached: {e}"}
        return resp.code, _json_or_message(resp.body)


def _json_or_message(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return {"message": body.decode(errors="replace")[:200]}
    return data if isinstance(data, dict) else {"message": str(data)}


class WarningsHandler(APIHandler):
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
        from gpusessions.notebook.kernels import LOST_REASON, PersistentGatewayKernelManager

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


class KeepHandler(APIHandler):
    @web.authenticated
    async def post(self) -> None:
        relay = HubRelay()
        if not relay.enabled:
            raise web.HTTPError(404, "This notebook server does not run under gpusessions.")
        code, body = await relay.call("POST", "keep")
        self.set_status(code)
        self.finish(json.dumps(body))


def setup_handlers(web_app: Any) -> None:
    from gpusessions.notebook import gpustatus

    base = web_app.settings["base_url"]
    web_app.add_handlers(
        ".*$",
        [
            (url_path_join(base, "gpusessions", "warnings"), WarningsHandler),
            (url_path_join(base, "gpusessions", "keep"), KeepHandler),
            *gpustatus.handlers(base),
        ],
    )
