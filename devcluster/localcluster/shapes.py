"""Cluster shapes: YAML -> simulated Nodes and NVIDIA-style ResourceSlices.

Pure functions only: nothing here talks to the API. The slices follow what the
NVIDIA DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu, release 25.12) publishes
on Kubernetes 1.35, point by point from ../shared/real-slices/README.md:

- one pool per node; slice names from `generateName` (`<node>-gpu.nvidia.com-<5 random>`),
  owned by the Node (the owner is added when publishing: it needs the Node's uid);
- attributes `type`, `uuid`, `productName`, `brand`, `architecture`,
  `cudaComputeCapability`, `driverVersion`, `cudaDriverVersion` (versions),
  `addressingMode`, `resource.kubernetes.io/pciBusID` and `resource.kubernetes.io/pcieRoot`;
- whole GPUs `gpu-<minor>`; MIG devices `gpu-<minor>-mig-<profile without dots>-<GI profile
  id>-<placement start>` (`+me` becomes `-me`);
- static MIG (a fixed layout): the MIG devices with their `uuid` and `memorySlice<N>`
  capacities, and no whole device for their parent; all devices in one slice;
- dynamic MIG (the driver-wide DynamicMIG gate): every profile (`+me` included) at every
  placement, without `uuid`, consuming from one counter set per GPU
  (`gpu-<minor>-counter-set`); the whole GPU too, except on Ampere with MIG mode on; one slice
  with all counter sets, then one slice per GPU;
- a `compute-domain.nvidia.com` slice per GPU node (`channel-0`, `daemon-0`).

One driver install is either static or dynamic MIG: a shape that mixes them is refused.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import gpumodels
from .gpumodels import GPUModel, MigProfile

DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
NODE_LABEL = "devcluster.gpusessions.io/node"
K8S_VERSION = "v1.36.5"  # what devcluster/scripts/build.sh builds (a test compares the two)
_UUID_NS = uuid.UUID("6f1d3c52-0b7e-4f55-9a59-3c1f0d2f7a10")
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what the apiserver's generateName uses

Obj = dict[str, Any]


class ShapeError(ValueError):
    """A cluster shape that cannot be simulated, with the reason."""


@dataclass(frozen=True)
class MigInstance:
    profile: MigProfile
    start: int


@dataclass(frozen=True)
class GPU:
    minor: int
    model: GPUModel
    mode: str  # "none" (whole GPU), "static" (fixed MIG layout), "dynamic" (partitionable)
    layout: tuple[MigInstance, ...] = ()


@dataclass(frozen=True)
class NodeSpec:
    name: str
    index: int
    cpu: str
    memory: str
    pods: int
    labels: dict[str, str] = field(default_factory=dict)
    gpus: tuple[GPU, ...] = ()

    @property
    def ip(self) -> str:
        return f"127.200.{self.index // 250}.{self.index % 250 + 1}"


@dataclass(frozen=True)
class Shape:
    name: str
    description: str
    nodes: tuple[NodeSpec, ...]

    @property
    def mig_mode(self) -> str:
        """The driver install's MIG mode: "dynamic" (DynamicMIG on) or "static"."""
        return "dynamic" if any(g.mode == "dynamic" for n in self.nodes for g in n.gpus) else "static"

    @property
    def gpu_count(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)


# -- identities -------------------------------------------------------------
def gpu_uuid(node: str, minor: int) -> str:
    return "GPU-" + str(uuid.uuid5(_UUID_NS, f"{node}/gpu-{minor}"))


def mig_uuid(parent_uuid: str, profile: str, start: int) -> str:
    return "MIG-" + str(uuid.uuid5(_UUID_NS, f"{parent_uuid}/{profile}/{start}"))


def mig_device_name(minor: int, profile: MigProfile, start: int) -> str:
    name = re.sub(r"[^a-z0-9-]", "-", profile.name.replace(".", "").lower()).strip("-")
    return f"gpu-{minor}-mig-{name}-{profile.profile_id}-{start}"


def counter_set_name(minor: int) -> str:
    return f"gpu-{minor}-counter-set"


