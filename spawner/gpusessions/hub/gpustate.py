"""Hub endpoints the notebook's GPU panel reads and acts on, with the server's own token.

    GET  /hub/api/gpusessions/users/<user>/gpu?server=<name>          this server's GPU state
    POST /hub/api/gpusessions/users/<user>/gpu/release?server=<name>  "Release my GPU"

The state is read from the hub's shared watch of claims (no API call): the claim, whether
it is kept across stops, the culler's warning (warned, when, why) and a "keep" in force,
plus the hub's notices for that server and the GPU's health (`hub/health.py`: a device the
driver tainted as broken). A notebook server's token (scopes narrowed to
that one server, see GPUSessionSpawner.server_token_scopes) is enough for both; so is
the user's own token or an admin's.
"""

from __future__ import annotations

import time
from typing import Any

from gpusessions.core import labels as L
from gpusessions.core import scopes
from gpusessions.hub import health, notices
from gpusessions.hub.base import GPUSessionsAPIHandler
from gpusessions.hub.keep import contended_until, keep_seconds, standing_warning
from gpusessions.kube.watch import cluster_view


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


def claim_state(
    claim: dict[str, Any] | None, now: float | None = None, keep_for: float = 4 * 3600
) -> dict[str, Any]:
    """What the culler wrote on the claim, as the panel shows it; `keep_for`: how long a keep
    holds with nobody waiting (the spawner's `gpu_keep_extension`)."""
    if claim is None:
        return {"claim": None}
    now = time.time() if now is None else now
    ann = claim["metadata"].get("annotations") or {}
    keep_until = _float(ann.get(L.KEEP_UNTIL))
    kept = keep_until is not None and keep_until > now
    warned = standing_warning(claim, now)
    return {
        "claim": claim["metadata"]["name"],
        "profile": ann.get(L.PROFILE_ANNOTATION, ""),
        "allocated": bool(((claim.get("status") or {}).get("allocation") or {}).get("devices")),
        "kept_until": keep_until if kept else None,
        # A user's keep while someone waits for this size: until then only (from its warning).
        "kept_contended_until": contended_until(claim, _float(ann.get(L.KEEP_FROM))) if kept else None,
        "warning": (
            {
                "cull_at": _float(ann.get(L.CULL_AT)),
                "reason": ann.get(L.CULL_REASON, ""),
                "keep_until": now + keep_for,
                "keep_contended_until": contended_until(claim, warned),
            }
            if warned is not None
            else None
        ),
    }


class GPUStateHandler(GPUSessionsAPIHandler):
    async def get(self, user_name: str) -> None:
        server = self.get_argument("server", "")
        self.authorize(scopes.READ_SERVERS, user_name, server)
        _, spawner = self.user_and_spawner(user_name, server)
        await cluster_view().wait_ready(timeout=5)
        mine = [
            c
            for c in self.claims_of(user_name)
            if (c["metadata"].get("annotations") or {}).get(L.SERVER_ANNOTATION, "") == server
        ]
        out = claim_state(mine[0] if mine else None, keep_for=keep_seconds(spawner))
        out["keep_on_stop"] = bool(getattr(spawner, "keep_gpu_on_stop", False))
        broken = health.for_claims(mine, server)
        # The GPU panel's health line: the driver's taints on this session's device(s).
        out["health"] = {"ok": not broken, "message": broken[0]["text"] if broken else ""}
        out["notices"] = broken + notices.for_user(user_name, server)
        self.write_json(out)


class ServerReleaseHandler(GPUSessionsAPIHandler):
    """The release of one server's GPU, allowed with that server's own token.

    JupyterHub's `needs_scope` on the default-server route checks the user filter only;
    this checks the server filter too, then releases as `release.ReleaseGPUHandler` does."""

    async def post(self, user_name: str) -> None:
        server = self.get_argument("server", "")
        self.authorize(scopes.SERVERS, user_name, server)
        self.write_json(await self.release(user_name, server))


default_handlers: list[tuple[str, Any]] = [
    (r"/api/gpusessions/users/([^/]+)/gpu", GPUStateHandler),
    (r"/api/gpusessions/users/([^/]+)/gpu/release", ServerReleaseHandler),
]
