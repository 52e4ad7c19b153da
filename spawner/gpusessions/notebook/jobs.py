"""jupyter-scheduler's backend for gpusessions: "Create Notebook Job" runs the notebook as a
Kubernetes Job in the user's team queue, through the hub (never with the user's credentials).

Enabled by `jupyter-config/gpusessions.json` (installed with the package):

    SchedulerApp.scheduler_class = gpusessions.notebook.jobs.GPUJobsScheduler
    SchedulerApp.environment_manager_class = gpusessions.notebook.jobs.GPUSizesEnvironmentManager

- The environments offered are the GPU sizes of the user's hub profiles and "CPU only", with
  what is free now (`GET /hub/api/gpusessions/users/<user>/jobs/sizes`).
- A job is submitted to the hub (`POST .../jobs`) with this server's `$JUPYTERHUB_API_TOKEN`;
  the hub checks it and creates the Job. The notebook runs with papermill in its own pod and
  writes the executed notebook to `jobs/<id>/` in the home, which the Notebook Jobs panel
  links to (nothing to download). The job outlives this server.
- The job's log (papermill's output, `GET .../jobs/<id>/log`) is one more output file of the
  job, `jobs/<id>/<notebook>.log`, written by this server: refreshed each time the panel opens
  the job (or its files are downloaded), and once after the job ends when the list shows it.
  The hub reads at most `c.NotebookJobs.log_max_bytes` of it, the end: a cut log's file
  begins with a line that says so.
- States: queued (with the scheduler's reason), in progress, completed, failed; a preempted
  job shows "Preempted N time(s) ..., requeued" while it waits again.
- Schedules ("Run on a schedule": job definitions) are the hub's job definitions
  (`.../jobdefinitions`, a CronJob each); pausing or resuming one is its `active` field, "Run
  job" on a definition runs it now; its runs show in the panel with their definition's id.
- Not offered: stopping a job without deleting it, HTML output.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
from typing import Any

from jupyter_scheduler.environments import EnvironmentManager
from jupyter_scheduler.exceptions import SchedulerError
from jupyter_scheduler.job_files_manager import JobFilesManager
from jupyter_scheduler.models import (
    CountJobsQuery,
    CreateJob,
    CreateJobDefinition,
    CreateJobFromDefinition,
    DescribeJob,
    DescribeJobDefinition,
    JobFile,
    ListJobDefinitionsQuery,
    ListJobDefinitionsResponse,
    ListJobsQuery,
    ListJobsResponse,
    RuntimeEnvironment,
    Status,
    UpdateJob,
    UpdateJobDefinition,
)
from jupyter_scheduler.scheduler import BaseScheduler
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Any as AnyTrait
from traitlets import Unicode

from gpusessions.core.timestamps import epoch
from gpusessions.notebook.hubrelay import HubRelay

STATES = {
    "queued": Status.QUEUED,
    "running": Status.IN_PROGRESS,
    "completed": Status.COMPLETED,
    "failed": Status.FAILED,
    "stopped": Status.STOPPED,
}
FINISHED = ("completed", "failed")
LOG_FORMAT = "log"
NEEDS_SCHEDULE = "A job definition needs a schedule (a cron expression such as '0 2 * * *')."


async def hub_call(method: str, action: str, body: Any = None, relay: HubRelay | None = None) -> Any:
    """Call the hub's job endpoint; `SchedulerError` with the hub's own words on refusal."""
    relay = relay or HubRelay()
    if not relay.enabled:
        raise SchedulerError("GPU jobs need JupyterHub with gpusessions (this server is not started by it).")
    req = HTTPRequest(
        relay.url(action),
        method=method,
        headers={"Authorization": f"token {relay.token}", "Content-Type": "application/json"},
        body=json.dumps(body) if body is not None else None,
        request_timeout=20,
    )
    try:
        resp = await AsyncHTTPClient().fetch(req)
    except HTTPClientError as e:
        raw = e.response.body if e.response is not None else b""
        try:
            message = json.loads(raw or b"{}").get("message") or str(e)
        except (ValueError, AttributeError):
            message = raw.decode(errors="replace")[:300] or str(e)
        raise SchedulerError(str(message)) from None
    except OSError as e:
        raise SchedulerError(f"The hub could not be reached: {e}") from None
    return json.loads(resp.body or b"null")


class GPUSizesEnvironmentManager(EnvironmentManager):
    """The sizes a job may run on (the user's hub profiles and CPU only), with availability."""

    def output_formats_mapping(self) -> dict[str, str]:
        return {"ipynb": "Notebook"}

    def manage_environments_command(self) -> str:
        return ""

    # jupyter-scheduler's form lists environments by name but submits their label: label -> name.
    by_label: dict[str, str]

    async def list_environments(self) -> list[RuntimeEnvironment]:
        sizes = (await hub_call("GET", "jobs/sizes"))["sizes"]
        out = []
        for s in sizes:
            queue = (s.get("queue") or {}).get("text") or ""
            out.append(
                RuntimeEnvironment(
                    name=s["slug"],
                    label=f"{s['display_name']} ({s['describe']})" if s["gpu"] else s["display_name"],
                    description=" ".join(x for x in (s.get("availability") or "", queue) if x),
                    file_extensions=["ipynb"],
                    output_formats=["ipynb"],
                    metadata={"gpu": str(bool(s["gpu"])).lower()},
                    compute_types=None,
                    default_compute_type=None,
                    utc_only=None,
                )
            )
        self.by_label = {e.label: e.name for e in out}
        return out

    def size_of(self, submitted: str) -> str:
        """The size slug of what the form submitted (a label or a name)."""
        return getattr(self, "by_label", {}).get(submitted, submitted)


def _param(value: str) -> Any:
    """A parameter from the form (text) with its type: 3 -> int, 0.1 -> float, true -> bool."""
    try:
        v = json.loads(value)
    except (TypeError, ValueError):
        return value
    return v if v is None or isinstance(v, (int, float, bool)) else value


def lab_id(job_id: str) -> str:
    """The job's id in jupyter-scheduler (its URLs want a dash): the Job's name, nbjob-<id> for a
    one-off job, nbdef-<definition>-<run> for a definition's run (whose hub id has a dash)."""
    return f"nbdef-{job_id}" if "-" in job_id else f"nbjob-{job_id}"


def hub_id(lab_job_id: str) -> str:
    return lab_job_id.removeprefix("nbjob-").removeprefix("nbdef-")


def lab_definition_id(def_id: str) -> str:
    """A definition's id in jupyter-scheduler: its CronJob's name, nbdef-<id>."""
    return f"nbdef-{def_id}"


def hub_definition_id(lab_definition: str) -> str:
    return lab_definition.removeprefix("nbdef-")


def _ms(iso: Any) -> int | None:
    ts = epoch(iso)
    return None if ts is None else int(ts * 1000)


def log_path(j: dict[str, Any]) -> str | None:
    """Where the job's log is written, relative to the home: next to its executed notebook
    (`jobs/<id>/<notebook>.log`); None for a folder that is not under the home."""
    folder = j.get("output_dir") or posixpath.dirname((j.get("outputs") or {}).get("ipynb") or "")
    stem = posixpath.basename(j.get("input") or "notebook.ipynb").removesuffix(".ipynb")
    path = posixpath.normpath(posixpath.join(folder, f"{stem}.log"))
    if not folder or path.startswith(("/", "../")):
        return None
    return path


def log_is_stale(j: dict[str, Any], written_ms: float | None) -> bool:
    """Whether the jobs list should (re)write a job's log: a finished job's, when it was not
    written yet or was written before the job ended (a running job's is refreshed only when
    the job itself is opened, so listing stays one hub call)."""
    if j.get("state") not in FINISHED:
        return False
    if written_ms is None:
        return True
    ended = _ms(j.get("completion_time"))
    return ended is not None and written_ms < ended


def save_text(full: str, text: str) -> None:
    """Write a file whole (a reader never sees half of it), making its folder."""
    os.makedirs(os.path.dirname(full), exist_ok=True)
    tmp = f"{full}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, full)


def _common(j: dict[str, Any]) -> dict[str, Any]:
    """What a job and a definition show alike, from the hub's answer."""
    return {
        "name": j.get("name") or j["id"],
        "input_filename": posixpath.basename(j.get("input") or "notebook.ipynb"),
        "runtime_environment_name": j.get("size") or "",
        "runtime_environment_parameters": None,
        "output_formats": list(j.get("output_formats") or ["ipynb"]),
        "parameters": {
            k: json.dumps(v) if not isinstance(v, str) else v for k, v in (j.get("parameters") or {}).items()
        },
    }


class GPUJobsScheduler(BaseScheduler):
    """jupyter-scheduler's scheduler, backed by the hub's notebook jobs (no local database)."""

    db_url = Unicode(help="Not used (jupyter-scheduler passes it).").tag(config=True)
    task_runner = AnyTrait(None, allow_none=True, help="No local task runner: the cluster runs jobs.")

    def __init__(self, root_dir: str, environments_manager: Any, config: Any = None, **kwargs: Any) -> None:
        kwargs.pop("db_url", None)
        super().__init__(
            root_dir=root_dir, environments_manager=environments_manager, config=config, **kwargs
        )
        self._asked_after_end: set[str] = set()

    # -- jobs -------------------------------------------------------------------------------
    async def create_job(self, model: CreateJob) -> str:
        if model.job_definition_id:
            return await self.create_job_from_definition(
                model.job_definition_id, CreateJobFromDefinition(parameters=model.parameters)
            )
        body = self._request(model)
        job = await hub_call("POST", "jobs", body)
        return lab_id(job["id"])

    def _request(self, model: CreateJob | CreateJobDefinition) -> dict[str, Any]:
        """The hub's job request from jupyter-scheduler's form (typed parameters, size slug)."""
        return {
            "name": model.name,
            "input": self._input(model.input_uri),
            "size": self._size(model.runtime_environment_name),
            "parameters": {k: _param(v) for k, v in (model.parameters or {}).items()},
            "output_formats": [f for f in (model.output_formats or ["ipynb"]) if f == "ipynb"] or ["ipynb"],
        }

    def _size(self, submitted: str) -> str:
        envs = self.environments_manager
        return envs.size_of(submitted) if isinstance(envs, GPUSizesEnvironmentManager) else submitted

    def _input(self, input_uri: str) -> str:
        """The notebook's path relative to the home (the hub checks it is inside)."""
        if not self.file_exists(input_uri):
            raise SchedulerError(f"Input path '{input_uri}' does not exist.")
        return os.path.relpath(os.path.join(self.root_dir, input_uri), self._home()).replace(os.sep, "/")

    def _home(self) -> str:
        """The folder the job's paths are relative to: the job pod's working folder, which is
        this server's root (the user's home)."""
        return os.path.abspath(self.root_dir)

    def describe(self, j: dict[str, Any]) -> DescribeJob:
        created = _ms(j.get("created")) or 0
        outputs = j.get("outputs") or {}
        rel_home = os.path.relpath(self._home(), os.path.abspath(self.root_dir))
        files = []
        for fmt in j.get("output_formats") or ["ipynb"]:
            path = posixpath.normpath(posixpath.join(rel_home, outputs.get(fmt, "")))
            files.append(
                JobFile(
                    display_name="Notebook",
                    file_format=fmt,
                    file_path=path if self.file_exists(path) else None,
                )
            )
        log = log_path(j)
        files.append(
            JobFile(
                display_name="Log",
                file_format=LOG_FORMAT,
                file_path=log if log and self.file_exists(log) else None,
            )
        )
        files.append(JobFile(display_name="Input", file_format="input", file_path=j.get("input")))
        status = STATES.get(j.get("state", ""), Status.QUEUED)
        message = j.get("message") or ""
        if j.get("queue"):
            message += (
                f" Queue {j['queue']}, priority {j.get('priority')}, {j.get('size_text') or j['size']}."
            )
        if j.get("gpu_seconds"):
            message += f" GPU time {j['gpu_seconds'] / 60:.1f} min."
        return DescribeJob(
            **_common(j),
            job_id=lab_id(j["id"]),
            job_definition_id=lab_definition_id(j["job_definition_id"])
            if j.get("job_definition_id")
            else None,
            url=f"/jobs/{lab_id(j['id'])}",
            create_time=created,
            update_time=created,
            start_time=_ms(j.get("start_time")),
            end_time=_ms(j.get("completion_time")),
            status=status,
            status_message=message.strip(),
            job_files=files,
            # The log may never be readable (no pod yet, or gone): it does not count here.
            downloaded=all(f.file_path for f in files if f.file_format != LOG_FORMAT),
        )

    async def write_log(self, j: dict[str, Any]) -> None:
        """Fetch the job's log from the hub and write it next to its notebook. Nothing when the
        hub has no log (no pod yet, or gone: an older copy stays) or it cannot be written."""
        path = log_path(j)
        if path is None:
            return
        try:
            got = await hub_call("GET", f"jobs/{j['id']}/log")
        except SchedulerError as e:
            self.log.warning("The log of job %s could not be read: %s", j["id"], e)
            return
        text = (got or {}).get("log") or ""
        if not text:
            return
        if (got or {}).get("truncated"):
            # The hub read only the end of a long log: the file says so on its first line.
            text = f"[{got.get('message') or 'The log is long: only its end is shown.'}]\n" + text
        try:
            save_text(os.path.join(self._home(), *path.split("/")), text)
        except OSError as e:
            self.log.warning("The log of job %s could not be written to %s: %s", j["id"], path, e)

    def _written_ms(self, j: dict[str, Any]) -> float | None:
        path = log_path(j)
        try:
            return os.path.getmtime(os.path.join(self._home(), *path.split("/"))) * 1000 if path else None
        except OSError:
            return None

    async def list_jobs(self, query: ListJobsQuery) -> ListJobsResponse:
        found = (await hub_call("GET", "jobs"))["jobs"]
        # Asked once after the end: a log the hub no longer has is not asked for at every poll.
        stale = [
            j for j in found if j["id"] not in self._asked_after_end and log_is_stale(j, self._written_ms(j))
        ]
        self._asked_after_end.update(j["id"] for j in stale)
        await asyncio.gather(*(self.write_log(j) for j in stale))
        jobs = [self.describe(j) for j in found]
        if query.status:
            jobs = [j for j in jobs if j.status == query.status]
        if query.name:
            jobs = [j for j in jobs if j.name.startswith(query.name)]
        if query.start_time:
            jobs = [j for j in jobs if (j.start_time or 0) >= query.start_time]
        if query.job_definition_id:
            jobs = [j for j in jobs if j.job_definition_id == query.job_definition_id]
        n = len(jobs)
        return ListJobsResponse(jobs=jobs[: query.max_items or n], total_count=n)

    async def count_jobs(self, query: CountJobsQuery) -> int:
        jobs = (await hub_call("GET", "jobs"))["jobs"]
        return sum(1 for j in jobs if STATES.get(j.get("state", "")) == query.status)

    async def get_job(self, job_id: str, job_files: bool | None = True) -> DescribeJob:
        j = await hub_call("GET", f"jobs/{hub_id(job_id)}")
        if j.get("state") != "queued" or j.get("requeues"):  # a pod has run: it has a log
            await self.write_log(j)
        return self.describe(j)

    async def delete_job(self, job_id: str) -> None:
        await hub_call("DELETE", f"jobs/{hub_id(job_id)}")

    async def stop_job(self, job_id: str) -> None:
        # A Job cannot be paused and resumed on the same GPU: stopping deletes it.
        await hub_call("DELETE", f"jobs/{hub_id(job_id)}")

    async def update_job(self, job_id: str, model: UpdateJob) -> None:
        if model.status == Status.STOPPED:
            await self.stop_job(job_id)
            return
        raise SchedulerError("A GPU job cannot be changed once submitted: delete it and create another.")

    def get_staging_paths(self, model: Any) -> dict[str, str]:
        return {}

    # -- job definitions (schedules): the hub's CronJobs -----------------------------------------
    async def create_job_definition(self, model: CreateJobDefinition) -> str:
        if not model.schedule:
            raise SchedulerError(NEEDS_SCHEDULE)
        body = {**self._request(model), "schedule": model.schedule, "timezone": model.timezone or None}
        d = await hub_call("POST", "jobdefinitions", body)
        return lab_definition_id(d["id"])

    async def update_job_definition(self, job_definition_id: str, model: UpdateJobDefinition) -> None:
        given = model.dict(exclude_unset=True)
        body: dict[str, Any] = {}
        for ours, theirs in (("name", "name"), ("schedule", "schedule"), ("active", "active")):
            if given.get(theirs) is not None:
                body[ours] = given[theirs]
        if "timezone" in given:
            body["timezone"] = given["timezone"] or None
        if given.get("runtime_environment_name"):
            body["size"] = self._size(given["runtime_environment_name"])
        if given.get("parameters") is not None:
            body["parameters"] = {k: _param(v) for k, v in given["parameters"].items()}
        if given.get("input_uri"):
            body["input"] = self._input(given["input_uri"])
        await hub_call("PATCH", f"jobdefinitions/{hub_definition_id(job_definition_id)}", body)

    async def delete_job_definition(self, job_definition_id: str) -> None:
        await hub_call("DELETE", f"jobdefinitions/{hub_definition_id(job_definition_id)}")

    def describe_definition(self, d: dict[str, Any]) -> DescribeJobDefinition:
        created = _ms(d.get("created")) or 0
        return DescribeJobDefinition(
            **_common(d),
            schedule=d.get("schedule"),
            timezone=d.get("timezone"),
            job_definition_id=lab_definition_id(d["id"]),
            create_time=created,
            update_time=_ms(d.get("last_schedule_time")) or created,
            active=bool(d.get("active")),
        )

    async def get_job_definition(self, job_definition_id: str) -> DescribeJobDefinition:
        return self.describe_definition(
            await hub_call("GET", f"jobdefinitions/{hub_definition_id(job_definition_id)}")
        )

    async def list_job_definitions(self, query: ListJobDefinitionsQuery) -> ListJobDefinitionsResponse:
        found = [
            self.describe_definition(d) for d in (await hub_call("GET", "jobdefinitions"))["job_definitions"]
        ]
        if query.name:
            found = [d for d in found if d.name.startswith(query.name)]
        if query.create_time:
            found = [d for d in found if d.create_time >= query.create_time]
        n = len(found)
        return ListJobDefinitionsResponse(job_definitions=found[: query.max_items or n], total_count=n)

    async def create_job_from_definition(self, job_definition_id: str, model: CreateJobFromDefinition) -> str:
        body = {"parameters": {k: _param(v) for k, v in (model.parameters or {}).items()}}
        job = await hub_call("POST", f"jobdefinitions/{hub_definition_id(job_definition_id)}/jobs", body)
        return lab_id(job["id"])

    async def pause_jobs(self, job_definition_id: str) -> None:
        await hub_call("PATCH", f"jobdefinitions/{hub_definition_id(job_definition_id)}", {"active": False})

    async def resume_jobs(self, job_definition_id: str) -> None:
        await hub_call("PATCH", f"jobdefinitions/{hub_definition_id(job_definition_id)}", {"active": True})


class GPUJobFilesManager(JobFilesManager):
    """jupyter-scheduler's "Download output files": the job's outputs are in the home already
    (the job pod wrote them); only the log is fetched again (by `get_job`)."""

    async def copy_from_staging(self, job_id: str, redownload: bool | None = False) -> None:
        await self.scheduler.get_job(job_id, False)
