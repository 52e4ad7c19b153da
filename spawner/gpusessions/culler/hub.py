"""The culler's calls to the JupyterHub REST API (users with servers; stop a server; a cull)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

Obj = dict[str, Any]


class HubAPI:
    def __init__(self, url: str, token: str, timeout: float = 20.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.client = AsyncHTTPClient()
        self.calls = 0

    async def _request(
        self, method: str, path: str, accept: str = "application/json", body: Any = None
    ) -> Any:
        self.calls += 1
        req = HTTPRequest(
            self.url + path,
            method=method,
            request_timeout=self.timeout,
            headers={"Authorization": f"token {self.token}", "Accept": accept},
            body=None if method in ("GET", "DELETE") else json.dumps(body) if body is not None else "",
            allow_nonstandard_methods=True,
        )
        resp = await self.client.fetch(req)
        return json.loads(resp.body) if resp.body else None

    async def users(self, page: int = 200) -> list[Obj]:
        """All users with their servers (stopped ones too), one paginated list per cycle."""
        out: list[Obj] = []
        offset = 0
        while True:
            q = urlencode({"include_stopped_servers": "1", "offset": offset, "limit": page})
            body = await self._request("GET", f"/users?{q}", accept="application/jupyterhub-pagination+json")
            items = body["items"] if isinstance(body, dict) else body
            out += items
            nxt = (body.get("_pagination") or {}).get("next") if isinstance(body, dict) else None
            if not nxt or not items:
                return out
            offset = int(nxt.get("offset", offset + len(items)))

    async def cull_server(self, user: str, server: str, since: float, reason: str) -> str:
        """Ask the hub to stop a server for a cull (hub/cull.py). The hub answers it together with
        the user's "Keep my GPU": `kept` (a keep arrived after `since`, the warning the cull acts
        on: nothing stopped), `stopping`, `not-running`, or `busy` (a start or stop is pending)."""
        path = f"/gpusessions/users/{quote(user, safe='')}"
        path += f"/servers/{quote(server, safe='')}/cull" if server else "/cull"
        try:
            body = await self._request("POST", path, body={"since": since, "reason": reason})
        except HTTPClientError as e:
            if e.code == 409 and e.response is not None:
                try:
                    if json.loads(e.response.body).get("outcome") == "kept":
                        return "kept"
                except ValueError:
                    pass
                return "busy"
            if e.code == 404:
                try:
                    message = str(json.loads(e.response.body).get("message", "")) if e.response else ""
                except ValueError:
                    message = ""
                if message.startswith("No such user") or "has no server" in message:
                    return "not-running"  # the user or the server is gone
                # A hub without the gpusessions endpoints (configure_hub): its plain stop.
                return "stopping" if await self.stop_server(user, server) else "not-running"
            raise
        return str((body or {}).get("outcome") or "stopping")

    async def stop_server(self, user: str, server: str) -> bool:
        path = f"/users/{quote(user, safe='')}/server" + (f"s/{quote(server, safe='')}" if server else "")
        try:
            await self._request("DELETE", path)
        except HTTPClientError as e:
            if e.code in (400, 404):  # not running / gone: nothing to stop
                return False
            raise
        return True
