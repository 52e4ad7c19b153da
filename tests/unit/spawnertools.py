"""GPUSessionSpawner's notebook pod built without a hub or cluster (KubeSpawner's `_mock`)."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client import ApiClient

from gpusessions.hub.session import Allocation
from gpusessions.hub.spawner import GPUSessionSpawner
from localcluster.testing import allocation_status

# KubeSpawner loads a kube config when it is built; nothing here contacts the server.
KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: none, user: {token: none}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
"""


CLAIM = {
    "metadata": {"name": "gpu-mock-name---6241db84", "namespace": "default"},
    "status": allocation_status("gpu-node-0", "gpu-0-mig-1g10gb-0", "gpu-node-0"),
}


def notebook_pod(gateway_url: str | None, **config: Any) -> dict[str, Any]:
    """The notebook pod's manifest as the spawner sends it, with the GPU phase done (no cluster)."""

    async def build() -> dict[str, Any]:
        spawner = GPUSessionSpawner(_mock=True, **config)

        async def prepare() -> None:
            spawner._gpu_alloc = Allocation(CLAIM, kept=False, gateway_url=gateway_url)
            spawner._gpu_state = {"describe": "MIG 1g.10gb", "claim": CLAIM["metadata"]["name"]}

        spawner._prepare_gpu = prepare  # type: ignore[method-assign]
        pod = await spawner.get_pod_manifest()
        async with ApiClient() as client:
            return client.sanitize_for_serialization(pod)  # type: ignore[no-any-return]

    return asyncio.run(build())
