"""The culler's web side: the admin page, the sessions JSON API and its actions, /metrics.

Runs as the JupyterHub service `gpusessions` (hub-managed or external): the page
at /services/gpusessions/ (in JupyterHub's look: it extends the installed
jupyterhub's page.html), everything the page shows at
/services/gpusessions/api/page (pagedata.py; gzip when the browser accepts it), the
JSON list of sessions at /services/gpusessions/api/sessions, metrics (no login) at
/services/gpusessions/metrics. Everything shown is read from the `Culler`
(cycle.py); actions go through it.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import jinja2
from jupyterhub._data import DATA_FILES_PATH
from jupyterhub.services.auth import HubOAuthCallbackHandler, HubOAuthenticated
from jupyterhub.utils import url_path_join
from tornado import web

from gpusessions.core import bodies, scopes
from gpusessions.core.timestamps import epoch, rfc3339
from gpusessions.culler import jobs as culler_jobs
from gpusessions.culler import summary
from gpusessions.culler.cycle import Culler
from gpusessions.culler.metrics import CONTENT_TYPE
from gpusessions.culler.pagedata import PageData

Obj = dict[str, Any]


class _Admin(HubOAuthenticated, web.RequestHandler):
    """Admins only: the custom scope (or admin:users, which hub admins hold)."""

    hub_scopes = {scopes.ADMIN, "admin:users"}

    def initialize(self, culler: Culler) -> None:
        self.culler = culler

    def prepare(self) -> None:
        """A body past the app's `max_body_bytes` is a 413 before anything reads it."""
        try:
            bodies.check_size(
                self.request.headers.get("Content-Length"),
                len(self.request.body or b""),
                self.settings["max_body_bytes"],
            )
        except bodies.BadBody as e:
            raise web.HTTPError(e.status, str(e)) from None

    def check_xsrf_cookie(self) -> None:
        """Browser (cookie) requests need the page's XSRF token; token requests carry no cookie risk."""
        if self.request.headers.get("Authorization", "").lower().startswith(("token ", "bearer ")):
            return
        super().check_xsrf_cookie()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The refusal in its own words (an HTTPError's message), else the status's reason."""
        exc = (kwargs.get("exc_info") or (None, None, None))[1]
        words = exc.log_message if isinstance(exc, web.HTTPError) and exc.log_message else self._reason
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": words}))


# Ours first, then JupyterHub's own (page.html: navbar, styles, dark mode), as hub services may.
HUB_TEMPLATES = os.path.join(DATA_FILES_PATH, "templates")
_TEMPLATES = jinja2.Environment(
    loader=jinja2.ChoiceLoader(
        [
            jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
            jinja2.FileSystemLoader(HUB_TEMPLATES),
        ]
    ),
    autoescape=True,
)
COLUMNS = [
    ("user", "User"),
    ("server", "Server"),
    ("profile", "Profile"),
    ("queue", "Queue"),
    ("node", "Node / device"),
    ("state", "State"),
    ("gpu", "GPU memory and activity"),
    ("kernels", "Kernels"),
    ("notebook_idle_seconds", "Notebook idle"),
    ("gpu_idle_seconds", "GPU idle"),
    ("decision", "Culler"),
    ("seconds_left", "Time left"),
]


def hub_page_vars(user: Obj, hub_prefix: str, service_prefix: str) -> Obj:
    """What JupyterHub's page.html reads, for a page served by this service."""
    name = str(user.get("name", ""))
    # page.html puts this inside a <script> string unescaped: no "<", ">" or "&" may reach it.
    js_name = json.dumps(name)[1:-1].replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return {
        "base_url": hub_prefix,
        "prefix": hub_prefix,
        "static_url": lambda path, include_version=True: url_path_join(hub_prefix, "static", path),
        "user": {"name": name, "json_escaped_name": js_name},
        "admin_access": bool(user.get("admin")),
        "parsed_scopes": {"admin-ui"} if user.get("admin") else set(),
        "services": [{"name": "GPU sessions", "href": service_prefix}],
        "no_spawner_check": True,
        "logout_url": url_path_join(hub_prefix, "logout"),
        "login_url": url_path_join(hub_prefix, "login"),
    }


class PageHandler(_Admin):
    @web.authenticated
    def get(self) -> None:
        xsrf = self.xsrf_token.decode()
        html = _TEMPLATES.get_template("admin.html").render(
            **hub_page_vars(self.current_user, self.hub_auth.hub_prefix, self.settings["service_prefix"]),
            columns=COLUMNS,
            dry_run=self.culler.policy.dry_run,
            xsrf=xsrf,
            xsrf_token=xsrf,
            record=summary.record(self.culler.history, time.time()),
            policy=summary.policy(self.culler.policy),
        )
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.write(html)


class PageDataHandler(_Admin):
    """Everything the admin page shows, in one document (pagedata.py)."""

    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.set_header("Vary", "Accept-Encoding")
        page_data = self.settings["page_data"]
        if "gzip" in self.request.headers.get("Accept-Encoding", ""):
            # Gzipped once per document, not per request (tornado leaves an encoded body alone).
            self.set_header("Content-Encoding", "gzip")
            self.write(page_data.gzipped())
        else:
            self.write(page_data.body())


class SessionsHandler(_Admin):
    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "application/json")
        self.write(
            json.dumps(
                {
                    "sessions": self.culler.describe(),
                    "jobs": culler_jobs.rows(culler_jobs.watched(self.culler) or []),  # notebook jobs
                    "cycles": self.culler.cycles,
                    "last_cycle": rfc3339(self.culler.last_cycle),
                    "dry_run": self.culler.policy.dry_run,
                    "error": self.culler.last_error,
                    "record": summary.record(self.culler.history, time.time()),
                    "policy": summary.policy(self.culler.policy),
                }
            )
        )


