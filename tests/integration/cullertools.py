"""The culler service beside a real JupyterHub, for the tests that need it."""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from localcluster import waits
from localcluster.hubproc import Hub, free_port, start_hub
from localcluster.kubeapi import KubeAPI
from promtext import value

from .hubtools import GPU_HUB_CONFIG

CULLER = """
from gpusessions.hub.cullerservice import configure_culler
configure_culler(c, admins=["admin"], port={port}, args=["--interval", "1", "--stopped-keep", "3",
    "--idle-limit", "20", "--warn-before", "5", "--orphan-grace", "3"{extra}])
c.JupyterHub.load_roles[0]["scopes"].append("custom:gpusessions:admin")
"""


def culler_hub(
    namespace: str,
    workdir: Path,
    dry_run: bool = False,
    ports: tuple[int, int, int] | None = None,
    args: tuple[str, ...] = (),
    config: str = "",
) -> Hub:
    """A GPU hub with the culler service; `args` are added to (and override) its flags;
    `config` is added to the hub's config."""
    extra = ', "--dry-run"' if dry_run else ""
    extra += "".join(f", {a!r}" for a in args)
    cfg = GPU_HUB_CONFIG.format(namespace=namespace) + CULLER.format(port=free_port(), extra=extra) + config
    return start_hub(cfg, workdir, ports=ports)


def sessions(hub: Hub, token: str | None = None) -> dict[str, dict[str, Any]]:
    req = urllib.request.Request(
        hub.url + "/services/gpusessions/api/sessions",
        headers={"Authorization": f"token {token or hub.token}"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        body = json.loads(r.read())
    return {s["claim"]: s for s in body["sessions"]}


def metrics(hub: Hub) -> str:
    with urllib.request.urlopen(hub.url + "/services/gpusessions/metrics", timeout=10) as r:
        return r.read().decode()


# Warned after 5 s of idleness, culled after 120 s: time enough to look and press "keep".
SLOW_CULL = ("--idle-limit", "120", "--warn-before", "115")


def annotations(api: KubeAPI, namespace: str, claim: str) -> dict[str, str]:
    return api.get("ResourceClaim", claim, namespace)["metadata"].get("annotations") or {}


def wait_warned(api: KubeAPI, namespace: str, claim: str) -> None:
    waits.wait_for(
        lambda: annotations(api, namespace, claim).get("gpusessions.io/warned-at"), 60, "the culler's warning"
    )


def culler_view(hub: Hub) -> dict[str, Any]:
    """The culler's admin JSON (sessions, and notebook jobs)."""
    req = urllib.request.Request(
        hub.url + "/services/gpusessions/api/sessions", headers={"Authorization": f"token {hub.token}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def culler_cycles(hub: Hub) -> int:
    """How many cycles the hub's culler has finished (gpusessions_culler_cycles_total)."""
    return int(value(metrics(hub), "gpusessions_culler_cycles_total") or 0)


def culler_looked_after(hub: Hub, moment: float, timeout: float = 60) -> None:
    """Return once the culler has run a whole cycle begun after `moment` (a time.time()): the
    witness that it decided on everything as it stood then, so what it did not do by now it
    did not decide to do (not a fixed sleep: a slow culler is waited for, a fast one is not)."""
    waits.wait_for(lambda: time.time() >= moment, max(0.0, moment - time.time()) + timeout, "the moment")
    # The counter moves at a cycle's end: two more ends mean one cycle began after `moment`.
    seen = culler_cycles(hub)
    waits.wait_for(lambda: culler_cycles(hub) >= seen + 2, timeout, "two more culler cycles")


@contextmanager
def slow_culler_hub(namespace: str, workdir: Path) -> Iterator[Hub]:
    """The GPU hub with a culler that warns after 5 s idle and culls after 120 s (SLOW_CULL),
    shared by the tests of the culler's warning in JupyterLab (`shared_hub`)."""
    h = culler_hub(namespace, workdir, args=SLOW_CULL)
    try:
        yield h
    finally:
        h.stop()
