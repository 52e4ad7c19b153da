"""The fake NVIDIA DRA driver of the simulated nodes.

What the real driver's kubelet plugin does on a GPU node, minus the hardware:
it applies the DeviceClasses, publishes each node's ResourceSlices (built from
the cluster shape by `shapes`), writes the files the fake NVML of the GPU agent
reads, and names the devices of an allocation the way the container sees them.
Node registration and pods are the kubelet stand-in's (`kubelet`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .gpuhealth import carry_taints
from .gpumodels import MigProfile
from .kubeapi import KubeAPI
from .paths import ClusterPaths
from .shapes import (
    DRIVER,
    NodeSpec,
    Shape,
    build_slices,
    compute_domain_slices,
    device_classes,
    device_uuids,
    gpu_uuid,
    mig_uuid,
)

Obj = dict[str, Any]
# Simulation only: the UUIDs of the devices a container was given (what its device nodes
# would be on a real node), for tests to check; the real driver sets nothing like it.
CDI_DEVICES_ENV = "DEVCLUSTER_CDI_DEVICES"


class FakeDriver:
    def __init__(self, api: KubeAPI, shape: Shape, paths: ClusterPaths):
        self.api = api
        self.shape = shape
        self.paths = paths
        self.nodes = {n.name: n for n in shape.nodes}
        self.uuids = device_uuids(shape)
        self.fake_nvml_dir = paths.root / "fake-nvml"
        # The plugin's device taints (GPU health, `gpuhealth`) live in its memory: its first
        # publish has none, later ones keep what the slices show (`gpuhealth.fail_gpu` wrote).
        self._published = False

    def container_nvml(self, node: str, key: str, uuids: list[str]) -> str:
        """A fake-NVML configuration that sees only these devices of the node (what NVML in a
        container finds with the driver's CDI injection: the allocated GPUs, and of a MIG parent
        only the allocated MIG devices); its path."""
        self.fake_nvml_dir.mkdir(parents=True, exist_ok=True)
        path = self.fake_nvml_dir / "containers" / f"{key}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        cfg = {"gpus": visible_gpus(fake_nvml_gpus(self.nodes[node]), uuids), "control": str(self._control)}
        path.write_text(json.dumps(cfg, indent=1))
        return str(path)

    @property
    def _control(self) -> Path:
        return self.fake_nvml_dir / "load.json"

    def write_fake_nvml(self) -> None:
        """One simulated-NVML config per node (for the agent in holder pods), and the shared load file."""
        self.fake_nvml_dir.mkdir(parents=True, exist_ok=True)
        control = self._control
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
        """Each node's slices, owned by its Node (so they go with it); a node whose slices differ
        gets them replaced. Slices of other nodes (a test's real-cluster fixtures) are left alone."""
        uids = {
            n["metadata"]["name"]: n["metadata"]["uid"]
            for n in self.api.list("Node")["items"]
            if n["metadata"]["name"] in self.nodes
        }
        want: dict[str, Obj] = {}
        for node in self.shape.nodes:
            if node.name in uids:
                for s in node_slices(node, uids[node.name]):
                    want[s["metadata"]["name"]] = s
        have = {
            s["metadata"]["name"]: s
            for s in self.api.list("ResourceSlice")["items"]
            if s["spec"].get("nodeName") in uids
        }
        for name, s in want.items():
            cur = have.get(name)
            if cur is None:
                self.api.create(s)
                continue
            if self._published:
                s = carry_taints(s, cur)
            if _slice_differs(cur, s):
                s = dict(s)
                s["metadata"] = {**s["metadata"], "resourceVersion": cur["metadata"]["resourceVersion"]}
                self.api.replace(s)
        for name in set(have) - set(want):
            self.api.delete("ResourceSlice", name)
        self._published = True


def node_slices(node: NodeSpec, owner_uid: str | None = None) -> list[Obj]:
    """Every slice the driver's two kubelet plugins publish for a node."""
    return build_slices(node, owner_uid) + compute_domain_slices(node, owner_uid)


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


def visible_gpus(gpus: list[Obj], uuids: list[str]) -> list[Obj]:
    """The GPUs of `gpus` (fake-NVML form) that a container given `uuids` sees: a whole GPU with
    MIG mode off, or a MIG parent with only the given MIG devices."""
    want = set(uuids)
    out = []
    for g in gpus:
        if g["uuid"] in want:
            out.append({**g, "mig": []})
            continue
        migs = [m for m in g["mig"] if m["uuid"] in want]
        if migs:
            out.append({**g, "mig": migs})
    return out


def _slice_differs(cur: Obj, want: Obj) -> bool:
    a, b = cur["spec"], want["spec"]
    keys = ("driver", "nodeName", "devices", "sharedCounters")
    if any(a.get(k) != b.get(k) for k in keys):
        return True
    owners = [o.get("uid") for o in cur["metadata"].get("ownerReferences") or []]
    if owners != [o["uid"] for o in want["metadata"].get("ownerReferences") or []]:
        return True
    return bool(a["pool"]["resourceSliceCount"] != b["pool"]["resourceSliceCount"])
