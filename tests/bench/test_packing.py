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


@pytest.fixture(scope="module")
def demo() -> packing.Supply:
    return packing.supply(slices_of(load_shape("demo", SHAPES_DIR)), MATCHES)


def test_demo_supply_reads_fixed_devices_and_partitionable_options(demo: packing.Supply) -> None:
    # Static MIG: 7 + 2 (H100) + 1 (A100) x 1g, one 3g; whole: 2 H100 + 1 A100.
    assert demo.fixed == (10, 1, 3)
    # Two partitionable H100s: 7 x 1g, 3g + 4 x 1g, 2 x 3g, or the whole GPU (the counters allow no more).
    assert demo.groups == ((frozenset({(7, 0, 0), (4, 1, 0), (0, 2, 0), (0, 0, 1)}), 2),)


def test_feasible_agrees_with_brute_force(demo: packing.Supply) -> None:
    for d in itertools.product(range(26), range(7), range(7)):
        assert packing.feasible(d, demo) == packing.brute_force_feasible(d, demo), d


def test_optimum_prefix_single_sizes(demo: packing.Supply) -> None:
    assert packing.optimum_prefix(["3g"] * 10, demo) == 5  # 1 static + 2 x 2 on the partitionable GPUs
    assert packing.optimum_prefix(["gpu"] * 10, demo) == 5  # 3 whole + 2 partitionable
    assert packing.optimum_prefix(["1g"] * 40, demo) == 24  # 10 static + 2 x 7
    # A whole GPU taken from a partitionable H100 costs two 3g.40gb.
    assert packing.optimum_prefix(["gpu"] * 4 + ["3g"] * 10, demo) == 4 + 3


def test_one_kind_enumeration_matches_the_general_programme() -> None:
    node = {
        "name": "n-{i}",
        "count": 3,
        "gpus": [
            {"model": "H100-80GB", "mig": "static", "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]},
            {"model": "H100-80GB", "mig": "dynamic", "count": 2},
        ],
    }
    sup = packing.supply(slices_of(parse_shape("t", {"nodes": [node]})), MATCHES)
    assert sup.partitionable == 6
    for d in itertools.product(range(0, 50, 5), range(0, 16, 3), range(0, 8, 2)):
        deficit = tuple(max(0, a - f) for a, f in zip(d, sup.fixed, strict=True))
        assert packing.feasible(d, sup) == packing._feasible_dp(deficit, sup.groups), d
