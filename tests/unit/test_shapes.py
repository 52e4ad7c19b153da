"""Cluster shapes turn into NVIDIA-style slices that the 1.35 API accepts."""

from __future__ import annotations

import pytest

from localcluster.paths import SHAPES_DIR
from localcluster.shapes import (
    ShapeError,
    build_slices,
    device_uuids,
    load_shape,
    node_devices,
    parse_shape,
)


def _one_gpu(gpu: dict) -> dict:
    return {"nodes": [{"name": "n0", "gpus": [gpu]}]}


@pytest.mark.parametrize("name", sorted(p.stem for p in SHAPES_DIR.glob("*.yaml")))
def test_every_shipped_shape_loads_and_respects_slice_limits(name: str) -> None:
    shape = load_shape(name, SHAPES_DIR)
    for node in shape.nodes:
        slices = build_slices(node)
        for s in slices:
            spec = s["spec"]
            assert ("devices" in spec) != ("sharedCounters" in spec), "1.35: devices or counters, not both"
            devices = spec.get("devices", [])
            with_counters = [d for d in devices if d.get("consumesCounters")]
            assert len(devices) <= 128
            assert len(with_counters) <= 64
            assert len(spec.get("sharedCounters", [])) <= 8
            for cs in spec.get("sharedCounters", []):
                assert len(cs["counters"]) <= 32
            assert spec["pool"] == {"name": node.name, "generation": 1, "resourceSliceCount": len(slices)}


def test_demo_shape_is_three_nodes_eight_gpus_mixed() -> None:
    shape = load_shape("demo", SHAPES_DIR)
    assert len(shape.nodes) == 3
    assert shape.gpu_count == 8
    modes = {g.mode for n in shape.nodes for g in n.gpus}
    assert modes == {"none", "static", "dynamic"}
    models = {g.model.key for n in shape.nodes for g in n.gpus}
    assert models == {"H100-80GB", "A100-80GB"}


def test_small_shape_is_one_node_two_gpus() -> None:
    shape = load_shape("small", SHAPES_DIR)
    assert len(shape.nodes) == 1 and shape.gpu_count == 2


