"""Notebook jobs: a notebook run by papermill as a Kubernetes Job in the user's team queue (pure).

The hub's job endpoint (`hub/jobs.py`) checks a user's request with `check_request` and builds
the objects here; nothing in this module talks to the API.

- `JobRequest`: what the user asked (a notebook inside their home, parameters, a size, workers),
  checked for paths, counts and lengths; anything else is `InvalidJob` (the endpoint's 400).
- `build_job`: the `batch/v1` Job. Its pods run `papermill` on the user's image with the
  user's home volume and environment, in the home folder, and write the executed notebook to
  `jobs/<id>/` in the home (the folder jupyter-scheduler's download step reads). Scheduled by
  KAI (`schedulerName`, the team's queue label, priority `train` by default); several
  workers are one gang (`kai.scheduler/batch-min-member`, an Indexed Job).
- `build_claim_template`: the ResourceClaimTemplate made from the size's `GPURequest`
  (each worker gets its own claim, deleted with its pod).
- Preemption: KAI marks a pod it evicts with the `DisruptionTarget` condition. The Job's
  `podFailurePolicy` counts such a pod against `backoffLimit`, which is the requeue limit
  (a replacement pod waits in the queue again), and fails the Job at once on any other
  failure (a notebook that raises is not retried). So `status.failed` is the number of
  preemptions, and more than `requeue_limit` of them fail the Job.
- `job_state`: the Job's and its pods' status read back as one state for people
  (queued with the scheduler's reason, running, completed, failed, preempted and requeued).
- `gpu_seconds`: the GPU time of a job's pods, those gone included: the culler notes each
  pod's run time on the Job (`RUN_SECONDS`, culler/jobtime.py), so an evicted pod still counts.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusessions.core import labels as L
from gpusessions.core import owners
from gpusessions.core.claims import REQUEST_NAME, GPURequest
from gpusessions.core.placement import placement
from gpusessions.core.security import Contexts
from gpusessions.core.timestamps import epoch

Obj = dict[str, Any]

JOB = "job"  # the value of app.kubernetes.io/component and gpusessions.io/component
JOB_ID_LABEL = "gpusessions.io/job-id"
JOB_ANNOTATION = "gpusessions.io/job"  # the job's request as JSON (what the user asked)
MIN_MEMBER_ANNOTATION = "kai.scheduler/batch-min-member"
PRIORITY_CLASS = "train"  # KAI's preemptible class: may run over quota, may be reclaimed
OUTPUT_ROOT = "jobs"  # under the home: jobs/<id>/<notebook>
CONTAINER = "notebook"
OUTPUT_FORMATS = ("ipynb",)
DISRUPTION = "DisruptionTarget"
# The run time of a job's pods, noted on the Job by the culler ({pod uid: seconds}): a preempted
# pod is deleted, and its GPU time would go with it (core.jobs.gpu_seconds reads it back).
RUN_SECONDS = "gpusessions.io/run-seconds"

# Limits of a request (the endpoint refuses past them; settings may lower them).
MAX_NAME = 100
MAX_PATH = 255
MAX_PARAMETERS = 50
MAX_PARAMETER_NAME = 64
MAX_PARAMETER_VALUE = 2000
MAX_WORKERS = 8
_ID = re.compile(r"^[a-z0-9]{8,16}$")
_PARAM = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYS = {"name", "input", "parameters", "size", "workers", "output_formats"}


class InvalidJob(ValueError):
    """A request that makes no valid job; the message says which field and why."""


@dataclass(frozen=True)
class Limits:
    """What one request may hold (the hub's settings)."""

    max_parameters: int = MAX_PARAMETERS
    max_workers: int = MAX_WORKERS
    max_value: int = MAX_PARAMETER_VALUE


@dataclass(frozen=True)
class JobRequest:
    """A user's notebook job, checked: paths relative to the home, inside it."""

    name: str
    input: str  # e.g. "work/train.ipynb"
    size: str  # a profile slug of the user's, or "cpu"
    parameters: Mapping[str, Any] = field(default_factory=dict)
    workers: int = 1
    output_formats: tuple[str, ...] = ("ipynb",)

    def json(self) -> Obj:
        return {
            "name": self.name,
            "input": self.input,
            "size": self.size,
            "parameters": dict(self.parameters),
            "workers": self.workers,
            "output_formats": list(self.output_formats),
        }


def _home_path(value: Any, what: str) -> str:
    """A path inside the home, normalized and relative; `InvalidJob` for anything else."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidJob(f"{what} must be a path to a notebook in your home folder")
    if len(value) > MAX_PATH:
        raise InvalidJob(f"{what} is longer than {MAX_PATH} characters")
    if "\x00" in value or "\\" in value or any(ord(ch) < 32 for ch in value):
        raise InvalidJob(f"{what} has characters a path may not have")
    if value.startswith(("/", "~")):
        raise InvalidJob(f"{what} must be relative to your home folder, not {value[:80]!r}")
    if "$(" in value:
        # Kubernetes expands $(NAME) in a container's command line.
        raise InvalidJob(f"{what} {value[:80]!r} has '$(', which Kubernetes would expand as a variable")
    norm = posixpath.normpath(value)
    if norm.startswith("-"):
        # papermill would read it as an option (`--cwd=/tmp/x.ipynb`); ./-x.ipynb normalizes to it.
        raise InvalidJob(
            f"{what} {value[:80]!r} starts with '-', which a command line reads as an option: "
            "rename the notebook"
        )
    if norm == "." or norm == ".." or norm.startswith("../"):
        raise InvalidJob(f"{what} {value[:80]!r} is outside your home folder")
    if not norm.endswith(".ipynb"):
        raise InvalidJob(f"{what} must be a notebook (.ipynb), not {value[:80]!r}")
    return norm


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def check_request(body: Any, limits: Limits = Limits()) -> JobRequest:
    """The request in a JSON body, checked (types, paths, counts, lengths), or `InvalidJob`."""
    if not isinstance(body, Mapping):
        raise InvalidJob("the request must be a JSON object")
    unknown = set(body) - _KEYS
    if unknown:
        raise InvalidJob(f"unknown field(s) {sorted(unknown)}; known: {sorted(_KEYS)}")
    name = body.get("name", "")
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME:
        raise InvalidJob(f"name must be 1 to {MAX_NAME} characters")
    if any(ord(ch) < 32 for ch in name):
        raise InvalidJob("name has control characters")
    path = _home_path(body.get("input"), "input")
    size = body.get("size", "")
    if not isinstance(size, str) or not size or len(size) > 63:
        raise InvalidJob("size must be the name of one of your sizes (or 'cpu')")
    params = body.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise InvalidJob("parameters must be an object of name: value")
    if len(params) > limits.max_parameters:
        raise InvalidJob(f"at most {limits.max_parameters} parameters, not {len(params)}")
    for k, v in params.items():
        if not isinstance(k, str) or not _PARAM.match(k) or len(k) > MAX_PARAMETER_NAME:
            raise InvalidJob(f"parameter name {str(k)[:80]!r} is not a Python identifier")
        if not _scalar(v):
            raise InvalidJob(f"parameter {k} must be a string, number, true/false or null")
        if len(json.dumps(v)) > limits.max_value:
            raise InvalidJob(f"parameter {k} is longer than {limits.max_value} characters")
    workers = body.get("workers", 1)
    if not isinstance(workers, int) or isinstance(workers, bool) or not 1 <= workers <= limits.max_workers:
        raise InvalidJob(f"workers must be a whole number from 1 to {limits.max_workers}")
    formats = body.get("output_formats", ["ipynb"])
    if not isinstance(formats, list) or not formats or not all(f in OUTPUT_FORMATS for f in formats):
        raise InvalidJob(f"output_formats must be a list of {list(OUTPUT_FORMATS)}")
    return JobRequest(name.strip(), path, size, dict(params), workers, tuple(dict.fromkeys(formats)))


def output_dir(job_id: str) -> str:
    """Where a job's outputs go, relative to the home."""
    return f"{OUTPUT_ROOT}/{job_id}"


def output_path(request: JobRequest, job_id: str, worker: int | str = 0) -> str:
    stem = posixpath.basename(request.input)[: -len(".ipynb")]
    suffix = "" if worker == 0 else f".worker-{worker}"
    return f"{output_dir(job_id)}/{stem}{suffix}.ipynb"


def job_priority(
    default: str, by_queue: Mapping[str, str], size_priority: str | None, queue: str | None
) -> str:
    """The Job's priority class: the size's own setting, else the queue's, else the default."""
    if size_priority:
        return size_priority
    if queue and by_queue.get(queue):
        return by_queue[queue]
    return default


@dataclass(frozen=True)
class JobSettings:
    """What the hub gives every job of a user (from the spawner's settings)."""

    image: str
    home: str = "/home/jovyan"  # the pod's working folder: the user's home volume
    volumes: tuple[Obj, ...] = ()
    volume_mounts: tuple[Obj, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Obj = field(default_factory=dict)  # cpu/memory requests and limits
    # The notebook pod's security contexts (uid, gid, fs_gid, ... as KubeSpawner composes them)
    security: Contexts = field(default_factory=Contexts)
    # Init containers the notebook pod has that user code needs too (z2jh's block-cloud-metadata)
    init_containers: tuple[Obj, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Obj, ...] = ()
    affinity: Obj | None = None  # the profile's (placement.affinity_of), as a session's holder gets
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    scheduler_name: str | None = None  # None: the cluster's default scheduler
    priority_class: str | None = None
    queue_labels: Mapping[str, str] = field(default_factory=dict)
    requeue_limit: int = 3
    ttl_after_finished: int | None = None
    active_deadline: int | None = None
    papermill: str = "papermill"


def job_name(job_id: str) -> str:
    return f"nbjob-{job_id}"


def job_labels(username: str, job_id: str, queue_labels: Mapping[str, str]) -> dict[str, str]:
    return {
        **L.owner_labels(JOB, username, ""),
        L.NOTEBOOK_COMPONENT: JOB,
        JOB_ID_LABEL: job_id,
        **queue_labels,
    }


def papermill_argv(request: JobRequest, job_id: str, papermill: str = "papermill") -> list[str]:
    """papermill's command line, relative to the home (the container's working folder)."""
    out = output_path(request, job_id, "$(JOB_COMPLETION_INDEX)" if request.workers > 1 else 0)
    argv = [papermill, request.input, out, "--cwd", posixpath.dirname(request.input) or "."]
    if request.parameters:
        # JSON is YAML: papermill reads the values with their types.
        # `$$` is Kubernetes' escape of `$`: a value's `$(HOME)` reaches the notebook as written.
        argv += ["-y", json.dumps(dict(request.parameters), sort_keys=True).replace("$", "$$")]
    return argv


def build_job(
    job_id: str,
    namespace: str,
    username: str,
    request: JobRequest,
    settings: JobSettings,
    gpu: GPURequest | None,
    size_text: str = "",
) -> Obj:
    """The Job that runs the notebook (`gpu`: the size's request, None for CPU only)."""
    if not _ID.match(job_id):
        raise ValueError(f"job id {job_id!r} must be 8-16 lowercase letters and digits")
    name = job_name(job_id)
    labels = job_labels(username, job_id, settings.queue_labels)
    container: Obj = {
        "name": CONTAINER,
        "image": settings.image,
        # papermill does not make the output folder: a shell makes it, then becomes papermill.
        "command": [
            "sh",
            "-c",
            'mkdir -p "$0" && exec "$@"',
            output_dir(job_id),
            *papermill_argv(request, job_id, settings.papermill),
        ],
        "workingDir": settings.home,
        "env": [
            *({"name": k, "value": v} for k, v in sorted(settings.env.items())),
            {"name": "GPUSESSIONS_JOB_ID", "value": job_id},
            {"name": "GPUSESSIONS_JOB_WORKERS", "value": str(request.workers)},
        ],
        "resources": dict(settings.resources),
        "securityContext": settings.security.container_context(),
    }
    if settings.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in settings.volume_mounts]
    if settings.image_pull_policy:
        container["imagePullPolicy"] = settings.image_pull_policy
    spec: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 30,
        "containers": [container],
    }
    spec["securityContext"] = settings.security.pod_context()
    if settings.init_containers:
        spec["initContainers"] = [dict(c) for c in settings.init_containers]
    if gpu is not None and gpu.wants_gpu:
        spec["resourceClaims"] = [{"name": REQUEST_NAME, "resourceClaimTemplateName": name}]
        container["resources"] = {**container["resources"], "claims": [{"name": REQUEST_NAME}]}
    spec.update(placement(settings, volumes=settings.volumes))
    annotations = {
        **L.owner_annotations(username, ""),
        JOB_ANNOTATION: json.dumps({**request.json(), "size_text": size_text}, sort_keys=True),
    }
    job_spec: Obj = {
        "backoffLimit": settings.requeue_limit,
        "podFailurePolicy": {
            "rules": [
                # Evicted by the scheduler (reclaim, preemption) or a node going away: requeue.
                {"action": "Count", "onPodConditions": [{"type": DISRUPTION, "status": "True"}]},
                # The notebook failed: fail the job, do not run it again.
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
                },
            ]
        },
        "template": {
            "metadata": {"labels": dict(labels), "annotations": L.owner_annotations(username, "")},
            "spec": spec,
        },
    }
    if request.workers > 1:
        job_spec.update(completions=request.workers, parallelism=request.workers, completionMode="Indexed")
    if settings.ttl_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = settings.ttl_after_finished
    if settings.active_deadline is not None:
        job_spec["activeDeadlineSeconds"] = settings.active_deadline
    if request.workers > 1:
        annotations[MIN_MEMBER_ANNOTATION] = str(request.workers)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
        "spec": job_spec,
    }


