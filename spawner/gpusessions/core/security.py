"""The security contexts of a pod that runs user code beside the notebook (a notebook job's),
composed as KubeSpawner composes the notebook pod's, over a non-root floor.

KubeSpawner (kubespawner/objects.py, make_pod): the container's context is `uid`, `gid`,
`privileged` and `allow_privilege_escalation`, then `container_security_context` over them;
the pod's is `fs_gid` and `supplemental_gids`, then `pod_security_context`. Under both, here:
non-root, no privilege escalation, no capabilities, the runtime's seccomp profile (what
GPUSessionSpawner's own default `container_security_context` asks of the notebook); a setting
that says otherwise (an image that must start as root) wins, as on the notebook pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

CONTAINER_FLOOR: Obj = {
    "runAsNonRoot": True,
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
POD_FLOOR: Obj = {"seccompProfile": {"type": "RuntimeDefault"}}


@dataclass(frozen=True)
class Contexts:
    """The notebook's security settings, as the spawner has them for a profile."""

    uid: int | None = 1000
    gid: int | None = 100
    fs_gid: int | None = 100
    supplemental_gids: tuple[int, ...] = ()
    privileged: bool = False
    allow_privilege_escalation: bool | None = False
    container: Mapping[str, Any] = field(default_factory=dict)  # container_security_context
    pod: Mapping[str, Any] = field(default_factory=dict)  # pod_security_context

    def container_context(self) -> Obj:
        out: Obj = {k: (dict(v) if isinstance(v, dict) else v) for k, v in CONTAINER_FLOOR.items()}
        if self.uid is not None:
            out["runAsUser"] = self.uid
        if self.gid is not None:
            out["runAsGroup"] = self.gid
        if self.privileged:
            out["privileged"] = True
        if self.allow_privilege_escalation is not None:
            out["allowPrivilegeEscalation"] = self.allow_privilege_escalation
        out.update(self.container)
        return out

    def pod_context(self) -> Obj:
        out: Obj = dict(POD_FLOOR)
        if self.fs_gid is not None:
            out["fsGroup"] = self.fs_gid
        if self.supplemental_gids:
            out["supplementalGroups"] = list(self.supplemental_gids)
        out.update(self.pod)
        return out


def contexts_of(get: Callable[[str], Any]) -> Contexts:
    """The notebook's security settings from KubeSpawner's (`get(name)` reads one)."""

    def num(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    return Contexts(
        uid=num(get("uid")),
        gid=num(get("gid")),
        fs_gid=num(get("fs_gid")),
        supplemental_gids=ints(get("supplemental_gids")),
        privileged=bool(get("privileged")),
        allow_privilege_escalation=get("allow_privilege_escalation"),
        container=dict(get("container_security_context") or {}),
        pod=dict(get("pod_security_context") or {}),
    )


def ints(values: Sequence[Any] | None) -> tuple[int, ...]:
    return tuple(v for v in values or () if isinstance(v, int) and not isinstance(v, bool))
