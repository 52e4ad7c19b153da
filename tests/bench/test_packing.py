"""The packing optimum (tests/bench/packing.py) on the slices the fake NVIDIA driver builds."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import packing

from gpusessions.core.sizes import DeviceMatch
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import Shape, build_slices, load_shape, parse_shape

MATCHES = {
    "1g": DeviceMatch.of({"type": "mig", "profile": "1g.10gb"}),
    "3g": DeviceMatch.of({"type": "mig", "profile": "3g.40gb"}),
    "gpu": DeviceMatch.of({"type": "gpu"}),
}


def slices_of(shape: Shape) -> list[dict[str, Any]]:
    return [s for n in shape.nodes for s in build_slices(n)]


# Partitionable GPUs exist only with dynamic MIG, which a cluster has throughout (one driver
# install): the packing is checked on the dynamic-MIG shapes.
H100_OPTIONS = frozenset({(7, 0, 0), (4, 1, 0), (0, 2, 0), (0, 0, 1)})
A100_OPTIONS = frozenset({(7, 0, 0), (4, 1, 0), (0, 2, 0)})  # MIG mode on: no whole GPU


@pytest.fixture(scope="module")
def demo() -> packing.Supply:
    return packing.supply(slices_of(load_shape("demo-dynamic", SHAPES_DIR)), MATCHES)


def test_demo_supply_reads_fixed_devices_and_partitionable_options(demo: packing.Supply) -> None:
    # Fixed: the A100 with MIG mode off, a whole GPU.
    assert demo.fixed == (0, 0, 1)
    # Six partitionable H100s: 7 x 1g, 3g + 4 x 1g, 2 x 3g, or the whole GPU (the counters allow no
    # more); one A100 in MIG mode: the same without the whole GPU.
    assert demo.groups == ((H100_OPTIONS, 6), (A100_OPTIONS, 1))


def test_feasible_agrees_with_brute_force() -> None:
    small = packing.supply(slices_of(load_shape("small-dynamic", SHAPES_DIR)), MATCHES)
    assert small.groups == ((H100_OPTIONS, 1), (A100_OPTIONS, 1))
    for d in itertools.product(range(16), range(5), range(3)):
        assert packing.feasible(d, small) == packing.brute_force_feasible(d, small), d


def test_optimum_prefix_single_sizes(demo: packing.Supply) -> None:
    assert packing.optimum_prefix(["3g"] * 20, demo) == 14  # 2 on each partitionable GPU
    assert packing.optimum_prefix(["gpu"] * 10, demo) == 7  # 1 whole A100 + 6 partitionable H100
    assert packing.optimum_prefix(["1g"] * 60, demo) == 49  # 7 on each partitionable GPU
    # A whole GPU taken from a partitionable H100 costs two 3g.40gb.
    assert packing.optimum_prefix(["gpu"] * 4 + ["3g"] * 20, demo) == 4 + 8


def test_one_kind_enumeration_matches_the_general_programme() -> None:
    node = {
        "name": "n-{i}",
        "count": 3,
        "gpus": [
            {"model": "A100-80GB"},  # MIG mode off: a whole GPU, fixed
            {"model": "H100-80GB", "mig": "dynamic", "count": 2},
        ],
    }
    sup = packing.supply(slices_of(parse_shape("t", {"nodes": [node]})), MATCHES)
    assert sup.partitionable == 6
    for d in itertools.product(range(0, 50, 5), range(0, 16, 3), range(0, 8, 2)):
        deficit = tuple(max(0, a - f) for a, f in zip(d, sup.fixed, strict=True))
        assert packing.feasible(d, sup) == packing._feasible_dp(deficit, sup.groups), d
