"""Where a pod of ours may run, and with what: the pod spec fields the holder pod
(`claims.build_holder_pod`) and a notebook job's pod (`jobs.build_job`) share (pure).

The notebook pod is KubeSpawner's own (`make_pod` sets these fields from the same settings);
the holder and the job pods are built here, so a profile's node selector, tolerations,
affinity, scheduler, priority and pull secrets reach them the same way.

- `affinity_of`: KubeSpawner's six affinity settings (`node_affinity_required`, ...,
  `pod_anti_affinity_preferred`) as one `affinity` object, composed as KubeSpawner composes
  them for the notebook pod; None when none is set.
- `placement`: the spec fields of a pod from its settings (only the ones that are set).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

Obj = dict[str, Any]

# KubeSpawner's affinity settings: (setting, affinity kind, field).
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
AFFINITY_SETTINGS = (
    ("node_affinity_required", "nodeAffinity", _REQUIRED),
    ("node_affinity_preferred", "nodeAffinity", _PREFERRED),
    ("pod_affinity_required", "podAffinity", _REQUIRED),
    ("pod_affinity_preferred", "podAffinity", _PREFERRED),
    ("pod_anti_affinity_required", "podAntiAffinity", _REQUIRED),
    ("pod_anti_affinity_preferred", "podAntiAffinity", _PREFERRED),
)


def _items(value: Any) -> list[Obj]:
    """A setting's terms: a list, or a dict of terms (KubeSpawner sorts those by key)."""
    if isinstance(value, Mapping):
        value = [value[k] for k in sorted(value)]
    return [dict(v) for v in value or () if isinstance(v, Mapping)]


def affinity_of(get: Callable[[str], Any]) -> Obj | None:
    """The pod `affinity` from KubeSpawner's six settings (`get(name)` reads one)."""
    out: Obj = {}
    for name, kind, key in AFFINITY_SETTINGS:
        terms = _items(get(name))
        if not terms:
            continue
        if kind == "nodeAffinity" and key == _REQUIRED:
            out.setdefault(kind, {})[key] = {"nodeSelectorTerms": terms}
        else:
            out.setdefault(kind, {})[key] = terms
    return out or None


class Placed(Protocol):
    """Settings that say where a pod runs (`claims.HolderSettings`, `jobs.JobSettings`)."""

    @property
    def node_selector(self) -> Mapping[str, str]: ...
    @property
    def tolerations(self) -> tuple[Obj, ...]: ...
    @property
    def affinity(self) -> Obj | None: ...
    @property
    def scheduler_name(self) -> str | None: ...
    @property
    def priority_class(self) -> str | None: ...
    @property
    def image_pull_secrets(self) -> tuple[str, ...]: ...


def placement(settings: Placed, volumes: Iterable[Obj] = ()) -> Obj:
    """The pod spec fields for these settings (and the pod's volumes); a field left empty is
    not set (the cluster's default: its default scheduler, no priority class, any node)."""
    spec: Obj = {}
    if vols := [dict(v) for v in volumes]:
        spec["volumes"] = vols
    if settings.node_selector:
        spec["nodeSelector"] = dict(settings.node_selector)
    if tols := [dict(t) for t in settings.tolerations]:
        spec["tolerations"] = tols
    if settings.affinity:
        spec["affinity"] = settings.affinity
    if settings.scheduler_name:
        spec["schedulerName"] = settings.scheduler_name
    if settings.priority_class:
        spec["priorityClassName"] = settings.priority_class
    if secrets := [s for s in settings.image_pull_secrets if s]:
        spec["imagePullSecrets"] = [{"name": s} for s in secrets]
    return spec


def pull_secrets(value: Any) -> tuple[str, ...]:
    """KubeSpawner's `image_pull_secrets` (names, or {"name": ...} objects) as names."""
    if isinstance(value, (str, Mapping)):
        value = [value]
    out = (v if isinstance(v, str) else (v or {}).get("name", "") for v in value or ())
    return tuple(s for s in out if s)
