"""The notebook pod's GPU parts: pure builders on KubeSpawner's V1Pod (no cluster, no spawner)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kubernetes_asyncio.client import (
    ApiClient,
    V1Container,
    V1EnvVar,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
)

from gpusessions.core import kernels as K
from gpusessions.core import notebook_pod as NP
from gpusessions.core.queues import QueuePolicy
from gpusessions.notebook import localkernels

INFO = NP.session_info(
    "gpu-ann",
    "hub",
    "gpu-holder-ann",
    "mig-1g-10gb",
    "MIG 1g.10gb",
    "gpu-node-0",
    [("gpu.nvidia.com", "gpu-node-0", "gpu-0-mig-1g10gb-19-0")],
)


def _pod() -> V1Pod:
    containers = [
        V1Container(name="sidecar"),
        V1Container(
            name="notebook",
            env=[V1EnvVar(name="JUPYTERHUB_USER", value="ann")],
            resources=V1ResourceRequirements(limits={"memory": "2Gi"}),
        ),
    ]
    return V1Pod(
        metadata=V1ObjectMeta(name="jupyter-ann", labels={"app": "jupyterhub"}),
        spec=V1PodSpec(containers=containers),
    )


def _body(pod: V1Pod) -> dict[str, Any]:
    async def serialize() -> dict[str, Any]:
        async with ApiClient() as client:
            return client.sanitize_for_serialization(pod)  # type: ignore[no-any-return]

    return asyncio.run(serialize())


def test_add_gpu_gives_the_notebook_container_the_claim_and_keeps_its_limits() -> None:
    pod = _pod()
    NP.add_gpu(pod, INFO)
    body = _body(pod)
    spec = body["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "gpu-ann"}]
    sidecar, notebook = spec["containers"]
    assert "resources" not in sidecar, "only the notebook container gets the device"
    assert notebook["resources"] == {"claims": [{"name": "gpu"}], "limits": {"memory": "2Gi"}}
    env = {e["name"]: e.get("value") for e in notebook["env"]}
    assert env["JUPYTERHUB_USER"] == "ann", "KubeSpawner's variables stay"
    assert env["GPUSESSIONS_DEVICES"] == "gpu-node-0/gpu-0-mig-1g10gb-19-0"
    assert env["GPUSESSIONS_SESSION_FILE"] == "/etc/gpusessions/session.json"
    assert "JUPYTER_GATEWAY_URL" not in env
    assert json.loads(body["metadata"]["annotations"]["gpusessions.io/session"]) == INFO
    (volume,) = spec["volumes"]
    assert (
        volume["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"]
        == "metadata.annotations['gpusessions.io/session']"
    )
    assert notebook["volumeMounts"] == [
        {"name": "gpusessions", "mountPath": "/etc/gpusessions", "readOnly": True}
    ]
    (term,) = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-0"]}]}


def test_add_gpu_with_kernels_in_the_holder_and_no_node_yet() -> None:
    pod = _pod()
    NP.add_gpu(pod, {**INFO, "node": None}, gateway_url="http://gpu-holder-ann.hub.svc:8889")
    body = _body(pod)
    env = {e["name"]: e for e in body["spec"]["containers"][1]["env"]}
    assert env["JUPYTER_GATEWAY_URL"]["value"] == "http://gpu-holder-ann.hub.svc:8889"
    assert env["GPUSESSIONS_NODE"]["value"] == ""
    assert "affinity" not in body["spec"], "no node: no affinity added"


def test_kernels_in_the_notebook_pod_park_in_its_grace_period() -> None:
    """No kernel host: the notebook server parks its own kernels when it stops; the pod's grace
    period is the park budget and its margin. With a kernel host, the holder parks them."""
    pod = _pod()
    NP.add_gpu(pod, INFO, park=NP.Parking(on=True, timeout=40, max_bytes=5 << 30, expiry_days=7))
    body = _body(pod)
    env = {e["name"]: e.get("value") for e in body["spec"]["containers"][1]["env"]}
    assert env[K.PARKS_ENV] == "1" and env[K.PARK_EXPIRY_ENV] == "7"
    assert (env["GPUSESSIONS_PARK_TIMEOUT"], env["GPUSESSIONS_PARK_MAX_BYTES"]) == ("40", str(5 << 30))
    assert body["spec"]["terminationGracePeriodSeconds"] == 40 + K.PARK_MARGIN
    assert localkernels.PARKS_ENV == K.PARKS_ENV  # the notebook side's own copy of the name
    held = _pod()
    NP.add_gpu(held, INFO, gateway_url="http://h:8889", park=NP.Parking(on=True, timeout=40))
    body = _body(held)
    assert "terminationGracePeriodSeconds" not in body["spec"]  # the holder's grace period
    assert "GPUSESSIONS_PARK_TIMEOUT" not in {e["name"] for e in body["spec"]["containers"][1]["env"]}
    off = _pod()
    NP.add_gpu(off, INFO, park=NP.Parking(on=False))
    assert K.PARKS_ENV not in {e["name"] for e in _body(off)["spec"]["containers"][1]["env"]}


def test_schedule_puts_the_pod_in_its_queue() -> None:
    pod = _pod()
    scheduling = QueuePolicy(queues="team-a").scheduling("team-a")
    assert scheduling is not None
    NP.schedule(pod, scheduling)
    body = _body(pod)
    assert body["metadata"]["labels"] == {"app": "jupyterhub", "kai.scheduler/queue": "team-a"}
    assert (body["spec"]["schedulerName"], body["spec"]["priorityClassName"]) == ("kai-scheduler", "build")
