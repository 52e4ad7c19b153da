"""The size definition check at hub start: every configured GPU size against the cluster.

A size whose selector reads an attribute or capacity that some device lacks is not skipped on
that device by the scheduler: the CEL error fails the claim, and a user would wait for a GPU
forever. A cluster whose driver (25.8.0) publishes a GPU both whole and cut into MIG devices lets
a whole-GPU claim take a GPU that MIG sessions use. Both are found from the slices when the hub
starts and logged as errors, one line per size and problem, naming the attribute and the node
(`core.availability.size_problems`); the spawner refuses such a size with the same line.
Devices of a size that the driver tainted as broken (`core.health`: an XID, a lost GPU) or an
admin's DeviceTaintRule took out of service are logged as warnings, which and why: the size
still works on its other devices.

`schedule(c)` (called by `configure_hub`) runs the check once the hub's event loop runs, on the
profile list the configuration ended with.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from gpusessions.core import health
from gpusessions.core.availability import Inventory, size_match, size_problems
from gpusessions.core.claims import GPURequest
from gpusessions.hub.picker import profile_request
from gpusessions.hub.spawner import GPUSessionSpawner
from gpusessions.kube.watch import cluster_view

log = logging.getLogger("JupyterHub")
START_DELAY = 2.0  # seconds after the config is loaded: the hub is up by then
READY_TIMEOUT = 60.0
_TASKS: set[asyncio.Task[Any]] = set()  # strong references while the checks run


def problems(requests: list[tuple[str, GPURequest]], inv: Inventory, classes: dict[str, Any]) -> list[str]:
    """`profile <slug>: <problem>` for each GPU profile's problems on these slices."""
    return [
        f"profile {slug}: {line}"
        for slug, request in requests
        if request.wants_gpu
        for line in size_problems(request, inv, classes)
    ]


def tainted(requests: list[tuple[str, GPURequest]], inv: Inventory, classes: dict[str, Any]) -> list[str]:
    """`profile <slug>: ...` for each GPU profile with devices that are tainted (never allocated
    to it), naming each device, its node and why."""
    out = []
    for slug, request in requests:
        if not request.wants_gpu or not inv.tainted:
            continue
        alternatives = (
            [(a.device_class, list(a.selectors)) for a in request.first_available]
            if request.first_available
            else [(request.device_class, list(request.selectors))]
        )
        keys: dict[Any, None] = {}
        for device_class, selectors in alternatives:
            match = size_match([device_class], selectors, classes)
            if match is not None:
                keys.update(dict.fromkeys(inv.candidates(match)))
        bad = [k for k in keys if k in inv.tainted]
        if bad:
            where = ", ".join(
                f"{k[2]} on node {inv.pool_node.get((k[0], k[1])) or k[1]} ({health.reasons(inv.tainted[k])})"
                for k in bad
            )
            out.append(
                f"profile {slug}: {len(bad)} of {len(keys)} device(s) of this size are tainted and "
                f"are not allocated: {where}"
            )
    return out


class _Settings:
    """The spawner's GPU settings from the hub config (class defaults where unset): what a
    profile's overrides apply to."""

    def __init__(self, config: Any):
        self._config = config
        self._traits = GPUSessionSpawner.class_traits()

    def __getattr__(self, name: str) -> Any:
        for section in ("GPUSessionSpawner", "KubeSpawner"):
            sect = self._config.get(section) or {}
            if name in sect:
                return sect[name]
        trait = self._traits.get(name)
        if trait is None:
            raise AttributeError(name)
        return trait.default()


def requests_of(config: Any) -> list[tuple[str, GPURequest]]:
    settings = _Settings(config)
    out = []
    profile_list = (config.get("KubeSpawner") or {}).get("profile_list") or []
    if callable(profile_list):
        # KubeSpawner's profile_list may be a function of the spawner: there is none at hub
        # start, so each start checks its own size instead (lifecycle.refuse_if_size_missing).
        log.info("gpusessions size check: profile_list is a function; each start checks its size")
        return []
    for p in list(profile_list):
        try:
            out.append((str(p.get("slug", "")), profile_request(settings, p)))
        except (TypeError, ValueError, AttributeError) as e:
            log.error("gpusessions size check: profile %s: invalid settings: %s", p.get("slug"), e)
    return out


async def check(config: Any, timeout: float = READY_TIMEOUT) -> list[str]:
    """Log and return the problems of the configured sizes on the cluster's slices."""
    try:
        view = cluster_view()
        if not await view.wait_ready(timeout=timeout) or view.errors:
            log.warning("gpusessions size check: no cluster view after %.0fs; not checked", timeout)
            return []
        inv, _, _, classes = view.derived()
        requests = requests_of(config)
        found = problems(requests, inv, classes)
        broken = tainted(requests, inv, classes)
    except Exception as e:  # a check must never stop the hub
        log.warning("gpusessions size check failed: %s", e)
        return []
    for line in broken:
        log.warning("gpusessions size check: %s", line)
    for line in found:
        log.error("gpusessions size check: %s", line)
    if not found:
        log.info("gpusessions size check: every GPU size can be allocated as defined")
    return found


def schedule(config: Any) -> None:
    """Run `check` once the hub runs (the hub loads its config inside its event loop)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # not inside a starting hub (a unit test, a config check)

    def start() -> None:
        task = loop.create_task(check(config))
        _TASKS.add(task)
        task.add_done_callback(_TASKS.discard)

    loop.call_later(START_DELAY, start)
