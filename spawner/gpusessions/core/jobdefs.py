"""Job definitions: a notebook job run on a schedule, as a Kubernetes CronJob (pure).

A definition is a checked job request (`core.jobs.check_request`) plus a schedule
(`core.schedule`). The hub makes it a `batch/v1` CronJob `nbdef-<id>` whose jobTemplate is the
Job a one-off submission builds (`core.jobs.build_job`: papermill, the team's queue label,
`schedulerName`, priority, pod failure policy), changed where a run differs from a one-off:

- **names and ids**: the CronJob controller names each run `nbdef-<id>-<minutes>`; a run's id
  (what the job endpoints and the Notebook Jobs panel use) is `<id>-<minutes>`, its Job
  `nbdef-<id>-<minutes>`. A one-off job's id stays `<id>`, its Job `nbjob-<id>` (`job_name_for`).
- **labels**: the Jobs carry the job labels (`gpusessions.io/component: job`, so every list of
  jobs, the culler's watch and the user's clean-up find them) without `gpusessions.io/job-id`
  (one id per run cannot be templated) and with `gpusessions.io/job-definition-id`; the CronJob
  itself is `gpusessions.io/component: jobdefinition`.
- **outputs**: the pod learns its Job's name from the label the Job controller sets
  (`batch.kubernetes.io/job-name`, through the downward API) and writes to `jobs/<run id>/`.
- **the claim template**: one ResourceClaimTemplate `nbdef-<id>` for every run (a claim per
  pod), owned by the CronJob: it lives as long as the definition.
- **one worker**: KAI's podgrouper groups a CronJob's pods with its CronJob grouper, which
  reads the Job's labels but not `kai.scheduler/batch-min-member` (every PodGroup gets
  minAvailable 1), so several workers would not start all or none: a schedule runs one worker.
- **concurrency**: `concurrencyPolicy: Forbid` (a run does not start while the last one is
  still queued or running: a schedule never fills the queue with copies of itself).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpusessions.core import jobs as J
from gpusessions.core import labels as L
from gpusessions.core import owners
from gpusessions.core import schedule as S
from gpusessions.core.claims import GPURequest

Obj = dict[str, Any]

DEFINITION = "jobdefinition"  # component label of the CronJob
DEFINITION_LABEL = "gpusessions.io/job-definition-id"
DEFINITION_ANNOTATION = "gpusessions.io/job-definition"  # the definition as JSON
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # set on a Job's pods by the apiserver
MANUAL_ANNOTATION = "cronjob.kubernetes.io/instantiate"  # as `kubectl create job --from=cronjob/`
PREFIX = "nbdef-"
STARTING_DEADLINE = 300  # a run the controller missed by more than this is skipped
_DEF_ID = re.compile(r"^[a-z0-9]{8,16}$")
_RUN_ID = re.compile(r"^(?P<definition>[a-z0-9]{8,16})-(?P<run>[a-z0-9]{1,16})$")
_SCHEDULE_KEYS = {"schedule", "timezone", "active"}
KEYS = J._KEYS | _SCHEDULE_KEYS


class InvalidDefinition(ValueError):
    """A definition that makes no valid CronJob; the message names the field."""


@dataclass(frozen=True)
class Definition:
    job: J.JobRequest
    schedule: str
    timezone: str | None = None
    active: bool = True

    def json(self) -> Obj:
        return {
            **self.job.json(),
            "schedule": self.schedule,
            "timezone": self.timezone,
            "active": self.active,
        }


def check_definition(body: Any, limits: J.Limits, min_interval_minutes: int) -> Definition:
    """A definition from a JSON body (a job request and `schedule`, `timezone`, `active`)."""
    if not isinstance(body, Mapping):
        raise InvalidDefinition("the request must be a JSON object")
    unknown = set(body) - KEYS
    if unknown:
        raise InvalidDefinition(f"unknown field(s) {sorted(unknown)}; known: {sorted(KEYS)}")
    workers = body.get("workers", 1)
    if workers != 1 or isinstance(workers, bool):
        raise InvalidDefinition(
            "workers must be 1 for a schedule (KAI does not gang the workers of a CronJob's Job: "
            "use 'Run now' for several workers)"
        )
    try:
        job = J.check_request({k: v for k, v in body.items() if k not in _SCHEDULE_KEYS}, limits)
        schedule = S.check_schedule(body.get("schedule"), min_interval_minutes)
        timezone = S.check_timezone(body.get("timezone"))
    except (J.InvalidJob, S.InvalidSchedule) as e:
        raise InvalidDefinition(str(e)) from None
    active = body.get("active", True)
    if not isinstance(active, bool):
        raise InvalidDefinition("active must be true or false")
    return Definition(job, schedule, timezone, active)


def merged(stored: Mapping[str, Any], changes: Any) -> Obj:
    """A definition's fields with a PATCH's changes on top (checked again as a whole after)."""
    if not isinstance(changes, Mapping):
        raise InvalidDefinition("the request must be a JSON object")
    unknown = set(changes) - KEYS
    if unknown:
        raise InvalidDefinition(f"unknown field(s) {sorted(unknown)}; known: {sorted(KEYS)}")
    base = {k: v for k, v in stored.items() if k in KEYS}
    return {**base, **changes}


# -- names and ids ----------------------------------------------------------------------------
def definition_name(def_id: str) -> str:
    return f"{PREFIX}{def_id}"


def valid_definition_id(value: str) -> bool:
    return bool(_DEF_ID.match(value))


def job_name_for(job_id: str) -> str | None:
    """The Job of a job id: `nbjob-<id>` (one-off), `nbdef-<id>` (a definition's run), None for
    anything else."""
    if J._ID.match(job_id):
        return J.job_name(job_id)
    if _RUN_ID.match(job_id):
        return f"{PREFIX}{job_id}"
    return None


def job_id_of(job: Obj) -> str:
    """The id of a Job of ours (one-off: its job-id label; a run: its name after `nbdef-`)."""
    md = job.get("metadata") or {}
    labels = md.get("labels") or {}
    if labels.get(J.JOB_ID_LABEL):
        return str(labels[J.JOB_ID_LABEL])
    name = str(md.get("name") or "")
    return name[len(PREFIX) :] if name.startswith(PREFIX) else ""


def definition_of(obj: Obj) -> str | None:
    """The definition id a Job (or pod, or the CronJob) belongs to, None for a one-off."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(DEFINITION_LABEL) or None


def owned_definition(obj: Obj, username: str) -> bool:
    """A CronJob of ours, of exactly this user (the annotation, not the slugged label)."""
    md = obj.get("metadata") or {}
    labels = md.get("labels") or {}
    return (
        labels.get(L.MANAGED_BY) == L.MANAGER
        and labels.get(L.NOTEBOOK_COMPONENT) == DEFINITION
        and (md.get("annotations") or {}).get(L.USER_ANNOTATION) == username
    )


def selector(username: str) -> str:
    """The label selector of a user's definitions (CronJobs)."""
    user = L.label_value(username)
    return f"{L.MANAGED_BY}={L.MANAGER},{L.NOTEBOOK_COMPONENT}={DEFINITION},{L.USER_LABEL}={user}"


# -- builders ---------------------------------------------------------------------------------
def _run_labels(username: str, def_id: str, queue_labels: Mapping[str, str]) -> dict[str, str]:
    labels = J.job_labels(username, def_id, queue_labels)
    del labels[J.JOB_ID_LABEL]
    return {**labels, DEFINITION_LABEL: def_id}


# The run's id is its Job's name after the prefix; the shell (the command a one-off job runs
# too) makes the output folder and hands papermill the output path last.
_RUN_SCRIPT = (
    'GPUSESSIONS_JOB_ID="${{GPUSESSIONS_JOB_NAME#{prefix}}}"; export GPUSESSIONS_JOB_ID; '
    'o="{root}/$GPUSESSIONS_JOB_ID"; mkdir -p "$o" && exec "$@" "$o/$0"'
)


def run_command(request: J.JobRequest, papermill: str) -> list[str]:
    """The container's command for a run: papermill's arguments, the output path added by the
    shell once it knows the run's id (`$GPUSESSIONS_JOB_NAME`)."""
    argv = J.papermill_argv(request, "x", papermill)
    del argv[2]  # the output path (papermill reads it as the second path, after the options)
    stem = request.input.rsplit("/", 1)[-1]
    return ["sh", "-c", _RUN_SCRIPT.format(prefix=PREFIX, root=J.OUTPUT_ROOT), stem, *argv]


def build_cronjob(
    def_id: str,
    namespace: str,
    username: str,
    definition: Definition,
    settings: J.JobSettings,
    gpu: GPURequest | None,
    size_text: str = "",
    history_limit: int = 3,
) -> Obj:
    """The CronJob of a definition; its jobTemplate is the one-off Job, made a run (above)."""
    if not _DEF_ID.match(def_id):
        raise ValueError(f"definition id {def_id!r} must be 8-16 lowercase letters and digits")
    if definition.job.workers != 1:
        raise ValueError("a schedule runs one worker")
    name = definition_name(def_id)
    job = J.build_job(def_id, namespace, username, definition.job, settings, gpu, size_text)
    labels = _run_labels(username, def_id, settings.queue_labels)
    pod = job["spec"]["template"]
    pod["metadata"]["labels"] = dict(labels)
    container = pod["spec"]["containers"][0]
    container["command"] = run_command(definition.job, settings.papermill)
    container["env"] = [
        *(e for e in container["env"] if e["name"] != "GPUSESSIONS_JOB_ID"),
        {
            "name": "GPUSESSIONS_JOB_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{JOB_NAME_LABEL}']"}},
        },
        {"name": "GPUSESSIONS_JOB_DEFINITION_ID", "value": def_id},
    ]
    for rc in pod["spec"].get("resourceClaims") or []:
        rc["resourceClaimTemplateName"] = name
    cron_labels = {
        **L.owner_labels(DEFINITION, username, ""),
        L.NOTEBOOK_COMPONENT: DEFINITION,
        DEFINITION_LABEL: def_id,
        **settings.queue_labels,
    }
    spec: Obj = {
        "schedule": definition.schedule,
        "suspend": not definition.active,
        "concurrencyPolicy": "Forbid",
        "startingDeadlineSeconds": STARTING_DEADLINE,
        "successfulJobsHistoryLimit": history_limit,
        "failedJobsHistoryLimit": history_limit,
        "jobTemplate": {
            "metadata": {"labels": labels, "annotations": job["metadata"]["annotations"]},
            "spec": job["spec"],
        },
    }
    if definition.timezone:
        spec["timeZone"] = definition.timezone
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": cron_labels,
            "annotations": {
                **L.owner_annotations(username, ""),
                DEFINITION_ANNOTATION: json.dumps(
                    {**definition.json(), "size_text": size_text}, sort_keys=True
                ),
            },
        },
        "spec": spec,
    }


