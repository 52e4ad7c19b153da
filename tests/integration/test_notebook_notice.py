"""The culler's warning inside the notebook server, relayed with the server's own narrow token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .cullertools import SLOW_CULL, annotations, culler_hub, wait_warned
from .hubtools import process_env, spawn

pytestmark = pytest.mark.cluster


def call(url: str, token: str, method: str = "GET") -> tuple[int, Any]:
    req = urllib.request.Request(
        url,
        method=method,
        data=b"{}" if method == "POST" else None,
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, None


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Any:
    h = culler_hub(namespace, tmp_path / "hub", args=SLOW_CULL)
    yield h
    h.stop()


def test_notebook_relays_the_warning_and_keep_with_a_token_for_this_server_only(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "carol", {"profile": "mig-1g-10gb"})
    spawn(hub, "bob", {"profile": "mig-1g-10gb"})
    wait_warned(api, namespace, "gpu-carol")

    # What JupyterLab's notice polls, through carol's notebook server.
    code, body = call(hub.url + "/user/carol/gpusessions/warnings", hub.token)
    assert code == 200, body
    assert body["enabled"] is True
    [w] = body["warnings"]
    assert w["claim"] == "gpu-carol" and w["profile"] == "mig-1g-10gb"
    assert w["reason"].startswith("notebook and GPU idle") and w["cull_at"]

    # The notebook's own token reaches this server's warning and "keep", nothing else.
    token = process_env(api, namespace, "jupyter-carol")["JUPYTERHUB_API_TOKEN"]
    api_url = hub.url + "/hub/api/gpusessions/users"
    assert call(f"{api_url}/carol/warnings?server=", token)[0] == 200
    assert call(f"{api_url}/carol/warnings", token)[0] == 404, "all her servers: not for this token"
    assert call(f"{api_url}/bob/warnings?server=", token)[0] == 404
    assert call(f"{api_url}/bob/keep?server=", token, "POST")[0] == 404
    assert "gpusessions.io/keep-until" not in annotations(api, namespace, "gpu-bob")
    assert call(hub.url + "/hub/api/users/bob/server", token, "DELETE")[0] in (403, 404)
    assert call(hub.url + "/hub/api/users/bob", token)[0] in (403, 404)

    # "Keep my GPU" from the notebook.
    code, body = call(hub.url + "/user/carol/gpusessions/keep", hub.token, "POST")
    assert code == 200, body
    assert body["claim"] == "gpu-carol" and body["kept_until"]
    ann = annotations(api, namespace, "gpu-carol")
    assert "gpusessions.io/keep-until" in ann and "gpusessions.io/warned-at" not in ann
    code, body = call(hub.url + "/user/carol/gpusessions/warnings", hub.token)
    assert code == 200 and body["warnings"] == []
