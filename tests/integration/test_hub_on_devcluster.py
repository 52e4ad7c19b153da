"""A real JupyterHub with configurable-http-proxy spawns a notebook through the
`gpusessions` spawner entry point onto the devcluster: the runtime runs the
real jupyterhub-singleuser process on the pod's 127.x IP, and the server
answers through the proxy. A server without a GPU profile spawns as with
KubeSpawner."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI

pytestmark = pytest.mark.cluster


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    h = start_hub(
        f"""
c.JupyterHub.spawner_class = "gpusessions"
c.JupyterHub.authenticator_class = "dummy"
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = "quay.io/jupyterhub/singleuser:5"
c.KubeSpawner.start_timeout = 60
c.KubeSpawner.http_timeout = 60
c.KubeSpawner.default_url = "/lab"
""",
        tmp_path / "hub",
    )
    yield h
    h.stop()


def _server_ready(hub: Hub, user: str) -> dict | None:
    code, body = hub.api("GET", f"/users/{user}")
    server = (body or {}).get("servers", {}).get("") if code == 200 else None
    return server if server and server.get("ready") else None


def test_spawn_through_the_hub_runs_singleuser_on_the_pod_ip(hub: Hub, api: KubeAPI, namespace: str) -> None:
    assert hub.api("POST", "/users/alice")[0] == 201
    code, body = hub.api("POST", "/users/alice/server")
    assert code in (201, 202), body
    server = waits.wait_for(
        lambda: _server_ready(hub, "alice"),
        90,
        "alice's server to be ready",
        lambda: hub.log_tail(3000),
    )
    pods = api.list("Pod", namespace)["items"]
    [pod] = [p for p in pods if p["metadata"]["name"] == "jupyter-alice"]
    ip = pod["status"]["podIP"]
    assert ip.startswith("127.") and ip != "127.0.0.1"
    # The proxy routes to the pod IP, where jupyterhub-singleuser answers.
    req = urllib.request.Request(
        f"{hub.url}{server['url']}api/status", headers={"Authorization": f"token {hub.token}"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
        assert "started" in json.loads(r.read())

    assert hub.api("DELETE", "/users/alice/server")[0] in (202, 204)
    waits.wait_for(lambda: _stopped(hub, "alice"), 60, "alice's server to stop")
    waits.gone(api, "Pod", "jupyter-alice", namespace)


def _stopped(hub: Hub, user: str) -> bool:
    code, body = hub.api("GET", f"/users/{user}")
    return code == 200 and "" not in (body or {}).get("servers", {})
