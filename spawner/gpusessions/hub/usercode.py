"""What pods running user code beside the notebook (the holder's kernels, notebook jobs) take
from the notebook pod's settings: its init containers named in `user_code_init_containers`
(Zero to JupyterHub's `block-cloud-metadata`: the iptables rule that keeps user code away from
the cloud metadata server), as plain dicts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpusessions.core.placement import affinity_of, pull_secrets
from gpusessions.core.security import contexts_of

Obj = dict[str, Any]


def pod_fields(spawner: Any, setting: Callable[[str], Any]) -> dict[str, Any]:
    """What a pod running as the notebook does takes from its settings (`setting(name)` reads
    one): security contexts, the user-code init containers and placement; the fields of
    `core.jobs.JobSettings` and `core.parkcleanup.CleanupSettings` of those names."""
    return {
        "security": contexts_of(setting),
        "init_containers": init_containers(spawner, setting("init_containers")),
        "node_selector": dict(setting("node_selector") or {}),
        "tolerations": tuple(t for t in setting("tolerations") or () if isinstance(t, dict)),
        "affinity": affinity_of(setting),
        "image_pull_policy": setting("image_pull_policy") or None,
        "image_pull_secrets": pull_secrets(setting("image_pull_secrets")),
    }


def init_containers(spawner: Any, value: Any) -> tuple[Obj, ...]:
    """The init containers of `value` (the spawner's `init_containers`: dicts, or
    kubernetes_asyncio models as z2jh's hub config appends them) that user code gets too."""
    names = set(getattr(spawner, "user_code_init_containers", ()) or ())
    out: list[Obj] = []
    for c in value or ():
        d = _as_dict(c)
        if isinstance(d, dict) and d.get("name") in names:
            out.append(dict(d))
    return tuple(out)


def _as_dict(model: Any) -> Any:
    """A kubernetes client model as the API's JSON (camelCase keys, unset fields left out)."""
    if isinstance(model, list | tuple):
        return [_as_dict(x) for x in model]
    if isinstance(model, dict):
        return {k: _as_dict(v) for k, v in model.items()}
    names = getattr(model, "attribute_map", None)
    if not isinstance(names, dict):
        return model
    return {
        names[attr]: _as_dict(getattr(model, attr))
        for attr in getattr(model, "openapi_types", names)
        if getattr(model, attr, None) is not None
    }