# -- parsing ----------------------------------------------------------------
def _place(model: GPUModel, names: list[str], where: str) -> tuple[MigInstance, ...]:
    profiles = [model.profile(n) for n in names]
    if sum(p.compute_slices for p in profiles) > model.compute_slices:
        raise ShapeError(f"{where}: MIG layout {names} needs more than {model.compute_slices} compute slices")
    # Largest first, then search placements (as nvidia-smi would have to).
    order = sorted(profiles, key=lambda p: -p.memory_slices)

    def search(i: int, used: frozenset[int]) -> list[MigInstance] | None:
        if i == len(order):
            return []
        p = order[i]
        for start in p.placements:
            span = frozenset(range(start, start + p.memory_slices))
            if not span & used:
                rest = search(i + 1, used | span)
                if rest is not None:
                    return [MigInstance(p, start), *rest]
        return None

    placed = search(0, frozenset())
    if placed is None:
        raise ShapeError(f"{where}: MIG layout {names} has no valid placement on {model.key}")
    return tuple(sorted(placed, key=lambda m: m.start))


def _gpus(raw: list[Any], where: str) -> tuple[GPU, ...]:
    gpus: list[GPU] = []
    for i, g in enumerate(raw or []):
        w = f"{where}.gpus[{i}]"
        if not isinstance(g, dict):
            raise ShapeError(f"{w}: expected a mapping")
        unknown = set(g) - {"model", "mig", "layout", "count"}
        if unknown:
            raise ShapeError(f"{w}: unknown keys {sorted(unknown)}")
        try:
            model = gpumodels.model(str(g.get("model", "")))
        except ValueError as e:
            raise ShapeError(f"{w}: {e}") from None
        mode = str(g.get("mig", "none"))
        if mode not in ("none", "static", "dynamic"):
            raise ShapeError(f"{w}: mig must be none, static or dynamic, not {mode!r}")
        layout_names = g.get("layout") or []
        if mode == "static" and not layout_names:
            raise ShapeError(f"{w}: mig: static needs a layout (list of MIG profiles)")
        if mode != "static" and layout_names:
            raise ShapeError(f"{w}: a layout is only valid with mig: static")
        count = int(g.get("count", 1))
        for _ in range(count):
            minor = len(gpus)
            try:
                layout = _place(model, [str(n) for n in layout_names], w) if mode == "static" else ()
            except ValueError as e:
                raise ShapeError(f"{w}: {e}") from None
            gpus.append(GPU(minor=minor, model=model, mode=mode, layout=layout))
    return tuple(gpus)


def parse_shape(name: str, data: Any) -> Shape:
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise ShapeError(f"shape {name}: expected a mapping with a 'nodes' list")
    nodes: list[NodeSpec] = []
    for i, n in enumerate(data["nodes"]):
        where = f"shape {name}: nodes[{i}]"
        if not isinstance(n, dict):
            raise ShapeError(f"{where}: expected a mapping")
        unknown = set(n) - {"name", "count", "cpu", "memory", "pods", "labels", "gpus"}
        if unknown:
            raise ShapeError(f"{where}: unknown keys {sorted(unknown)}")
        count = int(n.get("count", 1))
        pattern = str(n.get("name", ""))
        gpus = _gpus(n.get("gpus") or [], where)
        for k in range(count):
            node_name = pattern.format(i=k) if count > 1 or "{" in pattern else pattern
            if not _NAME_RE.match(node_name) or len(node_name) > 63:
                raise ShapeError(f"{where}: node name {node_name!r} is not a valid DNS label")
            nodes.append(
                NodeSpec(
                    name=node_name,
                    index=len(nodes),
                    cpu=str(n.get("cpu", "32")),
                    memory=str(n.get("memory", "256Gi")),
                    pods=int(n.get("pods", 110)),
                    labels={str(a): str(b) for a, b in (n.get("labels") or {}).items()},
                    gpus=gpus,
                )
            )
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ShapeError(f"shape {name}: node names are not unique")
    _check_one_mig_mode(name, nodes)
    return Shape(name=name, description=str(data.get("description", "")), nodes=tuple(nodes))