def build_claim_template(
    job_id: str, namespace: str, username: str, gpu: GPURequest, queue_labels: Mapping[str, str]
) -> Obj:
    """The ResourceClaimTemplate of a job's workers: one claim of the size per pod."""
    labels = {**job_labels(username, job_id, queue_labels), L.COMPONENT: "job-claim"}
    # The claims made from it: no managed-by (the culler's sessions) and no queue label (the
    # hub's team quota counts interactive sessions; a job may run over quota as `train`).
    claim_labels = {L.NOTEBOOK_COMPONENT: JOB, JOB_ID_LABEL: job_id, L.USER_LABEL: L.label_value(username)}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": job_name(job_id),
            "namespace": namespace,
            "labels": labels,
            "annotations": {**L.owner_annotations(username, ""), L.REQUEST_HASH: gpu.hash()},
        },
        "spec": {"metadata": {"labels": claim_labels}, "spec": gpu.spec()},
    }


def selector(username: str) -> str:
    """The label selector of a user's jobs (and their pods)."""
    return f"{L.MANAGED_BY}={L.MANAGER},{L.NOTEBOOK_COMPONENT}={JOB},{L.USER_LABEL}={L.label_value(username)}"


def owner_reference(job: Obj) -> Obj:
    """An owner reference to a created Job (its uid): what it owns goes with it."""
    return owners.owner_reference(job, "batch/v1", "Job", block_owner_deletion=False)


