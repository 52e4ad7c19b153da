"""The admin page's fleet map and totals (pure): every GPU of the cluster from its
ResourceSlices, each device coloured by the session that holds it.

Two steps, so a page view at 1,000 nodes costs little: `layout(slices, nodes)`
reads the slices into nodes -> GPUs -> devices (only when slices or nodes
change), and `fleet(layout, sessions, ...)` colours it from the sessions the
culler's last cycle saw (one pass over the devices).

A GPU is found the way the NVIDIA DRA driver publishes it: a partitionable GPU
(dynamic MIG) by the counter set its devices consume, a static MIG device by its
`parentUUID`, a whole GPU by its `uuid`. Devices of other types (the driver's
compute-domain channels, say) are not GPUs and are left out. Sizes are in
GPU-equivalents: a MIG slice `Ng.*` is N/7, a whole GPU 1 (as the culler's record
counts them).

"Free" means held by no gpusessions session: the culler watches only its own
claims, so a device another workload allocated shows free here. A device with a
`NoSchedule` or `NoExecute` taint (the driver reported it broken: an XID, a lost GPU;
`core.health`) is "broken", held or not, and the map says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpusessions.core import health
from gpusessions.core.sizes import mig_slices
from gpusessions.culler.model import Session

Obj = dict[str, Any]

# Cell states, in the order the page's legend shows them (cells carry their index).
FREE, BUSY, IDLE, KEPT, PENDING, BROKEN = "free", "busy", "idle", "kept", "pending", "broken"
STATES = [FREE, BUSY, IDLE, KEPT, PENDING, BROKEN]
_INDEX = {s: i for i, s in enumerate(STATES)}

# Node labels that name a node pool, most specific first (GKE, EKS, AKS, Karpenter, OpenShift
# machine sets); without one, nodes are grouped by their GPU shape.
POOL_LABELS = (
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
    "karpenter.sh/nodepool",
    "machine.openshift.io/cluster-api-machineset",
    "gpusessions.io/node-pool",
)


def _attr(device: Obj, name: str) -> Any:
    a = (device.get("attributes") or {}).get(name) or {}
    return a.get("string")


def sevenths(device: Obj) -> int:
    """A device's size in sevenths of a GPU (a whole GPU is 7)."""
    n = mig_slices(device)
    return 7 if n is None else min(7, n)


@dataclass
class GPU:
    key: tuple[str, str]  # (pool, counter set / uuid)
    product: str
    mode: str  # whole | static | dynamic
    devices: list[tuple[str, int]] = field(default_factory=list)  # (device name, sevenths)
    bus: str = ""
    label: str = ""
    free: list[Any] = field(default_factory=list)  # the GPU's entry on the map while nothing is held
    free_json: str = ""  # the same, serialized once (pagedata.nodes_json)


@dataclass
class Node:
    name: str
    group: str
    gpus: list[GPU]


@dataclass
class Layout:
    """Nodes -> GPUs -> devices, from the slices (recomputed only when slices or nodes change)."""

    nodes: list[Node]
    groups: list[str]
    # (pool, device) -> (node index, gpu index) for the devices a session can hold
    where: dict[tuple[str, str], tuple[int, int]]
    gpus: int
    # (pool, device) -> why it is tainted (never allocated), for the devices that are
    tainted: dict[tuple[str, str], str] = field(default_factory=dict)


def _gpu_key(pool: str, device: Obj) -> tuple[tuple[str, str], str] | None:
    kind = _attr(device, "type")
    if kind not in ("gpu", "mig"):
        return None
    consumes = device.get("consumesCounters") or []
    if consumes:
        return (pool, "counters:" + consumes[0].get("counterSet", "")), "dynamic"
    if kind == "mig":
        return (pool, "uuid:" + (_attr(device, "parentUUID") or "")), "static"
    return (pool, "uuid:" + (_attr(device, "uuid") or device["name"])), "whole"


def pool_of(node: Obj | None) -> str | None:
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    for key in POOL_LABELS:
        if labels.get(key):
            return f"pool {labels[key]}"
    return None


def _shape_name(gpus: list[GPU]) -> str:
    counts: dict[tuple[str, str], int] = {}
    for g in gpus:
        counts[(g.product, g.mode)] = counts.get((g.product, g.mode), 0) + 1
    words = {"whole": "", "static": " static MIG", "dynamic": " dynamic MIG"}
    return ", ".join(f"{n} x {p or 'GPU'}{words[m]}" for (p, m), n in sorted(counts.items()))


