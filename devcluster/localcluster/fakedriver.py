"""The fake NVIDIA DRA driver of the simulated nodes.

What the real driver's kubelet plugin does on a GPU node, minus the hardware:
it applies the DeviceClasses, publishes each node's ResourceSlices (built from
the cluster shape by `shapes`), writes the files the fake NVML of the GPU agent
reads, and names the devices of an allocation the way the container sees them.
Node registration and pods are the kubelet stand-in's (`kubelet`).
"""

from __future__ import annotations

import json
from typing import Any

from .gpumodels import MigProfile
from .kubeapi import KubeAPI
from .paths import ClusterPaths
from .shapes import (
    DRIVER,
    NodeSpec,
    Shape,
    build_slices,
    device_classes,
    device_uuids,
    gpu_uuid,
    mig_uuid,
)

Obj = dict[str, Any]
MANAGED = "app.kubernetes.io/managed-by=devcluster"


class FakeDriver:
    def __init__(self, api: KubeAPI, shape: Shape, paths: ClusterPaths):
        self.api = api
        self.shape = shape
        self.paths = paths
        self.nodes = {n.name: n for n in shape.nodes}
        self.uuids = device_uuids(shape)
        self.fake_nvml_dir = paths.root / "fake-nvml"

    def nvml_file(self, node: str) -> str:
        """The fake NVML's configuration for a node's agent."""
        return str(self.fake_nvml_dir / f"{node}.json")

    def write_fake_nvml(self) -> None:
        """One simulated-NVML config per node (for the agent in holder pods), and the shared load file."""
        self.fake_nvml_dir.mkdir(parents=True, exist_ok=True)
        control = self.fake_nvml_dir / "load.json"
        if not control.exists():
            control.write_text("{}")
        for node in self.shape.nodes:
            cfg = {"gpus": fake_nvml_gpus(node), "control": str(control)}
            (self.fake_nvml_dir / f"{node.name}.json").write_text(json.dumps(cfg, indent=1))

    def visible_uuid(self, driver: str, pool: str, device: str) -> str | None:
        """The UUID by which a container sees an allocated device (None: not one of our GPUs)."""
        if driver != DRIVER:
            return None
        return self.uuids.get((pool, device))

    def publish(self) -> None:
        """The DeviceClasses and every node's slices, as the driver's plugins publish them."""
        for dc in device_classes():
            self.api.apply(dc)
        self._publish_slices()

    def _publish_slices(self) -> None:
        want: dict[str, Obj] = {}
        for node in self.shape.nodes:
            for s in build_slices(node):
                want[s["metadata"]["name"]] = s
        have = {
            s["metadata"]["name"]: s for s in self.api.list("ResourceSlice", label_selector=MANAGED)["items"]
        }
        for name, s in want.items():
            cur = have.get(name)
            if cur is None:
                self.api.create(s)
            elif _slice_differs(cur["spec"], s["spec"]):
                s = dict(s)
                s["metadata"] = {**s["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]}
                self.api.replace(s)
        for name in set(have) - set(want):
            self.api.delete("ResourceSlice", name)


def fake_nvml_gpus(node: NodeSpec) -> list[Obj]:
    """The node's GPUs as the simulated NVML presents them (MIG devices with their UUIDs)."""
    out = []
    for gpu in node.gpus:
        parent = gpu_uuid(node.name, gpu.minor)
        migs: list[tuple[MigProfile, int]] = []
        if gpu.mode == "static":
            migs = [(m.profile, m.start) for m in gpu.layout]
        elif gpu.mode == "dynamic":
            migs = [(p, s) for p in gpu.model.mig_profiles for s in p.placements]
        out.append(
            {
                "uuid": parent,
                "name": gpu.model.product_name,
                "arch": gpu.model.architecture.lower(),
                "memory_mib": gpu.model.memory_mib,
                "mig": [
                    {
                        "uuid": mig_uuid(parent, p.name, s),
                        "profile": p.name,
                        "memory_mib": p.memory_mib,
                        "gi": i + 1,
                    }
                    for i, (p, s) in enumerate(migs)
                ],
            }
        )
    return out


def _slice_differs(a: Obj, b: Obj) -> bool:
    keys = ("driver", "nodeName", "devices", "sharedCounters")
    if any(a.get(k) != b.get(k) for k in keys):
        return True
    return bool(a["pool"]["resourceSliceCount"] != b["pool"]["resourceSliceCount"])
