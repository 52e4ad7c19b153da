"""Job definitions (schedules) through a real JupyterHub on the local cluster: the hub makes a
CronJob, the real CronJob controller (kube-controller-manager) makes its runs' Jobs, KAI's
podgrouper puts them in the team's queue, the process kubelet runs papermill and the executed
notebook lands in the user's home. Pausing stops new runs; deleting the definition or the user
deletes every object; another user gets 404."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core.timestamps import epoch
from localcluster import waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI

from .hubtools import GPU_HUB_CONFIG, user_token
from .jobtools import NOTEBOOK, NOTHING, call, job_objects, teams
from .kaitools import make_queues, podgroup_of, queue

pytestmark = pytest.mark.cluster

DEFINITION_LABEL = "gpusessions.io/job-definition-id"
QUICK = {
    **NOTEBOOK,
    "cells": [
        NOTEBOOK["cells"][0],
        {
            "cell_type": "code",
            "metadata": {},
            "source": (
                "import os\njob = os.environ['GPUSESSIONS_JOB_ID']\n"
                "open(f'ran-{job}.txt', 'w').write(f'{message} {epochs}')\nprint('ran', job)"
            ),
            "outputs": [],
            "execution_count": None,
        },
    ],
}


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    dept, team = teams(namespace)
    extra = f"""
