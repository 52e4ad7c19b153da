"""What pods running user code beside the notebook (the holder's kernels, notebook jobs) take
from the notebook pod's settings: its init containers named in `user_code_init_containers`
(Zero to JupyterHub's `block-cloud-metadata`: the iptables rule that keeps user code away from
the cloud metadata server), as plain dicts."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


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