def _check_one_mig_mode(name: str, nodes: list[NodeSpec]) -> None:
    """One driver install is static or dynamic MIG (DynamicMIG is driver-wide, and with it on the
    driver destroys MIG devices it did not create); with it on, Hopper GPUs are always offered as
    partitions too."""
    where = {m: f"{n.name} gpu {g.minor}" for n in nodes for g in n.gpus for m in (g.mode,)}
    if "static" in where and "dynamic" in where:
        raise ShapeError(
            f"shape {name} mixes static MIG ({where['static']}) and dynamic MIG ({where['dynamic']}): "
            "one NVIDIA driver install is either, so make two shapes"
        )
    if "dynamic" in where:
        for n in nodes:
            for g in n.gpus:
                if g.mode == "none" and g.model.toggles_mig_without_reset:
                    raise ShapeError(
                        f"shape {name}: {n.name} gpu {g.minor} ({g.model.key}) has mig: none, but with "
                        "dynamic MIG the driver offers every Hopper or newer GPU as partitions too: "
                        "write mig: dynamic"
                    )


def load_shape(name_or_path: str, shapes_dir: Path) -> Shape:
    path = Path(name_or_path)
    if not path.suffix:
        path = shapes_dir / f"{name_or_path}.yaml"
    if not path.exists():
        known = ", ".join(sorted(p.stem for p in shapes_dir.glob("*.yaml")))
        raise ShapeError(f"no cluster shape {name_or_path!r} (known shapes: {known})")
    return parse_shape(path.stem, yaml.safe_load(path.read_text()))


# -- builders ---------------------------------------------------------------
def build_node(node: NodeSpec) -> Obj:
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        NODE_LABEL: "true",
        **({"nvidia.com/gpu.present": "true"} if node.gpus else {}),
        **node.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels},
        "spec": {},
    }


def build_node_status(node: NodeSpec, now: str, kubelet_port: int = 0) -> Obj:
    """The Node's status as its kubelet reports it; `kubelet_port`: where its API listens on
    the node's address (0: none; then the apiserver cannot read the node's pod logs)."""
    resources = {"cpu": node.cpu, "memory": node.memory, "pods": str(node.pods), "ephemeral-storage": "500Gi"}

    def cond(t: str, status: str, reason: str, msg: str) -> Obj:
        return {
            "type": t,
            "status": status,
            "reason": reason,
            "message": msg,
            "lastHeartbeatTime": now,
            "lastTransitionTime": now,
        }

    return {
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                cond("Ready", "True", "KubeletReady", "devcluster process runtime is ready"),
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": node.ip},
                {"type": "Hostname", "address": node.name},
            ],
            "nodeInfo": {
                "machineID": node.name,
                "systemUUID": node.name,
                "bootID": node.name,
                "kernelVersion": "simulated",
                "osImage": "gpusessions devcluster",
                "containerRuntimeVersion": "devcluster://process",
                "kubeletVersion": K8S_VERSION,
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        }
    }


def _s(v: str) -> Obj:
    return {"string": v}


def _quantity(name: str, v: int) -> str:
    if name == "memory" and v % (1024 * 1024) == 0:
        return f"{v // (1024 * 1024)}Mi"
    return str(v)


def _capacity(caps: dict[str, int]) -> Obj:
    return {k: {"value": _quantity(k, v)} for k, v in caps.items()}


def _counter_name(capacity: str) -> str:
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", capacity).lower()


def _counters(caps: dict[str, int], start: int, size: int) -> Obj:
    c = {_counter_name(k): {"value": _quantity(k, v)} for k, v in caps.items()}
    for i in range(start, start + size):
        c[f"memory-slice-{i}"] = {"value": "1"}
    return c


def _parent_attrs(node: NodeSpec, gpu: GPU) -> Obj:
    m = gpu.model
    return {
        "productName": _s(m.product_name),
        "brand": _s(m.brand),
        "architecture": _s(m.architecture),
        "cudaComputeCapability": {"version": m.cuda_compute_capability},
        "driverVersion": {"version": gpumodels.DRIVER_VERSION},
        "cudaDriverVersion": {"version": gpumodels.CUDA_DRIVER_VERSION},
        "addressingMode": _s(m.addressing_mode),
        "resource.kubernetes.io/pciBusID": _s(f"0000:{_bus(node, gpu)}:00.0"),
        "resource.kubernetes.io/pcieRoot": _s(f"pci0000:{_bus(node, gpu)}"),
    }


