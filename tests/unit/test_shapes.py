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
            assert s["metadata"]["generateName"] == f"{node.name}-gpu.nvidia.com-"
            assert s["metadata"]["name"].startswith(s["metadata"]["generateName"])


def test_demo_shape_is_three_nodes_eight_gpus_mixed() -> None:
    shape = load_shape("demo", SHAPES_DIR)
    assert len(shape.nodes) == 3
    assert shape.gpu_count == 8
    modes = {g.mode for n in shape.nodes for g in n.gpus}
    assert modes == {"none", "static"}  # a driver install is static or dynamic MIG
    models = {g.model.key for n in shape.nodes for g in n.gpus}
    assert models == {"H100-80GB", "A100-80GB"}
    dynamic = load_shape("demo-dynamic", SHAPES_DIR)
    assert {g.mode for n in dynamic.nodes for g in n.gpus} == {"none", "dynamic"}
    assert dynamic.mig_mode == "dynamic" and shape.mig_mode == "static"


def test_small_shape_is_one_node_two_gpus() -> None:
    shape = load_shape("small", SHAPES_DIR)
    assert len(shape.nodes) == 1 and shape.gpu_count == 3
    assert load_shape("small-dynamic", SHAPES_DIR).gpu_count == 2


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
        "memorySlice0",  # the memory slice it uses (static MIG only)
        "multiprocessors",
        "copyEngines",
        "decoders",
        "encoders",
        "jpegEngines",
        "ofaEngines",
    }
    assert devices[3]["capacity"]["memorySlice3"] == {"value": "1"}


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
    # 7 + 4 + 3 + 2 + 1 + 1 profile placements, 7 of 1g.10gb+me, plus the full GPU.
    assert len(names) == 19 + 7
    assert names == sorted(names), "the driver sorts a GPU's devices by name"
    full = devices[0]["consumesCounters"][0]["counters"]
    assert full == cs["counters"], "the full GPU consumes every counter"
    four = next(d for d in devices if d["name"] == "gpu-0-mig-4g40gb-5-0")
    used = four["consumesCounters"][0]["counters"]
    assert {k for k in used if k.startswith("memory-slice-")} == {f"memory-slice-{i}" for i in range(4)}
    assert all("uuid" not in d["attributes"] for d in devices[1:]), "dynamic MIG devices have no UUID yet"
    assert all(not any(k.startswith("memorySlice") for k in d["capacity"]) for d in devices)


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
    ("gpu-node-0", "gpu-1"): "GPU-81511435-b451-52da-8021-24b8016e0edf",  # whole
    ("gpu-node-0", "gpu-1-mig-1g10gb-19-0"): "MIG-f8fcd619-484b-5e5f-bb66-226745c92bc4",  # dynamic MIG
}


def test_uuids_of_the_small_shape_are_the_ones_written_down() -> None:
    uuids = device_uuids(load_shape("small", SHAPES_DIR))
    # GPU 1 of gpu-node-0 with dynamic MIG (the small shape is static MIG now: a cluster is one or
    # the other), for the UUID a dynamic MIG device gets when prepared.
    dynamic = parse_shape(
        "t",
        {"nodes": [{"name": "gpu-node-0", "gpus": [{"model": "H100-80GB", "mig": "dynamic", "count": 2}]}]},
    )
    uuids.update(device_uuids(dynamic))
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
    assert len(slices) == 1 + 8  # one slice with the 8 counter sets, then one per GPU
    assert len(slices[0]["spec"]["sharedCounters"]) == 8
    assert [len(s["spec"]["devices"]) for s in slices[1:]] == [19 + 7] * 8


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


# -- what the real driver (25.12) publishes: ../shared/real-slices/README.md ------------------
def test_attributes_have_the_real_names_and_types() -> None:
    shape = parse_shape(
        "t", _one_gpu({"model": "H100-80GB", "mig": "static", "layout": ["4g.40gb", "3g.40gb"]})
    )
    for d in node_devices(shape.nodes[0])[0]:
        a = d["attributes"]
        assert "pcieBusID" not in a
        assert a["resource.kubernetes.io/pciBusID"]["string"].startswith("0000:")
        assert a["resource.kubernetes.io/pcieRoot"]["string"].startswith("pci0000:")
        assert set(a["addressingMode"]) == {"string"}
        for v in ("cudaComputeCapability", "driverVersion", "cudaDriverVersion"):
            assert set(a[v]) == {"version"}
    names = [d["name"] for d in node_devices(shape.nodes[0])[0]]
    assert names == ["gpu-0-mig-4g40gb-5-0", "gpu-0-mig-3g40gb-9-4"]  # as in the H100 dump


