"""A notebook job's log through the hub (`GET .../jobs/<id>/log`, what the Notebook Jobs panel
can show), read from the job pod on the local cluster as on a real one: the apiserver asks the
node's kubelet (tests/integration/test_pod_logs.py), which serves papermill's output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .hubtools import user_token
from .jobtools import NOTEBOOK, NOTHING, call, job_objects, jobs_hub

pytestmark = pytest.mark.cluster


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    yield from jobs_hub(api, namespace, tmp_path / "hub", culler=False)


def test_a_jobs_log_is_papermills_output(hub: Hub, api: KubeAPI, namespace: str, cluster: Any) -> None:
    home = Path(cluster.paths.homes) / namespace / "ann"
    home.mkdir(parents=True, exist_ok=True)
    (home / "train.ipynb").write_text(json.dumps(NOTEBOOK))
    ann = user_token(hub, "ann")
    code, job = call(
        hub, ann, "POST", "/users/ann/jobs", {"name": "t", "input": "train.ipynb", "size": "cpu"}
    )
    assert code == 201, job
    path = f"/users/ann/jobs/{job['id']}"

    # While it runs (the notebook sleeps 6 s): papermill has said what it runs.
    def running_log() -> Any:
        _, j = call(hub, ann, "GET", path)
        _, lg = call(hub, ann, "GET", path + "/log")
        return lg if j["state"] == "running" and "Input Notebook:" in lg["log"] else None

    live = waits.wait_for(running_log, 60, "papermill's first lines while the job runs")
    assert live["pod"].startswith(f"nbjob-{job['id']}-") and live["message"] == "", live

    def done() -> Any:
        _, j = call(hub, ann, "GET", path)
        return j if j["state"] in ("completed", "failed") else None

    assert waits.wait_for(done, 90, "the job to finish")["state"] == "completed"
    code, lg = call(hub, ann, "GET", path + "/log")
    assert code == 200, lg
    text = lg["log"]
    # papermill's own lines (its logging and progress bar), not the runtime's.
    assert "Input Notebook:  train.ipynb" in text, text
    assert f"Output Notebook: jobs/{job['id']}/train.ipynb" in text, text
    assert "Executing" in text and "100%" in text, text
    assert "==== " not in text, text
    # The same as `kubectl logs` of the job's pod.
    assert api.pod_log(lg["pod"], namespace, container="notebook") == text

    # Another user learns nothing; once the job is deleted there is no pod to read.
    bo = user_token(hub, "bo")
    assert call(hub, bo, "GET", path + "/log")[0] == 404
    assert call(hub, ann, "DELETE", path)[0] == 200
    waits.wait_for(lambda: job_objects(api, namespace) == NOTHING, 30, "the job's objects to go")
    assert call(hub, ann, "GET", path + "/log")[0] == 404
