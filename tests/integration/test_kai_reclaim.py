"""Reclaim through a real JupyterHub on the real KAI Scheduler: a preemptible session of a team
without quota borrows the only whole GPU of the `small` shape; the team that owns the quota
asks for it; what the borrower's hub, user and objects see."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .hubtools import gpu_objects, logged_in, server_model, spawn
from .kaitools import reclaim_hub, reclaim_teams

pytestmark = pytest.mark.cluster


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    yield from reclaim_hub(api, namespace, tmp_path / "hub")


def notices(hub: Hub, user: str) -> list[str]:
    code, body = hub.api("GET", f"/gpusessions/users/{user}/warnings")
    assert code == 200, body
    return [n["text"] for n in body["notices"]]


def test_a_borrowed_gpu_is_reclaimed_when_its_owner_asks(hub: Hub, api: KubeAPI, namespace: str) -> None:
    spawn(hub, "cy", {"profile": "gpu-pre"})
    holder = api.get("Pod", "gpu-holder-cy", namespace)
    assert holder["spec"]["priorityClassName"] == "build-preemptible"
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
