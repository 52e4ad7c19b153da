"""Owner references: what a Kubernetes object of ours belongs to, so it goes with its owner."""

from __future__ import annotations

from typing import Any

Obj = dict[str, Any]


def owner_reference(
    owner: Obj,
    api_version: str,
    kind: str,
    *,
    block_owner_deletion: bool | None = None,
    controller: bool = False,
) -> Obj:
    """A reference to a created object (`owner`: its name and uid are read from its metadata).

    `block_owner_deletion` is written only when given; `controller` only when True."""
    md = owner["metadata"]
    ref: Obj = {"apiVersion": api_version, "kind": kind, "name": md["name"], "uid": md["uid"]}
    if block_owner_deletion is not None:
        ref["blockOwnerDeletion"] = block_owner_deletion
    if controller:
        ref["controller"] = True
    return ref


def references(metadata: Obj) -> list[Obj]:
    """An object's owner references, in the API's spelling or the Python client's."""
    return list(metadata.get("ownerReferences") or metadata.get("owner_references") or [])


def owned_by(metadata: Obj, owner: Obj) -> bool:
    """Whether the object with this metadata names `owner` (by uid) among its owners."""
    uid = owner["metadata"].get("uid")
    return any(r.get("uid") == uid for r in references(metadata))


def owner_name(metadata: Obj, kind: str) -> str | None:
    """The name of the object's first owner of this kind."""
    for ref in references(metadata):
        if ref.get("kind") == kind:
            return str(ref.get("name"))
    return None
