"""GPUSessionSpawner's own hooks, on a spawner built without a hub (KubeSpawner's `_mock`)."""

from __future__ import annotations

import asyncio
import json

import pytest

import kubeschemas
from gpusessions.hub.spawner import GPUSessionSpawner

from .spawnertools import notebook_pod


async def _first_gpu_message(reader_first: bool, start_takes: float) -> list[str]:
    """A spawn as JupyterHub runs it, after an earlier one: the progress reader comes before or
    after start(); the start (claim found, pod running) takes `start_takes` seconds, and
    JupyterHub keeps the spawn pending after it (it waits for the server to answer)."""
    spawner = GPUSessionSpawner(_mock=True)
    # The last spawn: its GPU phase ended, its start future is done, the server was stopped.
    spawner._emit("GPU allocated: from the last spawn")
    spawner._gpu_phase_done.set()
    last: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    last.set_result(None)
    spawner._start_future = last
    spawner._gpu_started = False  # as stop() leaves it
    # The new spawn is pending (JupyterHub's handler marks it before calling start()).
    spawner._spawn_pending = spawner._start_pending = True
    seen: list[str] = []

    async def read() -> None:
        async for event in spawner.progress():
            seen.append(event["message"])
            return

    async def start() -> None:
        spawner._emit("GPU kept from your last start, reattaching")
        spawner._gpu_phase_done.set()
        await asyncio.sleep(start_takes)

    spawner._start = start  # type: ignore[method-assign]
    if reader_first:
        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)
        spawner.start()
    else:
        spawner.start()
        await asyncio.sleep(0.3)
        reader = asyncio.create_task(read())
    await asyncio.wait_for(reader, 5)
    spawner._start_future.cancel()
    return seen


@pytest.mark.usefixtures("kubeconfig")
@pytest.mark.parametrize(
    ("reader_first", "start_takes"),
    [(True, 2.0), (True, 0.0), (False, 2.0), (False, 0.0)],
    ids=["reader-first", "reader-first-quick-start", "start-first", "start-first-quick-start"],
)
def test_the_progress_stream_gets_this_spawns_gpu_messages(reader_first: bool, start_takes: float) -> None:
    """JupyterHub marks a spawn pending (and serves its progress stream) a few steps before it
    calls start(), and keeps it pending after start() returns: the reader must neither take the
    last spawn's finished GPU phase for this one's nor miss a start that was over quickly."""
    assert asyncio.run(_first_gpu_message(reader_first, start_takes)) == [
        "GPU kept from your last start, reattaching"
    ]


@pytest.mark.usefixtures("kubeconfig")
@pytest.mark.parametrize(
    "gateway_url", [None, "http://gpu-holder-x.default.svc:8889"], ids=["plain", "kernels"]
)
def test_the_notebook_pod_with_its_gpu_is_valid_for_kubernetes_1_35(gateway_url: str | None) -> None:
    pod = notebook_pod(
        gateway_url,
        user_options={"profile": "mig-1g-10gb"},
        gpu_device_class="mig.nvidia.com",
        kai_queue="team-a",
        node_affinity_required=[{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}],
        extra_resource_limits={"memory": "2Gi"},
    )
    kubeschemas.validate(pod)
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "gpu-mock-name---6241db84"}]
    (notebook,) = spec["containers"]
    assert notebook["resources"]["claims"] == [{"name": "gpu"}]
    assert notebook["resources"]["limits"]["memory"] == "2Gi"
    assert {"name": "gpusessions", "mountPath": "/etc/gpusessions", "readOnly": True} in notebook[
        "volumeMounts"
    ]
    env = {e["name"]: e.get("value") for e in notebook["env"]}
    assert env["GPUSESSIONS_DEVICES"] == "gpu-node-0/gpu-0-mig-1g10gb-0"
    assert env["GPUSESSIONS_NODE"] == "gpu-node-0"
    assert ("JUPYTER_GATEWAY_URL" in env) == (gateway_url is not None)
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-0"]}]
    assert spec["schedulerName"] == "kai-scheduler"
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert json.loads(pod["metadata"]["annotations"]["gpusessions.io/session"])["node"] == "gpu-node-0"