def layout(
    slices: Iterable[Obj], nodes: Mapping[str, Obj] | None = None, driver: str = "gpu.nvidia.com"
) -> Layout:
    """The GPUs of each node, from the slices of `driver`; grouped by node pool (a pool label
    on the Node) or else by the node's GPU shape. `nodes`: Node objects by name (optional)."""
    per_node: dict[str, dict[tuple[str, str], GPU]] = {}
    tainted: dict[tuple[str, str], str] = {}
    for s in sorted(slices, key=lambda s: s["metadata"]["name"]):
        spec = s.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = spec["pool"]["name"]
        node = spec.get("nodeName") or pool
        found_gpus = per_node.setdefault(node, {})
        for d in spec.get("devices") or []:
            found = _gpu_key(pool, d)
            if found is None:
                continue
            key, mode = found
            g = found_gpus.get(key)
            if g is None:
                g = found_gpus[key] = GPU(key, _attr(d, "productName") or "", mode)
            g.bus = g.bus or _attr(d, "resource.kubernetes.io/pciBusID") or ""
            g.devices.append((d["name"], sevenths(d)))
            taints = health.device_taints(d)
            if taints:
                tainted[(pool, d["name"])] = health.reasons(taints)
    out: list[Node] = []
    groups: list[str] = []
    where: dict[tuple[str, str], tuple[int, int]] = {}
    total = 0
    node_objs = nodes or {}
    for name in sorted(per_node):
        gpus = sorted(per_node[name].values(), key=lambda g: (g.bus, g.key))
        if not gpus:
            continue
        group = pool_of(node_objs.get(name)) or _shape_name(gpus)
        if group not in groups:
            groups.append(group)
        ni = len(out)
        for gi, gpu in enumerate(gpus):
            gpu.label = f"GPU {gi}"
            cells = [["", 0, 7, -1]] if gpu.mode == "dynamic" else [[n, 0, k, -1] for n, k in gpu.devices]
            gpu.free = [gpu.label, gpu.product, gpu.mode, cells]
            for dname, _ in gpu.devices:
                where[(gpu.key[0], dname)] = (ni, gi)
        out.append(Node(name, group, gpus))
        total += len(gpus)
    groups.sort()
    return Layout(out, groups, where, total, tainted)


def cell_state(s: Session) -> str:
    """A held device's colour, from the session holding it."""
    if s.pending or (s.allocated and s.holder_phase == "Pending"):
        return PENDING
    if not s.running:
        return KEPT
    return BUSY if s.gpu_busy_now else IDLE


def fleet(lay: Layout, sessions: list[Session], idle_gpu_hours_today: float | None = None) -> Obj:
    """The fleet map and the totals, as the page's JSON carries them (compact: cells are lists).

    `sessions` in the order of the page's session list: a cell names its holder by index.
    Result: {"states", "groups", "nodes": [[name, group index, [[gpu label, product, mode,
    [[device, state index, sevenths, session index or -1], ...]], ...]], ...], "totals"}.
    A partitionable GPU shows the devices sessions hold and one free cell for the rest."""
    held: dict[tuple[str, str], tuple[int, str]] = {}
    waiting = 0
    for i, s in enumerate(sessions):
        if not s.allocated:
            waiting += 1
            continue
        st = cell_state(s)
        for dev in s.devices:
            pool, _, name = dev.partition("/")
            held[(pool, name)] = (i, st)
    eq = dict.fromkeys(STATES, 0)  # in sevenths
    devs = dict.fromkeys(STATES, 0)
    gpus_by_state = dict.fromkeys(STATES, 0)
    # GPUs with a device held or broken are drawn cell by cell; the others as the layout made them.
    touched = {lay.where[k] for k in [*held, *lay.tainted] if k in lay.where}
    broken: list[Obj] = []
    group_index = {g: i for i, g in enumerate(lay.groups)}
    nodes_out = []
    for ni, node in enumerate(lay.nodes):
        gpus_out = []
        for gi, g in enumerate(node.gpus):
            if (ni, gi) not in touched:  # nothing held: the cells the layout made once
                gpus_out.append(g.free)
                eq[FREE] += 7 if g.mode == "dynamic" else sum(n for _, n in g.devices)
                devs[FREE] += 0 if g.mode == "dynamic" else len(g.devices)
                gpus_by_state[FREE] += 1
                continue
            cells: list[list[Any]] = []
            used = 0
            by_size: dict[str, int] = {}
            pool = g.key[0]
            for dname, n in g.devices:
                h = held.get((pool, dname))
                why = lay.tainted.get((pool, dname))
                if why is not None:
                    broken.append(
                        {
                            "node": node.name,
                            "gpu": g.label,
                            "device": dname,
                            "why": why,
                            "session": -1 if h is None else h[0],
                        }
                    )
                    h = (-1 if h is None else h[0], BROKEN)
                if h is None:
                    if g.mode != "dynamic":
                        cells.append([dname, 0, n, -1])
                        eq[FREE] += n
                        devs[FREE] += 1
                    continue
                used += n
                cells.append([dname, _INDEX[h[1]], n, h[0]])
                eq[h[1]] += n
                devs[h[1]] += 1
                by_size[h[1]] = by_size.get(h[1], 0) + n
            if g.mode == "dynamic" and used < 7:
                cells.append(["", 0, 7 - used, -1])
                eq[FREE] += 7 - used
            # A GPU counts once, by the state of most of it: free only when nothing is held.
            gpus_by_state[max(by_size, key=lambda k: (by_size[k], -_INDEX[k]))] += 1
            gpus_out.append([g.label, g.product, g.mode, cells])
        nodes_out.append([node.name, group_index[node.group], gpus_out])
    totals = {
        "gpus": lay.gpus,
        "nodes": len(lay.nodes),
        "gpus_by_state": gpus_by_state,
        "devices": devs,
        "equivalents": {k: round(v / 7, 2) for k, v in eq.items()},
        "waiting": waiting,
        "idle_gpu_hours_today": None if idle_gpu_hours_today is None else round(idle_gpu_hours_today, 2),
        # Each broken device: node, GPU label, device, why, the index of the session holding it.
        "broken": broken,
    }
    return {"states": STATES, "groups": lay.groups, "nodes": nodes_out, "totals": totals}
