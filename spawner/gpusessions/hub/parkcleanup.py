"""A deleted user's (or named server's) parked sessions go with them (`delete_forever`).

The hub cannot read the user's home, so it runs `core.parkcleanup`'s pod with the notebook's
image, volumes, security contexts and init containers, waits for it at most
`park_cleanup_timeout` seconds, and deletes it. Skipped where the home itself goes:
KubeSpawner's `delete_forever` deletes the home PVC it made (`storage_pvc_ensure` and
`delete_pvc`, for a named server only when its PVC is its own). A cleanup that fails or runs
out of time is logged as an error that names the folder to delete by hand; it never stops the
user's deletion.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpusessions.core import parkcleanup as P
from gpusessions.core.requests import configured
from gpusessions.hub import usercode
from gpusessions.kube.api import Conflict, KubeError, SessionAPI


def home_goes(spawner: Any) -> bool:
    """KubeSpawner's `delete_forever` deletes this server's home PVC (and the parks in it)."""
    if not (spawner.storage_pvc_ensure and spawner.delete_pvc):
        return False
    return not spawner.name or "{user_server}" in spawner.pvc_name_template


def settings(spawner: Any) -> P.CleanupSettings:
    """The pod's settings: the notebook's, as the hub configures them (not a profile's)."""

    def setting(name: str) -> Any:
        return configured(spawner, name)

    def dicts(items: Any) -> tuple[dict[str, Any], ...]:
        return tuple(x for x in spawner._expand_all(list(items or [])) or [] if isinstance(x, dict))

    return P.CleanupSettings(
        image=str(setting("image")),
        volumes=dicts(spawner._sorted_dict_values(setting("volumes"))),
        volume_mounts=dicts(spawner._sorted_dict_values(setting("volume_mounts"))),
        **usercode.pod_fields(spawner, setting),
        deadline_seconds=int(spawner.park_cleanup_timeout),
    )


async def delete_parks(spawner: Any) -> bool:
    """Delete the server's parks in the user's home (all of them with the default server, which
    goes only with the user). True when done or nothing to do; False when it failed (logged)."""
    user, server = spawner.user.name, spawner.name or ""
    who = f"{user}/{server}" if server else user
    where = f"~/{P.PARK_ROOT}" + (f"/{server}" if server else "")
    if not (spawner.persist_kernels and spawner.park_kernels):
        return True
    if home_goes(spawner):
        spawner.log.info("%s: the home PVC is deleted, and the parked sessions in it", who)
        return True
    n = spawner._names()
    api = SessionAPI.of(spawner)
    name = P.pod_name(n.holder)
    body = P.build_cleanup_pod(name, n.namespace, user, server, settings(spawner))
    timeout = float(spawner.park_cleanup_timeout)
    try:
        try:
            await api.create_pod(body)
        except Conflict:  # left by an earlier try (a hub that died in it): made afresh
            await api.delete_pod(n.namespace, name, grace_seconds=0)
            await api.create_pod(body)
        done, why = await _wait(api, n.namespace, name, timeout)
    except KubeError as e:
        done, why = False, f"the cluster refused its pod: {e.message}"
    finally:
        try:
            await api.delete_pod(n.namespace, name, grace_seconds=0)
        except KubeError as e:
            spawner.log.warning("%s: could not delete the park cleanup pod %s: %s", who, name, e.message)
    if done:
        spawner.log.info("%s: deleted the parked sessions in %s", who, where)
    else:
        spawner.log.error(
            "%s: could not delete the parked sessions in the user's home (%s): %s. Delete that "
            "folder by hand.",
            who,
            where,
            why,
        )
    return done


async def _wait(api: SessionAPI, namespace: str, name: str, timeout: float) -> tuple[bool, str]:
    deadline = time.monotonic() + timeout
    pause = 0.25
    while True:
        done, why = P.outcome(await api.get_pod(namespace, name))
        if done is not None:
            return done, why
        if time.monotonic() > deadline:
            return False, f"its pod did not finish within {timeout:g} s"
        await asyncio.sleep(pause)
        pause = min(pause * 2, 2.0)
