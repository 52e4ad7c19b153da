"""Notebook jobs through the hub: a notebook run as a Kubernetes Job in the user's team queue.

    GET    /hub/api/gpusessions/users/{user}/jobs[?server=<name>]          the user's jobs
    POST   /hub/api/gpusessions/users/{user}/jobs[?server=<name>]          submit one
    GET    /hub/api/gpusessions/users/{user}/jobs/sizes[?server=<name>]    the sizes a job may use
    GET    /hub/api/gpusessions/users/{user}/jobs/{id}[?server=<name>]     one job
    DELETE /hub/api/gpusessions/users/{user}/jobs/{id}[?server=<name>]     delete it (and its pods, claims)
    GET    /hub/api/gpusessions/users/{user}/jobs/{id}/log[?server=<name>] its newest pod's log

The notebook server calls these with its own token (`servers` and `read:servers` on itself,
see GPUSessionSpawner.server_token_scopes); the user's own token and admins holding those
scopes on the user work too. Another user gets 404 and learns nothing. The hub checks every
field (core.jobs.check_request), that the size is one of this user's profiles (or CPU only),
the user's count of unfinished jobs, and the team queue, and only then creates the objects
(with the hub's own Kubernetes credentials, never the user's): a refused request creates nothing.

The runs of a job definition (a schedule: `hub/jobdefs.py`) are jobs here too, listed, read and
deleted with the id `<definition>-<run>` (their Job `nbdef-<definition>-<run>`).

Settings: `c.NotebookJobs.<trait>` (`jobsettings.py`).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tornado import web

from gpusessions.core import jobdefs as D
from gpusessions.core import jobs as J
from gpusessions.core import labels as L
from gpusessions.core import queues as Q
from gpusessions.core import reclaim, scopes
from gpusessions.core.claims import GPURequest
from gpusessions.core.progress import Refused
from gpusessions.core.requests import configured, profile_settings, request_from
from gpusessions.hub import usercode
from gpusessions.hub.base import GPUSessionsAPIHandler
from gpusessions.hub.jobsettings import NotebookJobs
from gpusessions.hub.picker import figures_for
from gpusessions.kube.api import KubeError
from gpusessions.kube.jobs import JobsAPI

Obj = dict[str, Any]
CPU = "cpu"


def job_settings(handler: Any) -> NotebookJobs:
    return NotebookJobs(config=handler.settings.get("config"))


# -- the user's spawner settings ------------------------------------------------------------
def _static_env(spawner: Any, setting: Any) -> dict[str, str]:
    env = {}
    for k, v in (setting("environment") or {}).items():
        if isinstance(v, str):
            env[k] = spawner._expand_all(v)
    return env


def _resources(setting: Any) -> Obj:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for name, where, key in (
        ("cpu_guarantee", requests, "cpu"),
        ("mem_guarantee", requests, "memory"),
        ("cpu_limit", limits, "cpu"),
        ("mem_limit", limits, "memory"),
    ):
        if setting(name):
            where[key] = str(setting(name))
    out: Obj = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def settings_for(
    spawner: Any, cfg: NotebookJobs, profile: Obj | None, queue: str | None, policy: Q.QueuePolicy
) -> J.JobSettings:
    override = (profile or {}).get("kubespawner_override") or {}

    def setting(name: str) -> Any:
        """A spawner setting as the size's profile sets it (its kubespawner_override), else
        as the hub configures it: the job is placed as a session of that profile is. Not the
        live value: KubeSpawner leaves the user's running session's profile on the spawner."""
        return override[name] if name in override else configured(spawner, name)

    image = cfg.image or setting("image")
    sched = policy.scheduling(queue)
    priority = None
    if sched is not None:
        priority = J.job_priority(
            cfg.priority_class, cfg.queue_priority_class, override.get("job_priority_class"), queue
        )
    volumes = spawner._expand_all(spawner._sorted_dict_values(setting("volumes")))
    mounts = spawner._expand_all(spawner._sorted_dict_values(setting("volume_mounts")))
    return J.JobSettings(
        image=str(image),
        home=str(setting("working_dir") or setting("notebook_dir") or "/home/jovyan"),
        volumes=tuple(volumes),
        volume_mounts=tuple(mounts),
        env=_static_env(spawner, setting),
        resources=_resources(setting),
        **usercode.pod_fields(spawner, setting),
        scheduler_name=sched.scheduler_name if sched else None,
        priority_class=priority,
        queue_labels=dict(sched.labels) if sched else {},
        requeue_limit=cfg.requeue_limit,
        ttl_after_finished=cfg.ttl_seconds_after_finished,
        active_deadline=cfg.active_deadline_seconds,
        papermill=cfg.papermill,
    )


async def user_sizes(spawner: Any, cfg: NotebookJobs) -> list[tuple[str, Obj | None, GPURequest | None]]:
    """(slug, profile, GPU request or None) of each size this user may run a job on."""
    out: list[tuple[str, Obj | None, GPURequest | None]] = []
    for p in await spawner._profile_list_for_user():
        try:
            req = request_from(profile_settings(spawner, p))
        except (TypeError, ValueError):
            continue  # a profile the spawner refuses is no size for a job either
        out.append((str(p["slug"]), p, req if req.wants_gpu else None))
    if cfg.allow_cpu and not any(gpu is None for _, _, gpu in out):
        out.append((CPU, None, None))
    return out


async def create_with_template(
    api: Any, template: Obj | None, create: Any, body: Obj, owner_reference: Any
) -> Obj:
    """Create the claim template (None: CPU only), then `body` with `create`, then make the
    template the created object's (deleted with it); a refused `body` takes the template back."""
    if template is None:
        return await create(body)
    md = template["metadata"]
    await api.create_claim_template(template)
    try:
        created = await create(body)
    except Exception:
        await api.delete_claim_template(md["namespace"], md["name"])
        raise
    await api.own_claim_template(md["namespace"], md["name"], owner_reference(created))
    return created