def build_claim_template(
    def_id: str, namespace: str, username: str, gpu: GPURequest, queue_labels: Mapping[str, str]
) -> Obj:
    """The ResourceClaimTemplate every run of the definition uses (owned by the CronJob)."""
    t = J.build_claim_template(def_id, namespace, username, gpu, queue_labels)
    md = t["metadata"]
    md["name"] = definition_name(def_id)
    md["labels"] = {**_run_labels(username, def_id, queue_labels), L.COMPONENT: "job-claim"}
    claim = t["spec"]["metadata"]["labels"]
    del claim[J.JOB_ID_LABEL]
    claim[DEFINITION_LABEL] = def_id
    return t


def owner_reference(cronjob: Obj, controller: bool = False) -> Obj:
    """An owner reference to a created CronJob: what it owns goes with it."""
    return owners.owner_reference(
        cronjob, "batch/v1", "CronJob", block_owner_deletion=False, controller=controller
    )


def build_run(cronjob: Obj, run: str) -> Obj:
    """A run now: the Job the CronJob controller would make (`kubectl create job --from`),
    owned by the CronJob (KAI groups it as the scheduled runs; it goes with the definition)."""
    if not re.fullmatch(r"[a-z0-9]{1,16}", run):
        raise ValueError(f"run {run!r} must be 1-16 lowercase letters and digits")
    tmpl = cronjob["spec"]["jobTemplate"]
    md = cronjob["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{md['name']}-{run}",
            "namespace": md["namespace"],
            "labels": dict(tmpl["metadata"]["labels"]),
            "annotations": {**tmpl["metadata"]["annotations"], MANUAL_ANNOTATION: "manual"},
            "ownerReferences": [owner_reference(cronjob, controller=True)],
        },
        "spec": copy.deepcopy(tmpl["spec"]),
    }