def test_static_mig_device_names_attributes_and_capacity() -> None:
    shape = parse_shape("t", _one_gpu({"model": "H100-80GB", "mig": "static", "layout": ["1g.10gb"] * 7}))
    devices, counters = node_devices(shape.nodes[0])
    assert counters == []
    assert [d["name"] for d in devices] == [f"gpu-0-mig-1g10gb-19-{i}" for i in range(7)]
    d = devices[0]
    assert d["attributes"]["type"] == {"string": "mig"}
    assert d["attributes"]["profile"] == {"string": "1g.10gb"}
    assert d["attributes"]["uuid"]["string"].startswith("MIG-")
    assert d["attributes"]["parentUUID"]["string"].startswith("GPU-")
    assert d["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    # MIG memory is below the profile's label, as NVML reports it.
    assert d["capacity"]["memory"] == {"value": "9984Mi"}
    assert set(d["capacity"]) == {
        "memory",
        "multiprocessors",
        "copyEngines",
        "decoders",
        "encoders",
        "jpegEngines",
        "ofaEngines",
    }


def test_whole_gpu_device() -> None:
    shape = parse_shape("t", _one_gpu({"model": "A100-80GB"}))
    [d], _ = node_devices(shape.nodes[0])
    assert d["name"] == "gpu-0"
    assert d["attributes"]["type"] == {"string": "gpu"}
    assert d["attributes"]["productName"] == {"string": "NVIDIA A100-SXM4-80GB"}
    assert d["capacity"] == {"memory": {"value": "81920Mi"}}
    assert "consumesCounters" not in d


def test_partitionable_gpu_offers_full_device_and_every_profile_placement() -> None:
    shape = parse_shape("t", _one_gpu({"model": "H100-80GB", "mig": "dynamic"}))
    devices, counters = node_devices(shape.nodes[0])
    [cs] = counters
    assert cs["name"] == "gpu-0-counter-set"
    assert {f"memory-slice-{i}" for i in range(8)} <= set(cs["counters"])
    names = [d["name"] for d in devices]
    assert names[0] == "gpu-0"
    # 7 + 4 + 3 + 2 + 1 + 1 profile placements, plus the full GPU.
    assert len(names) == 19
    full = devices[0]["consumesCounters"][0]["counters"]
    assert full == cs["counters"], "the full GPU consumes every counter"
    four = next(d for d in devices if d["name"] == "gpu-0-mig-4g40gb-5-0")
    used = four["consumesCounters"][0]["counters"]
    assert {k for k in used if k.startswith("memory-slice-")} == {f"memory-slice-{i}" for i in range(4)}
    assert all("uuid" not in d["attributes"] for d in devices[1:]), "dynamic MIG devices have no UUID yet"


def test_uuids_are_stable_and_unique() -> None:
    a = device_uuids(load_shape("demo", SHAPES_DIR))
    b = device_uuids(load_shape("demo", SHAPES_DIR))
    assert a == b
    assert len(set(a.values())) == len(a)


# Written down once: a change to the derivation (namespace, key format) would hand every device a
# new UUID after an upgrade, which the two calls above cannot notice.
SMALL_UUIDS = {
    ("gpu-node-0", "gpu-0-mig-3g40gb-9-4"): "MIG-54f90c1f-5ce5-503f-a9e9-7c3c13d9957c",  # static MIG
    ("gpu-node-0", "gpu-0-mig-1g10gb-19-3"): "MIG-f3be2dd2-359c-51ad-a28c-4d58438b7600",
    ("gpu-node-0", "gpu-1"): "GPU-81511435-b451-52da-8021-24b8016e0edf",  # partitionable, whole
    ("gpu-node-0", "gpu-1-mig-1g10gb-19-0"): "MIG-f8fcd619-484b-5e5f-bb66-226745c92bc4",  # dynamic MIG
}


def test_uuids_of_the_small_shape_are_the_ones_written_down() -> None:
    uuids = device_uuids(load_shape("small", SHAPES_DIR))
    assert {k: uuids[k] for k in SMALL_UUIDS} == SMALL_UUIDS
    # The static MIG devices' parent, as their slices publish it.
    [static] = [
        d
        for sl in build_slices(load_shape("small", SHAPES_DIR).nodes[0])
        for d in sl["spec"].get("devices", [])
        if d["name"] == "gpu-0-mig-3g40gb-9-4"
    ]
    assert static["attributes"]["parentUUID"] == {"string": "GPU-5e8316a6-6288-57d9-9719-0d73af358bac"}
    assert static["attributes"]["uuid"] == {"string": SMALL_UUIDS[("gpu-node-0", "gpu-0-mig-3g40gb-9-4")]}


def test_a_node_with_many_partitionable_gpus_splits_into_several_slices() -> None:
    shape = parse_shape("t", _one_gpu({"model": "H100-80GB", "mig": "dynamic", "count": 8}))
    slices = build_slices(shape.nodes[0])
    assert len(slices) == 1 + 3  # one counter slice (8 sets), 152 devices in chunks of 64
    assert sum(len(s["spec"].get("devices", [])) for s in slices) == 8 * 19


def test_node_count_expands_names() -> None:
    shape = parse_shape(
        "t", {"nodes": [{"name": "gpu-{i:03d}", "count": 3, "gpus": [{"model": "H100-80GB"}]}]}
    )
    assert [n.name for n in shape.nodes] == ["gpu-000", "gpu-001", "gpu-002"]
    assert len({n.ip for n in shape.nodes}) == 3


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        (
            {"model": "H100-80GB", "mig": "static", "layout": ["3g.40gb", "3g.40gb", "1g.10gb"]},
            "no valid placement",
        ),
        ({"model": "H100-80GB", "mig": "static", "layout": ["4g.40gb", "4g.40gb"]}, "compute slices"),
        ({"model": "H100-80GB", "mig": "static", "layout": ["5g.50gb"]}, "no MIG profile '5g.50gb'"),
        ({"model": "H100-80GB", "mig": "static"}, "needs a layout"),
        ({"model": "H100-80GB", "layout": ["1g.10gb"]}, "only valid with mig: static"),
        ({"model": "V100"}, "unknown GPU model"),
        ({"model": "H100-80GB", "mig": "sometimes"}, "mig must be"),
        ({"model": "H100-80GB", "colour": "green"}, "unknown keys"),
    ],
)
def test_bad_shapes_are_refused_with_a_reason(gpu: dict, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        parse_shape("t", _one_gpu(gpu))


def test_valid_static_layout_is_placed_like_nvidia_smi_would() -> None:
    shape = parse_shape(
        "t",
        _one_gpu(
            {"model": "H100-80GB", "mig": "static", "layout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]}
        ),
    )
    placed = [(m.profile.name, m.start) for m in shape.nodes[0].gpus[0].layout]
    assert placed == [("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]


def test_bad_node_names_are_refused() -> None:
    with pytest.raises(ShapeError, match="not a valid DNS label"):
        parse_shape("t", {"nodes": [{"name": "Bad_Name"}]})
    with pytest.raises(ShapeError, match="not unique"):
        parse_shape("t", {"nodes": [{"name": "a"}, {"name": "a"}]})