# -- handlers -------------------------------------------------------------------------------
_user_locks: dict[str, asyncio.Lock] = {}


def user_lock(user_name: str) -> asyncio.Lock:
    """One of a user's job or definition creations at a time in this hub: a limit counted from
    the API (`max_active_jobs`, `max_definitions`) then filled holds under concurrent requests
    (the API's list shows a created object at once)."""
    return _user_locks.setdefault(user_name, asyncio.Lock())


@dataclass(frozen=True)
class Prepared:
    """What a checked request runs with: the job settings, the size's GPU request (None: CPU
    only), the team queue, the size in words."""

    settings: J.JobSettings
    gpu: GPURequest | None
    queue: str | None
    size_text: str


class JobsBase(GPUSessionsAPIHandler):
    def _begin(self, user_name: str, write: bool) -> tuple[Any, Any, NotebookJobs]:
        cfg = job_settings(self)
        if not cfg.enabled:
            raise web.HTTPError(404, "Notebook jobs are not enabled on this hub.")
        # The token of one of the user's servers acts for the user's jobs (default server unless
        # ?server= names it); the user's own token, or an admin's with these scopes, too.
        server = self.get_argument("server", "")
        self.authorize(scopes.SERVERS if write else scopes.READ_SERVERS, user_name, server)
        user, spawner = self.user_and_spawner(user_name, "")
        return user, self.require_gpusessions(spawner), cfg

    def _json(self, body: Any, status: int = 200) -> None:
        """Jobs change by the second: their answers are never cached."""
        self.write_json(body, status, no_store=True)

    async def _prepare(self, user: Any, spawner: Any, cfg: NotebookJobs, req: J.JobRequest) -> Prepared:
        """The size (one of the user's), the team queue and the job settings of a request;
        400 for a size not the user's, 403 without a queue."""
        sizes = await user_sizes(spawner, cfg)
        match = next(((p, g) for slug, p, g in sizes if slug == req.size), None)
        if match is None:
            raise web.HTTPError(
                400,
                f"Invalid job: size {req.size!r} is not one of yours ({', '.join(s for s, _, _ in sizes)}).",
            )
        profile, gpu = match
        policy = Q.QueuePolicy.of(spawner)
        groups = [g.name for g in getattr(user, "groups", []) or []]
        try:
            queue = await policy.queue_of(spawner, groups)
        except Refused as e:
            raise web.HTTPError(403, str(e).replace("your server", "your job")) from None
        settings = settings_for(spawner, cfg, profile, queue, policy)
        return Prepared(settings, gpu, queue, gpu.describe() if gpu else "CPU only")

    async def _check_active(self, api: Any, spawner: Any, user_name: str, cfg: NotebookJobs) -> None:
        """429 when the user has `max_active_jobs` queued or running jobs."""
        active = [
            j
            for j in await api.list_jobs(spawner.namespace, J.selector(user_name))
            if J.owned_by_user(j, user_name) and J.job_state(j)["state"] in ("queued", "running")
        ]
        if len(active) >= cfg.max_active_jobs:
            raise web.HTTPError(
                429,
                f"You have {len(active)} unfinished job(s), the most one user may have: wait for one to "
                "end or delete one.",
            )

    async def _find(self, spawner: Any, user_name: str, job_id: str) -> Obj:
        name = D.job_name_for(job_id)
        if name is None:
            raise web.HTTPError(404, "No such job.")
        job = await JobsAPI().get_job(spawner.namespace, name)
        if job is None or not J.owned_by_user(job, user_name):
            raise web.HTTPError(404, "No such job.")
        return job