def read_definition(cronjob: Obj) -> Obj:
    """The definition a CronJob was built from (its annotation), {} when unreadable."""
    raw = ((cronjob.get("metadata") or {}).get("annotations") or {}).get(DEFINITION_ANNOTATION) or "{}"
    try:
        out = json.loads(raw)
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def describe(cronjob: Obj) -> Obj:
    """A definition as the endpoints answer it."""
    md = cronjob["metadata"]
    d = read_definition(cronjob)
    spec = cronjob.get("spec") or {}
    st = cronjob.get("status") or {}
    tmpl = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template", {}).get("spec", {})
    return {
        "id": (md.get("labels") or {}).get(DEFINITION_LABEL, ""),
        "name": d.get("name", ""),
        "input": d.get("input", ""),
        "size": d.get("size", ""),
        "size_text": d.get("size_text", ""),
        "parameters": d.get("parameters", {}),
        "output_formats": d.get("output_formats", ["ipynb"]),
        "schedule": spec.get("schedule", ""),
        "timezone": spec.get("timeZone"),
        "active": not spec.get("suspend", False),
        "queue": (md.get("labels") or {}).get(L.QUEUE_LABEL),
        "priority": tmpl.get("priorityClassName"),
        "created": md.get("creationTimestamp"),
        "last_schedule_time": st.get("lastScheduleTime"),
        "last_successful_time": st.get("lastSuccessfulTime"),
        "active_runs": len(st.get("active") or []),
    }
