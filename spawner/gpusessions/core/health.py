"""GPU health from device taints (pure): which devices are broken, why, in words.

The NVIDIA DRA driver reports a failing GPU by tainting its device in the ResourceSlice
(KEP-5055, feature gate DRADeviceTaints: alpha in 1.33-1.35, beta and on from 1.36):

- `gpu.nvidia.com/xid`, value the XID ("79"), effect `NoSchedule` for a fatal XID (`None`
  for the XIDs NVIDIA lists as application errors);
- `gpu.nvidia.com/gpu-lost`, effect `NoSchedule`, on every device of the node;
- `gpu.nvidia.com/unmonitored`, effect `None`.

The driver never uses `NoExecute`: pods on a broken GPU keep running, so the user must be told.
An admin's DeviceTaintRule may taint devices too (`NoExecute` evicts their pods). A device
with a `NoSchedule` or `NoExecute` taint is not allocated to a claim that does not tolerate it
(ours do not): it is never free. `None` and unknown effects only inform (the API says to treat
unknown effects like `None`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpusessions.core.reclaim import event_time
from gpusessions.core.timestamps import epoch

Obj = dict[str, Any]
DeviceKey = tuple[str, str, str]  # driver, pool, device

XID_KEY = "gpu.nvidia.com/xid"
GPU_LOST_KEY = "gpu.nvidia.com/gpu-lost"
UNMONITORED_KEY = "gpu.nvidia.com/unmonitored"
BLOCKING = frozenset({"NoSchedule", "NoExecute"})
# kube-controller-manager's device-taint-eviction-controller deletes each pod that uses a device
# with a NoExecute taint (an admin's DeviceTaintRule; the driver never sets one): first an
# event of this reason on the pod, and the condition DisruptionTarget with reason
# DeletionByDeviceTaintManager (kubernetes pkg/controller/devicetainteviction).
TAINT_EVICT_REASON = "DeviceTaintManagerEviction"
TAINT_EVICT_SELECTOR = f"involvedObject.kind=Pod,reason={TAINT_EVICT_REASON}"
TAINT_EVICT_CONDITION = "DeletionByDeviceTaintManager"
TAINT_EVICTED_RELEASED = (
    "Your GPU was taken out of service by the cluster (a NoExecute device taint, e.g. an admin's "
    "DeviceTaintRule), so its pods were evicted: your server was stopped and the GPU released, "
    "as this hub is configured. Start again to get a healthy GPU."
)
TAINT_EVICTED_KEPT = (
    "Your GPU was taken out of service by the cluster (a NoExecute device taint, e.g. an admin's "
    "DeviceTaintRule), so its pods were evicted and your server was stopped. Start again: you "
    "get a healthy GPU of the same size."
)


def blocking(taint: Obj) -> bool:
    """The taint keeps the device from new claims (and, `NoExecute`, evicts its pods)."""
    return taint.get("effect") in BLOCKING


def device_taints(device: Obj) -> list[Obj]:
    """The blocking taints of one slice device."""
    return [t for t in device.get("taints") or [] if blocking(t)]


def tainted_devices(slices: Iterable[Obj]) -> dict[DeviceKey, list[Obj]]:
    """(driver, pool, device) -> blocking taints, for every device of these slices that has one."""
    out: dict[DeviceKey, list[Obj]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
        for d in spec.get("devices") or []:
            taints = device_taints(d)
            if taints:
                out[(driver, pool, d["name"])] = taints
    return out


def reason(taint: Obj) -> str:
    """One taint in words: "a fatal error (XID 79)", "GPU lost", or its key, value and effect."""
    key, value = taint.get("key", ""), taint.get("value", "")
    if key == XID_KEY:
        return f"a fatal error (XID {value})" if value else "a fatal error"
    if key == GPU_LOST_KEY:
        return "a lost GPU (it no longer answers)"
    what = f"{key}={value}" if value else key
    return f"a device taint {what} ({taint.get('effect', '')})"


def reasons(taints: Iterable[Obj]) -> str:
    return "; ".join(dict.fromkeys(reason(t) for t in taints))


def user_message(taints: list[Obj]) -> str:
    """What a user whose GPU is tainted reads, on the hub home page and in JupyterLab."""
    if any(t.get("key") == XID_KEY for t in taints):
        xid = next(t for t in taints if t.get("key") == XID_KEY)
        what = f"reported {reason(xid)}"
    elif any(t.get("key") == GPU_LOST_KEY for t in taints):
        what = "was lost (it no longer answers)"
    else:
        what = f"was taken out of service ({reasons(taints)})"
    return f"Your GPU {what}; save your work: Release and start again to get a healthy GPU."


def claim_taints(claim: Obj, tainted: dict[DeviceKey, list[Obj]]) -> list[Obj]:
    """The blocking taints of the devices allocated to a claim (empty: healthy, or not allocated)."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    out: list[Obj] = []
    for r in results or []:
        out += tainted.get((r.get("driver", ""), r.get("pool", ""), r.get("device", "")), [])
    return out


def since(taints: Iterable[Obj], default: float = 0.0) -> float:
    """When the earliest of these taints was added (unix seconds; `default` when none says)."""
    times = [epoch(t.get("timeAdded")) for t in taints]
    known = [x for x in times if x is not None]
    return min(known) if known else default


def taint_evicted(events: Iterable[Obj], namespace: str, pods: Iterable[str], since: float = 0.0) -> bool:
    """Whether the device-taint eviction controller evicted one of `pods` (its event, newer than
    `since`, epoch seconds)."""
    wanted = set(pods)
    for e in events:
        obj = e.get("involvedObject") or {}
        if (
            e.get("reason") == TAINT_EVICT_REASON
            and obj.get("namespace") == namespace
            and obj.get("name") in wanted
            and event_time(e) >= since
        ):
            return True
    return False


def taint_evicted_pod(pod: Obj | None) -> bool:
    """The pod carries the eviction controller's DisruptionTarget condition."""
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and c.get("reason") == TAINT_EVICT_CONDITION:
            return True
    return False
