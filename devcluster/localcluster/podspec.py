"""Pure helpers that read a Pod (dict) the way a kubelet would.

Which program a container image maps to, the container's argv and
environment, which claims feed NVIDIA_VISIBLE_DEVICES, and the pod status the
runtime reports. Nothing here talks to the API or starts processes.
"""

from __future__ import annotations

import base64
import datetime
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

Obj = dict[str, Any]

# Modes: what the runtime does for a container, chosen from its image.
SINGLEUSER = "singleuser"  # run jupyterhub-singleuser (the notebook server)
HOLDER = "holder"  # run the GPU agent (or an idle process) for holder pods
EXEC = "exec"  # run the container's command and args as given (test image)
NONE = "none"  # no process: only report the container as running
# Benchmarks: no process, the runtime's one shared server answers HTTP on the pod's IP and the
# container's first port (localcluster.fakeserve), so thousands of pods are cheap.
FAKE_SINGLEUSER = "fake-singleuser"  # answers any request (JupyterHub counts the server up)
FAKE_HOLDER = "fake-holder"  # answers the GPU agent's /api/status, devices idle
FAKE_MODES = (FAKE_SINGLEUSER, FAKE_HOLDER)

EXEC_IMAGE_PREFIX = "localcluster/exec"
FAKE_IMAGE_PREFIX = "localcluster/"
_STACKS_WRAPPERS = {
    "tini",
    "start.sh",
    "start-notebook.sh",
    "start-notebook.py",
    "start-singleuser.sh",
    "start-singleuser.py",
    "/usr/local/bin/start-notebook.sh",
    "/usr/local/bin/start-singleuser.sh",
    "--",
    "-g",
}


class ConfigError(Exception):
    """A container's configuration refers to what does not exist (a kubelet's
    CreateContainerConfigError): the message is the kubelet's."""


def image_mode(image: str) -> str:
    if image.startswith(EXEC_IMAGE_PREFIX):
        return EXEC
    for mode in FAKE_MODES:
        if image.startswith(FAKE_IMAGE_PREFIX + mode):
            return mode
    last = image.rsplit("/", 1)[-1]
    last = re.split(r"[:@]", last, maxsplit=1)[0]
    if "singleuser" in last or last.endswith("-notebook"):
        return SINGLEUSER
    if last.startswith(("gpusessions-holder", "gpusessions-agent")):
        return HOLDER
    return NONE


def container_argv(container: Obj, mode: str, holder_argv: list[str], as_root: bool) -> list[str]:
    cmd = list(container.get("command") or []) + list(container.get("args") or [])
    if mode == SINGLEUSER:
        while cmd and cmd[0] in _STACKS_WRAPPERS:
            cmd = cmd[1:]
        if not cmd or cmd[0].startswith("-"):
            cmd = ["jupyterhub-singleuser", *cmd]
        if as_root and _is_jupyter_server(cmd):
            cmd.append("--ServerApp.allow_root=True")
        return cmd
    if mode == HOLDER:
        return [*holder_argv, *list(container.get("args") or [])]
    if mode == EXEC:
        return cmd
    return []


def _is_jupyter_server(cmd: list[str]) -> bool:
    """A notebook server (which refuses root without allow_root), not e.g. a kernel gateway."""
    first = cmd[0].rsplit("/", 1)[-1]
    if first in ("jupyterhub-singleuser", "jupyter-lab", "jupyter-server", "jupyter-notebook"):
        return True
    return first == "jupyter" and len(cmd) > 1 and cmd[1] in ("lab", "server", "notebook")


def tcp_probe_port(container: Obj) -> int | None:
    """The port of a tcpSocket readinessProbe (a number or a named container port)."""
    port = (((container.get("readinessProbe") or {}).get("tcpSocket")) or {}).get("port")
    if isinstance(port, int):
        return port
    for p in container.get("ports") or []:
        if port is not None and p.get("name") == port:
            return int(p["containerPort"])
    return None


def first_port(container: Obj) -> int | None:
    """The container's first containerPort (where a fake server listens)."""
    for p in container.get("ports") or []:
        if p.get("containerPort"):
            return int(p["containerPort"])
    return None


def _field(pod: Obj, path: str, pod_ip: str, host_ip: str) -> str:
    md = pod["metadata"]
    m = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if m:
        return str(md.get(m.group(1), {}).get(m.group(2), ""))
    table = {
        "metadata.name": md.get("name", ""),
        "metadata.namespace": md.get("namespace", ""),
        "metadata.uid": md.get("uid", ""),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.hostIP": host_ip,
    }
    return str(table.get(path, ""))


