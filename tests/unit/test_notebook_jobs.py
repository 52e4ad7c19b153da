"""jupyter-scheduler's GPU backend (notebook/jobs.py): what it sends the hub and how it shows
the hub's answer, without a hub."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from jupyter_scheduler.exceptions import SchedulerError
from jupyter_scheduler.models import (
    CreateJob,
    CreateJobDefinition,
    CreateJobFromDefinition,
    ListJobDefinitionsQuery,
    ListJobsQuery,
    Status,
    UpdateJobDefinition,
)

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


def test_a_schedule_is_a_hub_job_definition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "t.ipynb").write_text("{}")
    sent: list[Any] = []
    definition = {
        "id": "abc123def456",
        "name": "nightly",
        "input": "t.ipynb",
        "size": "mig-1g-10gb",
        "parameters": {"epochs": 3},
        "output_formats": ["ipynb"],
        "schedule": "0 2 * * *",
        "timezone": "Europe/Paris",
        "active": False,
        "created": "2026-01-01T00:00:00Z",
    }
    run = {
        "id": "abc123def456-29000000",
        "job_definition_id": "abc123def456",
        "name": "nightly",
        "input": "t.ipynb",
        "size": "mig-1g-10gb",
        "created": "2026-01-02T00:00:00Z",
        "state": "completed",
    }

    async def hub_call(method: str, action: str, body: Any = None, relay: Any = None) -> Any:
        sent.append((method, action, body))
        if action == "jobdefinitions" and method == "GET":
            return {"job_definitions": [definition]}
        if action == "jobs":
            return {"jobs": [run, {**run, "id": "0123456789ab", "job_definition_id": None}]}
        if action.endswith("/jobs"):
            return {"id": "abc123def456-m1234abcd"}
        return definition

    monkeypatch.setattr(NJ, "hub_call", hub_call)
    s = scheduler(tmp_path)
    model = CreateJobDefinition(
        input_uri="t.ipynb",
        runtime_environment_name="Small GPU slice (MIG 1g.10gb)",
        name="nightly",
        parameters={"epochs": "3"},
        schedule="0 2 * * *",
        timezone="Europe/Paris",
    )
    assert asyncio.run(s.create_job_definition(model)) == "nbdef-abc123def456"
    method, action, body = sent[-1]
    assert (method, action) == ("POST", "jobdefinitions")
    assert body == {
        "name": "nightly",
        "input": "t.ipynb",
        "size": "mig-1g-10gb",
        "parameters": {"epochs": 3},
        "output_formats": ["ipynb"],
        "schedule": "0 2 * * *",
        "timezone": "Europe/Paris",
    }
    with pytest.raises(SchedulerError, match="needs a schedule"):
        asyncio.run(s.create_job_definition(model.copy(update={"schedule": None})))

    d = asyncio.run(s.get_job_definition("nbdef-abc123def456"))
    assert sent[-1][:2] == ("GET", "jobdefinitions/abc123def456")
    assert (d.job_definition_id, d.schedule, d.timezone, d.active) == (
        "nbdef-abc123def456",
        "0 2 * * *",
        "Europe/Paris",
        False,
    )
    assert d.parameters == {"epochs": "3"} and d.runtime_environment_name == "mig-1g-10gb"
    listed = asyncio.run(s.list_job_definitions(ListJobDefinitionsQuery(name="night")))
    assert listed.total_count == 1
    assert asyncio.run(s.list_job_definitions(ListJobDefinitionsQuery(name="other"))).total_count == 0

    # Pause and resume are the definition's `active`; an edit sends only what was changed.
    asyncio.run(s.update_job_definition("nbdef-abc123def456", UpdateJobDefinition(active=False)))
    assert sent[-1] == ("PATCH", "jobdefinitions/abc123def456", {"active": False})
    asyncio.run(s.resume_jobs("nbdef-abc123def456"))
    assert sent[-1] == ("PATCH", "jobdefinitions/abc123def456", {"active": True})
    asyncio.run(s.pause_jobs("nbdef-abc123def456"))
    assert sent[-1] == ("PATCH", "jobdefinitions/abc123def456", {"active": False})
    asyncio.run(
        s.update_job_definition(
            "nbdef-abc123def456",
            UpdateJobDefinition(schedule="0 3 * * *", timezone="UTC", parameters={"e": "1"}),
        )
    )
    assert sent[-1][2] == {"schedule": "0 3 * * *", "timezone": "UTC", "parameters": {"e": 1}}

    # Run now, with a parameter changed; the runs show with their definition.
    job_id = asyncio.run(
        s.create_job_from_definition(
            "nbdef-abc123def456", CreateJobFromDefinition(parameters={"epochs": "5"})
        )
    )
    assert job_id == "nbdef-abc123def456-m1234abcd" and NJ.hub_id(job_id) == "abc123def456-m1234abcd"
    assert sent[-1] == ("POST", "jobdefinitions/abc123def456/jobs", {"parameters": {"epochs": 5}})
    jobs = asyncio.run(s.list_jobs(ListJobsQuery(job_definition_id="nbdef-abc123def456")))
    assert [j.job_id for j in jobs.jobs] == ["nbdef-abc123def456-29000000"]
    assert jobs.jobs[0].job_definition_id == "nbdef-abc123def456"
    asyncio.run(s.delete_job_definition("nbdef-abc123def456"))
    assert sent[-1] == ("DELETE", "jobdefinitions/abc123def456", None)


def test_the_jobs_log_is_one_more_output_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hub_job = {
        "id": "abc123def456",
        "name": "t",
        "input": "work/t.ipynb",
        "size": "cpu",
        "output_dir": "jobs/abc123def456",
        "outputs": {"ipynb": "jobs/abc123def456/t.ipynb"},
        "created": "2026-01-01T00:00:00Z",
        "state": "queued",
    }
    logs = {"text": "Input Notebook:  work/t.ipynb\n"}
    sent: list[Any] = []

    async def hub_call(method: str, action: str, body: Any = None, relay: Any = None) -> Any:
        sent.append(action)
        if action == "jobs":
            return {"jobs": [hub_job]}
        if action.endswith("/log"):
            return {"id": hub_job["id"], "pod": "p", "log": logs["text"], "message": ""}
        return hub_job

    monkeypatch.setattr(NJ, "hub_call", hub_call)
    s = scheduler(tmp_path)
    log = tmp_path / "jobs" / "abc123def456" / "t.log"

    # Queued, never started: no log asked for, the file is listed without a path.
    d = asyncio.run(s.get_job("nbjob-abc123def456"))
    assert sent == ["jobs/abc123def456"] and not log.exists()
    assert [(f.display_name, f.file_format, f.file_path) for f in d.job_files] == [
        ("Notebook", "ipynb", None),
        ("Log", "log", None),
        ("Input", "input", "work/t.ipynb"),
    ]
    # (a queued job's missing log does not make it "not downloaded": the notebook does)
    (tmp_path / "jobs" / "abc123def456").mkdir(parents=True)
    (tmp_path / "jobs" / "abc123def456" / "t.ipynb").write_text("{}")
    assert asyncio.run(s.get_job("nbjob-abc123def456")).downloaded

    # Running: opening the job writes what the hub has so far, next to the notebook.
    hub_job["state"] = "running"
    d = asyncio.run(s.get_job("nbjob-abc123def456"))
    assert sent[-1] == "jobs/abc123def456/log"
    assert log.read_text() == "Input Notebook:  work/t.ipynb\n"
    assert next(f for f in d.job_files if f.file_format == "log").file_path == "jobs/abc123def456/t.log"
    # Listing a running job asks the hub once (the jobs), not for each log.
    n = len(sent)
    asyncio.run(s.list_jobs(ListJobsQuery()))
    assert sent[n:] == ["jobs"]

    # Finished after the log was written: the list refreshes it once, not at every poll.
    hub_job.update(state="completed", completion_time="2099-01-01T00:00:00Z")
    logs["text"] += "Output Notebook: jobs/abc123def456/t.ipynb\n"
    listed = asyncio.run(s.list_jobs(ListJobsQuery()))
    assert sent[n + 1 :] == ["jobs", "jobs/abc123def456/log"]
    assert "Output Notebook:" in log.read_text()
    assert listed.jobs[0].job_files[1].file_path == "jobs/abc123def456/t.log"
    asyncio.run(s.list_jobs(ListJobsQuery()))
    assert sent[-1] == "jobs"

    # The pod is gone: the hub has no log any more, the copy stays; "download" refreshes it.
    logs["text"] = ""
    asyncio.run(NJ.GPUJobFilesManager(scheduler=s).copy_from_staging("nbjob-abc123def456"))
    assert sent[-1] == "jobs/abc123def456/log" and "Output Notebook:" in log.read_text()


def test_where_the_log_goes_and_when_the_list_rewrites_it() -> None:
    job = {"id": "x", "input": "a/b/t.ipynb", "output_dir": "jobs/x", "state": "completed"}
    assert NJ.log_path(job) == "jobs/x/t.log"
    assert NJ.log_path({**job, "output_dir": None, "outputs": {"ipynb": "jobs/x/t.worker-0.ipynb"}}) == (
        "jobs/x/t.log"
    )
    assert NJ.log_path({**job, "output_dir": "../elsewhere"}) is None
    assert NJ.log_path({**job, "output_dir": "/etc"}) is None
    assert NJ.log_path({**job, "output_dir": ""}) is None
    end = {**job, "completion_time": "2026-01-01T00:00:10Z"}
    ended_ms = 1767225610000
    assert NJ.log_is_stale(end, None) and NJ.log_is_stale(end, ended_ms - 1)
    assert not NJ.log_is_stale(end, ended_ms + 1)
    assert NJ.log_is_stale({**job, "state": "failed"}, None)
    assert not NJ.log_is_stale({**job, "state": "failed"}, 1.0)  # no end time: written once is enough
    assert not NJ.log_is_stale({**job, "state": "running"}, None)
