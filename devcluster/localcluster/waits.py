"""Waiting helpers for tests and tools, with failure messages that say what was
waited for, the last state seen and the relevant events."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, TypeVar

from .kubeapi import ApiError, KubeAPI, Obj
from .paths import ClusterPaths

T = TypeVar("T")


class WaitTimeout(AssertionError):
    pass


def wait_for(
    fn: Callable[[], T | None],
    timeout: float,
    what: str,
    explain: Callable[[], str] | None = None,
    interval: float = 0.2,
) -> T:
    """Call fn until it returns something truthy; on timeout raise with `explain()`."""
    deadline = time.monotonic() + timeout
    last_err: Exception | None = None
    while True:
        try:
            v = fn()
            if v:
                return v
        except ApiError as e:
            last_err = e
        if time.monotonic() >= deadline:
            detail = explain() if explain else ""
            if last_err:
                detail += f"\nlast API error: {last_err}"
            raise WaitTimeout(f"timed out after {timeout:.0f}s waiting for {what}\n{detail}".rstrip())
        time.sleep(interval)


def events_for(api: KubeAPI, namespace: str, kind: str, name: str) -> list[str]:
    sel = f"involvedObject.kind={kind},involvedObject.name={name}"
    try:
        items = api.list("Event", namespace, field_selector=sel)["items"]
    except ApiError as e:
        return [f"(events unavailable: {e})"]
    items.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return [f"{e.get('type')} {e.get('reason')}: {e.get('message')}" for e in items[-10:]]


def _short(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True)[:1500]


def _claim_consumers(api: KubeAPI, namespace: str, claim: str) -> list[str]:
    out = []
    for p in api.list("Pod", namespace)["items"]:
        names = {rc.get("resourceClaimName") for rc in p["spec"].get("resourceClaims") or []}
        if claim in names:
            conds = {c["type"]: c for c in (p.get("status") or {}).get("conditions") or []}
            sched = conds.get("PodScheduled", {})
            out.append(
                f"pod {p['metadata']['name']}: phase={p.get('status', {}).get('phase')} "
                f"node={p['spec'].get('nodeName')} scheduled={sched.get('status')} {sched.get('message', '')}"
            )
    return out


def explain_claim(api: KubeAPI, namespace: str, name: str) -> str:
    claim = api.get_or_none("ResourceClaim", name, namespace)
    lines = [
        f"claim {namespace}/{name}: " + ("(not found)" if claim is None else _short(claim.get("status", {})))
    ]
    lines += ["  " + c for c in _claim_consumers(api, namespace, name)]
    lines += ["  event: " + e for e in events_for(api, namespace, "ResourceClaim", name)]
    return "\n".join(lines)


def explain_pod(api: KubeAPI, namespace: str, name: str, paths: ClusterPaths | None = None) -> str:
    pod = api.get_or_none("Pod", name, namespace)
    if pod is None:
        return f"pod {namespace}/{name}: (not found)"
    st = pod.get("status") or {}
    lines = [
        f"pod {namespace}/{name}: phase={st.get('phase')} node={pod['spec'].get('nodeName')} "
        f"ip={st.get('podIP')}",
        "  conditions: "
        + _short(
            [
                {k: c.get(k) for k in ("type", "status", "reason", "message")}
                for c in st.get("conditions") or []
            ]
        ),
        "  containers: " + _short(st.get("containerStatuses") or []),
    ]
    lines += ["  event: " + e for e in events_for(api, namespace, "Pod", name)]
    paths = paths or ClusterPaths.default()
    for c in pod["spec"]["containers"]:
        logf = paths.pod_logs / f"{namespace}_{name}_{c['name']}.log"
        if logf.exists():
            tail = logf.read_text(errors="replace").splitlines()[-8:]
            lines += [f"  log {c['name']}: {ln}" for ln in tail]
    return "\n".join(lines)


def _claim_allocation(api: KubeAPI, namespace: str, name: str, want: bool, timeout: float) -> Obj:
    def check() -> Obj | None:
        c = api.get_or_none("ResourceClaim", name, namespace)
        return c if c and bool((c.get("status") or {}).get("allocation")) == want else None

    what = "allocated" if want else "deallocated"
    return wait_for(
        check,
        timeout,
        f"ResourceClaim {namespace}/{name} to be {what}",
        lambda: explain_claim(api, namespace, name),
    )


def claim_allocated(api: KubeAPI, namespace: str, name: str, timeout: float = 30) -> Obj:
    return _claim_allocation(api, namespace, name, True, timeout)


def claim_deallocated(api: KubeAPI, namespace: str, name: str, timeout: float = 30) -> Obj:
    return _claim_allocation(api, namespace, name, False, timeout)


def pod_ready(api: KubeAPI, namespace: str, name: str, timeout: float = 30) -> Obj:
    def check() -> Obj | None:
        p = api.get_or_none("Pod", name, namespace)
        if not p:
            return None
        st = p.get("status") or {}
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in st.get("conditions") or [])
        return p if st.get("phase") == "Running" and st.get("podIP") and ready else None

    return wait_for(
        check,
        timeout,
        f"pod {namespace}/{name} to be Running and Ready",
        lambda: explain_pod(api, namespace, name),
    )


def pod_phase(api: KubeAPI, namespace: str, name: str, phases: tuple[str, ...], timeout: float = 30) -> Obj:
    def check() -> Obj | None:
        p = api.get_or_none("Pod", name, namespace)
        return p if p and (p.get("status") or {}).get("phase") in phases else None

    return wait_for(
        check,
        timeout,
        f"pod {namespace}/{name} to reach phase {'/'.join(phases)}",
        lambda: explain_pod(api, namespace, name),
    )


def pod_unschedulable(api: KubeAPI, namespace: str, name: str, timeout: float = 30) -> str:
    """Wait until the scheduler reports the pod unschedulable; return its message."""

    def check() -> str | None:
        p = api.get_or_none("Pod", name, namespace)
        for c in ((p or {}).get("status") or {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return str(c.get("message", ""))
        return None

    return wait_for(
        check,
        timeout,
        f"pod {namespace}/{name} to be reported Unschedulable",
        lambda: explain_pod(api, namespace, name),
    )


def gone(api: KubeAPI, kind: str, name: str, namespace: str | None = None, timeout: float = 30) -> bool:
    return wait_for(
        lambda: api.get_or_none(kind, name, namespace) is None,
        timeout,
        f"{kind} {namespace + '/' if namespace else ''}{name} to be deleted",
        lambda: _short(api.get_or_none(kind, name, namespace)),
    )
