"""The notebook server's GPU panel data: the session's device, node and the GPU memory a kernel
holds (simulated NVML), read with the server's own tokens; and the panel's event stream does not
count as activity, while a JupyterLab request does."""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core.claims import AGENT_PORT
from localcluster import waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI

from .hubtools import GPU_HUB_CONFIG, allocated_device, nb, process_env, spawn
from .kerneltools import execute

pytestmark = pytest.mark.cluster
GIB = 2**30


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Any:
    # The hub reads the proxy's activity every 2 s (default 300): a request through the proxy
    # that counts as activity shows in the hub's last_activity at once.
    cfg = GPU_HUB_CONFIG.format(namespace=namespace) + "c.JupyterHub.last_activity_interval = 2\n"
    h = start_hub(cfg, tmp_path / "hub")
    yield h
    h.stop()


def _last_activity(hub: Hub, user: str) -> tuple[str, str]:
    code, model = hub.api("GET", f"/users/{user}")
    assert code == 200, model
    return model["last_activity"], model["servers"][""]["last_activity"]


def _stream_is_not_activity(hub: Hub, user: str) -> None:
    time.sleep(3)  # the spawn's own requests reach the hub's last_activity
    before = _last_activity(hub, user)
    req = urllib.request.Request(
        hub.url + f"/user/{user}/gpusessions/gpu/events", headers={"Authorization": f"token {hub.token}"}
    )
    events = []
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        while len(events) < 3:  # three readings, 5 s apart, through the proxy
            line = r.readline().decode()
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    assert all(e["enabled"] and e["session"]["gpu"] == "MIG 1g.10gb" for e in events)
    assert events[-1]["at"] - events[0]["at"] >= 9
    time.sleep(5)  # two of the hub's activity reads
    assert _last_activity(hub, user) == before, "the GPU panel's stream moved last_activity"
    # A request JupyterLab makes does count: the check above can fail.
    code, _ = nb(hub, "GET", f"/user/{user}/api/contents")
    assert code == 200
    waits.wait_for(
        lambda: _last_activity(hub, user)[1] != before[1], 15, "a JupyterLab request to count as activity"
    )


def test_the_panel_reads_the_gpu_and_its_stream_is_not_activity(
    hub: Hub, api: KubeAPI, namespace: str, load_file: Path
) -> None:
    spawn(hub, "una", {"profile": "mig-1g-10gb"})
    _stream_is_not_activity(hub, "una")
    env = process_env(api, namespace, "jupyter-una")
    holder_ip = api.get("Pod", "gpu-holder-una", namespace)["status"]["podIP"]
    assert env["GPUSESSIONS_AGENT_URL"] == f"http://{holder_ip}:{AGENT_PORT}"
    code, k = nb(hub, "POST", "/user/una/api/kernels", {"name": "python3"})
    assert code == 201, code
    pid = int(execute(hub.url, "una", k["id"], hub.token, "import os; print(os.getpid())"))
    gpu = process_env(api, namespace, "gpu-holder-una", "kernels")["DEVCLUSTER_CDI_DEVICES"]
    load_file.write_text(json.dumps({gpu: {"memory_used_mib": 2048, "pids": {str(pid): 2048}}}))

    def panel() -> dict[str, Any] | None:
        code, d = nb(hub, "GET", "/user/una/gpusessions/gpu")
        assert code == 200, code
        ks = d.get("kernels") or []
        return d if ks and ks[0].get("gpu_memory") else None

    d = waits.wait_for(panel, 30, "the panel to show the kernel's GPU memory")
    pool, device, node = allocated_device(api, namespace, "gpu-una")
    assert d["session"]["gpu"] == "MIG 1g.10gb"
    assert d["session"]["devices"] == [f"{pool}/{device}"] and d["session"]["node"] == node
    [kern] = d["kernels"]
    assert (kern["id"], kern["gpu_memory"]) == (k["id"], 2 * GIB)
    assert d["summary"]["memory_used"] == 2 * GIB
    assert 9 * GIB < d["summary"]["memory_total"] < 10 * GIB, d["summary"]
    assert d["state"]["claim"] == "gpu-una" and d["state"]["keep_on_stop"] is True
    assert d["state"]["warning"] is None and "agent_error" not in d
