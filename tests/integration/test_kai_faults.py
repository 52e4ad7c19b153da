"""KAI Scheduler's scheduler or binder stopped during spawns: sessions finish once it is back,
or a spawn through the hub fails with a clear message; nothing is left behind."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import faults, waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI
from localcluster.testing import allocated

from .hubtools import GPU_HUB_CONFIG, follow_spawn, gpu_objects, progress_messages, start
from .kaitools import kai_claim, kai_pod, make_queues, queue, queue_names

pytestmark = pytest.mark.cluster

MIG = "mig.nvidia.com"
ONE_G = ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]


@pytest.fixture
def team(api: KubeAPI, namespace: str) -> Iterator[str]:
    parent, leaf = queue_names(namespace)
    for _ in make_queues(api, [queue(parent, 4, -1), queue(leaf, 4, 4, parent=parent)]):
        yield leaf


def sessions(api: KubeAPI, namespace: str, team: str, n: int) -> None:
    for i in range(n):
        api.create(kai_claim(f"c{i}", team, MIG, ONE_G), namespace)
        api.create(kai_pod(f"h{i}", team, f"c{i}"), namespace)
        api.create(kai_pod(f"nb{i}", team, f"c{i}"), namespace)


def bind_requests(api: KubeAPI, namespace: str) -> list[dict]:
    path = f"/apis/scheduling.run.ai/v1alpha2/namespaces/{namespace}/bindrequests"
    return list(api.request("GET", path)["items"])


def all_running(api: KubeAPI, namespace: str, n: int) -> None:
    devices = set()
    for i in range(n):
        waits.pod_ready(api, namespace, f"h{i}", timeout=90)
        waits.pod_ready(api, namespace, f"nb{i}", timeout=90)
        c = api.get("ResourceClaim", f"c{i}", namespace)
        assert {r["name"] for r in c["status"]["reservedFor"]} == {f"h{i}", f"nb{i}"}
        [dev] = allocated(c)
        devices.add(dev)
    assert len(devices) == n  # no device handed out twice


@pytest.mark.parametrize("component", ["kai-scheduler", "kai-binder"])
def test_sessions_started_while_kai_is_down_run_once_it_is_back(
    api: KubeAPI, namespace: str, team: str, component: str
) -> None:
    with faults.stopped(component):
        sessions(api, namespace, team, 3)
        # Without the scheduler nothing is placed; without the binder nothing is bound.
        assert not any(p["spec"].get("nodeName") for p in api.list("Pod", namespace)["items"])
        assert not any(
            (c.get("status") or {}).get("allocation") for c in api.list("ResourceClaim", namespace)["items"]
        )
    all_running(api, namespace, 3)
    # The binder's work list is empty again (every BindRequest done).
    waits.wait_for(
        lambda: all(
            (b.get("status") or {}).get("phase") == "Succeeded" for b in bind_requests(api, namespace)
        ),
        30,
        "every BindRequest to be Succeeded",
    )


def test_kai_killed_in_the_middle_of_binding(api: KubeAPI, namespace: str, team: str) -> None:
    """The scheduler restarted while six pods are being placed: each claim ends with exactly one
    device, reserved for its two pods."""
    sessions(api, namespace, team, 3)
    faults.restart("kai-scheduler")
    faults.restart("kai-binder")
    all_running(api, namespace, 3)


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path, team: str) -> Iterator[Hub]:
    extra = f"\nc.GPUSessionSpawner.kai_queue = {team!r}\n"
    h = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + extra, tmp_path / "hub")
    yield h
    h.stop()


def test_a_spawn_while_kai_is_down_fails_clearly_and_leaves_nothing(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    with faults.stopped("kai-scheduler"):
        code, body = start(hub, "ann", {"profile": "gpu-short"})  # 4 s allocation timeout
        # The hub answers the failure itself when it comes quickly, else the spawn page says it.
        text = body["message"] if code == 400 else " ".join(progress_messages(hub, "ann"))
    assert (
        "No GPU (whole GPU) became free within 4 seconds; the scheduler never looked at the request" in text
    )
    waits.wait_for(
        lambda: not any(gpu_objects(api, namespace).values()), 30, "the withdrawn request to leave nothing"
    )


def test_a_spawn_past_its_queues_limit_says_why_in_kais_words(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """A queue of GPU limit 1 whose one GPU is in use: a user's whole-GPU spawn waits, the spawn
    page gives KAI's reason (queue, limit, in use) within seconds, and the withdrawn request (a
    4 s allocation timeout here) leaves nothing."""
    parent, leaf = queue_names(namespace)
    for _ in make_queues(api, [queue(parent, 1, -1), queue(leaf, 1, 1, parent=parent)]):
        api.create(kai_claim("other", leaf, "gpu.nvidia.com"), namespace)
        api.create(kai_pod("other-holder", leaf, "other"), namespace)
        waits.pod_ready(api, namespace, "other-holder", timeout=60)
        extra = f"\nc.GPUSessionSpawner.kai_queue = {leaf!r}\n"
        hub = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + extra, tmp_path / "hub")
        try:
            t0 = time.monotonic()
            _, messages = follow_spawn(hub, "ann", {"profile": "gpu-short"})
            took = time.monotonic() - t0
            text = "\n".join(messages)
            want = (
                f"OverLimit: {leaf} quota has reached the allowable limit of GPUs. Limit is 1 GPUs, "
                "currently 1 GPUs allocated and workload requested 1 GPUs."
            )
            assert want in text, text
            assert took < 20, took
            waits.wait_for(
                lambda: not any(gpu_objects(api, namespace).values()),
                30,
                "the withdrawn request to leave nothing",
            )
        finally:
            hub.stop()
