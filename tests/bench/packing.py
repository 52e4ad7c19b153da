"""Packing: the offline optimum for a sequence of GPU-size requests on a cluster shape.

Pure functions, used by bench_pack.py (and its unit test). Everything is read
from the ResourceSlices the devcluster's fake NVIDIA driver builds, so the
solver sees the same devices and counters the scheduler sees:

- A device without counters (a whole GPU, a static MIG device) serves one
  session of the size it matches: a fixed supply per size.
- A partitionable GPU (one counter set, dynamic MIG) serves any set of its
  devices whose summed counter consumption fits the counter set. Its
  *options* are the Pareto-maximal vectors of sessions per size over those
  sets (found by exhaustive search over its matching devices; identical GPUs
  share one search). For the H100 and sizes (1g.10gb, 3g.40gb, whole) these
  are 7 x 1g, 3g + 4 x 1g, 2 x 3g and the whole GPU.
- A demand (sessions per size) is feasible if the fixed supply plus one
  option per partitionable GPU covers it. With one kind of partitionable GPU
  this is solved exactly: every count of GPUs taking each *mixed* option
  (sessions of two or more sizes) is tried, and the remaining deficits are
  covered by *pure* options (one size only), whose minimal number is
  ceil(deficit / sessions per GPU). Several kinds fall back to an exact
  dynamic programme over the GPUs (fine for small shapes).
- The optimum for a request sequence is the longest prefix whose demand is
  feasible (demand only grows with the prefix, so a binary search finds it):
  what a scheduler that knew the whole sequence in advance could place
  before refusing anyone.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpusessions.core.sizes import DeviceMatch, quantity

Obj = dict[str, Any]
Vector = tuple[int, ...]


@dataclass(frozen=True)
class Supply:
    sizes: tuple[str, ...]
    fixed: Vector  # sessions per size served by devices without counters
    groups: tuple[tuple[frozenset[Vector], int], ...]  # (options of one kind of partitionable GPU, how many)

    @property
    def partitionable(self) -> int:
        return sum(n for _, n in self.groups)


def _matching_size(driver: str, device: Obj, matches: dict[str, DeviceMatch]) -> str | None:
    found = [s for s, m in matches.items() if m.matches(driver, device)]
    if len(found) > 1:
        raise ValueError(f"device {device['name']} matches several sizes {found}: the solver needs one")
    return found[0] if found else None


def pareto(vectors: Iterable[Vector]) -> frozenset[Vector]:
    """The vectors no other vector dominates (at least as large in every size)."""
    vs = set(vectors)
    return frozenset(
        v for v in vs if not any(w != v and all(a >= b for a, b in zip(w, v, strict=True)) for w in vs)
    )


def _options(
    capacity: dict[str, Fraction], devices: list[tuple[int, dict[str, Fraction]]], dims: int
) -> frozenset[Vector]:
    """Pareto-maximal session vectors of one counter set (devices: (size index, consumption))."""
    found: set[Vector] = set()

    def search(i: int, left: dict[str, Fraction], have: list[int]) -> None:
        if i == len(devices):
            found.add(tuple(have))
            return
        search(i + 1, left, have)
        size, use = devices[i]
        if all(left.get(k, Fraction(0)) >= v for k, v in use.items()):
            have[size] += 1
            search(i + 1, {k: v - use.get(k, Fraction(0)) for k, v in left.items()}, have)
            have[size] -= 1

    search(0, dict(capacity), [0] * dims)
    return pareto(found)


def supply(slices: Sequence[Obj], matches: dict[str, DeviceMatch]) -> Supply:
    """What the slices of a cluster can serve, per size (see the module docstring)."""
    sizes = tuple(matches)
    index = {s: i for i, s in enumerate(sizes)}
    fixed = [0] * len(sizes)
    counter_sets: dict[tuple[str, str], dict[str, Fraction]] = {}
    users: dict[tuple[str, str], list[tuple[int, dict[str, Fraction]]]] = {}
    for s in slices:
        spec = s["spec"]
        pool = spec["pool"]["name"]
        for cs in spec.get("sharedCounters") or []:
            counter_sets[(pool, cs["name"])] = {k: quantity(v["value"]) for k, v in cs["counters"].items()}
        for d in spec.get("devices") or []:
            size = _matching_size(spec["driver"], d, matches)
            if size is None:
                continue
            consumes = d.get("consumesCounters") or []
            if not consumes:
                fixed[index[size]] += 1
                continue
            if len(consumes) != 1:
                raise ValueError(f"device {d['name']} consumes several counter sets: not supported")
            use = {k: quantity(v["value"]) for k, v in consumes[0]["counters"].items()}
            users.setdefault((pool, consumes[0]["counterSet"]), []).append((index[size], use))
    kinds: Counter[frozenset[Vector]] = Counter()
    memo: dict[Any, frozenset[Vector]] = {}
    for key, devs in users.items():
        cap = counter_sets[key]
        sig = (
            tuple(sorted(cap.items())),
            tuple(sorted((size, tuple(sorted(u.items()))) for size, u in devs)),
        )
        if sig not in memo:
            memo[sig] = _options(cap, sorted(devs, key=lambda d: (d[0], sorted(d[1].items()))), len(sizes))
        kinds[memo[sig]] += 1
    groups = tuple(sorted(kinds.items(), key=lambda kv: sorted(kv[0])))
    return Supply(sizes, tuple(fixed), groups)


def _feasible_one_kind(deficit: Vector, options: frozenset[Vector], gpus: int) -> bool:
    dims = len(deficit)
    pure = [0] * dims
    mixed = []
    for v in options:
        nonzero = [j for j in range(dims) if v[j]]
        if len(nonzero) == 1:
            pure[nonzero[0]] = max(pure[nonzero[0]], v[nonzero[0]])
        elif len(nonzero) > 1:
            mixed.append(v)
    if len(mixed) > 3:
        raise ValueError(f"{len(mixed)} mixed options per GPU: the exact enumeration would be too slow")

    def cover(rest: Vector, left: int) -> bool:
        need = 0
        for j in range(dims):
            if rest[j] > 0:
                if not pure[j]:
                    return False
                need += math.ceil(rest[j] / pure[j])
        return need <= left

    def search(i: int, rest: Vector, left: int) -> bool:
        if cover(rest, left):
            return True
        if i == len(mixed):
            return False
        v = mixed[i]
        # More GPUs on this option than any deficit it helps with is never useful.
        top = min(left, max(math.ceil(rest[j] / v[j]) for j in range(dims) if v[j]))
        for n in range(top + 1):
            if search(i + 1, tuple(max(0, r - n * x) for r, x in zip(rest, v, strict=True)), left - n):
                return True
        return False

    return search(0, deficit, gpus)


def _feasible_dp(deficit: Vector, groups: tuple[tuple[frozenset[Vector], int], ...]) -> bool:
    """Exact for any mix of kinds: the Pareto set of covered deficits, GPU by GPU."""
    states = {tuple(0 for _ in deficit)}
    for options, count in groups:
        for _ in range(count):
            nxt = {
                tuple(min(d, s + o) for d, s, o in zip(deficit, st, opt, strict=True))
                for st in states
                for opt in options
            }
            states = set(pareto(nxt | states))
            if deficit in states:
                return True
    return deficit in states


def feasible(demand: Vector, sup: Supply) -> bool:
    """Can every session of `demand` (per size, in `sup.sizes` order) be placed at once?"""
    deficit = tuple(max(0, d - f) for d, f in zip(demand, sup.fixed, strict=True))
    if not any(deficit):
        return True
    if not sup.groups:
        return False
    if len(sup.groups) == 1:
        options, gpus = sup.groups[0]
        return _feasible_one_kind(deficit, options, gpus)
    return _feasible_dp(deficit, sup.groups)


def demand_of(sequence: Sequence[str], sizes: tuple[str, ...]) -> Vector:
    c = Counter(sequence)
    return tuple(c[s] for s in sizes)


def optimum_prefix(sequence: Sequence[str], sup: Supply) -> int:
    """The longest prefix of `sequence` that can be placed at once (binary search)."""
    lo, hi = 0, len(sequence)
    if feasible(demand_of(sequence, sup.sizes), sup):
        raise ValueError("the sequence never runs out of room: make it longer")
    while hi - lo > 1:  # feasible(lo), not feasible(hi)
        mid = (lo + hi) // 2
        if feasible(demand_of(sequence[:mid], sup.sizes), sup):
            lo = mid
        else:
            hi = mid
    return lo


def brute_force_feasible(demand: Vector, sup: Supply) -> bool:
    """Every option for every partitionable GPU: for tests on tiny shapes only."""
    deficit = tuple(max(0, d - f) for d, f in zip(demand, sup.fixed, strict=True))
    per_gpu = [sorted(opts) for opts, n in sup.groups for _ in range(n)]
    for choice in itertools.product(*per_gpu):
        got = [sum(v[j] for v in choice) for j in range(len(deficit))]
        if all(g >= d for g, d in zip(got, deficit, strict=True)):
            return True
    return not any(deficit)
