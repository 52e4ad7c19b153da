"""How many sessions of each GPU size can start now (pure functions).

Inputs are plain dicts as the API returns them: ResourceSlices, allocated
ResourceClaims and DeviceClasses. A size is the conjunction of its
DeviceClass's selectors and the profile's selectors, read as structured
matches (`sizes.parse_cel`); a size whose CEL is of another form is reported
as unknown rather than guessed.

Counting follows the scheduler's allocator: devices are taken first-fit in
slice order; a device is free when no claim has it; a device that consumes
counters (partitionable GPUs) fits only while its pool's counter set has
enough left after what allocated devices consume; a device with a `NoSchedule` or
`NoExecute` taint (a broken GPU, `core.health`) is never free, though it counts in the
total of an empty cluster. So "N free" means N claims of that size can be allocated now,
one after another.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeVar, cast

from gpusessions.core.claims import GPURequest
from gpusessions.core.health import device_taints
from gpusessions.core.sizes import DeviceMatch, mig_slices, parse_cel, quantity

Obj = dict[str, Any]
DeviceKey = tuple[str, str, str]  # driver, pool, device
CounterKey = tuple[str, str, str]  # driver, pool, counter set


Amount = int | Fraction
Consumption = list[tuple[CounterKey, dict[str, Amount]]]


@functools.lru_cache(maxsize=4096)
def _amount(q: str) -> Amount:
    v = quantity(q)
    return int(v) if v.denominator == 1 else v


@dataclass
class Inventory:
    """Devices and counters of all slices, in the order the scheduler sees them."""

    devices: list[tuple[DeviceKey, Obj]] = field(default_factory=list)
    by_key: dict[DeviceKey, Obj] = field(default_factory=dict)
    counters: dict[CounterKey, dict[str, Amount]] = field(default_factory=dict)
    consumption: dict[DeviceKey, Consumption] = field(default_factory=dict)
    # The node of each (driver, pool): a claim's devices all come from the node its pod runs
    # on. None for a pool that is not node-local (allNodes / nodeSelector).
    pool_node: dict[tuple[str, str], str | None] = field(default_factory=dict)
    # Whole GPUs their pool also publishes as the parent of MIG devices (NVIDIA DRA driver 25.8.0;
    # fixed in 25.8.1): a whole-GPU claim could take a GPU that MIG sessions use.
    cut: set[DeviceKey] = field(default_factory=set)
    # Devices with a NoSchedule or NoExecute taint (the driver's health taints): never free.
    tainted: dict[DeviceKey, list[Obj]] = field(default_factory=dict)

    @classmethod
    def from_slices(cls, slices: Iterable[Obj]) -> Inventory:
        inv = cls()
        ordered = sorted(
            slices,
            key=lambda s: (s["spec"]["driver"], s["spec"]["pool"]["name"], s["metadata"]["name"]),
        )
        for s in ordered:
            spec = s["spec"]
            driver, pool = spec["driver"], spec["pool"]["name"]
            inv.pool_node[(driver, pool)] = spec.get("nodeName") or None
            for cs in spec.get("sharedCounters") or []:
                inv.counters[(driver, pool, cs["name"])] = {
                    k: _amount(v["value"]) for k, v in (cs.get("counters") or {}).items()
                }
            for d in spec.get("devices") or []:
                key = (driver, pool, d["name"])
                inv.devices.append((key, d))
                inv.by_key[key] = d
                taints = device_taints(d)
                if taints:
                    inv.tainted[key] = taints
                if d.get("consumesCounters"):
                    inv.consumption[key] = [
                        (
                            (driver, pool, c["counterSet"]),
                            {k: _amount(v["value"]) for k, v in (c.get("counters") or {}).items()},
                        )
                        for c in d["consumesCounters"]
                    ]
        inv.cut = cut_gpus(inv.devices)
        return inv

    def candidates(self, match: DeviceMatch) -> list[DeviceKey]:
        return [k for k, d in self.devices if match.matches(k[0], d)]

    def by_node(self, keys: list[DeviceKey]) -> list[list[DeviceKey]]:
        """`keys` split by node, in order (devices of a pool that is not node-local make a group
        of their own: counted as if they could not be combined with any node's devices)."""
        groups: dict[str | None, list[DeviceKey]] = {}
        for k in keys:
            groups.setdefault(self.pool_node.get((k[0], k[1])), []).append(k)
        return list(groups.values())


def _attr(device: Obj, name: str) -> Any:
    a = (device.get("attributes") or {}).get(name) or {}
    return a.get("string")


def cut_gpus(devices: list[tuple[DeviceKey, Obj]]) -> set[DeviceKey]:
    """Whole GPUs whose pool also has MIG devices with them as parent (by uuid), with nothing to
    keep both from being allocated: a partitionable GPU's whole device shares counters with its
    MIG devices (dynamic MIG), a cut GPU published whole does not."""
    parents = {(k[0], k[1], _attr(d, "parentUUID")) for k, d in devices if _attr(d, "type") == "mig"}
    return {
        k
        for k, d in devices
        if _attr(d, "type") == "gpu"
        and not d.get("consumesCounters")
        and (k[0], k[1], _attr(d, "uuid")) in parents
    }


def allocated_devices(claims: Iterable[Obj]) -> set[DeviceKey]:
    out: set[DeviceKey] = set()
    for c in claims:
        alloc = (c.get("status") or {}).get("allocation") or {}
        for r in (alloc.get("devices") or {}).get("results") or []:
            out.add((r["driver"], r["pool"], r["device"]))
    return out


def remaining_counters(inv: Inventory, allocated: set[DeviceKey]) -> dict[CounterKey, dict[str, Amount]]:
    """What each counter set has left after the allocated devices (only sets in use are copied)."""
    left = dict(inv.counters)
    copied: set[CounterKey] = set()
    for key in allocated:
        for cset, used in inv.consumption.get(key, ()):
            if cset not in left:
                continue
            if cset not in copied:
                left[cset] = dict(left[cset])
                copied.add(cset)
            for name, amount in used.items():
                if name in left[cset]:
                    left[cset][name] -= amount
    return left


def size_parts(
    request_classes: list[str], selectors: list[str], classes: dict[str, Obj]
) -> list[DeviceMatch] | None:
    """The structured match of each selector of (device class, selectors), in the order the
    scheduler evaluates them, or None when one cannot be read."""
    if len(request_classes) != 1:
        return None
    dc = classes.get(request_classes[0])
    if dc is None:
        return None
    exprs = [s["cel"]["expression"] for s in (dc.get("spec") or {}).get("selectors") or [] if "cel" in s]
    parts = [parse_cel(e) for e in exprs + selectors]
    return None if any(m is None for m in parts) else [m for m in parts if m is not None]


def selector_errors(inv: Inventory, parts: list[DeviceMatch]) -> int:
    """Devices on which the scheduler's evaluation of these selectors (one after another, each
    until one is false) stops with a CEL runtime error: the scheduler then fails the allocation
    instead of skipping the device, whenever it reaches such a device."""
    n = 0
    for key, d in inv.devices:
        for m in parts:
            r = m.evaluate(key[0], d)
            if r is None:
                n += 1
            if r is not True:
                break
    return n


def selector_error_sites(inv: Inventory, parts: list[DeviceMatch]) -> list[tuple[str, str, list[str]]]:
    """(node or pool, device, names it lacks) for each device the selectors' CEL fails on (as in
    `selector_errors`)."""
    out = []
    for key, d in inv.devices:
        for m in parts:
            r = m.evaluate(key[0], d)
            if r is None:
                out.append((inv.pool_node.get((key[0], key[1])) or key[1], key[2], m.missing(key[0], d)))
            if r is not True:
                break
    return out


def size_problems(request: GPURequest, inv: Inventory, classes: dict[str, Obj]) -> list[str]:
    """Why this size cannot be trusted on these slices, one line each (empty: none): a selector
    that reads an attribute or capacity some device lacks (the scheduler then fails the claim
    instead of skipping that device: a user would wait forever), or a whole GPU the driver also
    publishes cut into MIG devices."""
    out: list[str] = []
    alternatives = (
        [(a.device_class, list(a.selectors)) for a in request.first_available]
        if request.first_available
        else [(request.device_class, list(request.selectors))]
    )
    for device_class, selectors in alternatives:
        parts = size_parts([device_class], selectors, classes)
        if parts is None:
            continue
        sites = selector_error_sites(inv, parts)
        if sites:
            node, device, names = sites[0]
            what = " and ".join(repr(n) for n in names) or "a value"
            more = f" (and {len(sites) - 1} more device(s))" if len(sites) > 1 else ""
            out.append(
                f"{_describe_size(device_class, selectors)}: its selector reads {what}, which device "
                f"{device} on node {node} lacks{more}; the scheduler fails such a claim instead of "
                "skipping the device"
            )
        match = size_match([device_class], selectors, classes)
        cut = [k for k in inv.candidates(match) if k in inv.cut] if match is not None else []
        if cut:
            node = inv.pool_node.get((cut[0][0], cut[0][1])) or cut[0][1]
            out.append(
                f"{_describe_size(device_class, selectors)}: node {node} publishes {cut[0][2]} as a "
                "whole GPU although it is cut into MIG devices (NVIDIA DRA driver 25.8.0, fixed in "
                "25.8.1), so a claim of this size could take a GPU that MIG sessions use; upgrade "
                "the driver"
            )
    return out


def _describe_size(device_class: str, selectors: list[str]) -> str:
    return f"size {device_class}" + (f" [{' && '.join(selectors)}]" if selectors else "")


def size_match(
    request_classes: list[str], selectors: list[str], classes: dict[str, Obj]
) -> DeviceMatch | None:
    """The structured match of (device class, selectors), or None when it cannot be read."""
    parts = size_parts(request_classes, selectors, classes)
    if parts is None:
        return None
    match: DeviceMatch | None = None
    for m in parts:
        match = m if match is None else match.merge(m)
        if match is None:
            return DeviceMatch(driver="(nothing)")  # contradictory: matches no device
    return match or DeviceMatch()


def count_free(
    inv: Inventory,
    match: DeviceMatch,
    allocated: set[DeviceKey],
    per_session: int = 1,
    left: dict[CounterKey, dict[str, Amount]] | None = None,
    candidates: list[DeviceKey] | None = None,
    total: int | None = None,
) -> tuple[int, int, list[Obj]]:
    """(sessions that can start now, sessions on an empty cluster, matching devices).

    `candidates` and `total` (devices that fit on an empty cluster, used when one device makes a
    session) depend only on the slices: pass them to skip matching again."""
    keys = candidates if candidates is not None else inv.candidates(match)
    per = max(per_session, 1)
    left = left if left is not None else remaining_counters(inv, allocated)
    if inv.tainted:
        allocated = allocated | inv.tainted.keys()  # a broken GPU is never free
    if per == 1:
        now = _greedy(inv, keys, allocated, left)
        if total is None:
            total = _greedy(inv, keys, set(), inv.counters)
        return now, total, [inv.by_key[k] for k in keys[:1]]
    # Several devices per session: the scheduler takes them all from one node, so what is
    # free counts per node (3 free GPUs on one node and 1 on another make 1 session of 2).
    by_node = inv.by_node(keys)
    now = sum(_greedy(inv, ks, allocated, left) // per for ks in by_node)
    total = sum(_greedy(inv, ks, set(), inv.counters) // per for ks in by_node)
    return now, total, [inv.by_key[k] for k in keys[:1]]


def _greedy(
    inv: Inventory,
    keys: list[DeviceKey],
    allocated: set[DeviceKey],
    left: dict[CounterKey, dict[str, Amount]],
) -> int:
    """First-fit, as the allocator does: how many of these devices can be allocated one after another."""
    mine: dict[CounterKey, dict[str, Amount]] = {}
    taken = 0
    for key in keys:
        if key in allocated:
            continue
        need = inv.consumption.get(key)
        if not need:
            taken += 1
            continue
        fits = True
        for cset, used in need:
            have = mine.get(cset)
            if have is None:
                if cset not in left:
                    fits = False
                    break
                have = mine[cset] = dict(left[cset])
            if any(have.get(n, 0) < a for n, a in used.items()):
                fits = False
                break
        if fits:
            for cset, used in need:
                have = mine[cset]
                for n, a in used.items():
                    have[n] -= a
            taken += 1
    return taken


def device_memory(device: Obj | None) -> int | None:
    cap = ((device or {}).get("capacity") or {}).get("memory")
    return int(quantity(cap["value"])) if cap else None


def memory_range(inv: Inventory, keys: list[DeviceKey]) -> tuple[int, int] | None:
    """The least and most GPU memory of the devices `keys` (None when none says)."""
    mems = [m for m in (device_memory(inv.by_key[k]) for k in keys) if m is not None]
    return (min(mems), max(mems)) if mems else None


@dataclass(frozen=True)
class Figures:
    """What one size has on the cluster now, counted; the picker puts it in words.

    `state`: `cpu` (no GPU), `free` (`free` sessions can start now, of `total` on an empty
    cluster), `none-free`, `not-offered`, or `unknown` (`note` says why)."""

    state: str
    gpu: str | None = None  # the size in words ("MIG 1g.10gb")
    free: int | None = None
    total: int | None = None
    memory: int | None = None  # GPU memory (bytes) a session of this size gets at least
    memory_max: int | None = None  # ... and at most (matching devices may differ)
    counted: bool = False  # devices were counted (so `memory_max` is known, maybe None)
    count: int = 1  # devices per session
    device: str = ""  # the kind of a matching device: "mig", "gpu", or "" when none was seen
    slices: int = 0  # the compute slices (of 7) of a matching MIG device
    note: str | None = None  # why the state is unknown


def _unknown(request: GPURequest, note: str) -> Figures:
    return Figures("unknown", gpu=request.describe(), note=note)


def _device_kind(device: Obj | None) -> tuple[str, int]:
    if device is None:
        return "", 0
    slices = mig_slices(device)
    return ("mig", slices) if slices is not None else ("gpu", 0)


def size_figures(
    request: GPURequest,
    inv: Inventory,
    allocated: set[DeviceKey],
    classes: dict[str, Obj],
    left: dict[CounterKey, dict[str, Amount]],
    slice_memo: dict[Any, tuple[list[DeviceKey], int, int, tuple[int, int] | None]] | None = None,
) -> Figures:
    """The figures of one size (a GPU request).

    `slice_memo` keeps, per size, the matching devices, the empty-cluster count, the devices
    its selectors fail on (a size with any is shown as unknown, with the reason) and the least
    and most GPU memory of a matching device (a size may match an A100 40GB and an 80GB): they
    change only with the slices, so claims changing costs only the count of what is free."""
    if not request.wants_gpu:
        return Figures("cpu")
    alternatives = (
        [(a.device_class, list(a.selectors), a.count) for a in request.first_available]
        if request.first_available
        else [(request.device_class, list(request.selectors), request.count)]
    )
    best: tuple[int, int, Obj | None, int, tuple[int, int] | None] | None = None
    for device_class, selectors, count in alternatives:
        if device_class not in classes:
            continue
        match = size_match([device_class], selectors, classes)
        if match is None:
            return _unknown(request, "this size uses a selector the picker cannot evaluate")
        parts = tuple(size_parts([device_class], selectors, classes) or ())
        cached = slice_memo.get((match, parts)) if slice_memo is not None else None
        if cached is None:
            keys = inv.candidates(match)
            cached = (
                keys,
                _greedy(inv, keys, set(), inv.counters),
                selector_errors(inv, list(parts)),
                memory_range(inv, keys),
            )
            if slice_memo is not None:
                slice_memo[(match, parts)] = cached
        cut = [k for k in cached[0] if k in inv.cut]
        if cut:
            return _unknown(request, "; ".join(size_problems(request, inv, classes)))
        if cached[2]:
            return _unknown(
                request,
                f"this size's selector fails with a CEL error on {cached[2]} device(s) of the "
                "cluster (an attribute or capacity they lack, or a version compared with a "
                "string), so the scheduler may refuse it",
            )
        free, total, devices = count_free(inv, match, allocated, count, left, cached[0], cached[1])
        cand = (free, total, devices[0] if devices else None, count, cached[3])
        if best is None or (cand[0], cand[1]) > (best[0], best[1]):
            best = cand
    if best is None:
        return Figures("not-offered", gpu=request.describe(), free=0, total=0)
    free, total, example, count, mem_range = best
    state = "free" if free > 0 else ("none-free" if total > 0 else "not-offered")
    least, most = mem_range if mem_range else (None, None)
    device, slices = _device_kind(example)
    return Figures(
        state,
        gpu=request.describe(),
        free=free,
        total=total,
        memory=least * count if least is not None else None,
        memory_max=most * count if most is not None else None,
        counted=True,
        count=count,
        device=device,
        slices=slices,
    )


T = TypeVar("T")
Derived = tuple[Inventory, set[DeviceKey], dict[CounterKey, dict[str, Amount]], dict[str, Obj]]


class FiguresCache:
    """The one owner of the picker's counted figures for one cluster view.

    - per version of the cluster data: the figures of each size (and the team use the picker
      counts), so a page view costs a lookup, not a count over every device;
    - per shape (slices and device classes): what matching a size costs, `size_figures`'
      `slice_memo` (and what a size counts against a team's quota);
    - the sizes views asked for lately (`recent`), which `warm` counts again after a change,
      so the next view reads figures already made.
    """

    MAX_ENTRIES = 256
    MAX_RECENT = 64

    def __init__(self) -> None:
        self.by_version: dict[Any, Any] = {}
        self.by_shape: dict[Any, Any] = {}
        self.recent: dict[tuple[str, int], GPURequest] = {}

    def new_shape(self) -> None:
        """The slices or device classes changed: what was matched is stale."""
        self.by_shape = {}

    def for_version(self, version: int, key: Any, make: Callable[[], T]) -> T:
        """`make()` kept for this version of the data."""
        k = (version, key)
        if k in self.by_version:
            return cast(T, self.by_version[k])
        value = make()
        if len(self.by_version) > self.MAX_ENTRIES:
            self.by_version.clear()
        self.by_version[k] = value
        return value

    def for_shape(self, key: Any, make: Callable[[], T]) -> T:
        """`make()` kept until the slices change."""
        if key not in self.by_shape:
            self.by_shape[key] = make()
        return cast(T, self.by_shape[key])

    def figures(self, request: GPURequest, derived: Derived, version: int) -> Figures:
        """The figures of one size for one version of the data."""
        inv, allocated, left, classes = derived
        return self.for_version(
            version,
            (request.hash(), request.count),
            lambda: size_figures(request, inv, allocated, classes, left, self.by_shape),
        )

    def viewed(self, request: GPURequest) -> None:
        """A view asked for this size: it is counted again after each change (`warm`)."""
        if len(self.recent) > self.MAX_RECENT:
            self.recent.clear()
        self.recent[(request.hash(), request.count)] = request

    def warm(self, derived: Derived, version: int) -> None:
        """Count the sizes views asked for lately, for this version of the data."""
        for request in list(self.recent.values()):
            self.figures(request, derived, version)

    def forget_recent(self) -> None:
        """Nobody looked lately: the next view counts what it needs."""
        self.recent.clear()
