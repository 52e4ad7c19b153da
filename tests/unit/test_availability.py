"""Sizes (structured match <-> CEL) and free-session counting, on simulated slices."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gpusessions.core.availability import (
    Inventory,
    allocated_devices,
    count_free,
    remaining_counters,
    selector_errors,
    size_figures,
)
from gpusessions.core.claims import GPURequest
from gpusessions.core.sizes import DeviceMatch, parse_cel, quantity, semver
from gpusessions.hub.picker import compute_text
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import build_slices, device_classes, load_shape

CLASSES = {dc["metadata"]["name"]: dc for dc in device_classes()}


def _inv(shape: str = "small") -> Inventory:
    return Inventory.from_slices([s for n in load_shape(shape, SHAPES_DIR).nodes for s in build_slices(n)])


def _claim_on(*devices: str, pool: str = "gpu-node-0") -> dict:
    return {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": pool, "device": d}
                        for d in devices
                    ]
                }
            }
        }
    }


@pytest.mark.parametrize(
    ("q", "value"),
    [
        ("9984Mi", 9984 * 2**20),
        ("40Gi", 40 * 2**30),
        ("1.5G", 1_500_000_000),
        ("100m", Fraction(1, 10)),
        ("7", 7),
        ("1e3", 1000),
    ],
)
def test_quantities(q: str, value: float) -> None:
    assert quantity(q) == value


def test_quantity_rejects_junk() -> None:
    with pytest.raises(ValueError):
        quantity("40 Gi")


@pytest.mark.parametrize(
    "match",
    [
        DeviceMatch.of({"type": "mig", "profile": "1g.10gb"}),
        DeviceMatch.of({"type": "gpu"}, {"memory": "70Gi"}),
        DeviceMatch.of({"productName": "NVIDIA A100-SXM4-80GB", "type": "mig"}, {"multiprocessors": "28"}),
        DeviceMatch.of({"odd": "it's \\ quoted"}),
        DeviceMatch.of(
            {"type": "gpu"}, versions={"driverVersion": "580.0.0", "cudaComputeCapability": "9.0.0"}
        ),
    ],
)
def test_generated_cel_parses_back_to_the_same_match(match: DeviceMatch) -> None:
    assert parse_cel(match.cel()) == match


@pytest.mark.parametrize(
    "cel",
    [
        "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')",
        "device.attributes['gpu.nvidia.com'].type == 'mig' || device.driver == 'gpu.nvidia.com'",
        "!(device.attributes['gpu.nvidia.com'].type == 'mig')",
        "device.attributes['gpu.nvidia.com'].type != 'mig'",
        "device.capacity['gpu.nvidia.com'].memory >= 40Gi",
        "device.attributes['a.example'].x == 'y' && device.attributes['b.example'].z == 'w'",
    ],
)
def test_other_cel_is_not_guessed(cel: str) -> None:
    assert parse_cel(cel) is None


def test_driver_device_classes_parse() -> None:
    for name, dtype in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        expr = CLASSES[name]["spec"]["selectors"][0]["cel"]["expression"]
        assert parse_cel(expr) == DeviceMatch.of({"type": dtype})


def test_matcher_on_every_demo_device() -> None:
    inv = _inv("demo")
    one_g = DeviceMatch.of({"type": "mig", "profile": "1g.10gb"})
    names = {(k[1], k[2]) for k in inv.candidates(one_g)}
    # a: 7 + 2 static; b: 1 static (A100); c: 7 placements on each of 2 partitionable GPUs
    assert len(names) == 7 + 2 + 1 + 14
    assert all("1g10gb" in n for _, n in names)
    big = DeviceMatch.of({"type": "gpu"}, {"memory": "81000Mi"})
    assert {k[2] for k in inv.candidates(big)} >= {"gpu-0", "gpu-1"}
    assert all(inv.by_key[k]["attributes"]["type"]["string"] == "gpu" for k in inv.candidates(big))


def test_counting_follows_counters_on_a_partitionable_gpu() -> None:
    inv = _inv()
    one_g = DeviceMatch.of({"type": "mig", "profile": "1g.10gb"})
    whole = DeviceMatch.of({"type": "gpu"})
    assert count_free(inv, one_g, set())[:2] == (9, 9)
    assert count_free(inv, whole, set())[:2] == (1, 1)
    # A 4g.40gb on GPU 1 takes memory slices 0-3: 3 placements of 1g.10gb stay there.
    alloc = allocated_devices([_claim_on("gpu-1-mig-4g40gb-5-0")])
    assert count_free(inv, one_g, alloc, left=remaining_counters(inv, alloc))[0] == 2 + 3
    assert count_free(inv, whole, alloc)[0] == 0
    # Two devices per session: 9 slices on the one node make 4 sessions.
    assert count_free(inv, one_g, set(), per_session=2)[:2] == (4, 4)


def test_several_devices_per_session_count_per_node() -> None:
    """The scheduler takes all devices of a claim from one node: free slices on different nodes
    do not add up to a session."""
    inv = _inv("demo")
    one_g = DeviceMatch.of({"type": "mig", "profile": "1g.10gb"})
    # node a: 7 + 2 static; node b: 1 static; node c: 7 placements on each of 2 partitionable GPUs.
    assert count_free(inv, one_g, set())[:2] == (24, 24)
    assert count_free(inv, one_g, set(), per_session=2)[:2] == (4 + 0 + 7, 11)  # not 24 // 2
    assert count_free(inv, one_g, set(), per_session=3)[:2] == (3 + 0 + 4, 7)  # not 24 // 3
    # One slice taken on node a leaves 8 there: still 4 sessions of 2; a second leaves 3.
    taken = [d for d in ("gpu-2-mig-1g10gb-19-0", "gpu-2-mig-1g10gb-19-1")]
    one = allocated_devices([_claim_on(taken[0], pool="h100-node-a")])
    assert count_free(inv, one_g, one, per_session=2)[0] == 11
    two = allocated_devices([_claim_on(*taken, pool="h100-node-a")])
    assert count_free(inv, one_g, two, per_session=2)[0] == 10


def test_profile_figures_states() -> None:
    inv = _inv()
    left = remaining_counters(inv, set())
    cpu = size_figures(GPURequest(), inv, set(), CLASSES, left)
    assert cpu.state == "cpu"
    one = GPURequest("mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",))
    f = size_figures(one, inv, set(), CLASSES, left)
    assert (f.state, f.free, f.total, compute_text(f)) == ("free", 9, 9, "1/7 of a GPU")
    custom = GPURequest(
        "mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile.startsWith('1g')",)
    )
    assert size_figures(custom, inv, set(), CLASSES, left).state == "unknown"
    missing = GPURequest("tpu.example.com")
    assert size_figures(missing, inv, set(), CLASSES, left).state == "not-offered"
    contradictory = GPURequest("gpu.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].type == 'mig'",))
    assert size_figures(contradictory, inv, set(), CLASSES, left).state == "not-offered"


def test_semver_precedence() -> None:
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0"]
    assert sorted(order, key=semver) == order
    assert semver("580.95.5") > semver("580.9.50") and semver("13.0.0+build.7") == semver("13.0.0")
    for bad in ("580.95", "580.095.5", "v1.2.3", "1.2.3-"):
        with pytest.raises(ValueError):
            semver(bad)


def test_version_attributes_match_as_the_scheduler_evaluates_them() -> None:
    """driverVersion is a semver in CEL: `== '580.95.5'` compares a version with a string and never
    matches; `.compareTo(semver(...)) >= 0` compares versions."""
    inv = _inv()
    gpus = len(inv.candidates(DeviceMatch.of({"type": "gpu"})))
    assert gpus == 1
    equal = parse_cel("device.attributes['gpu.nvidia.com'].driverVersion == '580.95.5'")
    assert equal is not None and inv.candidates(equal) == []
    at_least = parse_cel(
        "device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('580.9.0')) >= 0"
    )
    assert at_least == DeviceMatch(versions_at_least=(("driverVersion", "580.9.0"),))
    assert len(inv.candidates(at_least)) == len(inv.devices)  # every device has driver 580.95.5
    newer = DeviceMatch.of({"type": "gpu"}, versions={"driverVersion": "580.95.6"})
    assert inv.candidates(newer) == []
    hopper = DeviceMatch.of({"type": "gpu"}, versions={"cudaComputeCapability": "9.0.0"})
    assert len(inv.candidates(hopper)) == gpus
    # A version the scheduler's semver() rejects cannot be evaluated here: unknown, not guessed.
    assert (
        parse_cel("device.attributes['gpu.nvidia.com'].driverVersion.compareTo(semver('580')) >= 0") is None
    )
    # The stricter of two bounds wins when sizes are merged.
    merged = at_least.merge(DeviceMatch.of(versions={"driverVersion": "580.10.0"}))
    assert merged is not None and merged.versions_at_least == (("driverVersion", "580.10.0"),)


def test_a_selector_that_fails_on_some_devices_is_shown_as_unknown() -> None:
    """CEL stops with a runtime error on a device that lacks an attribute the selector reads,
    unless another term is false, and the scheduler then fails the allocation: seen on the real
    scheduler (tests/integration/test_picker.py). Such a size is unknown, with the reason."""
    inv = _inv()
    left = remaining_counters(inv, set())
    whole = next(d for _, d in inv.devices if d["attributes"]["type"]["string"] == "gpu")
    profile = DeviceMatch.of({"profile": "1g.10gb"})
    assert profile.evaluate("gpu.nvidia.com", whole) is None  # no such key: profile
    assert DeviceMatch.of({"type": "mig", "profile": "1g.10gb"}).evaluate("gpu.nvidia.com", whole) is False
    version_eq = DeviceMatch.of({"driverVersion": "580.95.5"})
    assert version_eq.evaluate("gpu.nvidia.com", whole) is None  # no such overload
    assert DeviceMatch.of(capacity={"nope": "1"}).evaluate("gpu.nvidia.com", whole) is None
    assert DeviceMatch.of(versions={"productName": "1.0.0"}).evaluate("gpu.nvidia.com", whole) is None
    assert (
        DeviceMatch.of(driver="other.example.com", attributes={"x": "y"}).evaluate("gpu.nvidia.com", whole)
        is False
    )

    # The gpu.nvidia.com class lets the whole GPU through; `profile == '1g.10gb'` then fails on it.
    sel = ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",)
    f = size_figures(GPURequest("gpu.nvidia.com", 1, sel), inv, set(), CLASSES, left)
    assert f.state == "unknown" and "fails with a CEL error on 1 device(s)" in (f.note or "")
    assert selector_errors(inv, [profile]) == 1
    # On the mig.nvidia.com class, the class's `type == 'mig'` is false on the whole GPU first.
    f = size_figures(GPURequest("mig.nvidia.com", 1, sel), inv, set(), CLASSES, left)
    assert f.state == "free"
    sel_eq = ("device.attributes['gpu.nvidia.com'].driverVersion == '580.95.5'",)
    f = size_figures(GPURequest("gpu.nvidia.com", 1, sel_eq), inv, set(), CLASSES, left)
    assert f.state == "unknown" and "fails with a CEL error on 1 device(s)" in (f.note or "")
    f = size_figures(GPURequest("mig.nvidia.com", 1, sel_eq), inv, set(), CLASSES, left)
    assert f.state == "unknown" and "on 22 device(s)" in (f.note or "")


def test_a_size_matching_gpus_of_different_memory_shows_the_range() -> None:
    """The demo shape's whole GPUs: A100 80GB (81920 MiB), H100 80GB (81559 MiB) and the
    whole-GPU device of a partitionable H100 (8 memory slices, 81152 MiB): a whole-GPU size
    promises the least and says the most; one model alone gives one figure."""
    from gpusessions.hub.picker import memory_text

    inv = _inv("demo")
    left = remaining_counters(inv, set())
    whole = GPURequest("gpu.nvidia.com", 1, ())
    f = size_figures(whole, inv, set(), CLASSES, left)
    assert (f.memory, f.memory_max) == (81152 * 2**20, 81920 * 2**20)
    assert memory_text(f.memory, f.memory_max) == "79.2-80.0 GiB"
    a100 = GPURequest(
        "gpu.nvidia.com", 2, ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'",)
    )
    f = size_figures(a100, inv, set(), CLASSES, left)
    assert f.memory == f.memory_max == 2 * 81920 * 2**20
    assert memory_text(f.memory, f.memory_max) == "160.0 GiB"


def test_semver_is_semver_2_exactly() -> None:
    """What Kubernetes' CEL semver() refuses is refused here too (leading zeros in a numeric
    pre-release identifier, empty identifiers, whitespace); build metadata never counts."""
    for bad in ("1.2.3-01", "1.2.3-a..b", "1.2.3+", " 1.2.3", "1.2.3\n", "1.2.3-a_b", "1.2"):
        with pytest.raises(ValueError, match="not a semantic version"):
            semver(bad)
    assert semver("1.2.3-0a") < semver("1.2.3") and semver("1.0.0-2") < semver("1.0.0-11")
    assert semver("1.0.0+b.01") == semver("1.0.0+a")


def test_quantity_is_the_apimachinery_grammar() -> None:
    assert quantity("9984Mi") == 9984 * 2**20 and quantity("100m") * 10 == 1 and quantity("1.5G") == 1.5e9
    assert quantity("1e3") == 1000 and quantity(7) == 7
    for bad in ("NaN", "Infinity", "1_000", "2K", "1mi", "", "Gi"):
        with pytest.raises(ValueError, match="not a quantity"):
            quantity(bad)
