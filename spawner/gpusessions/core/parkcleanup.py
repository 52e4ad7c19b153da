"""The pod that deletes a deleted user's (or named server's) parked sessions from their home (pure).

The hub cannot read users' homes (on a real cluster they are PVCs mounted only in the user's
own pods), so when JupyterHub deletes a user or a named server (`delete_forever`), the spawner
runs a short-lived pod as the notebook pod runs: the notebook's image, volumes and volume
mounts, security contexts (the user's uid, non-root, no privilege escalation, no capabilities),
the init containers user code gets (`user_code_init_containers`), placement, no service
account token and no network of its own use. Its one command removes the parks:

- the default server (JupyterHub deletes it only with the user): `~/.gpusessions/parked`,
  every server's parks in that home;
- a named server: `~/.gpusessions/parked/<server>` and the parks set aside beside it
  (`<server>.restored-*`, `<server>.unrestored-*`).

`outcome` reads the pod back: done, failed (with the container's words), or still running.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusessions.core import labels as L
from gpusessions.core.placement import placement
from gpusessions.core.security import Contexts

Obj = dict[str, Any]

COMPONENT = "park-cleanup"  # app.kubernetes.io/component of the pod
CONTAINER = "park-cleanup"
PARK_ROOT = ".gpusessions/parked"  # under $HOME, as gpusessions.notebook.parkrecord has it
# $0: the server's folder name under the park root ("" for all of them, the user is deleted).
SCRIPT = (
    'p="$HOME/' + PARK_ROOT + '"; '
    'if [ -z "$0" ]; then rm -rf -- "$p"; '
    'else rm -rf -- "$p/$0" "$p/$0".restored-* "$p/$0".unrestored-*; fi; '
    'if [ -z "$0" ] && [ -e "$p" ]; then echo "$p is still there" >&2; exit 1; fi; '
    'if [ -n "$0" ] && [ -e "$p/$0" ]; then echo "$p/$0 is still there" >&2; exit 1; fi; '
    'echo "parked sessions deleted: ${0:-all}"'
)


@dataclass(frozen=True)
class CleanupSettings:
    """What the pod takes from the notebook's settings."""

    image: str
    volumes: tuple[Obj, ...] = ()
    volume_mounts: tuple[Obj, ...] = ()
    security: Contexts = field(default_factory=Contexts)
    init_containers: tuple[Obj, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Obj, ...] = ()
    affinity: Obj | None = None
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    scheduler_name: str | None = None
    priority_class: str | None = None
    deadline_seconds: int = 120  # activeDeadlineSeconds: the pod never runs on past it


def pod_name(holder: str) -> str:
    """The cleanup pod of a session, named after its holder (`gpu-holder-<x>`)."""
    rest = holder.removeprefix("gpu-holder-")
    return f"gpu-park-cleanup-{rest}"[:63].rstrip("-.")


def build_cleanup_pod(name: str, namespace: str, username: str, servername: str, s: CleanupSettings) -> Obj:
    container: Obj = {
        "name": CONTAINER,
        "image": s.image,
        "command": ["sh", "-c", SCRIPT, servername],
        "securityContext": s.security.container_context(),
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
    }
    if s.volume_mounts:
        container["volumeMounts"] = [dict(m) for m in s.volume_mounts]
    if s.image_pull_policy:
        container["imagePullPolicy"] = s.image_pull_policy
    spec: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 5,
        "activeDeadlineSeconds": s.deadline_seconds,
        "securityContext": s.security.pod_context(),
        "containers": [container],
    }
    if s.init_containers:
        spec["initContainers"] = [dict(c) for c in s.init_containers]
    spec.update(placement(s, volumes=s.volumes))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": L.owner_labels(COMPONENT, username, servername),
            "annotations": L.owner_annotations(username, servername),
        },
        "spec": spec,
    }


def outcome(pod: Obj | None) -> tuple[bool | None, str]:
    """(True, "") when the pod did its work, (False, why) when it failed or is gone, (None, "")
    while it runs or waits."""
    if pod is None:
        return False, "its pod was deleted before it finished"
    st = pod.get("status") or {}
    phase = st.get("phase")
    if phase == "Succeeded":
        return True, ""
    if phase == "Failed":
        for c in st.get("containerStatuses") or []:
            term = ((c.get("state") or {}).get("terminated")) or {}
            if term:
                words = term.get("message") or term.get("reason") or f"exit code {term.get('exitCode')}"
                return False, f"its pod failed: {words}"
        return False, f"its pod failed: {st.get('reason') or st.get('message') or 'no reason given'}"
    for c in st.get("containerStatuses") or []:
        waiting = ((c.get("state") or {}).get("waiting")) or {}
        if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError"):
            return False, f"its pod cannot start: {waiting.get('reason')}: {waiting.get('message', '')}"
    return None, ""
