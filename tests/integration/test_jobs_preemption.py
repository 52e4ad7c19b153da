"""A notebook job that borrows another team's GPU is preempted by KAI when that team's notebook
needs it, requeued without failing (the Job's podFailurePolicy on the DisruptionTarget
condition), and completes once the GPU is free again: through a real hub on the real KAI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .cullertools import culler_hub, culler_view
from .hubtools import spawn, user_token
from .jobtools import call, job_objects
from .kaitools import make_queues, queue

pytestmark = pytest.mark.cluster


def teams(namespace: str) -> tuple[str, str, str]:
    s = namespace.rsplit("-", 1)[-1]
    return f"pdept-{s}", f"powner-{s}", f"pborrow-{s}"


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    dept, owner, borrower = teams(namespace)
    extra = f"""
c.GPUSessionSpawner.kai_queue = {{"physics": {owner!r}, "biology": {borrower!r}}}
c.JupyterHub.load_groups = {{"physics": {{"users": ["ann"]}}, "biology": {{"users": ["cy"]}}}}
c.KubeSpawner.poll_interval = 2
"""
    # One whole-GPU session needs a quota of 2 in KAI's eyes (docs/queues.md); the borrower has none.
    qs = [queue(dept, 2, -1), queue(owner, 2, 2, parent=dept), queue(borrower, 0, 2, parent=dept)]
    for _ in make_queues(api, qs):
        # With the culler's Job watch (--jobs): it notes the run time of the jobs' pods on their
        # Job, so the evicted pod's GPU time is kept. It culls nobody here (long limits).
        long = ("--idle-limit", "3600", "--stopped-keep", "3600", "--orphan-grace", "3600")
        long += ("--gpu-idle-limit", "0", "--gpu-idle-limit-contended", "0", "--stopped-keep-contended", "0")
        h = culler_hub(namespace, tmp_path / "hub", args=("--jobs", *long), config=extra)
        yield h
        h.stop()


# Runs until the test writes `go` next to it (at most two minutes).
WAITS_FOR_GO = {
    "cells": [
        {
            "cell_type": "code",
            "metadata": {},
            "source": (
                "import os, time\nt = time.time()\n"
                "while not os.path.exists('go') and time.time() - t < 120:\n    time.sleep(0.5)\n"
                "print('went', os.path.exists('go'))"
            ),
            "outputs": [],
            "execution_count": None,
        }
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def test_a_borrowing_job_is_preempted_requeued_and_completes(
    hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    _, owner, borrower = teams(namespace)
    home = Path(cluster.paths.homes) / namespace / "cy"
    home.mkdir(parents=True, exist_ok=True)
    (home / "long.ipynb").write_text(json.dumps(WAITS_FOR_GO))
    cy = user_token(hub, "cy")
    code, job = call(
        hub, cy, "POST", "/users/cy/jobs", {"name": "long", "input": "long.ipynb", "size": "gpu"}
    )
    assert code == 201, job
    path = f"/users/cy/jobs/{job['id']}"

    def state(want: str) -> Any:
        _, j = call(hub, cy, "GET", path)
        return j if j["state"] == want else None

    waits.wait_for(lambda: state("running"), 60, "the job to borrow the whole GPU")
    assert job["queue"] == borrower and job["priority"] == "train"
    selector = f"gpusessions.io/job-id={job['id']}"
    [first] = api.list("Pod", namespace, label_selector=selector)["items"]
    # It runs a few seconds on the GPU before it is preempted.
    ran = waits.wait_for(
        lambda: (j := call(hub, cy, "GET", path)[1])["gpu_seconds"] >= 3 and j, 30, "GPU time to count"
    )["gpu_seconds"]

    # The owning team's notebook (non-preemptible) takes the GPU back.
    spawn(hub, "ann", {"profile": "gpu"})
    requeued = waits.wait_for(
        lambda: (j := call(hub, cy, "GET", path)[1])["requeues"] == 1 and j["state"] == "queued" and j,
        60,
        "the job to be requeued",
        lambda: str(call(hub, cy, "GET", path)),
    )
    assert "Preempted 1 time(s)" in requeued["message"] and "requeued" in requeued["message"], requeued
    assert f"team {owner}'s workload pg-" in requeued["message"], requeued  # from KAI's Evict event
    k = api.get("Job", f"nbjob-{job['id']}", namespace)
    assert not any(c["type"] == "Failed" for c in k["status"].get("conditions") or []), k["status"]

    # The evicted pod is gone, its GPU time is not: the culler noted it on the Job, and the
    # requeued job (waiting, no pod running) still counts it, in the panel and on the admin page.
    def noted() -> Any:
        pods = api.list("Pod", namespace, label_selector=selector)["items"]
        if any(p["metadata"]["uid"] == first["metadata"]["uid"] for p in pods):
            return None
        k = api.get("Job", f"nbjob-{job['id']}", namespace)
        note = json.loads(k["metadata"].get("annotations", {}).get("gpusessions.io/run-seconds", "{}"))
        return note.get(first["metadata"]["uid"])

    first_run = waits.wait_for(noted, 60, "the evicted pod's run time to be noted on its Job")
    assert first_run >= ran, (first_run, ran)
    waiting = call(hub, cy, "GET", path)[1]
    assert waiting["state"] == "queued" and waiting["gpu_seconds"] >= first_run, waiting
    [row] = [r for r in culler_view(hub)["jobs"] if r["id"] == job["id"]]
    assert row["requeues"] == 1 and row["gpu_seconds"] >= first_run, row

    # The owner releases the GPU; the job runs again and completes, its GPU time kept.
    code, body = hub.api("POST", "/gpusessions/users/ann/release")
    assert code == 200, body
    (home / "go").write_text("")
    done = waits.wait_for(
        lambda: state("completed") or state("failed"),
        90,
        "the job to complete",
        lambda: str(call(hub, cy, "GET", path)),
    )
    assert done["state"] == "completed" and done["requeues"] == 1, done
    assert done["gpu_seconds"] > first_run, done  # both runs
    out = json.loads((home / done["outputs"]["ipynb"]).read_text())
    assert "went True" in json.dumps(out["cells"][0]["outputs"])
    assert call(hub, cy, "DELETE", path)[0] == 200
    waits.wait_for(lambda: not any(job_objects(api, namespace).values()), 30, "the job's objects to go")
