"""GPUSessionSpawner's own hooks, on a spawner built without a hub (KubeSpawner's `_mock`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio.config import kube_config

from gpusessions.spawner import GPUSessionSpawner

# KubeSpawner loads a kube config when it is built; nothing here contacts the server.
KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


@pytest.fixture
def kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    yield


@pytest.mark.usefixtures("kubeconfig")
def test_a_progress_reader_that_comes_before_start_gets_this_spawns_messages() -> None:
    """JupyterHub marks a spawn pending (and serves its progress stream) a few steps before it
    calls start(): the reader must not take the last spawn's finished GPU phase for this one's."""

    async def scenario() -> list[str]:
        spawner = GPUSessionSpawner(_mock=True)
        # The last spawn: its GPU phase ended, its start future is done.
        spawner._emit("GPU allocated: from the last spawn")
        spawner._gpu_phase_done.set()
        last: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        last.set_result(None)
        spawner._start_future = last
        # A new spawn is pending; the reader comes before start().
        spawner._start_pending = True
        seen: list[str] = []

        async def read() -> None:
            async for event in spawner.progress():
                seen.append(event["message"])
                return

        reader = asyncio.create_task(read())
        await asyncio.sleep(0.3)

        async def start() -> None:
            spawner._emit("GPU kept from your last start, reattaching")
            spawner._gpu_phase_done.set()
            await asyncio.sleep(2)

        spawner._start = start  # type: ignore[method-assign]
        spawner.start()
        await asyncio.wait_for(reader, 5)
        spawner._start_future.cancel()
        return seen

    assert asyncio.run(scenario()) == ["GPU kept from your last start, reattaching"]
