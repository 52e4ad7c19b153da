"""Notebook jobs through a real JupyterHub on the local cluster, scheduled by the real KAI
Scheduler: the notebook server submits with its own token, the hub checks and creates the Job
and its ResourceClaimTemplate, the process kubelet runs papermill, the Job controller completes
the Job, and the executed notebook lands in the user's home."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .cullertools import culler_view, metrics
from .hubtools import process_env, spawn, stop, user_token
from .jobtools import NOTEBOOK, NOTHING, call, job_objects, jobs_hub, teams

pytestmark = pytest.mark.cluster


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    yield from jobs_hub(api, namespace, tmp_path / "hub", culler=False)


@pytest.fixture
def culled_hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    yield from jobs_hub(api, namespace, tmp_path / "hub", culler=True)


def test_a_job_runs_in_the_team_queue_outlives_the_server_and_stays_private(
    culled_hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    hub = culled_hub
    _, team = teams(namespace)
    home = Path(cluster.paths.homes) / namespace / "ann"
    (home / "work").mkdir(parents=True, exist_ok=True)
    (home / "work" / "train.ipynb").write_text(json.dumps(NOTEBOOK))
    spawn(hub, "ann", {"profile": "cpu"})
    token = process_env(api, namespace, "jupyter-ann")["JUPYTERHUB_API_TOKEN"]  # the server's own

    # The sizes a job may use: the user's profiles (not an admin's), with availability.
    code, sizes = call(hub, token, "GET", "/users/ann/jobs/sizes")
    assert code == 200, sizes
    slugs = {s["slug"]: s for s in sizes["sizes"]}
    assert "mig-1g-10gb" in slugs and "cpu" in slugs and "secret" not in slugs
    assert slugs["mig-1g-10gb"]["gpu"] and slugs["mig-1g-10gb"]["availability"]

    # Tampered requests: a clear 400 and nothing created.
    good = {"name": "train", "input": "work/train.ipynb", "size": "mig-1g-10gb"}
    for bad, words in [
        ({**good, "input": "../bo/x.ipynb"}, "outside your home"),
        ({**good, "input": "/etc/x.ipynb"}, "relative to your home"),
        ({**good, "size": "secret"}, "size 'secret' is not one of yours"),
        ({**good, "namespace": "kube-system"}, "unknown field"),
        ({**good, "parameters": {"os.system('x')": 1}}, "not a Python identifier"),
    ]:
        code, body = call(hub, token, "POST", "/users/ann/jobs", bad)
        assert code == 400 and words in body["message"], (bad, code, body)
    assert job_objects(api, namespace) == NOTHING

    # Submit with the server's token: a Job in the team's queue, `train`, scheduled by KAI.
    code, job = call(hub, token, "POST", "/users/ann/jobs", {**good, "parameters": {"epochs": 3}})
    assert code == 201, job
    name = f"nbjob-{job['id']}"
    k = api.get("Job", name, namespace)
    pod_spec = k["spec"]["template"]["spec"]
    assert k["metadata"]["labels"]["kai.scheduler/queue"] == team
    assert pod_spec["schedulerName"] == "kai-scheduler" and pod_spec["priorityClassName"] == "train"
    assert k["spec"]["backoffLimit"] == 2
    tmpl = api.get("ResourceClaimTemplate", name, namespace)
    assert tmpl["metadata"]["ownerReferences"][0]["uid"] == k["metadata"]["uid"]

    # It runs; the user's server is stopped meanwhile; the job goes on and completes.
    def running() -> Any:
        _, j = call(hub, token, "GET", f"/users/ann/jobs/{job['id']}")
        return j if j["state"] == "running" else None

    waits.wait_for(running, 60, "the job to run", lambda: str(job_objects(api, namespace)))

    # The culler lists the job (admin JSON) and never takes its GPU claim for a session.
    def listed() -> dict[str, Any] | None:
        v = culler_view(hub)
        return v if [r for r in v["jobs"] if r["id"] == job["id"]] else None

    view = waits.wait_for(listed, 30, "the culler to list the job")
    assert view["sessions"] == [], view["sessions"]
    [row] = view["jobs"]
    assert (row["user"], row["size"], row["queue"], row["priority"]) == ("ann", "mig-1g-10gb", team, "train")
    pods = api.list("Pod", namespace, label_selector=f"gpusessions.io/job-id={job['id']}")["items"]
    assert pods[0]["metadata"]["labels"]["kai.scheduler/queue"] == team
    assert pods[0]["metadata"]["annotations"].get("pod-group-name"), "KAI's podgrouper took it"
    claim = api.list("ResourceClaim", namespace, label_selector=f"gpusessions.io/job-id={job['id']}")
    assert len(claim["items"]) == 1 and claim["items"][0]["status"].get("allocation")
    stop(hub, "ann")
    ann = user_token(hub, "ann")

    def finished() -> Any:
        _, j = call(hub, ann, "GET", f"/users/ann/jobs/{job['id']}")
        return j if j["state"] in ("completed", "failed") else None

    done = waits.wait_for(
        finished, 90, "the job to finish", lambda: str(call(hub, ann, "GET", "/users/ann/jobs"))
    )
    assert done["state"] == "completed", done
    out = json.loads((home / done["outputs"]["ipynb"]).read_text())
    assert any("epochs = 3" in "".join(c["source"]) for c in out["cells"]), "papermill injected the parameter"
    assert "trained 3" in json.dumps(out["cells"][-1]["outputs"])
    assert (home / "work" / "done.txt").read_text() == f"default 3 {job['id']}"
    assert done["gpu_seconds"] > 0
    text = metrics(hub)
    assert f'gpusessions_jobs{{queue="{team}",size="mig-1g-10gb",state="completed"}} 1.0' in text, text

    # Another user: 404 for reading, the log and deleting; absent from their list.
    bo = user_token(hub, "bo")
    for method, path in [
        ("GET", f"/users/ann/jobs/{job['id']}"),
        ("GET", f"/users/ann/jobs/{job['id']}/log"),
        ("DELETE", f"/users/ann/jobs/{job['id']}"),
        ("GET", "/users/ann/jobs"),
        ("POST", "/users/ann/jobs"),
    ]:
        code, _ = call(hub, bo, method, path, good if method == "POST" else None)
        assert code == 404, (method, path, code)
    assert call(hub, bo, "GET", "/users/bo/jobs") == (200, {"jobs": []})
    assert api.get_or_none("Job", name, namespace) is not None

    # The owner lists and deletes it: every object goes.
    code, mine = call(hub, ann, "GET", "/users/ann/jobs")
    assert [j["id"] for j in mine["jobs"]] == [job["id"]] and mine["jobs"][0]["queue"] == team
    assert call(hub, ann, "DELETE", f"/users/ann/jobs/{job['id']}")[0] == 200
    waits.wait_for(
        lambda: job_objects(api, namespace) == NOTHING,
        30,
        "the job's objects to go",
        lambda: str(job_objects(api, namespace)),
    )

    # Deleting the user deletes their jobs, queued or running.
    code, again = call(hub, ann, "POST", "/users/ann/jobs", good)
    assert code == 201, again
    waits.wait_for(lambda: job_objects(api, namespace)["claims"], 30, "the job's claim")
    code, body = hub.api("DELETE", "/users/ann")
    assert code == 204, body
    waits.wait_for(
        lambda: job_objects(api, namespace) == NOTHING,
        30,
        "the deleted user's job objects to go",
        lambda: str(job_objects(api, namespace)),
    )


def lab(hub: Hub, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """jupyter-scheduler's API of ann's notebook server, through the hub's proxy."""
    req = urllib.request.Request(
        hub.url + "/user/ann/scheduler" + path,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Authorization": f"token {hub.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def test_jupyterlab_creates_a_job_through_jupyter_scheduler(
    hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    _, team = teams(namespace)
    home = Path(cluster.paths.homes) / namespace / "ann"
    home.mkdir(parents=True, exist_ok=True)
    (home / "lab.ipynb").write_text(json.dumps(NOTEBOOK))
    spawn(hub, "ann", {"profile": "cpu"})

    # "Create Notebook Job" offers the hub's sizes (and CPU only) with what is free now.
    code, envs = lab(hub, "GET", "/runtime_environments")
    assert code == 200, envs
    by_name = {e["name"]: e for e in envs}
    assert "mig-1g-10gb" in by_name and "cpu" in by_name, envs
    assert "free now" in by_name["mig-1g-10gb"]["description"], by_name["mig-1g-10gb"]

    # A refusal reads as the hub words it.
    code, body = lab(
        hub, "POST", "/jobs", {"input_uri": "lab.ipynb", "runtime_environment_name": "tpu9", "name": "x"}
    )
    assert code == 500 and "size 'tpu9' is not one of yours" in body, body

    # "Run on a schedule": a job definition on the hub (a CronJob), paused, listed, deleted.
    schedule = {"input_uri": "lab.ipynb", "runtime_environment_name": "cpu", "name": "hourly"}
    code, body = lab(hub, "POST", "/job_definitions", {**schedule, "schedule": "0 * * *"})
    assert code == 500 and "five fields" in body, body
    code, made = lab(
        hub, "POST", "/job_definitions", {**schedule, "schedule": "0 * * * *", "timezone": "UTC"}
    )
    assert code == 200, made
    def_name = made["job_definition_id"]
    assert api.get("CronJob", def_name, namespace)["metadata"]["labels"]["kai.scheduler/queue"] == team
    code, got = lab(hub, "GET", f"/job_definitions/{def_name}")
    assert code == 200 and got["active"] and (got["schedule"], got["timezone"]) == ("0 * * * *", "UTC"), got
    assert lab(hub, "PATCH", f"/job_definitions/{def_name}", {"active": False})[0] == 204
    assert api.get("CronJob", def_name, namespace)["spec"]["suspend"] is True
    _, defs = lab(hub, "GET", "/job_definitions")
    assert [x["job_definition_id"] for x in defs["job_definitions"]] == [def_name], defs
    assert lab(hub, "DELETE", f"/job_definitions/{def_name}")[0] == 204
    assert api.get_or_none("CronJob", def_name, namespace) is None

    code, created = lab(
        hub,
        "POST",
        "/jobs",
        {
            "input_uri": "lab.ipynb",
            "runtime_environment_name": "mig-1g-10gb",
            "name": "from lab",
            "output_formats": ["ipynb"],
            "parameters": {"epochs": "2", "message": "lab"},
        },
    )
    assert code == 200, created
    job_id = created["job_id"].removeprefix("nbjob-")
    assert api.get("Job", created["job_id"], namespace)["metadata"]["labels"]["kai.scheduler/queue"] == team

    seen: set[str] = set()

    def finished() -> Any:
        _, j = lab(hub, "GET", f"/jobs/nbjob-{job_id}")
        seen.add(j["status"])
        return j if j["status"] in ("COMPLETED", "FAILED") else None

    done = waits.wait_for(finished, 90, "the job to finish in the Notebook Jobs panel")
    assert done["status"] == "COMPLETED", done
    assert seen & {"QUEUED", "IN_PROGRESS"}, seen
    assert f"Queue {team}, priority train" in done["status_message"], done
    nb = next(f for f in done["job_files"] if f["file_format"] == "ipynb")
    assert nb["file_path"] == f"jobs/{job_id}/lab.ipynb" and done["downloaded"]
    # Its log (papermill's output, from the job's pod through the hub) is one more output file.
    log = next(f for f in done["job_files"] if f["file_format"] == "log")
    assert (log["display_name"], log["file_path"]) == ("Log", f"jobs/{job_id}/lab.log"), done
    text = (home / log["file_path"]).read_text()
    assert "Input Notebook:  lab.ipynb" in text and f"Output Notebook: jobs/{job_id}/lab.ipynb" in text, text
    # "Download output files" fetches it again (the outputs are in the home already).
    (home / log["file_path"]).unlink()
    assert lab(hub, "GET", f"/jobs/nbjob-{job_id}/download_files")[0] == 204
    assert "Output Notebook:" in (home / log["file_path"]).read_text()
    assert (home / "done.txt").read_text() == f"lab 2 {job_id}"  # typed parameters: 2, not "2"
    _, listed = lab(hub, "GET", "/jobs")
    assert [j["job_id"] for j in listed["jobs"]] == [f"nbjob-{job_id}"]
    assert lab(hub, "DELETE", f"/jobs/nbjob-{job_id}")[0] == 204
    waits.wait_for(lambda: job_objects(api, namespace) == NOTHING, 30, "the job's objects to go")


QUICK = {
    **NOTEBOOK,
    "cells": [
        {
            "cell_type": "code",
            "metadata": {},
            "source": "import os\nprint('worker', os.environ['JOB_COMPLETION_INDEX'])",
            "outputs": [],
            "execution_count": None,
        }
    ],
}


def test_two_workers_start_together_or_not_at_all(
    hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    home = Path(cluster.paths.homes) / namespace / "bo"
    home.mkdir(parents=True, exist_ok=True)
    (home / "quick.ipynb").write_text(json.dumps(QUICK))
    bo = user_token(hub, "bo")

    # Two whole GPUs where the cluster has one: KAI starts neither worker (one gang).
    code, big = call(
        hub,
        bo,
        "POST",
        "/users/bo/jobs",
        {"name": "big", "input": "quick.ipynb", "size": "gpu", "workers": 2},
    )
    assert code == 201, big
    k = api.get("Job", f"nbjob-{big['id']}", namespace)
    assert k["metadata"]["annotations"]["kai.scheduler/batch-min-member"] == "2"
    sel = f"gpusessions.io/job-id={big['id']}"

    def waiting_pods() -> list[dict] | None:
        pods = api.list("Pod", namespace, label_selector=sel)["items"]
        said = [
            c.get("message", "")
            for p in pods
            for c in p.get("status", {}).get("conditions") or []
            if c["type"] == "PodScheduled" and c["status"] == "False"
        ]
        return pods if len(pods) == 2 and len(said) == 2 else None

    pods = waits.wait_for(waiting_pods, 30, "both workers to be refused as one gang")
    assert not any(p["spec"].get("nodeName") for p in pods), "a worker was placed alone"
    _, j = call(hub, bo, "GET", f"/users/bo/jobs/{big['id']}")
    assert j["state"] == "queued" and j["message"].startswith("Waiting in the queue: "), j
    assert call(hub, bo, "DELETE", f"/users/bo/jobs/{big['id']}")[0] == 200

    # Two 1g.10gb slices: both run and each writes its notebook.
    code, two = call(
        hub,
        bo,
        "POST",
        "/users/bo/jobs",
        {"name": "two", "input": "quick.ipynb", "size": "mig-1g-10gb", "workers": 2},
    )
    assert code == 201, two

    def finished() -> Any:
        _, j = call(hub, bo, "GET", f"/users/bo/jobs/{two['id']}")
        return j if j["state"] in ("completed", "failed") else None

    done = waits.wait_for(finished, 90, "both workers to finish")
    assert done["state"] == "completed", done
    out = home / "jobs" / two["id"]
    assert done["outputs"]["ipynb"] == f"jobs/{two['id']}/quick.worker-0.ipynb"
    assert "worker 0" in (out / "quick.worker-0.ipynb").read_text()
    assert "worker 1" in (out / "quick.worker-1.ipynb").read_text()
    assert call(hub, bo, "DELETE", f"/users/bo/jobs/{two['id']}")[0] == 200
    waits.wait_for(lambda: job_objects(api, namespace) == NOTHING, 30, "the jobs' objects to go")
