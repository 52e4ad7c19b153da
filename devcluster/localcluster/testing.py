"""Builders for the objects tests create (plain dicts), and small test utilities."""

from __future__ import annotations

import re
import secrets
import time
from typing import Any

from .kubeapi import Obj
from .paths import ClusterPaths

EXEC_IMAGE = "localcluster/exec"
# Prints the devices it sees, then waits to be stopped.
SHOW_DEVICES = [
    "sh",
    "-c",
    'echo "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES:-}"; '
    'echo "DEVCLUSTER_CDI_DEVICES=${DEVCLUSTER_CDI_DEVICES:-}"; exec sleep 3600',
]


def namespace_name(test_name: str) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{base}-{secrets.token_hex(3)}"


def claim(
    name: str,
    device_class: str,
    selectors: list[str] | None = None,
    count: int = 1,
    labels: dict[str, str] | None = None,
) -> Obj:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def exec_pod(
    name: str,
    claim_name: str | None = None,
    command: list[str] | None = None,
    restart_policy: str = "Always",
    node_name: str | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    container: Obj = {"name": "main", "image": EXEC_IMAGE, "command": command or SHOW_DEVICES}
    spec: Obj = {
        "containers": [container],
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": 5,
    }
    if claim_name:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def visible_devices(
    namespace: str, pod: str, container: str = "main", paths: ClusterPaths | None = None
) -> str:
    """The UUIDs of the devices a SHOW_DEVICES container was given (comma-separated), as it
    printed them last: with CDI injection a container gets the devices' nodes, not their
    UUIDs in NVIDIA_VISIBLE_DEVICES (the runtime sets that to "void", as the driver does)."""
    return printed_env(namespace, pod, "DEVCLUSTER_CDI_DEVICES", container, paths)


def printed_env(
    namespace: str,
    pod: str,
    name: str,
    container: str = "main",
    paths: ClusterPaths | None = None,
    timeout: float = 10.0,
) -> str:
    """The value of `name` a SHOW_DEVICES container printed last. A container is ready once its
    process runs, which can be a moment before its first line reaches the log: this waits up to
    `timeout` seconds for the line to appear."""
    paths = paths or ClusterPaths.default()
    logf = paths.pod_logs / f"{namespace}_{pod}_{container}.log"

    def last_printed() -> str | None:
        try:
            text = logf.read_text()
        except FileNotFoundError:
            return None
        seen = [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith(f"{name}=")]
        return seen[-1] if seen else None

    deadline = time.monotonic() + timeout
    while (value := last_printed()) is None:
        if time.monotonic() >= deadline:
            raise AssertionError(f"{logf} has no {name} line after {timeout:.0f} s")
        time.sleep(0.1)
    return value


def allocated(claim_obj: Obj) -> list[tuple[str, str]]:
    """(pool, device) pairs of an allocated claim."""
    res = claim_obj["status"]["allocation"]["devices"]["results"]
    return [(r["pool"], r["device"]) for r in res]


def allocation_status(pool: str, device: str, node: str, driver: str = "gpu.nvidia.com") -> Obj:
    """The `status` of a claim allocated one device on `node`, as kube-scheduler writes it
    (for tests of code that reads claims without a cluster)."""
    return {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": driver, "pool": pool, "device": device}]},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }


def slice_device(api: Any, pool: str, device: str) -> Obj:
    """The device entry of the simulated slices, by pool and name."""
    for s in api.list("ResourceSlice")["items"]:
        if s["spec"]["pool"]["name"] != pool:
            continue
        for d in s["spec"].get("devices") or []:
            if d["name"] == device:
                return d
    raise AssertionError(f"device {pool}/{device} is not in any ResourceSlice")
