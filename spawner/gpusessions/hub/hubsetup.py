"""One JupyterHub setup from one settings document, for the Helm chart and the demo.

The companion chart renders `settings.json` (ConfigMap `gpusessions-hub-settings`,
mounted into z2jh's hub pod); `hub_config/chart_config.py` reads it and calls
`apply(c, settings)`. The demo builds the same document in `hub_config/demo_config.py`.
`check()` refuses a wrong document with a message naming the key, before anything is set:
the document's one schema is `settings.schema.json` beside this module (jsonschema), and
check() adds only the rules across items that a schema cannot state.

    {"sizes": [{"name", "displayName", "description", "deviceClass", "count", "default",
                "match"?, "priorityClass"?, "jobPriorityClass"?, "persistKernels"?}],
     "cpuProfile": {"enabled", "displayName", "description"},
     "kai": {"enabled", "schedulerName", "priorityClass", "defaultQueue",
             "queues": {<queue>: {"groups": [...], "gpuEquivalents": 2}}},
     "holder": {"image", "persistKernels", "kernelImage", "kernelNetworkPolicy",
                "onHolderLoss", "keepGpuOnStop", "agentTokenSecret"},
     "culler": {"enabled", "serviceName", "url"? | "args"?, "admins", "adminGroups"},
     "jobs": {"enabled", "priorityClass"?, "queuePriorityClass"?, "requeueLimit"?,
              "maxActiveJobs"?, "maxWorkers"?, "allowCpu"?, "ttlSecondsAfterFinished"?,
              "activeDeadlineSeconds"?,
              "schedules"?: {"enabled", "minIntervalMinutes"?, "maxDefinitions"?, "historyLimit"?}}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema

from gpusessions.core import kernels as K
from gpusessions.core import queues as Q
from gpusessions.core.sizes import DeviceMatch
from gpusessions.hub.configure import configure_hub
from gpusessions.hub.cullerservice import configure_culler

Obj = dict[str, Any]
# The document's jobs settings -> c.NotebookJobs traits (hub/jobs.py).
JOB_SETTINGS = {
    "priorityClass": "priority_class",
    "queuePriorityClass": "queue_priority_class",
    "requeueLimit": "requeue_limit",
    "maxActiveJobs": "max_active_jobs",
    "maxWorkers": "max_workers",
    "allowCpu": "allow_cpu",
    "ttlSecondsAfterFinished": "ttl_seconds_after_finished",
    "activeDeadlineSeconds": "active_deadline_seconds",
}


# The document's jobs.schedules settings -> c.NotebookJobDefinitions traits (hub/jobdefs.py).
SCHEDULE_SETTINGS = {
    "minIntervalMinutes": "min_interval_minutes",
    "maxDefinitions": "max_definitions",
    "historyLimit": "history_limit",
}


class SettingsError(ValueError):
    """A settings document that cannot be used; the message names the key."""


def load(path: str | Path) -> Obj:
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise SettingsError(
            f"gpusessions settings file {p} is missing: is the gpusessions chart installed and "
            "its ConfigMap gpusessions-hub-settings mounted (helm/z2jh-values.yaml)?"
        ) from None
    except json.JSONDecodeError as e:
        raise SettingsError(f"gpusessions settings file {p} is not valid JSON: {e}") from None
    return check(doc)


def _expect(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise SettingsError(f"gpusessions settings: {where}: {what}")


SCHEMA_PATH = Path(__file__).with_name("settings.schema.json")
SCHEMA: Obj = json.loads(SCHEMA_PATH.read_text())
# JSON Schema counts 2.0 as an integer; a size's count is an int (as it always was here), not a bool.
_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool)
    ),
)
_Validator.check_schema(SCHEMA)
_VALIDATOR = _Validator(SCHEMA)
_TYPE_WORDS = {"object": "must be a mapping", "array": "must be a list"}


def _where(path: Any) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "top level"


def _message(e: jsonschema.ValidationError) -> str:
    """One schema error in words, as check() always said it (the schema's `x-messages` first)."""
    value, schema = e.instance, e.schema if isinstance(e.schema, dict) else {}
    custom = (schema.get("x-messages") or {}).get(str(e.validator))
    if custom:
        return str(custom).format(value=value)
    if e.validator == "type":
        want = e.validator_value
        if want in _TYPE_WORDS:
            return _TYPE_WORDS[want]
        return f"must be {'true or false' if want == 'boolean' else 'a ' + str(want)}, not {value!r}"
    if e.validator == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        return f"unknown key(s) {sorted(set(value) - set(known))}; known: {known}"
    if e.validator == "required":
        return f"missing key(s) {sorted(k for k in e.validator_value if k not in value)}"
    if e.validator == "minLength":
        return "must not be empty"
    if e.validator == "enum":
        return f"one of {sorted(e.validator_value)}"
    return e.message


def check(doc: Any) -> Obj:
    """Validate a settings document; returns it unchanged or raises SettingsError.

    First the one schema (settings.schema.json, with jsonschema), then what a schema cannot say:
    the rules across items."""
    error = next(iter(_VALIDATOR.iter_errors(doc)), None)
    if error is not None:
        raise SettingsError(f"gpusessions settings: {_where(error.absolute_path)}: {_message(error)}")
    top: Obj = doc
    seen = {"cpu"}  # the CPU profile's slug
    for i, s in enumerate(top["sizes"]):
        w = f"sizes[{i}]"
        _expect(s["name"] not in seen, f"{w}.name", f"{s['name']!r} is used twice (or reserved)")
        seen.add(s["name"])
        if "match" in s:
            m = s["match"]
            try:
                DeviceMatch.of(m.get("attributes"), m.get("capacity"), m.get("driver", "gpu.nvidia.com"))
            except (ValueError, TypeError, AttributeError) as e:
                raise SettingsError(f"gpusessions settings: {w}.match: {e}") from None
    kai = top.get("kai", {})
    if kai.get("enabled", False):
        queues = kai.get("queues", {})
        groups: dict[str, str] = {}
        for q, spec in queues.items():
            for g in spec["groups"]:
                _expect(g not in groups, f"kai.queues.{q}.groups", f"group {g!r} is also in {groups.get(g)}")
                groups[g] = q
        dq = kai.get("defaultQueue", "")
        _expect(not dq or dq in queues, "kai.defaultQueue", f"{dq!r} is not one of kai.queues")
    return top


def profiles(settings: Obj) -> list[Obj]:
    """KubeSpawner `profile_list` entries: CPU only (if enabled), then one per size."""
    out: list[Obj] = []
    cpu = settings.get("cpuProfile", {})
    if cpu.get("enabled", True):
        out.append(
            {
                "display_name": cpu.get("displayName", "CPU only"),
                "slug": "cpu",
                "description": cpu.get("description", "A notebook without a GPU."),
            }
        )
    for s in settings["sizes"]:
        override: Obj = {"gpu_device_class": s["deviceClass"], "gpu_count": s.get("count", 1)}
        if "match" in s:
            override["gpu_size"] = s["match"]
        if "priorityClass" in s:
            override["kai_priority_class"] = s["priorityClass"]
        if "jobPriorityClass" in s:  # this size's notebook jobs (hub/jobs.py; default `train`)
            override["job_priority_class"] = s["jobPriorityClass"]
        if "persistKernels" in s:
            override["persist_kernels"] = s["persistKernels"]
        entry = {
            "display_name": s["displayName"],
            "slug": s["name"],
            "description": s.get("description", ""),
            "kubespawner_override": override,
        }
        if s.get("default"):
            entry["default"] = True
        out.append(entry)
    if out and not any(p.get("default") for p in out):
        out[0]["default"] = True
    return out


def apply(c: Any, settings: Obj, culler_env: dict[str, str] | None = None) -> None:
    """Set the spawner, profiles, KAI queues, holder and culler on a JupyterHub config."""
    check(settings)
    c.JupyterHub.spawner_class = "gpusessions"
    c.KubeSpawner.profile_list = profiles(settings)
    g = c.GPUSessionSpawner
    holder = settings.get("holder", {})
    if holder.get("image"):
        g.holder_image = holder["image"]
    if "persistKernels" in holder:
        g.persist_kernels = holder["persistKernels"]
    if holder.get("kernelImage"):
        g.kernel_image = holder["kernelImage"]
    if "kernelNetworkPolicy" in holder:
        g.kernel_network_policy = holder["kernelNetworkPolicy"]
    if "onHolderLoss" in holder:
        g.on_holder_loss = holder["onHolderLoss"]
    if "keepGpuOnStop" in holder:
        g.keep_gpu_on_stop = holder["keepGpuOnStop"]
    if holder.get("agentTokenSecret"):
        g.agent_token_secret = holder["agentTokenSecret"]
    kai = settings.get("kai", {})
    if kai.get("enabled"):
        mapping = {grp: q for q, spec in kai["queues"].items() for grp in spec["groups"]}
        g.kai_queue = mapping
        g.kai_default_queue = kai.get("defaultQueue", "")
        g.kai_priority_class = kai.get("priorityClass", Q.PRIORITY_CLASS)
        g.kai_scheduler_name = kai.get("schedulerName", Q.SCHEDULER_NAME)
        g.kai_gpu_quota = {
            q: spec["gpuEquivalents"] for q, spec in kai["queues"].items() if spec.get("gpuEquivalents")
        }
    # Notebook jobs (hub/jobs.py): off unless the document enables them (the chart's
    # jobs.enabled, which also gives the hub and the culler their rights for jobs).
    jobs = settings.get("jobs", {})
    c.NotebookJobs.enabled = bool(jobs.get("enabled", False))
    for key, trait in JOB_SETTINGS.items():
        if key in jobs:
            setattr(c.NotebookJobs, trait, jobs[key])
    # Schedules (hub/jobdefs.py): off unless the document enables them too (the chart's
    # jobs.schedules.enabled, which gives the hub its rights for CronJobs).
    schedules = jobs.get("schedules", {})
    c.NotebookJobDefinitions.enabled = bool(jobs.get("enabled", False) and schedules.get("enabled", False))
    for key, trait in SCHEDULE_SETTINGS.items():
        if key in schedules:
            setattr(c.NotebookJobDefinitions, trait, schedules[key])
    configure_hub(c)
    culler = settings.get("culler", {})
    if culler.get("enabled") and culler.get("url"):
        # The chart's culler Deployment reads the agents: nothing else (not the hub's pod).
        g.agent_network_peers = [dict(K.CHART_CULLER)]
    if culler.get("enabled"):
        configure_culler(
            c,
            admins=culler.get("admins", []),
            admin_groups=culler.get("adminGroups", []),
            args=culler.get("args"),
            url=culler.get("url"),
            name=culler.get("serviceName", "gpusessions"),
            environment=culler_env,
        )
