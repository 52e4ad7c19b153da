"""Pure builders for persistent kernels: a kernel gateway in the holder pod (plain dicts).

With `persist_kernels`, the holder pod (which owns the claim and outlives the notebook
pod) also runs Jupyter Kernel Gateway in the notebook image. The notebook server uses it
as its gateway, so kernels, their variables and the GPU memory they hold survive a
notebook restart. The gateway's token lives in a Secret of the session; the holder and
the notebook read it from there (never from the pod spec).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gpusessions.core import labels as L
from gpusessions.core import owners

Obj = dict[str, Any]
KERNELS_CONTAINER = "kernels"
KERNEL_PORT = 8888
TOKEN_KEY = "token"
SECRET_ANNOTATION = "gpusessions.io/kernels-secret"
# Who may read a holder's GPU agent besides the session's own notebook: the culler, as the Helm
# chart runs it (its Deployment's pods) and as a hub runs it (a service inside the hub's pod,
# with Zero to JupyterHub's labels). NetworkPolicy peers.
CHART_CULLER: Obj = {
    "podSelector": {
        "matchLabels": {"app.kubernetes.io/name": "gpusessions", "app.kubernetes.io/component": "culler"}
    }
}
Z2JH_HUB: Obj = {"podSelector": {"matchLabels": {"app": "jupyterhub", "component": "hub"}}}
AGENT_READERS: tuple[Obj, ...] = (CHART_CULLER, Z2JH_HUB)


@dataclass(frozen=True)
class KernelSettings:
    """How the holder runs the kernel gateway."""

    image: str
    secret: str
    port: int = KERNEL_PORT
    command: tuple[str, ...] = ("jupyter", "kernelgateway")
    uid: int | None = 1000
    gid: int | None = 100
    working_dir: str | None = None
    resources: Obj = field(default_factory=dict)
    env: tuple[tuple[str, str], ...] = ()
    volumes: tuple[Obj, ...] = ()
    volume_mounts: tuple[Obj, ...] = ()
    image_pull_policy: str | None = None
    network_policy: bool = True
    agent_port: int = 9400
    agent_peers: tuple[Obj, ...] = AGENT_READERS  # who reads the agent besides the notebook
    # The notebook pod's init containers that user code needs too (z2jh's block-cloud-metadata):
    # the holder pod gets them when it hosts kernels.
    init_containers: tuple[Obj, ...] = ()
    # The session's variables the kernels see as the notebook does (GPUSESSIONS_PROFILE, _GPU;
    # the claim, node and session file are added by `gateway_container`).
    session_env: tuple[tuple[str, str], ...] = ()
    # Parking: at the holder's termination the supervisor (`gpusessions.notebook.parkhost`) saves
    # each kernel's namespace to the user's home before the gateway stops; the pod's
    # terminationGracePeriodSeconds is `park_timeout` plus `PARK_MARGIN`.
    park: bool = False
    park_timeout: int = 120
    park_max_bytes: int = 16 << 30


# Seconds the holder's grace period adds to the park budget: the gateway's own stop, the record.
PARK_MARGIN = 15
SESSION_VOLUME = "gpusessions"  # the downwardAPI volume of /etc/gpusessions/session.json
SESSION_FILE_DIR = "/etc/gpusessions"
SESSION_FILE = f"{SESSION_FILE_DIR}/session.json"


def park_grace(park_timeout: int) -> int:
    """A pod whose kernels park when it goes: its terminationGracePeriodSeconds."""
    return park_timeout + PARK_MARGIN


def grace_seconds(k: KernelSettings | None) -> int | None:
    """The holder's terminationGracePeriodSeconds: the park budget and its margin (None: the
    holder's own default, no park)."""
    return park_grace(k.park_timeout) if k is not None and k.park else None


def session_volume() -> Obj:
    """/etc/gpusessions/session.json from the pod's session annotation (the notebook pod's is
    set at its creation; the holder's when its claim is allocated, `GPUSession`)."""
    return {
        "name": SESSION_VOLUME,
        "downwardAPI": {
            "items": [
                {
                    "path": "session.json",
                    "fieldRef": {"fieldPath": f"metadata.annotations['{L.SESSION_ANNOTATION}']"},
                }
            ]
        },
    }


def secret_name(holder: str) -> str:
    """The Secret with the gateway token of the session whose holder pod is `holder`."""
    return f"{holder}-kernels"


def new_token() -> str:
    return secrets.token_urlsafe(32)