class ActionHandler(_Admin):
    @web.authenticated
    async def post(self, namespace: str, claim: str, action: str) -> None:
        if action == "release":
            if not await self.culler.release(namespace, claim):
                raise web.HTTPError(404, f"no session {namespace}/{claim}")
            body: Obj = {"released": True}
        elif action == "keep":
            ts = self._keep_until()
            if not await self.culler.keep(namespace, claim, ts):
                raise web.HTTPError(404, f"no session {namespace}/{claim}")
            body = {"kept_until": rfc3339(ts)}
        else:
            raise web.HTTPError(404)
        self.settings["page_data"].invalidate()
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps(body))

    def _keep_until(self) -> float:
        """The body's "until" (unix seconds or an ISO time), in the future and at most the app's
        `keep_max` seconds ahead; a 400 in words otherwise."""
        wanted = 'give {"until": <unix seconds or an ISO time>}'
        try:
            data = bodies.parse_json_object(self.request.body, limit=self.settings["max_body_bytes"])
        except bodies.BadBody as e:
            raise web.HTTPError(e.status, f"{e} ({wanted})") from None
        until = data.get("until")
        if isinstance(until, bool) or not isinstance(until, (int, float, str)):
            raise web.HTTPError(400, wanted)
        ts = float(until) if isinstance(until, (int, float)) else epoch(until)
        now, most = time.time(), float(self.settings["keep_max"])
        if ts is None or not math.isfinite(ts):
            raise web.HTTPError(400, wanted)
        if ts <= now:
            raise web.HTTPError(400, f'"until" is in the past ({rfc3339(ts)}): give a time to come')
        if ts > now + most:
            raise web.HTTPError(
                400, f'"until" is more than {most / 86400:g} days ahead, the longest keep this culler grants'
            )
        return ts


class MetricsHandler(web.RequestHandler):
    def initialize(self, culler: Culler) -> None:
        self.culler = culler

    def get(self) -> None:
        self.set_header("Content-Type", CONTENT_TYPE)
        self.write(self.culler.metrics())


def make_app(
    culler: Culler,
    prefix: str,
    *,
    keep_max: float = 30 * 86400.0,
    max_body_bytes: int = bodies.MAX_BODY_BYTES,
) -> web.Application:
    """`keep_max`: the longest admin keep, in seconds ahead; `max_body_bytes`: the largest
    request body any route reads (413 past it)."""
    kw = {"culler": culler}
    return web.Application(
        [
            (prefix, PageHandler, kw),
            (url_path_join(prefix, "api/page"), PageDataHandler, kw),
            (url_path_join(prefix, "api/sessions"), SessionsHandler, kw),
            (url_path_join(prefix, r"api/sessions/([^/]+)/([^/]+)/(release|keep)"), ActionHandler, kw),
            (url_path_join(prefix, "metrics"), MetricsHandler, kw),
            (url_path_join(prefix, "oauth_callback"), HubOAuthCallbackHandler),
        ],
        cookie_secret=os.urandom(32),
        xsrf_cookies=True,
        # gzip for the browsers that ask (the page data of a large fleet is mostly repetition).
        compress_response=True,
        page_data=PageData(culler),
        service_prefix=prefix,
        keep_max=keep_max,
        max_body_bytes=max_body_bytes,
    )