def _bus(node: NodeSpec, gpu: GPU) -> str:
    return f"{0x18 + gpu.minor * 0x10:02x}"


def _whole_gpu_device(node: NodeSpec, gpu: GPU) -> Obj:
    attrs = {"type": _s("gpu"), "uuid": _s(gpu_uuid(node.name, gpu.minor)), **_parent_attrs(node, gpu)}
    dev: Obj = {"name": f"gpu-{gpu.minor}", "attributes": attrs}
    if gpu.mode == "dynamic":
        # The full GPU of a partitionable GPU consumes every counter, so that
        # any MIG device on it makes the full device unavailable and back.
        caps = gpu.model.max_capacities()
        dev["capacity"] = _capacity(caps)
        dev["consumesCounters"] = [
            {
                "counterSet": counter_set_name(gpu.minor),
                "counters": _counters(caps, 0, gpu.model.memory_slices),
            }
        ]
    else:
        dev["capacity"] = _capacity({"memory": gpu.model.memory_mib * 1024 * 1024})
    return dev


def _mig_device(node: NodeSpec, gpu: GPU, profile: MigProfile, start: int, static: bool) -> Obj:
    parent = gpu_uuid(node.name, gpu.minor)
    attrs = {
        "type": _s("mig"),
        "parentUUID": _s(parent),
        "profile": _s(profile.name),
        **_parent_attrs(node, gpu),
    }
    if static:
        attrs["uuid"] = _s(mig_uuid(parent, profile.name, start))
    dev: Obj = {
        "name": mig_device_name(gpu.minor, profile, start),
        "attributes": attrs,
        "capacity": _capacity(profile.capacities()),
    }
    if static:
        # The memory slices this instance uses, one capacity each (static MIG only).
        for i in range(start, start + profile.memory_slices):
            dev["capacity"][f"memorySlice{i}"] = {"value": "1"}
    else:
        dev["consumesCounters"] = [
            {
                "counterSet": counter_set_name(gpu.minor),
                "counters": _counters(profile.capacities(), start, profile.memory_slices),
            }
        ]
    return dev


def gpu_devices(node: NodeSpec, gpu: GPU) -> tuple[list[Obj], list[Obj]]:
    """(devices, counter sets) the driver advertises for one GPU."""
    if gpu.mode == "none":
        return [_whole_gpu_device(node, gpu)], []
    if gpu.mode == "static":
        return [_mig_device(node, gpu, m.profile, m.start, static=True) for m in gpu.layout], []
    caps = gpu.model.max_capacities()
    counter_set = {
        "name": counter_set_name(gpu.minor),
        "counters": _counters(caps, 0, gpu.model.memory_slices),
    }
    devices = [
        _mig_device(node, gpu, p, s, static=False) for p in gpu.model.mig_profiles for s in p.placements
    ]
    if gpu.model.toggles_mig_without_reset:
        # Ampere with MIG mode on offers only partitions: MIG mode cannot change without a reset.
        devices.append(_whole_gpu_device(node, gpu))
    return sorted(devices, key=lambda d: d["name"]), [counter_set]


def node_devices(node: NodeSpec) -> tuple[list[Obj], list[Obj]]:
    """(devices, counter sets) the driver advertises for one node."""
    devices: list[Obj] = []
    counter_sets: list[Obj] = []
    for gpu in node.gpus:
        d, c = gpu_devices(node, gpu)
        devices += d
        counter_sets += c
    return devices, counter_sets


def slice_name(node: str, driver: str, index: int) -> str:
    """A name as the apiserver makes one from `<node>-<driver>-`: five random characters
    (derived from the node, driver and index here, so that republishing finds its slices)."""
    digest = hashlib.sha256(f"{node}/{driver}/{index}".encode()).digest()
    suffix = "".join(_NAME_ALPHABET[b % len(_NAME_ALPHABET)] for b in digest[:5])
    return f"{node}-{driver}-{suffix}"