def build_secret(name: str, namespace: str, token: str, username: str, servername: str, claim: Obj) -> Obj:
    """The session's gateway token (only the holder and this user's notebook pod read it).

    Owned by the claim: when the claim goes (released, culled, orphan-cleaned), Kubernetes'
    garbage collector deletes the token too, so nothing else needs rights on Secrets."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _child_metadata(name, namespace, claim, username, servername),
        "stringData": {TOKEN_KEY: token},
    }


def _child_metadata(name: str, namespace: str, claim: Obj, username: str, servername: str) -> Obj:
    """Metadata of an object of the session that the claim owns (collected with it)."""
    return {
        "name": name,
        "namespace": namespace,
        "labels": L.owner_labels("kernels", username, servername),
        "annotations": L.owner_annotations(username, servername),
        "ownerReferences": [owner_reference(claim)],
    }


def owner_reference(claim: Obj) -> Obj:
    return owners.owner_reference(claim, "resource.k8s.io/v1", "ResourceClaim")


def owned_by_claim(secret_md: Obj, claim: Obj) -> bool:
    return owners.owned_by(secret_md, claim)


def token_env(name: str, secret: str) -> Obj:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": TOKEN_KEY}}}


# What kernels inherit from the gateway's environment (the gateway passes nothing else,
# and never its own token).
KERNEL_ENV = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_DRIVER_CAPABILITIES",
    "CUDA_VISIBLE_DEVICES",
    "HOME",
    "LANG",
    "LC_ALL",
    "TZ",
    "USER",
    "PYTHONPATH",
    "CONDA_DIR",
    # The session, as the notebook server sees it (README, "Inside the notebook").
    "GPUSESSIONS_CLAIM",
    "GPUSESSIONS_PROFILE",
    "GPUSESSIONS_GPU",
    "GPUSESSIONS_NODE",
    "GPUSESSIONS_SESSION_FILE",
)


def gateway_container(k: KernelSettings, request_name: str, claim: str = "", servername: str = "") -> Obj:
    """The kernel gateway container of the holder pod; it shares the holder's claim.

    Its kernels get the session's variables and session file as the notebook server does.
    With `park`, the container's process is the park supervisor, which runs the gateway."""
    inherit = [*KERNEL_ENV, *(n for n, _ in k.env if n not in KERNEL_ENV)]
    session: list[Obj] = [
        {"name": "GPUSESSIONS_CLAIM", "value": claim},
        *({"name": n, "value": v} for n, v in k.session_env),
        {"name": "GPUSESSIONS_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": "GPUSESSIONS_SESSION_FILE", "value": SESSION_FILE},
    ]
    env: list[Obj] = [
        {"name": "KG_IP", "value": "0.0.0.0"},
        {"name": "KG_PORT", "value": str(k.port)},
        # Listing lets a restarted notebook server find (and re-attach to) its kernels.
        {"name": "KG_LIST_KERNELS", "value": "True"},
        {"name": "KG_ENV_PROCESS_WHITELIST", "value": ",".join(inherit)},
        token_env("KG_AUTH_TOKEN", k.secret),
        *session,
        *({"name": n, "value": v} for n, v in k.env),
    ]
    command = list(k.command)
    if k.park:
        env += [
            {"name": "JUPYTERHUB_SERVER_NAME", "value": servername},
            *park_limits_env(k.park_timeout, k.park_max_bytes),
        ]
        command = ["python", "-m", "gpusessions.notebook.parkhost", "--", *command]
    security: Obj = {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
    }
    if k.uid is not None:
        security["runAsUser"] = k.uid
    if k.gid is not None:
        security["runAsGroup"] = k.gid
    c: Obj = {
        "name": KERNELS_CONTAINER,
        "image": k.image,
        "command": command,
        "env": env,
        "ports": [{"name": "kernels", "containerPort": k.port, "protocol": "TCP"}],
        "resources": {**k.resources, "claims": [{"name": request_name}]},
        "securityContext": security,
        "readinessProbe": {"tcpSocket": {"port": k.port}, "periodSeconds": 2, "failureThreshold": 1},
    }
    if k.working_dir:
        c["workingDir"] = k.working_dir
    c["volumeMounts"] = [
        *(dict(m) for m in k.volume_mounts),
        {"name": SESSION_VOLUME, "mountPath": SESSION_FILE_DIR, "readOnly": True},
    ]
    if k.image_pull_policy:
        c["imagePullPolicy"] = k.image_pull_policy
    return c


def network_policy_name(holder: str) -> str:
    return f"{holder}-kernels"


