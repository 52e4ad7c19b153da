"""The process runtime runs the GPU agent in holder pods, on the simulated NVML."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core.claims import AGENT_PORT, GPURequest, HolderSettings, build_claim, build_holder_pod
from localcluster import waits
from localcluster.kubeapi import KubeAPI
from promtext import value

from .hubtools import process_env

pytestmark = pytest.mark.cluster


def _status(ip: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{ip}:{AGENT_PORT}/api/status", timeout=10) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


def test_holder_runs_the_agent_on_its_device(api: KubeAPI, namespace: str, load_file: Path) -> None:
    req = GPURequest("mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile == '3g.40gb'",))
    api.create(build_claim("gpu-a", namespace, req, "a", ""))
    settings = HolderSettings(image="gpusessions-holder:0.1.0", resources={})
    api.create(build_holder_pod("gpu-holder-a", namespace, "gpu-a", settings, "a", ""))
    pod = waits.pod_ready(api, namespace, "gpu-holder-a")
    ip = pod["status"]["podIP"]
    uuid = process_env(api, namespace, "gpu-holder-a")["NVIDIA_VISIBLE_DEVICES"]

    def first() -> dict[str, Any] | None:
        try:
            st = _status(ip)
        except OSError:
            return None
        return st if st["devices"] and st["sampled_at"] else None

    st = waits.wait_for(
        first, 30, "the agent to answer", lambda: waits.explain_pod(api, namespace, "gpu-holder-a")
    )
    assert st["nvml"]["ok"] and st["claim"] == "gpu-a" and st["user"] == "a"
    [dev] = st["devices"]
    assert dev["uuid"] == uuid and dev["kind"] == "mig"
    assert "MIG 3g.40gb" in dev["name"]
    assert dev["memory_total"] == 40448 * 2**20
    assert dev["busy"] is False

    # The GPU gets busy (H100: per-MIG SM activity through GPM).
    load_file.write_text(json.dumps({uuid: {"activity": 70, "processes": 1, "memory_used_mib": 4096}}))

    def busy() -> dict[str, Any] | None:
        d = _status(ip)["devices"][0]
        return d if d["busy"] else None

    d = waits.wait_for(busy, 20, "the agent to see the load")
    assert (d["activity"], d["activity_source"], d["processes"]) == (70.0, "gpm-sm-activity", 1)
    assert d["memory_used"] == 4096 * 2**20 and d["last_busy"]
    with urllib.request.urlopen(f"http://{ip}:{AGENT_PORT}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert value(text, "gpusessions_gpu_busy", uuid=uuid, kind="mig", source="gpm-sm-activity") == 1

    # The agent dies: the holder restarts it and keeps the claim.
    pid = int(
        next(
            e
            for e in reversed(waits.events_for(api, namespace, "Pod", "gpu-holder-a"))
            if "Started container" in e
        )
        .split("(pid ")[1]
        .split(",")[0]
    )
    os.kill(pid, signal.SIGKILL)
    waits.wait_for(
        lambda: (
            api.get("Pod", "gpu-holder-a", namespace)["status"]["containerStatuses"][0]["restartCount"] == 1
        ),
        30,
        "the agent to be restarted",
    )
    waits.wait_for(first, 30, "the restarted agent to answer")
    assert api.get("ResourceClaim", "gpu-a", namespace)["status"]["allocation"]