def owned_by_user(obj: Obj, username: str) -> bool:
    """A job object of ours, of exactly this user (the annotation, not the slugged label)."""
    md = obj.get("metadata") or {}
    return (
        (md.get("labels") or {}).get(L.MANAGED_BY) == L.MANAGER
        and (md.get("labels") or {}).get(L.NOTEBOOK_COMPONENT) == JOB
        and (md.get("annotations") or {}).get(L.USER_ANNOTATION) == username
    )


# -- reading a job back ---------------------------------------------------------------------
def _condition(obj: Obj, kind: str) -> Obj | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return dict(c)
    return None


def _waiting_reason(pods: Iterable[Obj]) -> str:
    for p in pods:
        c = next(
            (c for c in (p.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"),
            None,
        )
        if c and c.get("status") == "False" and c.get("message"):
            return str(c["message"])
    return ""


def _preempted_by(pods: Iterable[Obj]) -> str:
    """The newest eviction message of the scheduler on the job's pods."""
    best: tuple[str, str] = ("", "")
    for p in pods:
        for c in (p.get("status") or {}).get("conditions") or []:
            if c.get("type") == DISRUPTION and c.get("status") == "True":
                when = str(c.get("lastTransitionTime") or "")
                if when >= best[0]:
                    best = (when, str(c.get("message") or c.get("reason") or "evicted"))
    return best[1]


_QUEUE_LINE = re.compile(r"^\s*(?P<queue>[^\s<>]+) uses <")


def preempted_by(events: Iterable[Obj], namespace: str, job: Obj) -> str:
    """Who KAI preempted the job's pods for, in words, from its Evict events on PodGroups
    ("Pod <ns>/<pod> was preempted by workload <ns>/<pg>.", then a line per queue involved):
    "team-a's workload pg-... " (the newest), "" when none is found."""
    prefix = job["metadata"]["name"] + "-"
    queue = ((job.get("metadata") or {}).get("labels") or {}).get(L.QUEUE_LABEL)
    found: tuple[str, str] = ("", "")
    for e in events:
        lines = str(e.get("message") or "").strip().splitlines()
        m = (
            re.match(
                r"^Pod (?P<ns>[^/\s]+)/(?P<pod>\S+) was preempted by workload (?P<by>\S+?)\.?$", lines[0]
            )
            if lines
            else None
        )
        if not m or m.group("ns") != namespace or not m.group("pod").startswith(prefix):
            continue
        teams = [q.group("queue") for line in lines[1:] if (q := _QUEUE_LINE.match(line))]
        other = next((t for t in teams if t != queue), "")
        when = str(e.get("lastTimestamp") or e.get("eventTime") or "")
        workload = m.group("by").split("/", 1)[-1]
        words = f"team {other}'s workload {workload}" if other else f"workload {workload}"
        if when >= found[0]:
            found = (when, words)
    return found[1]


def job_state(job: Obj, pods: Iterable[Obj] = (), by: str = "") -> Obj:
    """The job's state for people: `state` (queued, running, completed, failed, stopped),
    `message`, `requeues` (preemptions so far) and the scheduler's reason while it waits."""
    pods = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")] or list(pods)
    st = job.get("status") or {}
    requeues = int(st.get("failed") or 0)
    preempted = (by or _preempted_by(pods)) if requeues else ""
    done = _condition(job, "Complete") or _condition(job, "SuccessCriteriaMet")
    failed = _condition(job, "Failed") or _condition(job, "FailureTarget")
    if done:
        state, message = "completed", "The notebook ran to the end."
    elif failed:
        state = "failed"
        reason = failed.get("reason", "")
        if reason == "BackoffLimitExceeded":
            message = (
                f"Preempted {requeues} time(s), more than the requeue limit of "
                f"{(job.get('spec') or {}).get('backoffLimit', 0)}: the job was stopped."
            )
        elif reason == "DeadlineExceeded":
            message = "The job ran longer than its time limit and was stopped."
        else:
            message = "The notebook failed (an error in a cell, or the run could not start): see its log."
    elif (job.get("spec") or {}).get("suspend"):
        state, message = "stopped", "The job is stopped."
    elif int(st.get("ready") or 0) > 0 or any(
        (p.get("status") or {}).get("phase") == "Running" for p in pods
    ):
        state, message = "running", "Running."
    else:
        state = "queued"
        why = _waiting_reason(pods)
        message = f"Waiting in the queue: {why}" if why else "Waiting in the queue."
    if requeues and state in ("queued", "running"):
        message = (
            f"Preempted {requeues} time(s) (the scheduler gave its GPU to in-quota work: "
            f"{preempted or 'another team reclaimed its share'}), requeued. " + message
        )
    return {
        "state": state,
        "message": message,
        "requeues": requeues,
        "start_time": st.get("startTime"),
        "completion_time": st.get("completionTime"),
    }


def _seconds(start: Any, end: Any, now: float) -> float:
    a, b = epoch(start), epoch(end)
    if a is None:
        return 0.0
    return max(0.0, (b if b is not None else now) - a)


def pod_run_seconds(pod: Obj, now: float) -> float:
    """How long the pod's notebook container has run (to its end, or to `now`)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") != CONTAINER:
            continue
        state = cs.get("state") or {}
        if state.get("running"):
            return _seconds(state["running"].get("startedAt"), None, now)
        if state.get("terminated"):
            t = state["terminated"]
            return _seconds(t.get("startedAt"), t.get("finishedAt"), now)
    return 0.0


def pod_ended(pod: Obj) -> bool:
    """The pod runs no more, or is going (evicted, deleted): it will not count any longer."""
    md, st = pod.get("metadata") or {}, pod.get("status") or {}
    return bool(md.get("deletionTimestamp")) or st.get("phase") in ("Succeeded", "Failed")


def recorded_run_seconds(job: Obj) -> dict[str, float]:
    """The run time of the job's pods noted on the Job ({pod uid: seconds}, RUN_SECONDS):
    what is left of pods that are gone (a preempted pod is deleted), {} when none."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(RUN_SECONDS) or "{}"
    try:
        out = json.loads(raw)
    except ValueError:
        return {}
    if not isinstance(out, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in out.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
    }


def run_seconds(
    pods: Iterable[Obj], now: float, recorded: Mapping[str, float] | None = None
) -> dict[str, float]:
    """{pod uid: run seconds} of the job's pods: those there now, and the recorded ones of
    pods that are gone (the larger of the two when both know a pod)."""
    out = dict(recorded or {})
    for i, p in enumerate(pods):
        uid = str((p.get("metadata") or {}).get("uid") or f"pod-{i}")
        out[uid] = max(out.get(uid, 0.0), pod_run_seconds(p, now))
    return out


def gpu_seconds(
    pods: Iterable[Obj], gpus_per_pod: float, now: float, recorded: Mapping[str, float] | None = None
) -> float:
    """GPU time the job's pods used, preempted ones included (each pod's run time x the
    devices of one worker): the pods there now, and `recorded` (`recorded_run_seconds`) for
    pods that are gone."""
    return sum(run_seconds(pods, now, recorded).values()) * gpus_per_pod


def read_request(job: Obj) -> Obj:
    """The request a Job was built from (its annotation), {} when unreadable."""
    raw = ((job.get("metadata") or {}).get("annotations") or {}).get(JOB_ANNOTATION) or "{}"
    try:
        out = json.loads(raw)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}