def build_network_policy(
    name: str,
    namespace: str,
    claim: Obj,
    port: int,
    agent_port: int,
    username: str,
    servername: str,
    agent_peers: tuple[Obj, ...] = AGENT_READERS,
) -> Obj:
    """Only this session's notebook pod may reach its kernel gateway; its GPU agent, only that
    notebook and the culler (`agent_peers`).

    Selects the session's holder pod (by the claim label); admits the gateway port from the
    notebook pod with the same claim label (marked `gpusessions.io/component: notebook`: the
    notebook pod keeps KubeSpawner's own `app.kubernetes.io/*` labels), and the agent port from
    that notebook (its GPU panel) and `agent_peers`. Ingress only: the holder's egress is the
    chart's (the same rules as z2jh's notebook pods, docs/install.md).
    Owned by the claim, like the token Secret."""
    session = {
        L.MANAGED_BY: L.MANAGER,
        L.CLAIM_LABEL: L.label_value(claim["metadata"]["name"]),
    }
    notebook = {
        "podSelector": {
            "matchLabels": {L.CLAIM_LABEL: session[L.CLAIM_LABEL], L.NOTEBOOK_COMPONENT: L.NOTEBOOK}
        }
    }
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _child_metadata(name, namespace, claim, username, servername),
        "spec": {
            "podSelector": {"matchLabels": {**session, L.COMPONENT: "holder"}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": [{"port": port, "protocol": "TCP"}], "from": [notebook]},
                {
                    "ports": [{"port": agent_port, "protocol": "TCP"}],
                    "from": [notebook, *(dict(p) for p in agent_peers)],
                },
            ],
        },
    }


def gateway_address(holder: Obj, port: int) -> str | None:
    """The gateway's URL once the holder has an IP, ready or not (a notebook pod can be made
    with it while the gateway starts); None for a holder being deleted."""
    ip = (holder.get("status") or {}).get("podIP")
    if not ip or holder["metadata"].get("deletionTimestamp"):
        return None
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{port}"


def gateway_url(holder: Obj, port: int) -> str | None:
    """The gateway's URL once the holder has an IP and its kernels container is ready."""
    status = holder.get("status") or {}
    ready = any(
        s.get("name") == KERNELS_CONTAINER and s.get("ready") for s in status.get("containerStatuses") or []
    )
    return gateway_address(holder, port) if ready else None


def has_gateway(holder: Obj) -> bool:
    return any(c.get("name") == KERNELS_CONTAINER for c in (holder.get("spec") or {}).get("containers") or [])


def kernels_restarts(holder: Obj) -> int:
    for s in (holder.get("status") or {}).get("containerStatuses") or []:
        if s.get("name") == KERNELS_CONTAINER:
            return int(s.get("restartCount") or 0)
    return 0


def agent_url(gateway: str, agent_port: int) -> str:
    """The holder's GPU agent: the gateway's host, the agent's port."""
    parts = urlsplit(gateway)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}:{agent_port}"


# In the notebook container: the session's kernels are parked, not ended, when its GPU goes.
PARKS_ENV = "GPUSESSIONS_PARK_KERNELS"
PARK_EXPIRY_ENV = "GPUSESSIONS_PARK_EXPIRY_DAYS"  # read by notebook/restore.py


def notebook_env(
    url: str, secret: str, agent_port: int = 9400, parks: bool = False, park_expiry_days: float = 30.0
) -> list[Obj]:
    """What the notebook container needs to use the gateway (jupyter_server's GatewayClient),
    and where its GPU panel reads the holder's agent (with the same session token); `parks`:
    the holder parks its kernels when it goes (the panel says "Park my session"), and the
    restore at the next start deletes a park older than `park_expiry_days` (0: none)."""
    env = [
        {"name": "JUPYTER_GATEWAY_URL", "value": url},
        token_env("JUPYTER_GATEWAY_AUTH_TOKEN", secret),
        {"name": "GPUSESSIONS_PERSIST_KERNELS", "value": "1"},
        {"name": "GPUSESSIONS_AGENT_URL", "value": agent_url(url, agent_port)},
    ]
    if parks:
        env.append({"name": PARKS_ENV, "value": "1"})
        env.append({"name": PARK_EXPIRY_ENV, "value": f"{park_expiry_days:g}"})
    return env


def park_limits_env(park_timeout: int, park_max_bytes: int) -> list[Obj]:
    """The park's budget and the user's limit, for the process that parks the kernels."""
    return [
        {"name": "GPUSESSIONS_PARK_TIMEOUT", "value": str(park_timeout)},
        {"name": "GPUSESSIONS_PARK_MAX_BYTES", "value": str(park_max_bytes)},
    ]


def notebook_park_env(park_timeout: int, park_max_bytes: int, park_expiry_days: float) -> list[Obj]:
    """Kernels in the notebook pod (no kernel host in the holder): its notebook server parks
    them when it stops (`gpusessions.notebook.localkernels`) and restores them at its next start."""
    return [
        {"name": PARKS_ENV, "value": "1"},
        {"name": PARK_EXPIRY_ENV, "value": f"{park_expiry_days:g}"},
        *park_limits_env(park_timeout, park_max_bytes),
    ]