c.GPUSessionSpawner.kai_queue = {{"physics": {team!r}}}
c.JupyterHub.load_groups = {{"physics": {{"users": ["ann", "bo"]}}}}
c.NotebookJobDefinitions.min_interval_minutes = 1
"""
    for _ in make_queues(api, [queue(dept, -1, -1), queue(team, -1, -1, parent=dept)]):
        h = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + extra, tmp_path / "hub")
        yield h
        h.stop()


def everything(api: KubeAPI, namespace: str) -> dict[str, list[str]]:
    """The job objects and the CronJobs of the namespace."""
    cron = api.list("CronJob", namespace, label_selector="gpusessions.io/component=jobdefinition")
    return {**job_objects(api, namespace), "cronjobs": [c["metadata"]["name"] for c in cron["items"]]}


NONE = {**NOTHING, "cronjobs": []}


CONTROL = "control-every-minute"
CONTROL_CRONJOB = {
    "apiVersion": "batch/v1",
    "kind": "CronJob",
    "metadata": {"name": CONTROL},
    "spec": {
        "schedule": "* * * * *",
        "jobTemplate": {
            "spec": {
                "suspend": True,  # a run of it makes a Job and no pod
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "none", "command": ["true"]}],
                    }
                },
            }
        },
    },
}


def control_ran_at(api: KubeAPI, namespace: str) -> float:
    """When the CronJob controller last ran the control schedule (epoch seconds; 0: never)."""
    return epoch((api.get("CronJob", CONTROL, namespace).get("status") or {}).get("lastScheduleTime")) or 0.0


def runs(api: KubeAPI, namespace: str, def_id: str) -> list[dict[str, Any]]:
    return api.list("Job", namespace, label_selector=f"{DEFINITION_LABEL}={def_id}")["items"]  # type: ignore[no-any-return]


def test_a_schedule_runs_in_the_team_queue_pauses_and_goes_with_its_definition(
    hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    _, team = teams(namespace)
    home = Path(cluster.paths.homes) / namespace / "ann"
    home.mkdir(parents=True, exist_ok=True)
    (home / "quick.ipynb").write_text(json.dumps(QUICK))
    ann = user_token(hub, "ann")
    bo = user_token(hub, "bo")
    base = "/users/ann/jobdefinitions"

    # Tampered or bad definitions: a clear 400 and nothing created.
    good = {"name": "every minute", "input": "quick.ipynb", "size": "mig-1g-10gb", "schedule": "* * * * *"}
    for bad, words in [
        ({**good, "schedule": "* * * * * *"}, "five fields"),
        ({**good, "schedule": "61 * * * *"}, "minute 61 is outside 0-59"),
        ({**good, "schedule": "@every 1s"}, "not a macro"),
        ({**good, "timezone": "Nowhere/City"}, "not a known time zone"),
        ({**good, "workers": 2}, "workers must be 1 for a schedule"),
        ({**good, "size": "secret"}, "size 'secret' is not one of yours"),
        ({**good, "input": "../bo/x.ipynb"}, "outside your home"),
        ({**good, "suspend": False}, "unknown field"),
    ]:
        code, body = call(hub, ann, "POST", base, bad)
        assert code == 400 and words in body["message"], (bad, code, body)
    assert everything(api, namespace) == NONE

    code, d = call(hub, ann, "POST", base, {**good, "parameters": {"epochs": 2}, "timezone": "UTC"})
    assert code == 201, d
    def_id = d["id"]
    assert (d["schedule"], d["timezone"], d["active"], d["queue"]) == ("* * * * *", "UTC", True, team)
    cj = api.get("CronJob", f"nbdef-{def_id}", namespace)
    assert cj["metadata"]["labels"]["gpusessions.io/component"] == "jobdefinition"
    tmpl = api.get("ResourceClaimTemplate", f"nbdef-{def_id}", namespace)
    assert tmpl["metadata"]["ownerReferences"][0]["uid"] == cj["metadata"]["uid"]

    # Run now (no wait for the schedule): a Job owned by the CronJob, a job like any other.
    code, now = call(hub, ann, "POST", f"{base}/{def_id}/jobs", {"parameters": {"message": "now"}})
    assert code == 201, now
    assert now["id"].startswith(f"{def_id}-m") and now["job_definition_id"] == def_id
    k = api.get("Job", f"nbdef-{now['id']}", namespace)
    assert k["metadata"]["ownerReferences"][0]["uid"] == cj["metadata"]["uid"]

    # The CronJob controller makes a run at the next minute (< 70 s), in the team's queue.
    def scheduled() -> list[dict[str, Any]]:
        return [
            j
            for j in runs(api, namespace, def_id)
            if "cronjob.kubernetes.io/instantiate" not in (j["metadata"].get("annotations") or {})
        ]

    [run] = waits.wait_for(scheduled, 70, "the schedule's first run", lambda: str(everything(api, namespace)))
    # Pause at once: the next minute makes no new run.
    code, paused = call(hub, ann, "PATCH", f"{base}/{def_id}", {"active": False})
    assert code == 200 and paused["active"] is False and paused["schedule"] == "* * * * *", paused
    paused_at = time.time()
    assert api.get("CronJob", f"nbdef-{def_id}", namespace)["spec"]["suspend"] is True
    # The witness that the CronJob controller took a minute's turn: a CronJob of the test's
    # own, every minute, whose runs start no pod.
    api.create(CONTROL_CRONJOB, namespace)
    run_id = run["metadata"]["name"].removeprefix("nbdef-")

    def pods_of(job: str) -> list[dict[str, Any]]:
        sel = f"batch.kubernetes.io/job-name={job}"
        return api.list("Pod", namespace, label_selector=sel)["items"]  # type: ignore[no-any-return]

    [pod] = waits.wait_for(lambda: pods_of(run["metadata"]["name"]), 30, "the run's pod")
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == team
    assert pod["spec"]["schedulerName"] == "kai-scheduler" and pod["spec"]["priorityClassName"] == "train"
    pg = podgroup_of(api, namespace, pod["metadata"]["name"])
    # KAI's CronJob grouper: one PodGroup per run, owned by the run's Job, in the team's queue,
    # the pod's priority, minMember 1 (it does not read batch-min-member: one worker per run).
    assert pg["spec"]["queue"] == team and pg["spec"]["minMember"] == 1, pg["spec"]
    assert pg["spec"].get("priorityClassName") == "train", pg["spec"]
    assert pg["metadata"]["ownerReferences"][0]["name"] == run["metadata"]["name"], pg["metadata"]

    def finished(job_id: str) -> Any:
        _, j = call(hub, ann, "GET", f"/users/ann/jobs/{job_id}")
        return j if j["state"] in ("completed", "failed") else None

    for job_id, message in [(now["id"], "now"), (run_id, "default")]:
        done = waits.wait_for(lambda job_id=job_id: finished(job_id), 90, f"run {job_id} to finish")
        assert done["state"] == "completed" and done["job_definition_id"] == def_id, done
        assert done["outputs"]["ipynb"] == f"jobs/{job_id}/quick.ipynb"
        assert f"ran {job_id}" in (home / done["outputs"]["ipynb"]).read_text()
        assert (home / f"ran-{job_id}.txt").read_text() == f"{message} 2"
    ended_at = time.time()  # no run in progress from here: Forbid holds nothing back
    _, listed = call(hub, ann, "GET", "/users/ann/jobs")
    assert {j["id"] for j in listed["jobs"]} == {now["id"], run_id}

    # Another user: 404 for everything of the definition, and it is not in their list.
    for method, path, body in [
        ("GET", f"{base}/{def_id}", None),
        ("PATCH", f"{base}/{def_id}", {"active": True}),
        ("DELETE", f"{base}/{def_id}", None),
        ("POST", f"{base}/{def_id}/jobs", {}),
        ("GET", base, None),
        ("POST", base, good),
        ("GET", f"/users/ann/jobs/{run_id}", None),
    ]:
        code, _ = call(hub, bo, method, path, body)
        assert code == 404, (method, path, code)
    assert call(hub, bo, "GET", "/users/bo/jobdefinitions") == (200, {"job_definitions": []})

    # Paused over a minute's turn with no run in progress: no new run.
    next_minute = (max(paused_at, ended_at) // 60 + 1) * 60
    waits.wait_for(
        lambda: control_ran_at(api, namespace) >= next_minute,
        120,
        "the CronJob controller to run the control schedule at the next minute",
        lambda: str(api.get("CronJob", CONTROL, namespace).get("status")),
    )
    api.delete("CronJob", CONTROL, namespace)
    assert [j["metadata"]["name"] for j in scheduled()] == [run["metadata"]["name"]], "a paused schedule ran"
    _, got = call(hub, ann, "GET", f"{base}/{def_id}")
    assert got["active"] is False and got["last_schedule_time"]

    # Delete the definition: its CronJob, runs, pods, claims and template go.
    assert call(hub, ann, "DELETE", f"{base}/{def_id}")[0] == 200
    waits.wait_for(
        lambda: everything(api, namespace) == NONE,
        30,
        "the definition's objects to go",
        lambda: str(everything(api, namespace)),
    )
    assert call(hub, ann, "GET", f"{base}/{def_id}")[0] == 404

    # Deleting the user deletes their definitions (and a run in progress).
    code, d2 = call(hub, ann, "POST", base, {**good, "schedule": "0 3 * * *"})
    assert code == 201, d2
    assert call(hub, ann, "POST", f"{base}/{d2['id']}/jobs", {})[0] == 201
    waits.wait_for(lambda: job_objects(api, namespace)["claims"], 30, "the run's claim")
    code, body = hub.api("DELETE", "/users/ann")
    assert code == 204, body
    waits.wait_for(
        lambda: everything(api, namespace) == NONE,
        30,
        "the deleted user's definitions to go",
        lambda: str(everything(api, namespace)),
    )
