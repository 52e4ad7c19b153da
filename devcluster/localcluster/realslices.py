"""ResourceSlices published from real clusters (../shared/real-slices/) as test fixtures.

`load(path)` reads one dump: a `kubectl get resourceslices -o yaml` list, one slice, or the
fragments some files hold. It returns v1 slices (the v1beta1 `basic:` form unwrapped) and the
Nodes they need. A fragment is completed only where its own header or gap comments say what is
missing; each completion is listed in `Dump.completions`. A dump that cannot be completed that
way (too little survived) comes back with `slices == []` and the reason; its devices' attributes
are still returned, for checks that need no slice.

`node_objects` and `load_into` put a dump into a cluster: Nodes (Ready, with the hostname label
a pod's nodeSelector uses), then the slices, owned by their Node as the driver's are.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
REAL_SLICES_DIR = Path(__file__).resolve().parents[3] / "shared" / "real-slices"
FIXTURE_LABEL = "test.gpusessions.io/real-slices"


@dataclass
class Dump:
    name: str
    api_version: str
    slices: list[Obj] = field(default_factory=list)  # v1, loadable
    devices: list[Obj] = field(default_factory=list)  # every device seen (v1 form), loadable or not
    completions: list[str] = field(default_factory=list)
    reason: str = ""  # why nothing is loadable

    @property
    def nodes(self) -> list[str]:
        return sorted({s["spec"]["nodeName"] for s in self.slices})


def dump_files(directory: Path = REAL_SLICES_DIR) -> list[Path]:
    return sorted(directory.glob("*.yaml"))


def to_v1(obj: Obj) -> Obj:
    """A ResourceSlice in v1 form: v1beta1 wraps each device's attributes and capacity in `basic`."""
    out = copy.deepcopy(obj)
    out["apiVersion"] = "resource.k8s.io/v1"
    spec = out.get("spec") or {}
    spec["devices"] = [
        {"name": d["name"], **(d.get("basic") or {})} if "basic" in d else d
        for d in spec.get("devices") or []
    ]
    return out


def _items(doc: Any) -> list[Obj]:
    if isinstance(doc, dict) and doc.get("kind") == "List":
        return list(doc.get("items") or [])
    return [doc] if isinstance(doc, dict) else []


def load(path: Path) -> Dump:
    text = path.read_text()
    special = _FRAGMENTS.get(path.name)
    if special is not None:
        return special(path, text)
    docs = [d for d in yaml.safe_load_all(text) if d]
    items = [i for d in docs for i in _items(d)]
    dump = Dump(path.name, items[0].get("apiVersion", "") if items else "")
    for item in items:
        s = to_v1(item)
        dump.slices.append(s)
        dump.devices += s["spec"].get("devices") or []
    return dump


def _h100_excerpt(path: Path, text: str) -> Dump:
    """Author-trimmed: 'only parentUUID/productName/profile attributes and memory/multiprocessors
    capacities kept'; spec.driver, nodeName and pool were cut too."""
    [raw] = [d for d in yaml.safe_load_all(text) if d]
    s = to_v1(raw)
    name = s["metadata"]["name"]
    node = re.sub(rf"-{re.escape(DRIVER)}-[a-z0-9]+$", "", name)
    spec = s["spec"]
    spec.update(
        {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}}
    )
    for d in spec["devices"]:
        d["attributes"].setdefault("type", {"string": "mig"})
    dump = Dump(path.name, raw["apiVersion"], [s], list(spec["devices"]))
    dump.completions = [
        f"spec.driver {DRIVER}, spec.nodeName and pool {node} (from the slice's generated name): "
        "cut by the author",
        "attribute type=mig on each device (a device with profile and parentUUID is a MIG device; "
        "the author kept only parentUUID, productName and profile)",
    ]
    return dump


_A100_PARENT = "GPU-ddf64803-f421-0e5b-883e-cd752de16db7"


