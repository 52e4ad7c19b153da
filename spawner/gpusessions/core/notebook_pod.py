"""Pure builders for the notebook pod's GPU parts (beside `claims.py`'s claim and holder).

The notebook pod is KubeSpawner's (a `kubernetes_asyncio` `V1Pod`); these functions add
what a GPU session needs to it and call no API: the claim (`spec.resourceClaims` and the
notebook container's `resources.claims`, in the manifest rather than through
`extra_container_config`, which would clobber CPU and memory limits), the session's
variables and `/etc/gpusessions/session.json`, the kernel gateway's variables, the claim's
node in the node affinity, and the scheduling fields of a scheduler queue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import (
    CoreV1ResourceClaim,
    V1Affinity,
    V1DownwardAPIVolumeFile,
    V1DownwardAPIVolumeSource,
    V1EnvVar,
    V1NodeAffinity,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1ObjectFieldSelector,
    V1PodResourceClaim,
    V1ResourceRequirements,
    V1Volume,
    V1VolumeMount,
)

from gpusessions.core import kernels as K
from gpusessions.core.claims import REQUEST_NAME
from gpusessions.core.labels import SESSION_ANNOTATION
from gpusessions.core.queues import Scheduling

Obj = dict[str, Any]
SESSION_FILE_DIR = K.SESSION_FILE_DIR  # the holder's kernels get the same file
SESSION_FILE = K.SESSION_FILE


def session_info(
    claim: str,
    namespace: str,
    holder: str,
    profile: str,
    gpu: str,
    node: str | None,
    devices: list[tuple[str, str, str]],
) -> Obj:
    """What the notebook is told about its GPU (the session annotation, session.json)."""
    return {
        "claim": claim,
        "namespace": namespace,
        "holder": holder,
        "profile": profile,
        "gpu": gpu,
        "node": node,
        "devices": [{"driver": d, "pool": p, "device": dev} for d, p, dev in devices],
    }


@dataclass(frozen=True)
class Parking:
    """`park_kernels` and its settings, as the notebook pod needs them."""

    on: bool = False
    timeout: int = 120
    max_bytes: int = 16 << 30
    expiry_days: float = 30.0


def add_gpu(pod: Any, info: Obj, gateway_url: str | None = None, park: Parking | None = None) -> None:
    """Give the notebook pod its session's claim, variables and session file (`info` from
    `session_info`), the kernel gateway's variables when kernels run in the holder
    (`gateway_url`; `park.on`: the holder parks them when it goes, kept `park.expiry_days`), and
    the claim's node in its node affinity. Kernels in the notebook pod itself (no `gateway_url`)
    with `park.on`: its server parks them when it stops, within its grace period (the park
    budget and its margin)."""
    park = park or Parking()
    claim, holder, node = info["claim"], info["holder"], info["node"]
    pod.spec.resource_claims = [
        *(pod.spec.resource_claims or []),
        V1PodResourceClaim(name=REQUEST_NAME, resource_claim_name=claim),
    ]
    pod.metadata.annotations = {**(pod.metadata.annotations or {}), SESSION_ANNOTATION: json.dumps(info)}
    container = next((c for c in pod.spec.containers if c.name == "notebook"), pod.spec.containers[0])
    if container.resources is None:
        container.resources = V1ResourceRequirements()
    container.resources.claims = [
        *(container.resources.claims or []),
        CoreV1ResourceClaim(name=REQUEST_NAME),
    ]
    env = {
        "GPUSESSIONS_CLAIM": claim,
        "GPUSESSIONS_PROFILE": info["profile"],
        "GPUSESSIONS_GPU": info["gpu"],
        "GPUSESSIONS_NODE": node or "",
        "GPUSESSIONS_DEVICES": ",".join(f"{d['pool']}/{d['device']}" for d in info["devices"]),
        "GPUSESSIONS_SESSION_FILE": SESSION_FILE,
    }
    container.env = [*(container.env or []), *(V1EnvVar(name=k, value=v) for k, v in env.items())]
    if gateway_url:
        # Kernels run in the holder's gateway: plain dicts serialize as they are.
        container.env += K.notebook_env(
            gateway_url, K.secret_name(holder), parks=park.on, park_expiry_days=park.expiry_days
        )
    elif park.on:
        container.env += K.notebook_park_env(park.timeout, park.max_bytes, park.expiry_days)
        grace = K.park_grace(park.timeout)
        pod.spec.termination_grace_period_seconds = max(pod.spec.termination_grace_period_seconds or 0, grace)
    pod.spec.volumes = [
        *(pod.spec.volumes or []),
        V1Volume(
            name="gpusessions",
            downward_api=V1DownwardAPIVolumeSource(
                items=[
                    V1DownwardAPIVolumeFile(
                        path="session.json",
                        field_ref=V1ObjectFieldSelector(
                            field_path=f"metadata.annotations['{SESSION_ANNOTATION}']"
                        ),
                    )
                ]
            ),
        ),
    ]
    container.volume_mounts = [
        *(container.volume_mounts or []),
        V1VolumeMount(name="gpusessions", mount_path=SESSION_FILE_DIR, read_only=True),
    ]
    if node:
        pin_to_node(pod, node)


def pin_to_node(pod: Any, node: str) -> None:
    """Require the claim's node in the pod's node affinity (added to every required term).

    The pod can only run there anyway (the allocation's nodeSelector), but saying so lets the
    scheduler's NodeAffinity PreFilter narrow the search to that node; otherwise its DRA
    Filter runs on every node to find the one that fits: 1,000 evaluations per notebook pod on
    a 1,000-node cluster, most of the scheduler's work in the scale benchmark."""
    field = V1NodeSelectorRequirement(key="metadata.name", operator="In", values=[node])
    spec = pod.spec
    spec.affinity = spec.affinity or V1Affinity()
    spec.affinity.node_affinity = spec.affinity.node_affinity or V1NodeAffinity()
    na = spec.affinity.node_affinity
    required = na.required_during_scheduling_ignored_during_execution
    terms = required.node_selector_terms if required is not None else None
    if not terms:
        na.required_during_scheduling_ignored_during_execution = V1NodeSelector(
            node_selector_terms=[V1NodeSelectorTerm(match_fields=[field])]
        )
        return
    for term in terms:  # KubeSpawner passes configured terms through as dicts
        if isinstance(term, dict):
            term["matchFields"] = [
                *(term.get("matchFields") or []),
                {"key": "metadata.name", "operator": "In", "values": [node]},
            ]
        else:
            term.match_fields = [*(term.match_fields or []), field]


def schedule(pod: Any, scheduling: Scheduling) -> None:
    """Put the pod in a scheduler queue: its labels, schedulerName and priorityClassName
    (`QueuePolicy.scheduling`)."""
    pod.metadata.labels = {**(pod.metadata.labels or {}), **scheduling.labels}
    pod.spec.scheduler_name = scheduling.scheduler_name
    pod.spec.priority_class_name = scheduling.priority_class