async def evictions(api: Any, namespace: str, jobs: list[Obj]) -> list[Obj]:
    """KAI's Evict events in the namespace, read only when one of `jobs` was preempted."""
    if not any(int((j.get("status") or {}).get("failed") or 0) for j in jobs):
        return []
    try:
        return list(await api.events(namespace, reclaim.EVICT_SELECTOR))
    except KubeError:
        return []


def describe(job: Obj, pods: list[Obj], now: float | None = None, events: list[Obj] | None = None) -> Obj:
    """A job as the endpoints answer it."""
    md = job["metadata"]
    req = J.read_request(job)
    job_id = D.job_id_of(job)
    spec = (job.get("spec") or {}).get("template", {}).get("spec", {})
    gpus = 0.0
    if spec.get("resourceClaims"):
        gpus = 1.0
    by = J.preempted_by(events or [], md.get("namespace", ""), job) if events else ""
    state = J.job_state(job, pods, by)
    stem = str(req.get("input", "x.ipynb")).rsplit("/", 1)[-1][: -len(".ipynb")]
    return {
        "id": job_id,
        "job_definition_id": D.definition_of(job),
        "name": req.get("name", ""),
        "input": req.get("input", ""),
        "size": req.get("size", ""),
        "size_text": req.get("size_text", ""),
        "parameters": req.get("parameters", {}),
        "workers": req.get("workers", 1),
        "output_formats": req.get("output_formats", ["ipynb"]),
        "output_dir": J.output_dir(job_id),
        # Several workers: each writes <stem>.worker-<index>.ipynb; the first is the job's.
        "outputs": {
            "ipynb": f"{J.output_dir(job_id)}/{stem}{'.worker-0' if req.get('workers', 1) > 1 else ''}.ipynb"
        },
        "queue": (md.get("labels") or {}).get(L.QUEUE_LABEL),
        "priority": spec.get("priorityClassName"),
        "created": md.get("creationTimestamp"),
        # The pods there now, and those gone (a preempted run) as the culler noted them.
        "gpu_seconds": round(J.gpu_seconds(pods, gpus, now or time.time(), J.recorded_run_seconds(job)), 1),
        **state,
    }


def _by_job(pods: list[Obj]) -> dict[str, list[Obj]]:
    """Pods by their Job's name (the label the apiserver puts on every Job's pods)."""
    out: dict[str, list[Obj]] = {}
    for p in pods:
        out.setdefault((p["metadata"].get("labels") or {}).get(D.JOB_NAME_LABEL, ""), []).append(p)
    return out


class JobsHandler(JobsBase):
    async def get(self, user_name: str) -> None:
        _, spawner, _ = self._begin(user_name, write=False)
        api = JobsAPI()
        jobs = [
            j
            for j in await api.list_jobs(spawner.namespace, J.selector(user_name))
            if J.owned_by_user(j, user_name)
        ]
        pods = _by_job(await api.list_pods(spawner.namespace, J.selector(user_name)))
        events = await evictions(api, spawner.namespace, jobs)
        out = [describe(j, pods.get(j["metadata"]["name"], []), events=events) for j in jobs]
        out.sort(key=lambda j: str(j.get("created") or ""), reverse=True)
        self._json({"jobs": out})

    async def post(self, user_name: str) -> None:
        user, spawner, cfg = self._begin(user_name, write=True)
        body = self.json_body()
        try:
            req = J.check_request(body, J.Limits(cfg.max_parameters, cfg.max_workers))
        except J.InvalidJob as e:
            raise web.HTTPError(400, f"Invalid job: {e}.") from None
        prepared = await self._prepare(user, spawner, cfg, req)
        api = JobsAPI()
        settings, gpu, queue = prepared.settings, prepared.gpu, prepared.queue
        job_id = uuid.uuid4().hex[:12]
        ns = spawner.namespace
        size_text = prepared.size_text
        job = J.build_job(job_id, ns, user_name, req, settings, gpu, size_text)
        template = None
        if gpu is not None:
            template = J.build_claim_template(job_id, ns, user_name, gpu, settings.queue_labels)
        async with user_lock(user_name):  # the count and the create, one request at a time
            await self._check_active(api, spawner, user_name, cfg)
            try:
                created = await create_with_template(api, template, api.create_job, job, J.owner_reference)
            except KubeError as e:
                self.log.warning("Notebook job of %s not created: %s", user_name, e)
                raise web.HTTPError(502, f"The cluster refused the job: {e.message}") from None
        self.log.info(
            "Notebook job %s of %s: %s on %s in queue %s (%s)",
            job_id,
            user_name,
            req.input,
            size_text,
            queue,
            settings.priority_class,
        )
        self._json(describe(created, []), status=201)


