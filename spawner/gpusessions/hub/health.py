"""A user's GPU that the driver reported broken (a device taint), told as a notice.

The notices are not posted when it happens: they are made from the hub's shared watches at
every read (a claim's allocated devices against the slices' taints, `core.health`), so the
home page, JupyterLab and the notices page say it as soon as the slice watch shows the
taint, and stop saying it once the GPU is released (or the taint gone). Each has the level
`error`, the kind `gpu-health` and, as its time, when the taint was added (so a page that
shows each notice once shows it once).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpusessions.core import health
from gpusessions.core import labels as L
from gpusessions.core.timestamps import epoch
from gpusessions.kube.watch import cluster_view

Obj = dict[str, Any]
KIND = "gpu-health"


def notices(
    claims: Iterable[Obj], tainted: dict[health.DeviceKey, list[Obj]], server: str | None = None
) -> list[dict[str, Any]]:
    """A notice for each of these claims (of one server when given) whose devices are tainted."""
    out = []
    for c in claims:
        ann = c["metadata"].get("annotations") or {}
        srv = ann.get(L.SERVER_ANNOTATION, "")
        if server is not None and srv != server:
            continue
        taints = health.claim_taints(c, tainted)
        if not taints:
            continue
        created = epoch(c["metadata"].get("creationTimestamp")) or 0.0
        out.append(
            {
                "server": srv,
                "text": health.user_message(taints),
                "level": "error",
                "kind": KIND,
                "at": health.since(taints, created),
                "claim": c["metadata"]["name"],
                "reasons": [health.reason(t) for t in taints],
            }
        )
    return out


def tainted_now() -> dict[health.DeviceKey, list[Obj]]:
    """The tainted devices the hub's slice watch shows now (empty while it cannot tell)."""
    view = cluster_view()
    if not view.slices.ready.is_set() or view.slices.error:
        return {}
    return view.derived()[0].tainted


def for_claims(claims: Iterable[Obj], server: str | None = None) -> list[dict[str, Any]]:
    return notices(claims, tainted_now(), server)


def claim_broken(claim: Obj) -> list[Obj]:
    """The blocking taints of a claim's allocated devices, as the slice watch shows them now."""
    return health.claim_taints(claim, tainted_now())
