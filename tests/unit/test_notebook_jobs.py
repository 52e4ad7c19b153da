"""jupyter-scheduler's GPU backend (notebook/jobs.py): what it sends the hub and how it shows
the hub's answer, without a hub."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from jupyter_scheduler.exceptions import SchedulerError
from jupyter_scheduler.models import CreateJob, Status

from gpusessions.notebook import jobs as NJ


class Envs(NJ.GPUSizesEnvironmentManager):
    by_label = {"Small GPU slice (MIG 1g.10gb)": "mig-1g-10gb"}


def scheduler(tmp_path: Path) -> NJ.GPUJobsScheduler:
    return NJ.GPUJobsScheduler(root_dir=str(tmp_path), environments_manager=Envs(), db_url="sqlite://")


def test_a_job_is_sent_to_the_hub_with_typed_parameters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "t.ipynb").write_text("{}")
    sent: list[Any] = []

    async def hub_call(method: str, action: str, body: Any = None, relay: Any = None) -> Any:
        sent.append((method, action, body))
        return {"id": "abc123def456"}

    monkeypatch.setattr(NJ, "hub_call", hub_call)
    model = CreateJob(
        input_uri="work/t.ipynb",
        runtime_environment_name="Small GPU slice (MIG 1g.10gb)",
        name="t",
        parameters={"epochs": "3", "lr": "0.5", "tag": "x y", "flag": "true"},
    )
    job_id = asyncio.run(scheduler(tmp_path).create_job(model))
    assert job_id == "nbjob-abc123def456"  # jupyter-scheduler's URLs want a dash
    [(method, action, body)] = sent
    assert (method, action) == ("POST", "jobs")
    assert body["input"] == "work/t.ipynb" and body["size"] == "mig-1g-10gb"
    assert body["parameters"] == {"epochs": 3, "lr": 0.5, "tag": "x y", "flag": True}
    with pytest.raises(SchedulerError, match="does not exist"):
        asyncio.run(scheduler(tmp_path).create_job(model.copy(update={"input_uri": "nope.ipynb"})))
    with pytest.raises(SchedulerError, match="Schedules are not available"):
        scheduler(tmp_path).create_job_definition(None)  # type: ignore[arg-type]


def test_the_hubs_states_and_messages_show_in_the_panel(tmp_path: Path) -> None:
    (tmp_path / "jobs" / "abc123def456").mkdir(parents=True)
    (tmp_path / "jobs" / "abc123def456" / "t.ipynb").write_text("{}")
    hub_job = {
        "id": "abc123def456",
        "name": "t",
        "input": "t.ipynb",
        "size": "mig-1g-10gb",
        "size_text": "MIG 1g.10gb",
        "parameters": {"epochs": 3},
        "outputs": {"ipynb": "jobs/abc123def456/t.ipynb"},
        "queue": "team-a",
        "priority": "train",
        "created": "2026-01-01T00:00:00Z",
        "state": "queued",
        "message": "Preempted 1 time(s) (...), requeued. Waiting in the queue: OverLimit: ...",
        "requeues": 1,
        "gpu_seconds": 120,
    }
    d = scheduler(tmp_path).describe(hub_job)
    assert d.status == Status.QUEUED and d.job_id == "nbjob-abc123def456"
    assert d.status_message.startswith("Preempted 1 time(s)")
    assert (
        "Queue team-a, priority train, MIG 1g.10gb." in d.status_message
        and "GPU time 2.0 min" in d.status_message
    )
    assert d.parameters == {"epochs": "3"}
    assert d.job_files[0].file_path == "jobs/abc123def456/t.ipynb" and d.downloaded
    for state, status in [
        ("running", Status.IN_PROGRESS),
        ("completed", Status.COMPLETED),
        ("failed", Status.FAILED),
    ]:
        assert scheduler(tmp_path).describe({**hub_job, "state": state}).status == status


def test_outside_jupyterhub_the_backend_says_so() -> None:
    relay = NJ.HubRelay({})
    with pytest.raises(SchedulerError, match="need JupyterHub"):
        asyncio.run(NJ.hub_call("GET", "jobs", relay=relay))
