"""Team queues on the local cluster: labels, priority, refusals and the GPU-equivalent quota.

KAI Scheduler itself cannot be built here (its Go module is not served to this machine), so
the pods are scheduled by kube-scheduler (`kai_scheduler_name = "default-scheduler"`); what
is tested is everything gpusessions does for KAI, on a real apiserver and scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI

from .hubtools import GPU_HUB_CONFIG, gpu_objects, progress_messages, spawn, start, stop

pytestmark = pytest.mark.cluster

QUEUES = """
c.GPUSessionSpawner.kai_queue = {"physics": "team-a", "biology": "team-b"}
c.GPUSessionSpawner.kai_scheduler_name = "default-scheduler"  # no KAI here; see the module doc
c.GPUSessionSpawner.kai_gpu_quota = {"team-a": 0.5}
c.JupyterHub.load_groups = {"physics": {"users": ["ann", "bo"]}, "biology": {"users": ["cy"]}}
"""


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    if api.get_or_none("PriorityClass", "build") is None:  # one of KAI's priority classes
        api.create(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": "build"},
                "value": 100,
                "preemptionPolicy": "Never",
            }
        )
    h = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + QUEUES, tmp_path / "hub")
    yield h
    h.stop()


def refusal(hub: Hub, user: str, options: dict) -> str:
    code, body = start(hub, user, options)
    if code == 400:
        return str(body["message"])
    return progress_messages(hub, user)[-1]


def queue_of(api: KubeAPI, namespace: str, claim: str) -> str | None:
    return api.get("ResourceClaim", claim, namespace)["metadata"].get("labels", {}).get("kai.scheduler/queue")


def owned(api: KubeAPI, namespace: str, user: str) -> list[dict]:
    return [
        o
        for objs in gpu_objects(api, namespace).values()
        for o in objs
        if (o["metadata"].get("annotations") or {}).get("gpusessions.io/user") == user
    ]


def test_sessions_go_to_their_team_queue_and_the_quota_counts_mig_slices(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "ann", {"profile": "mig-1g-10gb"})
    claim = api.get("ResourceClaim", "gpu-ann", namespace)
    assert claim["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert claim["metadata"]["annotations"]["gpusessions.io/gpu-equivalents"] == "1/7"
    for pod in ("gpu-holder-ann", "jupyter-ann"):
        p = api.get("Pod", pod, namespace)
        assert p["metadata"]["labels"]["kai.scheduler/queue"] == "team-a", pod
        assert p["spec"]["priorityClassName"] == "build" and p["spec"]["priority"] == 100, pod
        assert p["spec"]["schedulerName"] == "default-scheduler", pod

    # team-a holds 1/7; a 3g.40gb (3/7) would bring it to 4/7 > 0.5: refused, nothing made.
    msg = refusal(hub, "bo", {"profile": "mig-3g-40gb"})
    assert "Your team's queue team-a may hold 0.50 GPU" in msg, msg
    assert "1 session(s) hold 0.14 GPU now" in msg and "MIG 3g.40gb (0.43 GPU)" in msg
    assert owned(api, namespace, "bo") == []
    spawn(hub, "bo", {"profile": "mig-1g-10gb"})  # 2/7 fits

    # Another team has no such limit; a user in no team is refused, not sent to default-queue.
    spawn(hub, "cy", {"profile": "mig-3g-40gb"})
    assert (
        api.get("ResourceClaim", "gpu-cy", namespace)["metadata"]["labels"]["kai.scheduler/queue"] == "team-b"
    )
    msg = refusal(hub, "eve", {"profile": "cpu"})
    assert "You are in no team with a GPU queue (you are in no group)" in msg, msg
    assert api.get_or_none("Pod", "jupyter-eve", namespace) is None

    # A user cannot pick a queue: it is not an option.
    code, body = start(hub, "bo", {"profile": "mig-1g-10gb", "queue": "team-b"}, server="other")
    assert code == 400 and "Unknown option(s) for profile 'mig-1g-10gb': queue" in body["message"]


def test_a_kept_claim_without_its_queue_label_is_put_back_in_the_queue(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "ann", {"profile": "mig-1g-10gb"})
    stop(hub, "ann")
    api.patch("ResourceClaim", "gpu-ann", {"metadata": {"labels": {"kai.scheduler/queue": None}}}, namespace)
    spawn(hub, "ann", {"profile": "mig-1g-10gb"})
    assert (
        api.get("ResourceClaim", "gpu-ann", namespace)["metadata"]["labels"]["kai.scheduler/queue"]
        == "team-a"
    )