def container_env(
    pod: Obj,
    container: Obj,
    pod_ip: str,
    host_ip: str,
    lookup: Callable[[str, str, str], dict[str, str] | None],
) -> dict[str, str]:
    """The container's environment from env and envFrom.

    `lookup(kind, namespace, name)` returns a Secret's or ConfigMap's data
    (Secret values already decoded) or None when it does not exist. A reference to a Secret or
    ConfigMap (or a key of one) that does not exist raises `ConfigError` in the kubelet's words,
    unless it is `optional`: the container is not started (CreateContainerConfigError) and is
    tried again, as a kubelet does.
    """
    ns = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for src in container.get("envFrom") or []:
        prefix = src.get("prefix", "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key in src:
                data = lookup(kind, ns, src[key]["name"])
                if data is None and not src[key].get("optional"):
                    raise ConfigError(f'{kind.lower()} "{src[key]["name"]}" not found')
                env.update({prefix + k: v for k, v in (data or {}).items()})
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            env[name] = _expand(str(item["value"]), env)
            continue
        vf = item.get("valueFrom") or {}
        if "fieldRef" in vf:
            env[name] = _field(pod, vf["fieldRef"]["fieldPath"], pod_ip, host_ip)
        elif "secretKeyRef" in vf or "configMapKeyRef" in vf:
            kind, ref = (
                ("Secret", vf["secretKeyRef"])
                if "secretKeyRef" in vf
                else ("ConfigMap", vf["configMapKeyRef"])
            )
            data = lookup(kind, ns, ref["name"])
            if data is not None and ref["key"] in data:
                env[name] = data[ref["key"]]
            elif ref.get("optional"):
                continue
            elif data is None:
                raise ConfigError(f'{kind.lower()} "{ref["name"]}" not found')
            else:
                raise ConfigError(f"couldn't find key {ref['key']} in {kind} {ns}/{ref['name']}")
        elif name not in env:
            env[name] = ""
    return env


def expand(value: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion of a command or argument."""
    return _expand(value, dict(env))


def _expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion; $$(VAR) escapes."""

    def rep(m: re.Match[str]) -> str:
        if m.group(0).startswith("$$"):
            return m.group(0)[1:]
        return env.get(m.group(1), m.group(0))

    return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", rep, value)


def decode_secret(obj: Obj) -> dict[str, str]:
    out = {k: base64.b64decode(v).decode(errors="replace") for k, v in (obj.get("data") or {}).items()}
    out.update(obj.get("stringData") or {})
    return out


def bind_to_pod_ip(values: list[str], pod_ip: str) -> list[str]:
    """A pod has its own IP: a server that binds 0.0.0.0 in a container binds the pod IP here."""
    return [v.replace("0.0.0.0", pod_ip) for v in values]


@dataclass(frozen=True)
class ClaimRef:
    pod_claim: str  # name in pod.spec.resourceClaims
    request: str | None  # container's resources.claims[].request


def container_claims(container: Obj) -> list[ClaimRef]:
    return [
        ClaimRef(c["name"], c.get("request")) for c in (container.get("resources") or {}).get("claims") or []
    ]


def claim_name(pod: Obj, pod_claim: str) -> str | None:
    for rc in pod["spec"].get("resourceClaims") or []:
        if rc["name"] == pod_claim:
            if rc.get("resourceClaimName"):
                return str(rc["resourceClaimName"])
            break
    for st in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if st["name"] == pod_claim and st.get("resourceClaimName"):
            return str(st["resourceClaimName"])
    return None


def claim_ready_for(claim: Obj, pod_uid: str) -> bool:
    st = claim.get("status") or {}
    return bool(st.get("allocation")) and any(r.get("uid") == pod_uid for r in st.get("reservedFor") or [])


def allocated_devices(claim: Obj, request: str | None) -> list[tuple[str, str, str]]:
    """(driver, pool, device) of the claim's results, for one request or all."""
    results = ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    out = []
    for r in results:
        req = r["request"]
        if request is None or req == request or req.startswith(request + "/"):
            out.append((r["driver"], r["pool"], r["device"]))
    return out


def python_argv(module: str) -> list[str]:
    return [sys.executable, "-m", module]


def volume_files(
    pod: Obj, container: Obj, lookup: Callable[[str, str, str], dict[str, str] | None]
) -> dict[str, dict[str, str]]:
    """mountPath -> {relative file path: content} for the container's downwardAPI,
    configMap and secret volumes (what a kubelet would project into the container)."""
    ns = pod["metadata"]["namespace"]
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    out: dict[str, dict[str, str]] = {}
    for m in container.get("volumeMounts") or []:
        vol = volumes.get(m["name"]) or {}
        files: dict[str, str] = {}
        if "downwardAPI" in vol:
            for item in vol["downwardAPI"].get("items") or []:
                if "fieldRef" in item:
                    files[item["path"]] = _field(pod, item["fieldRef"]["fieldPath"], "", "")
        for kind, key, ref in (("ConfigMap", "configMap", "name"), ("Secret", "secret", "secretName")):
            if key in vol:
                data = lookup(kind, ns, vol[key][ref]) or {}
                items = vol[key].get("items")
                files.update({i["path"]: data.get(i["key"], "") for i in items} if items else data)
        if files:
            sub = m.get("subPath")
            out[m["mountPath"]] = {sub: files.get(sub, "")} if sub else files
    return out


def map_paths(values: list[str], mounts: dict[str, str]) -> list[str]:
    """Point paths under a volume's mountPath at the folder the runtime projected it to."""
    out = []
    for v in values:
        for mount, host in sorted(mounts.items(), key=lambda kv: -len(kv[0])):
            if v == mount or v.startswith(mount.rstrip("/") + "/"):
                v = host + v[len(mount.rstrip("/")) :]
                break
        out.append(v)
    return out


# -- the status a kubelet reports ----------------------------------------------
class ContainerState(Protocol):
    """What the runtime knows of one container (localcluster.kubelet.Container)."""

    name: str
    restart_count: int
    started_at: str | None
    terminated: Obj | None
    last_terminated: Obj | None
    waiting_reason: str | None
    waiting_message: str | None

    @property
    def running(self) -> bool: ...

    @property
    def ready(self) -> bool: ...


def _now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def container_status(spec: Obj, cont: ContainerState, pod_uid: str) -> Obj:
    """A container's status as a kubelet reports it."""
    st: Obj = {
        "name": cont.name,
        "image": spec.get("image", ""),
        "imageID": "devcluster://" + spec.get("image", ""),
        "containerID": f"devcluster://{pod_uid}/{cont.name}",
        "restartCount": cont.restart_count,
        "ready": cont.ready,
        "started": cont.running,
    }
    if cont.running:
        st["state"] = {"running": {"startedAt": cont.started_at}}
    elif cont.terminated:
        st["state"] = {"terminated": cont.terminated}
    else:
        st["state"] = {
            "waiting": {
                "reason": cont.waiting_reason or "ContainerCreating",
                "message": cont.waiting_message or "",
            }
        }
    if cont.last_terminated:
        st["lastState"] = {"terminated": cont.last_terminated}
    return st


def pod_status(
    pod: Obj, containers: Mapping[str, ContainerState], uid: str, ip: str, host_ip: str, start_time: str
) -> Obj:
    """The pod's status as a kubelet reports it: phase, IPs, conditions, container statuses."""
    specs = {c["name"]: c for c in pod["spec"]["containers"]}
    statuses = [container_status(specs[n], c, uid) for n, c in containers.items()]
    ready = all(s["ready"] for s in statuses)
    done = [c.terminated for c in containers.values() if c.terminated]
    phase = "Running"
    if len(done) == len(containers):
        phase = "Succeeded" if all(t["exitCode"] == 0 for t in done) else "Failed"
    ts = _now_iso()

    def cond(t: str, ok: bool) -> Obj:
        return {"type": t, "status": "True" if ok else "False", "lastTransitionTime": ts}

    init = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "devcluster://" + c.get("image", ""),
            "ready": True,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": start_time,
                    "finishedAt": start_time,
                }
            },
        }
        for c in pod["spec"].get("initContainers") or []
    ]
    status: Obj = {
        "phase": phase,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": start_time,
        "conditions": [
            cond("PodReadyToStartContainers", True),
            cond("Initialized", True),
            cond("Ready", ready and phase == "Running"),
            cond("ContainersReady", ready and phase == "Running"),
            cond("PodScheduled", True),
        ],
        "containerStatuses": statuses,
    }
    if init:
        status["initContainerStatuses"] = init
    return status
