"""One JupyterHub setup from one settings document, for the Helm chart and the demo.

The companion chart renders `settings.json` (ConfigMap `gpusessions-hub-settings`,
mounted into z2jh's hub pod); `hub_config/chart_config.py` reads it and calls
`apply(c, settings)`. The demo builds the same document in `hub_config/demo_config.py`.
`check()` refuses a wrong document with a message naming the key, before anything is set.

    {"sizes": [{"name", "displayName", "description", "deviceClass", "count", "default",
                "match"?, "priorityClass"?, "persistKernels"?}],
     "cpuProfile": {"enabled", "displayName", "description"},
     "kai": {"enabled", "schedulerName", "priorityClass", "defaultQueue",
             "queues": {<queue>: {"groups": [...], "gpuEquivalents": 2}}},
     "holder": {"image", "persistKernels", "kernelImage", "kernelNetworkPolicy",
                "onHolderLoss", "keepGpuOnStop", "agentTokenSecret"},
     "culler": {"enabled", "serviceName", "url"? | "args"?, "admins", "adminGroups"}}
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from gpusessions.core.sizes import DeviceMatch
from gpusessions.culler.hubconfig import configure_culler
from gpusessions.hub.handlers import configure_hub

Obj = dict[str, Any]
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PRIORITIES = {"build", "build-preemptible", "train", "inference"}


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


def _keys(obj: Any, where: str, allowed: set[str], required: set[str] | None = None) -> Obj:
    required = required or set()
    _expect(isinstance(obj, dict), where, "must be a mapping")
    unknown = sorted(set(obj) - allowed)
    _expect(not unknown, where, f"unknown key(s) {unknown}; known: {sorted(allowed)}")
    missing = sorted(required - set(obj))
    _expect(not missing, where, f"missing key(s) {missing}")
    return obj


def _str(v: Any, where: str, pattern: re.Pattern[str] | None = None, empty: bool = True) -> str:
    _expect(isinstance(v, str), where, f"must be a string, not {v!r}")
    _expect(empty or v != "", where, "must not be empty")
    if pattern is not None and v:
        _expect(bool(pattern.fullmatch(v)), where, f"{v!r} is not a valid name ({pattern.pattern})")
    return str(v)


def _bool(v: Any, where: str) -> bool:
    _expect(isinstance(v, bool), where, f"must be true or false, not {v!r}")
    return bool(v)


def check(doc: Any) -> Obj:
    """Validate a settings document; returns it unchanged or raises SettingsError."""
    top = _keys(doc, "top level", {"sizes", "cpuProfile", "kai", "holder", "culler"}, {"sizes"})
    sizes = top["sizes"]
    _expect(isinstance(sizes, list), "sizes", "must be a list")
    seen: set[str] = set()
    for i, s in enumerate(sizes):
        w = f"sizes[{i}]"
        _keys(
            s,
            w,
            {"name", "displayName", "description", "deviceClass", "count", "default"}
            | {"match", "priorityClass", "persistKernels"},
            {"name", "displayName", "deviceClass"},
        )
        name = _str(s["name"], f"{w}.name", _NAME, empty=False)
        _expect(name not in seen and name != "cpu", f"{w}.name", f"{name!r} is used twice (or reserved)")
        seen.add(name)
        _str(s["displayName"], f"{w}.displayName", empty=False)
        _str(s.get("description", ""), f"{w}.description")
        _str(s["deviceClass"], f"{w}.deviceClass", re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"), empty=False)
        count = s.get("count", 1)
        _expect(type(count) is int and 1 <= count <= 8, f"{w}.count", f"must be 1 to 8, not {count!r}")
        _bool(s.get("default", False), f"{w}.default")
        if "priorityClass" in s:
            _expect(s["priorityClass"] in _PRIORITIES, f"{w}.priorityClass", f"one of {sorted(_PRIORITIES)}")
        if "persistKernels" in s:
            _bool(s["persistKernels"], f"{w}.persistKernels")
        if "match" in s:
            m = _keys(s["match"], f"{w}.match", {"attributes", "capacity", "driver"})
            try:
                DeviceMatch.of(m.get("attributes"), m.get("capacity"), m.get("driver", "gpu.nvidia.com"))
            except (ValueError, TypeError, AttributeError) as e:
                raise SettingsError(f"gpusessions settings: {w}.match: {e}") from None
    cpu = _keys(top.get("cpuProfile", {}), "cpuProfile", {"enabled", "displayName", "description"})
    _bool(cpu.get("enabled", True), "cpuProfile.enabled")
    kai = _keys(
        top.get("kai", {}),
        "kai",
        {"enabled", "schedulerName", "priorityClass", "queues", "defaultQueue"},
    )
    if _bool(kai.get("enabled", False), "kai.enabled"):
        _expect(
            kai.get("priorityClass", "build") in _PRIORITIES,
            "kai.priorityClass",
            f"one of {sorted(_PRIORITIES)}",
        )
        queues = kai.get("queues", {})
        _expect(isinstance(queues, dict), "kai.queues", "must be a mapping")
        _expect(bool(queues), "kai.queues", "KAI is enabled but no queue is defined")
        groups: dict[str, str] = {}
        for q, spec in queues.items():
            _str(q, f"kai.queues key {q!r}", _NAME, empty=False)
            _keys(spec, f"kai.queues.{q}", {"groups", "gpuEquivalents"}, {"groups"})
            _expect(isinstance(spec["groups"], list), f"kai.queues.{q}.groups", "must be a list")
            for g in spec["groups"]:
                _str(g, f"kai.queues.{q}.groups", empty=False)
                _expect(g not in groups, f"kai.queues.{q}.groups", f"group {g!r} is also in {groups.get(g)}")
                groups[g] = q
            eq = spec.get("gpuEquivalents", 0)
            _expect(
                isinstance(eq, (int, float)) and not isinstance(eq, bool) and eq >= 0,
                f"kai.queues.{q}.gpuEquivalents",
                f"must be a number >= 0, not {eq!r}",
            )
        dq = _str(kai.get("defaultQueue", ""), "kai.defaultQueue", _NAME)
        _expect(not dq or dq in queues, "kai.defaultQueue", f"{dq!r} is not one of kai.queues")
    holder = _keys(
        top.get("holder", {}),
        "holder",
        {"image", "persistKernels", "kernelImage", "kernelNetworkPolicy", "onHolderLoss"}
        | {"keepGpuOnStop", "agentTokenSecret"},
    )
    for k in ("persistKernels", "kernelNetworkPolicy", "keepGpuOnStop"):
        if k in holder:
            _bool(holder[k], f"holder.{k}")
    _expect(
        holder.get("onHolderLoss", "recreate") in ("recreate", "release"),
        "holder.onHolderLoss",
        "recreate or release",
    )
    _str(holder.get("agentTokenSecret", ""), "holder.agentTokenSecret", _NAME)
    culler = _keys(
        top.get("culler", {}),
        "culler",
        {"enabled", "serviceName", "url", "args", "admins", "adminGroups"},
    )
    if _bool(culler.get("enabled", False), "culler.enabled"):
        _str(culler.get("serviceName", "gpusessions"), "culler.serviceName", _NAME, empty=False)
        _expect(
            ("url" in culler) != ("args" in culler), "culler", "give exactly one of url (external) or args"
        )
        for k in ("admins", "adminGroups"):
            v = culler.get(k, [])
            _expect(
                isinstance(v, list) and all(isinstance(x, str) for x in v), f"culler.{k}", "a list of names"
            )
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
        g.kai_priority_class = kai.get("priorityClass", "build")
        g.kai_scheduler_name = kai.get("schedulerName", "kai-scheduler")
        g.kai_gpu_quota = {
            q: spec["gpuEquivalents"] for q, spec in kai["queues"].items() if spec.get("gpuEquivalents")
        }
    configure_hub(c)
    culler = settings.get("culler", {})
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
