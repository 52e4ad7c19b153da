"""Pure builders for a GPU session's ResourceClaim and holder pod (plain dicts).

Nothing here talks to the API. The claim's spec comes from the profile's GPU
request; its hash (annotation `gpusessions.io/request-hash`) tells whether an
existing claim still matches the chosen profile (claim specs are immutable).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpusessions.core import labels as L
from gpusessions.core.kernels import (
    TOKEN_KEY,
    KernelSettings,
    gateway_container,
    grace_seconds,
    new_token,
    session_volume,
    token_env,
)
from gpusessions.core.placement import placement

Obj = dict[str, Any]
REQUEST_NAME = "gpu"  # the request in the claim, and the claim's name in pod specs
AGENT_PORT = 9400  # the GPU agent in the holder pod
# The Secret (key "token") the holders' GPU agents require on their API, one per namespace: the
# spawner's default (it makes one with a random token when none exists), the Helm chart's.
AGENT_TOKEN_SECRET = "gpusessions-agent-token"


@dataclass(frozen=True)
class Alternative:
    """One entry of a prioritized list (firstAvailable)."""

    device_class: str
    count: int = 1
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class GPURequest:
    """What a profile asks for: `exactly` one device class, or the first available of several."""

    device_class: str = ""
    count: int = 1
    selectors: tuple[str, ...] = ()
    first_available: tuple[Alternative, ...] = field(default_factory=tuple)

    @property
    def wants_gpu(self) -> bool:
        return bool(self.device_class or self.first_available)

    def device_request(self) -> Obj:
        if self.first_available:
            return {
                "name": REQUEST_NAME,
                "firstAvailable": [
                    _exact(a.device_class, a.count, a.selectors, name=f"alt{i}")
                    for i, a in enumerate(self.first_available)
                ],
            }
        return {"name": REQUEST_NAME, "exactly": _exact(self.device_class, self.count, self.selectors)}

    def spec(self) -> Obj:
        return {"devices": {"requests": [self.device_request()]}}

    def hash(self) -> str:
        canonical = json.dumps(self.spec(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """A few words for people: 'MIG 1g.10gb', '2 x gpu.nvidia.com', ..."""
        if self.first_available:
            return " or ".join(_describe(a.device_class, a.count, a.selectors) for a in self.first_available)
        return _describe(self.device_class, self.count, self.selectors)

    def device_classes(self) -> list[str]:
        if self.first_available:
            return [a.device_class for a in self.first_available]
        return [self.device_class]


def _exact(device_class: str, count: int, selectors: tuple[str, ...], name: str | None = None) -> Obj:
    out: Obj = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if name:
        out = {"name": name, **out}
    if selectors:
        out["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return out


def _describe(device_class: str, count: int, selectors: tuple[str, ...]) -> str:
    prof = next((m.group(1) for s in selectors if (m := re.search(r"profile\s*==\s*'([^']+)'", s))), None)
    what = f"MIG {prof}" if prof else ("whole GPU" if device_class == "gpu.nvidia.com" else device_class)
    return f"{count} x {what}" if count != 1 else what


def describe_spec(spec: Obj) -> str:
    """`GPURequest.describe()` read back from a claim's spec (as `build_claim` writes it)."""

    def one(r: Obj) -> str:
        sel = tuple(str((s.get("cel") or {}).get("expression", "")) for s in r.get("selectors") or [])
        return _describe(str(r.get("deviceClassName", "")), int(r.get("count", 1)), sel)

    requests = (spec.get("devices") or {}).get("requests") or []
    if not requests:
        return ""
    r = requests[0]
    if r.get("firstAvailable"):
        return " or ".join(one(a) for a in r["firstAvailable"])
    return one(r.get("exactly") or r)