def _slice(node: NodeSpec, driver: str, index: int, count: int, extra: Obj, owner_uid: str | None) -> Obj:
    md: Obj = {"generateName": f"{node.name}-{driver}-", "name": slice_name(node.name, driver, index)}
    if owner_uid:
        md["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": owner_uid, "controller": True}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": md,
        "spec": {
            "driver": driver,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": count},
            **extra,
        },
    }


def build_slices(node: NodeSpec, owner_uid: str | None = None) -> list[Obj]:
    """The gpu.nvidia.com ResourceSlices of one node's pool (empty for a node without GPUs):
    static MIG and whole GPUs in one slice; with dynamic MIG (Kubernetes 1.35's split form) one
    slice with every counter set, then one slice per GPU."""
    if not node.gpus:
        return []
    if all(g.mode != "dynamic" for g in node.gpus):
        devices, _ = node_devices(node)
        return [_slice(node, DRIVER, 0, 1, {"devices": devices}, owner_uid)]
    per_gpu = [gpu_devices(node, g) for g in node.gpus]
    specs: list[Obj] = [{"sharedCounters": [c for _, cs in per_gpu for c in cs]}]
    specs += [{"devices": d} for d, _ in per_gpu]
    return [_slice(node, DRIVER, i, len(specs), extra, owner_uid) for i, extra in enumerate(specs)]


def compute_domain_slices(node: NodeSpec, owner_uid: str | None = None) -> list[Obj]:
    """The compute-domain.nvidia.com slice the driver's second plugin publishes on a GPU node."""
    if not node.gpus:
        return []
    devices = [
        {"name": f"{t}-0", "attributes": {"type": {"string": t}, "id": {"int": 0}}}
        for t in ("channel", "daemon")
    ]
    return [_slice(node, CD_DRIVER, 0, 1, {"devices": devices}, owner_uid)]


def device_uuids(shape: Shape) -> dict[tuple[str, str], str]:
    """(pool, device name) -> UUID, as NVIDIA_VISIBLE_DEVICES would name the device.

    Dynamic MIG devices get their UUID when the runtime 'prepares' them; it is
    derived from the parent and placement, so it is stable too.
    """
    out: dict[tuple[str, str], str] = {}
    for node in shape.nodes:
        for gpu in node.gpus:
            parent = gpu_uuid(node.name, gpu.minor)
            if gpu.mode in ("none", "dynamic"):
                out[(node.name, f"gpu-{gpu.minor}")] = parent
            if gpu.mode == "static":
                for m in gpu.layout:
                    out[(node.name, mig_device_name(gpu.minor, m.profile, m.start))] = mig_uuid(
                        parent, m.profile.name, m.start
                    )
            if gpu.mode == "dynamic":
                for p in gpu.model.mig_profiles:
                    for s in p.placements:
                        out[(node.name, mig_device_name(gpu.minor, p, s))] = mig_uuid(parent, p.name, s)
    return out


def device_classes() -> list[Obj]:
    """The DeviceClasses the NVIDIA driver's chart installs (25.12): gpu, mig, vfio and the two
    compute-domain classes. `extendedResourceName` needs DRAExtendedResource (alpha in 1.35, beta
    in 1.36); an apiserver without the gate drops the field."""

    def dc(name: str, expression: str, extended: str | None = None) -> Obj:
        spec: Obj = {"selectors": [{"cel": {"expression": expression}}]}
        if extended:
            spec["extendedResourceName"] = extended
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "devcluster"}},
            "spec": spec,
        }

    def gpu_type(t: str) -> str:
        return f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{t}'"

    cd = f"device.driver == '{CD_DRIVER}' && device.attributes['{CD_DRIVER}'].type == "
    return [
        dc("gpu.nvidia.com", gpu_type("gpu"), "nvidia.com/gpu"),
        dc("mig.nvidia.com", gpu_type("mig")),
        dc("vfio.gpu.nvidia.com", gpu_type("vfio")),
        dc("compute-domain-daemon.nvidia.com", cd + "'daemon'"),
        dc(
            "compute-domain-default-channel.nvidia.com",
            cd + f"'channel' && device.attributes['{CD_DRIVER}'].id == 0",
        ),
    ]
