"""What a user waiting for a GPU is told, in words (pure functions), and `Refused`: a
refusal the user reads, with its reason."""

from __future__ import annotations

from typing import Any

from gpusessions.core.claims import allocated_devices, allocated_node
from gpusessions.core.health import reasons

Obj = dict[str, Any]


class Refused(Exception):
    """An expected refusal the user should read (the spawner makes it a SpawnException)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.message = message
        self.reason = reason


def waiting(what: str, holder: Obj | None) -> str:
    reason = scheduler_message(holder)
    base = f"Waiting for a GPU ({what})"
    return f"{base}: {reason}" if reason else f"{base} ..."


def scheduler_message(pod: Obj | None) -> str:
    """The scheduler's reason a pod is not placed yet, made readable."""
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            msg = str(c.get("message") or c.get("reason") or "")
            if "cannot allocate all claims" in msg:
                return f"none free right now (scheduler: {msg.strip()})"
            return f"not placed yet (scheduler: {msg.strip()})" if msg else ""
    return ""


def device_summary(claim: Obj, describe: dict[tuple[str, str], str] | None = None) -> str:
    devs = allocated_devices(claim)
    names = [f"{pool}/{dev}" for _, pool, dev in devs]
    return ", ".join(names)


def allocated(what: str, claim: Obj) -> str:
    node = allocated_node(claim) or "?"
    return f"GPU allocated: {what}, device {device_summary(claim)} on node {node}"


def kept(what: str, claim: Obj) -> str:
    node = allocated_node(claim) or "?"
    return (
        f"GPU kept from your last start, reattaching: {what}, device {device_summary(claim)} on node {node}"
    )


def broken_gpu(taints: list[Obj]) -> str:
    """A kept GPU the driver reported broken, at the next start."""
    return (
        f"The GPU kept for you reported {reasons(taints)}: releasing it and allocating a healthy "
        "GPU of the same size ..."
    )


def never_scheduled(pod: Obj | None) -> bool:
    """The scheduler has not looked at the pod at all (no PodScheduled condition yet)."""
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return (
        pod is not None
        and not (pod.get("spec") or {}).get("nodeName")
        and not any(c.get("type") == "PodScheduled" for c in conditions)
    )


def timed_out(what: str, seconds: float, holder: Obj | None, claim: Obj | None) -> str:
    if never_scheduled(holder):
        seen = (
            "the scheduler never looked at the request (is the cluster's scheduler running? tell your admin)"
        )
    else:
        seen = scheduler_message(holder) or "the claim was never allocated"
    return (
        f"No GPU ({what}) became free within {seconds:.0f} seconds; {seen}. "
        "Your request was withdrawn: try again later or pick another size."
    )


def gateway_timeout(seconds: float, holder: Obj | None) -> str:
    why = scheduler_message(holder) if holder else ""
    return (
        f"Your GPU is ready, but the kernel host beside it did not start within {seconds:.0f} s"
        + (f" ({why})" if why else "")
        + ". Try again; if it keeps failing, ask your admin to check the holder pod's kernels container."
    )