def build_claim(
    name: str,
    namespace: str,
    request: GPURequest,
    username: str,
    servername: str,
    profile: str = "",
    extra_labels: dict[str, str] | None = None,
    parks: bool = False,
) -> Obj:
    """The session's standalone claim; `parks`: its holder parks the kernels when it goes (the
    claim says so, for the culler's parking rules)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**L.owner_labels("claim", username, servername), **(extra_labels or {})},
            "annotations": {
                **L.owner_annotations(username, servername),
                L.REQUEST_HASH: request.hash(),
                L.PROFILE_ANNOTATION: profile,
                **L.park_annotations(parks),
            },
        },
        "spec": request.spec(),
    }


def claim_matches(claim: Obj, request: GPURequest) -> bool:
    ann = (claim.get("metadata") or {}).get("annotations") or {}
    return bool(ann.get(L.REQUEST_HASH) == request.hash())


@dataclass(frozen=True)
class HolderSettings:
    image: str
    resources: Obj
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Obj, ...] = ()
    affinity: Obj | None = None
    scheduler_name: str | None = None
    priority_class: str | None = None
    image_pull_policy: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    agent_token_secret: str | None = None  # Secret (key "token") the agent requires on its API
    agent_interval: float = 0.0  # seconds between the agent's NVML samples (0: the agent's default, 2 s)


def build_holder_pod(
    name: str,
    namespace: str,
    claim_name: str,
    settings: HolderSettings,
    username: str,
    servername: str,
    extra_labels: dict[str, str] | None = None,
    kernels: KernelSettings | None = None,
    session: str | None = None,
) -> Obj:
    """The pod that keeps the claim allocated while the notebook pod comes and goes.

    With `kernels`, it also runs the kernel gateway that hosts the user's kernels; `session`
    (the session annotation's JSON, `notebook_pod.session_info`) when the claim's allocation
    is known already (else `GPUSession` annotates the holder once it is). With parking on,
    its grace period is the park budget (`kernels.grace_seconds`)."""
    container: Obj = {
        "name": "holder",
        "image": settings.image,
        "resources": {**settings.resources, "claims": [{"name": REQUEST_NAME}]},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "env": [
            {"name": "GPUSESSIONS_CLAIM", "value": claim_name},
            {"name": "GPUSESSIONS_USER", "value": username},
            {"name": "GPUSESSIONS_SERVER", "value": servername},
            {"name": "GPUSESSIONS_AGENT_IP", "value": "0.0.0.0"},
            {"name": "GPUSESSIONS_AGENT_PORT", "value": str(AGENT_PORT)},
        ],
        "ports": [{"name": "agent", "containerPort": AGENT_PORT, "protocol": "TCP"}],
    }
    if settings.agent_token_secret:
        container["env"].append(token_env("GPUSESSIONS_AGENT_TOKEN", settings.agent_token_secret))
    if settings.agent_interval > 0:
        container["env"].append(
            {"name": "GPUSESSIONS_AGENT_INTERVAL", "value": f"{settings.agent_interval:g}"}
        )
    if settings.args:
        container["args"] = list(settings.args)
    if settings.image_pull_policy:
        container["imagePullPolicy"] = settings.image_pull_policy
    spec: Obj = {
        "restartPolicy": "Always",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 10,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65534,
            "runAsGroup": 65534,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "resourceClaims": [{"name": REQUEST_NAME, "resourceClaimName": claim_name}],
        "containers": [container],
    }
    if kernels is not None:
        spec["containers"].append(gateway_container(kernels, REQUEST_NAME, claim_name, servername))
        grace = grace_seconds(kernels)
        if grace is not None:
            spec["terminationGracePeriodSeconds"] = grace
        if kernels.init_containers:
            # The notebook pod's (z2jh's block-cloud-metadata: an iptables rule, as root, in the
            # pod's network namespace, before the kernels start). Each container of ours says
            # runAsNonRoot itself; the pod-wide one would refuse that root init container.
            spec["initContainers"] = [dict(c) for c in kernels.init_containers]
            del spec["securityContext"]["runAsNonRoot"]
        # The agent maps NVML's process ids to kernels, so it must see the gateway's processes.
        spec["shareProcessNamespace"] = True
        container["env"] += [
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "GPUSESSIONS_KERNELS_URL", "value": f"http://$(POD_IP):{kernels.port}"},
            token_env("GPUSESSIONS_KERNELS_TOKEN", kernels.secret),
        ]
    spec.update(
        placement(settings, volumes=(*kernels.volumes, session_volume()) if kernels is not None else ())
    )
    annotations = {**L.owner_annotations(username, servername), L.CLAIM_ANNOTATION: claim_name}
    if session is not None:
        annotations[L.SESSION_ANNOTATION] = session
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                **L.owner_labels("holder", username, servername),
                L.CLAIM_LABEL: L.label_value(claim_name),
                **(extra_labels or {}),
            },
            "annotations": annotations,
        },
        "spec": spec,
    }


def build_agent_token_secret(name: str, namespace: str, token: str | None = None) -> Obj:
    """The agents' token of a namespace (shared by its holders and the culler). Not owned by
    any session: it outlives them, so that a culler that read it once keeps its word."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {L.MANAGED_BY: L.MANAGER, L.COMPONENT: "agent-token"},
        },
        "stringData": {TOKEN_KEY: token or new_token()},
    }


def holder_lost(pod: Obj | None) -> bool:
    """The holder pod is gone, going, or ended: it no longer keeps the claim."""
    if pod is None or pod["metadata"].get("deletionTimestamp"):
        return True
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def allocation(claim: Obj) -> Obj | None:
    return ((claim.get("status") or {}).get("allocation")) or None


def allocated_node(claim: Obj) -> str | None:
    alloc = allocation(claim) or {}
    for term in (alloc.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for f in term.get("matchFields") or []:
            if f.get("key") == "metadata.name" and f.get("values"):
                return str(f["values"][0])
        for e in term.get("matchExpressions") or []:
            if e.get("key") == "kubernetes.io/hostname" and e.get("values"):
                return str(e["values"][0])
    return None


def allocated_devices(claim: Obj) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of each allocated device."""
    results = ((allocation(claim) or {}).get("devices") or {}).get("results") or []
    return [(r["driver"], r["pool"], r["device"]) for r in results]


def reserved_for(claim: Obj) -> list[str]:
    return [r.get("name", "") for r in (claim.get("status") or {}).get("reservedFor") or []]