def test_a_static_mig_node_does_not_publish_the_parent_gpu() -> None:
    shape = parse_shape("t", _one_gpu({"model": "A100-80GB", "mig": "static", "layout": ["1g.10gb"] * 7}))
    devices, _ = node_devices(shape.nodes[0])
    assert {d["attributes"]["type"]["string"] for d in devices} == {"mig"}


def test_dynamic_mig_publishes_me_profiles() -> None:
    shape = parse_shape("t", _one_gpu({"model": "H100-80GB", "mig": "dynamic"}))
    me = [
        d
        for d in node_devices(shape.nodes[0])[0]
        if d["attributes"].get("profile") == {"string": "1g.10gb+me"}
    ]
    assert [d["name"] for d in me] == [f"gpu-0-mig-1g10gb-me-20-{i}" for i in range(7)]


def test_ampere_with_dynamic_mig_publishes_partitions_only() -> None:
    shape = parse_shape("t", _one_gpu({"model": "A100-80GB", "mig": "dynamic"}))
    devices, [cs] = node_devices(shape.nodes[0])
    assert {d["attributes"]["type"]["string"] for d in devices} == {"mig"}
    assert cs["name"] == "gpu-0-counter-set"
    # With MIG mode off, an A100 in a dynamic-MIG cluster is a whole GPU only.
    off = parse_shape(
        "t",
        {
            "nodes": [
                {"name": "n0", "gpus": [{"model": "A100-80GB"}, {"model": "A100-80GB", "mig": "dynamic"}]}
            ]
        },
    )
    [whole] = [d for d in node_devices(off.nodes[0])[0] if d["attributes"]["type"] == {"string": "gpu"}]
    assert "consumesCounters" not in whole


def test_dynamic_slices_are_one_of_counters_then_one_per_gpu() -> None:
    shape = parse_shape("t", _one_gpu({"model": "H100-80GB", "mig": "dynamic", "count": 2}))
    slices = build_slices(shape.nodes[0], owner_uid="u-1")
    assert sorted(slices[0]["spec"]) == ["driver", "nodeName", "pool", "sharedCounters"]
    assert [{d["name"].split("-mig")[0] for d in s["spec"]["devices"]} for s in slices[1:]] == [
        {"gpu-0"},
        {"gpu-1"},
    ]
    for s in slices:
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": "n0", "uid": "u-1", "controller": True}
        ]
    assert len({s["metadata"]["name"] for s in slices}) == 3


def test_static_and_whole_gpus_are_one_slice() -> None:
    [s] = build_slices(load_shape("small", SHAPES_DIR).nodes[0])
    assert len(s["spec"]["devices"]) == 4 + 1 + 7


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (
            [
                {"model": "H100-80GB", "mig": "static", "layout": ["7g.80gb"]},
                {"model": "H100-80GB", "mig": "dynamic"},
            ],
            "mixes static MIG .n0 gpu 0. and dynamic MIG .n0 gpu 1.: one NVIDIA driver install is either",
        ),
        ([{"model": "H100-80GB"}, {"model": "H100-80GB", "mig": "dynamic"}], "write mig: dynamic"),
    ],
)
def test_a_shape_is_static_or_dynamic_mig(gpus: list, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        parse_shape("t", {"nodes": [{"name": "n0", "gpus": gpus}]})
    # Across nodes too.
    with pytest.raises(ShapeError, match="mixes static MIG"):
        parse_shape(
            "t",
            {
                "nodes": [
                    {"name": "a", "gpus": [{"model": "A100-80GB", "mig": "static", "layout": ["7g.80gb"]}]},
                    {"name": "b", "gpus": [{"model": "A100-80GB", "mig": "dynamic"}]},
                ]
            },
        )


def test_compute_domain_slices_and_classes() -> None:
    from localcluster.shapes import compute_domain_slices, device_classes

    [s] = compute_domain_slices(load_shape("small", SHAPES_DIR).nodes[0])
    assert s["spec"]["driver"] == "compute-domain.nvidia.com"
    assert [d["name"] for d in s["spec"]["devices"]] == ["channel-0", "daemon-0"]
    classes = {c["metadata"]["name"]: c["spec"] for c in device_classes()}
    assert set(classes) == {
        "gpu.nvidia.com",
        "mig.nvidia.com",
        "vfio.gpu.nvidia.com",
        "compute-domain-daemon.nvidia.com",
        "compute-domain-default-channel.nvidia.com",
    }
    assert classes["gpu.nvidia.com"]["extendedResourceName"] == "nvidia.com/gpu"
