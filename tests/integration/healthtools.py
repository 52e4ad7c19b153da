"""The hub of the GPU health tests (tests/integration/test_gpu_health.py), and its reads."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from localcluster.hubproc import Hub

from .cullertools import SLOW_CULL, culler_hub


@contextmanager
def health_hub(namespace: str, workdir: Path) -> Iterator[Hub]:
    """The GPU hub with the culler (warns late, culls later: it never acts in these tests) and
    a poll every 2 s (a lost holder is seen at once), shared by the module's tests."""
    h = culler_hub(namespace, workdir, args=SLOW_CULL, config="\nc.KubeSpawner.poll_interval = 2\n")
    try:
        yield h
    finally:
        h.stop()


def notices(hub: Hub, user: str) -> list[dict[str, Any]]:
    """What the hub home page shows the user (its warnings endpoint's notices)."""
    code, body = hub.api("GET", f"/gpusessions/users/{user}/warnings")
    return list((body or {}).get("notices", [])) if code == 200 else []


def page(hub: Hub) -> dict[str, Any]:
    """The culler's admin page document (the fleet map and totals)."""
    req = urllib.request.Request(
        hub.url + "/services/gpusessions/api/page", headers={"Authorization": f"token {hub.token}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]
