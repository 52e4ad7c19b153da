"""Reclaim through a real JupyterHub on the real KAI Scheduler: a preemptible session of a team
without quota borrows the only whole GPU of the `small` shape; the team that owns the quota
asks for it; what the borrower's hub, user and objects see. Its kernels (in the holder, parking
on: the defaults) are parked in the holder's grace period, which KAI's eviction honours (a
plain DELETE without options: pkg/scheduler/cache/evictor/default_evictor.go), and come back
at the borrower's next start."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core import kernels as K
from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .hubtools import gpu_objects, logged_in, nb, open_notebook, server_model, spawn
from .kaitools import reclaim_hub, reclaim_teams
from .kerneltools import execute

pytestmark = pytest.mark.cluster


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    yield from reclaim_hub(api, namespace, tmp_path / "hub")


def notices(hub: Hub, user: str) -> list[str]:
    code, body = hub.api("GET", f"/gpusessions/users/{user}/warnings")
    assert code == 200, body
    return [n["text"] for n in body["notices"]]


def parked_record(cluster: Any, namespace: str, user: str) -> dict[str, Any] | None:
    """The park's record in the user's home once the park has finished (None before)."""
    path = cluster.paths.homes / namespace / user / ".gpusessions" / "parked" / "_default" / "session.json"
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return rec if rec["kernels"] and rec["kernels"][0]["status"] != "parking" else None


def test_a_borrowed_gpu_is_reclaimed_when_its_owner_asks_and_its_kernels_park(
    hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    spawn(hub, "cy", {"profile": "gpu-pre"})
    holder = api.get("Pod", "gpu-holder-cy", namespace)
    assert holder["spec"]["priorityClassName"] == "build-preemptible"
    grace = 120 + K.PARK_MARGIN  # park_timeout's default and the margin
    assert holder["spec"]["terminationGracePeriodSeconds"] == grace
    # cy builds state in a notebook's kernel (in the holder).
    old = open_notebook(hub, "cy", "borrowed.ipynb")
    build = "answer = 41 + 1\nweights = {'w': list(range(1000))}\nprint('built')"
    assert execute(hub.url, "cy", old, hub.token, build).strip() == "built"
    spawn(hub, "ann", {"profile": "gpu"})
    assert api.get("Pod", "jupyter-ann", namespace)["spec"]["schedulerName"] == "kai-scheduler"
    # KAI evicted the borrower's pods: the hub sees cy's server stopped ...
    waits.wait_for(lambda: not (server_model(hub, "cy") or {}).get("ready"), 60, "cy's server to stop")
    for pod in ("jupyter-cy", "gpu-holder-cy"):
        waits.gone(api, "Pod", pod, namespace, timeout=60)
    # ... tells cy why (the hub home page and JupyterLab read these notices) ...
    said = waits.wait_for(lambda: notices(hub, "cy"), 30, "a notice to cy")
    assert len(said) == 1, said
    assert said[0].startswith(
        f"Your GPU session was taken back by the scheduler: your team's queue {reclaim_teams(namespace)[2]} "
        "was using GPUs beyond its share"
    ), said
    # ... that the session was parked, not lost ...
    assert "Your kernels were parked first" in said[0] and "start again and they are restored" in said[0]
    # ... which it was: KAI deleted the holder with its own grace period, and the kernel host
    # parked the kernel in it.
    killing = [e for e in waits.events_for(api, namespace, "Pod", "gpu-holder-cy") if "grace period" in e]
    assert any(f"grace period {grace}s" in e for e in killing), killing
    record = waits.wait_for(lambda: parked_record(cluster, namespace, "cy"), 60, "cy's kernel to park")
    [k] = record["kernels"]
    assert (k["id"], k["status"], k["paths"]) == (old, "parked", ["borrowed.ipynb"]), k
    assert {"answer", "weights"} <= set(k["report"]["saved"]), k["report"]
    # A JupyterLab tab whose server is gone reads them from the hub's page route with the login
    # cookie alone (no token, no XSRF token): the user's own notices, nobody else's.
    mine = json.loads(
        logged_in(hub, "cy").open(hub.url + "/hub/gpusessions/notices?server=", timeout=30).read()
    )
    assert [n["text"] for n in mine["notices"]] == said
    theirs = json.loads(logged_in(hub, "ann").open(hub.url + "/hub/gpusessions/notices", timeout=30).read())
    assert theirs == {"notices": []}
    # ... and releases its GPU: nothing of cy's session is left.
    waits.gone(api, "ResourceClaim", "gpu-cy", namespace, timeout=30)
    assert not [
        o for objs in gpu_objects(api, namespace).values() for o in objs if "cy" in o["metadata"]["name"]
    ]
    # ann's session, non-preemptible, runs on.
    assert (server_model(hub, "ann") or {}).get("ready")
    assert notices(hub, "ann") == []

    # ann is done and releases the GPU; cy starts again, on the GPU it was taken from or any of
    # its size: the first kernel request restores the kernel, the notebook maps to it.
    code, body = hub.api("POST", "/gpusessions/users/ann/release")
    assert code == 200 and body["released"], body
    waits.gone(api, "ResourceClaim", "gpu-ann", namespace, timeout=180)
    spawn(hub, "cy", {"profile": "gpu-pre"})
    code, sessions = nb(hub, "GET", "/user/cy/api/sessions")
    assert code == 200, code
    [(path, new)] = [(x["path"], x["kernel"]["id"]) for x in sessions]
    assert path == "borrowed.ipynb" and new != old
    code, status = nb(hub, "GET", "/user/cy/gpusessions/restore")
    assert code == 200 and status["state"] == "restored", status
    assert status["message"].startswith("Restored your session from "), status
    assert execute(hub.url, "cy", new, hub.token, "print(answer, len(weights['w']))").strip() == "42 1000"
