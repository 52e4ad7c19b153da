"""Where this notebook server's hub is and who this server is, and the calls to the hub's
gpusessions endpoints with the server's own token (the warnings, Keep, GPU panel and jobs
relays all go through it)."""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest


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