class JobSizesHandler(JobsBase):
    async def get(self, user_name: str) -> None:
        _, spawner, cfg = self._begin(user_name, write=False)
        sizes = await user_sizes(spawner, cfg)
        profiles = [p for _, p, _ in sizes if p is not None]
        figures = {f["slug"]: f for f in (await figures_for(spawner, profiles))["profiles"]}
        out = []
        for slug, p, gpu in sizes:
            f = figures.get(slug, {})
            out.append(
                {
                    "slug": slug,
                    "display_name": (p or {}).get("display_name", "CPU only") if p else "CPU only",
                    "gpu": gpu is not None,
                    "describe": gpu.describe() if gpu else "CPU only",
                    "availability": f.get("availability", "No GPU: starts right away." if not gpu else ""),
                    "free": f.get("free"),
                    "total": f.get("total"),
                    "queue": f.get("queue"),
                }
            )
        self._json({"sizes": out})


class JobHandler(JobsBase):
    async def get(self, user_name: str, job_id: str) -> None:
        _, spawner, _ = self._begin(user_name, write=False)
        job = await self._find(spawner, user_name, job_id)
        api = JobsAPI()
        pods = await api.list_pods(spawner.namespace, f"{D.JOB_NAME_LABEL}={job['metadata']['name']}")
        events = await evictions(api, spawner.namespace, [job])
        self._json(describe(job, [p for p in pods if J.owned_by_user(p, user_name)], events=events))

    async def delete(self, user_name: str, job_id: str) -> None:
        _, spawner, _ = self._begin(user_name, write=True)
        job = await self._find(spawner, user_name, job_id)
        name = job["metadata"]["name"]
        api = JobsAPI()
        deleted = await api.delete_job(spawner.namespace, name)
        if not D.definition_of(job):  # a run's claim template is its definition's
            await api.delete_claim_template(spawner.namespace, name)
        self.log.info("Notebook job %s of %s deleted", job_id, user_name)
        self._json({"id": job_id, "deleted": deleted})


class JobLogHandler(JobsBase):
    async def get(self, user_name: str, job_id: str) -> None:
        _, spawner, cfg = self._begin(user_name, write=False)
        job = await self._find(spawner, user_name, job_id)
        api = JobsAPI()
        pods = await api.list_pods(spawner.namespace, f"{D.JOB_NAME_LABEL}={job['metadata']['name']}")
        pods.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""))
        if not pods:
            self._json({"id": job_id, "pod": None, "log": "", "message": "No pod has started yet."})
            return
        pod = pods[-1]["metadata"]["name"]
        truncated = False
        try:
            text, truncated = await log_tail(
                api, spawner.namespace, pod, cfg.log_tail_lines, cfg.log_max_bytes
            )
        except KubeError as e:
            text, message = "", f"The log cannot be read yet: {e.message}"
        else:
            message = "" if text is not None else "The pod is gone."
        if truncated:
            message = (
                f"The log is long: only its end is shown (at most its last {cfg.log_tail_lines} lines"
                f" and {cfg.log_max_bytes // 1024} KiB)."
            )
        self._json({"id": job_id, "pod": pod, "log": text or "", "message": message, "truncated": truncated})


async def log_tail(api: Any, namespace: str, pod: str, lines: int, max_bytes: int) -> tuple[str | None, bool]:
    """The end of a job pod's log, at most `lines` lines in at most `max_bytes` bytes, and
    whether it was cut. One line more than wanted is asked for, so a log cut by its line count
    alone says so too. The kubelet's `limitBytes` keeps the start of what it sends, so the tail
    is asked for in ever fewer lines until it fits (a single line longer than that: its first
    `max_bytes`)."""
    n = lines
    while True:
        text = await api.pod_log(namespace, pod, J.CONTAINER, n + 1, max_bytes + 1)
        if text is None:
            return None, False
        if len(text.encode("utf-8", errors="replace")) <= max_bytes:
            kept = text.splitlines(keepends=True)
            if len(kept) > n:
                return "".join(kept[-n:]), True
            return text, n < lines
        if n == 1:
            last = await api.pod_log(namespace, pod, J.CONTAINER, 1, max_bytes + 1)
            if last is None:
                return None, False
            return last.encode("utf-8", errors="replace")[:max_bytes].decode("utf-8", errors="ignore"), True
        n = max(1, n // 4)


# Routes under the hub prefix (/hub/); `sizes` before `{id}`, which would match it too.
default_handlers: list[tuple[str, Any]] = [
    (r"/api/gpusessions/users/([^/]+)/jobs", JobsHandler),
    (r"/api/gpusessions/users/([^/]+)/jobs/sizes", JobSizesHandler),
    (r"/api/gpusessions/users/([^/]+)/jobs/([^/]+)", JobHandler),
    (r"/api/gpusessions/users/([^/]+)/jobs/([^/]+)/log", JobLogHandler),
]