def _a100_fragments(path: Path, text: str) -> Dump:
    """Three verbatim fragments of issue #719 (driver 25.8.0): the whole GPU gpu-1 of the node
    with MIG off, and two 1g.10gb MIG devices of the node with MIG on, whose whole GPUs the gap
    comment says were published too (the bug fixed in 25.8.1)."""
    product = {
        "architecture": {"string": "Ampere"},
        "brand": {"string": "Nvidia"},
        "cudaComputeCapability": {"version": "8.0.0"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "driverVersion": {"version": "580.95.5"},
        "productName": {"string": "NVIDIA A100 80GB PCIe"},
    }
    mig_caps = {
        "copyEngines": {"value": "1"},
        "decoders": {"value": "0"},
        "encoders": {"value": "0"},
        "jpegEngines": {"value": "0"},
        "memory": {"value": "9728Mi"},
        "multiprocessors": {"value": "14"},
        "ofaEngines": {"value": "0"},
    }

    def mig(name: str, uuid: str, memory_slice: int) -> Obj:
        attrs = {
            **product,
            "parentUUID": {"string": _A100_PARENT},
            "pcieBusID": {"string": "0001:00:00.0"},
            "profile": {"string": "1g.10gb"},
            "type": {"string": "mig"},
            "uuid": {"string": uuid},
        }
        return {
            "name": name,
            "attributes": attrs,
            "capacity": {**mig_caps, f"memorySlice{memory_slice}": {"value": "1"}},
        }

    gpupool, migpool = "aks-gpupool-15127565-vmss000002", "aks-migpool-68842551-vmss000001"
    whole_gpupool = {
        "name": "gpu-1",
        "attributes": {
            **product,
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-13719f71-412c-d11e-b236-a262f530a4fc"},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
    whole_migpool = {
        "name": "gpu-0",
        "attributes": {
            **product,
            "pcieBusID": {"string": "0001:00:00.0"},
            "type": {"string": "gpu"},
            "uuid": {"string": _A100_PARENT},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }
    devices_mig = [
        mig("gpu-0-mig-19-2-1", "MIG-d74574ee-26ab-5d71-ad7a-dc6c515ac642", 2),
        mig("gpu-0-mig-19-3-1", "MIG-6a0297e8-9708-515f-99e2-f111fc87221d", 3),
        whole_migpool,
    ]

    def slice_of(node: str, name: str, devices: list[Obj]) -> Obj:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name, "generateName": f"{node}-{DRIVER}-"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        }

    slices = [
        slice_of(gpupool, f"{gpupool}-{DRIVER}-fragm", [whole_gpupool]),
        slice_of(migpool, f"{migpool}-{DRIVER}-22vnt", devices_mig),
    ]
    dump = Dump(path.name, "resource.k8s.io/v1", slices, [whole_gpupool, *devices_mig])
    dump.completions = [
        "gpu-1 of aks-gpupool: its attributes above the first gap are product attributes of the same "
        "model and driver (taken from the MIG devices); pcieBusID unknown, left out; its slice name "
        "is lost (gap), one is made up",
        "gpu-0-mig-19-2-1: attributes after the gap (productName, profile 1g.10gb, type) as on the other "
        "1g.10gb device with the same capacities; pcieBusID as its sibling's",
        "second MIG device: the name (cut) by 25.8's naming gpu-<minor>-mig-<GI profile>-<start>-<size> "
        "from its profile and memorySlice3; multiprocessors and ofaEngines (cut) as on the first",
        "gpu-0 of aks-migpool: the whole-GPU entry the gap comment says was published (the 25.8.0 bug), "
        "with the parent's uuid and attributes and 80Gi as the other node's A100",
        "the other 1g.10gb devices and gpu-1 of aks-migpool: not in any fragment, left out",
    ]
    return dump


def _a30_fragment(path: Path, text: str) -> Dump:
    """Only the first attributes of one device survived: no name, type, uuid or capacity."""
    body = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    attrs: Obj = {}
    for m in re.finditer(r"^      ([A-Za-z./]+):\n        (string|version|int|bool): (.+)$", body, re.M):
        attrs[m.group(1)] = {m.group(2): m.group(3).strip()}
    return Dump(
        path.name,
        "resource.k8s.io/v1",
        devices=[{"name": "(cut)", "attributes": attrs}],
        reason="only the first attributes of one device survived (no device name, type or capacity, "
        "no counter sets): nothing the fragment itself says completes it",
    )


_FRAGMENTS = {
    "real-static-mig-h100-excerpt-hrishi.yaml": _h100_excerpt,
    "real-static-mig-a100-issue719-fragments.yaml": _a100_fragments,
    "real-dynamic-mig-a30-pr1018-fragment.yaml": _a30_fragment,
}


def node_objects(dump: Dump) -> list[Obj]:
    """Ready Nodes for the dump's pools, with the labels a real GPU node has."""
    out = []
    for name in dump.nodes:
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        "kubernetes.io/hostname": name,
                        "kubernetes.io/os": "linux",
                        "nvidia.com/gpu.present": "true",
                        FIXTURE_LABEL: "true",
                    },
                },
                "spec": {},
            }
        )
    return out


def node_status(now: str) -> Obj:
    resources = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "real-slices fixture"}
    return {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [{**ready, "lastHeartbeatTime": now, "lastTransitionTime": now}],
        }
    }


def owned_slices(dump: Dump, node_uids: dict[str, str]) -> list[Obj]:
    """The dump's slices owned by the Nodes just made (a dump's owner uids are of its cluster)."""
    out = []
    for s in dump.slices:
        s = copy.deepcopy(s)
        md = s["metadata"]
        node = s["spec"]["nodeName"]
        s["metadata"] = {
            "name": md["name"],
            "labels": {FIXTURE_LABEL: "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uids[node], "controller": True}
            ],
        }
        out.append(s)
    return out
