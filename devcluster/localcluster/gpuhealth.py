"""GPU health as the NVIDIA DRA driver reports it: device taints in the ResourceSlice.

What the driver's kubelet plugin does (kubernetes-sigs/dra-driver-nvidia-gpu,
cmd/gpu-kubelet-plugin: device_health.go, driver.go, allocatable.go), point by point:

- an NVML critical XID event on a device taints that device with key `gpu.nvidia.com/xid`,
  value the XID as a decimal number ("79"), effect `NoSchedule`; the XIDs NVIDIA lists as
  application errors (13, 31, 43, 45, 68, 109, and those the admin adds) get effect `None`;
- NVML saying the GPU is lost (or an event whose device it cannot name) taints every device
  of the node with `gpu.nvidia.com/gpu-lost`, no value, `NoSchedule`;
- a device it cannot watch gets `gpu.nvidia.com/unmonitored`, effect `None`;
- one taint per key: a new XID on a tainted device replaces the value (and `timeAdded`, which
  the apiserver sets);
- never `NoExecute`: pods that use the device keep running;
- the taints live in the plugin's memory: they stay until the plugin restarts, which publishes
  the slices without them.

`fail_gpu` and `lose_gpus` are the test helpers (an NVML event, simulated): they rewrite the
node's slice through the API, as the plugin's republish does, and the fake driver
(`fakedriver.FakeDriver`) keeps what they wrote on its later republishes, dropping it only
when the runtime (the plugin) starts again. `taint_rule` builds an admin's DeviceTaintRule.
"""

from __future__ import annotations

from typing import Any

from .kubeapi import ApiError, KubeAPI
from .shapes import DRIVER

Obj = dict[str, Any]

XID_KEY = f"{DRIVER}/xid"
GPU_LOST_KEY = f"{DRIVER}/gpu-lost"
UNMONITORED_KEY = f"{DRIVER}/unmonitored"
# Application errors, not a failing GPU (the driver's hard-coded list): effect None.
NON_FATAL_XIDS = frozenset({13, 31, 43, 45, 68, 109})


def xid_taint(xid: int) -> Obj:
    return {"key": XID_KEY, "value": str(xid), "effect": "None" if xid in NON_FATAL_XIDS else "NoSchedule"}


def gpu_lost_taint() -> Obj:
    return {"key": GPU_LOST_KEY, "effect": "NoSchedule"}


def add_taint(device: Obj, taint: Obj) -> bool:
    """The plugin's add-or-update: one taint per key; True if the device's taints changed."""
    taints = device.setdefault("taints", [])
    for t in taints:
        if t["key"] == taint["key"]:
            if t.get("value", "") == taint.get("value", "") and t["effect"] == taint["effect"]:
                return False
            t.clear()
            t.update(taint)  # no timeAdded: the apiserver sets it anew
            return True
    taints.append(dict(taint))
    return True


def carry_taints(want: Obj, current: Obj) -> Obj:
    """`want` (a slice as the driver builds it) with the taints its devices have in `current`
    (the same slice as published): the plugin's in-memory taints, kept across republishes."""
    have = {d["name"]: d["taints"] for d in current["spec"].get("devices") or [] if d.get("taints")}
    if not have:
        return want
    spec = dict(want["spec"])
    spec["devices"] = [
        {**d, "taints": have[d["name"]]} if d["name"] in have else d for d in spec.get("devices") or []
    ]
    return {**want, "spec": spec}


def _node_slices(api: KubeAPI, node: str) -> list[Obj]:
    # A list's items carry no kind: set it, to write them back.
    return [
        {**s, "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice"}
        for s in api.list("ResourceSlice")["items"]
        if s["spec"].get("nodeName") == node and s["spec"]["driver"] == DRIVER
    ]


def _taint_devices(api: KubeAPI, node: str, devices: set[str] | None, taint: Obj) -> list[Obj]:
    """Add `taint` to these devices of the node (every device: None); the devices as stored."""
    for _ in range(5):
        found: list[Obj] = []
        try:
            for s in _node_slices(api, node):
                mine = [d for d in s["spec"].get("devices") or [] if devices is None or d["name"] in devices]
                if any([add_taint(d, taint) for d in mine]):
                    names = {d["name"] for d in mine}
                    mine = [d for d in api.replace(s)["spec"]["devices"] if d["name"] in names]
                found += mine
        except ApiError as e:
            if e.status != 409:  # 409: a republish came between, read again
                raise
            continue
        if devices is not None and {d["name"] for d in found} != devices:
            raise AssertionError(f"node {node} publishes no device {sorted(devices)}")
        return found
    raise AssertionError(f"the slices of node {node} kept changing under the taint")


def fail_gpu(api: KubeAPI, node: str, device: str, xid: int = 79) -> Obj:
    """An XID event on one device of `node` (`gpu-1`, `gpu-0-mig-1g10gb-19-6`): the driver's
    taint on it, as the apiserver stored it (with `timeAdded`)."""
    stored = _taint_devices(api, node, {device}, xid_taint(xid))
    return next(t for d in stored if d["name"] == device for t in d["taints"] if t["key"] == XID_KEY)


def lose_gpus(api: KubeAPI, node: str) -> list[Obj]:
    """NVML says a GPU is lost: every device of the node tainted `gpu-lost`."""
    return _taint_devices(api, node, None, gpu_lost_taint())


def heal(api: KubeAPI, node: str) -> None:
    """The plugin restarted (and the GPU was fixed): the node's slices without taints."""
    for _ in range(5):
        try:
            for s in _node_slices(api, node):
                devs = s["spec"].get("devices") or []
                if any(d.get("taints") for d in devs):
                    for d in devs:
                        d.pop("taints", None)
                    api.replace(s)
            return
        except ApiError as e:
            if e.status != 409:
                raise


def taint_rule(
    name: str, pool: str, device: str, key: str, value: str = "", effect: str = "NoExecute"
) -> Obj:
    """An admin's DeviceTaintRule on one device of the NVIDIA driver (resource.k8s.io/v1alpha3)."""
    taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
    return {
        "apiVersion": "resource.k8s.io/v1alpha3",
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {"deviceSelector": {"driver": DRIVER, "pool": pool, "device": device}, "taint": taint},
    }
