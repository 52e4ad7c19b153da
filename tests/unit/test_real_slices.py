"""Slices published from real clusters (../shared/real-slices/): they load, the simulated driver
publishes the same attribute names and types, and the picker's counts and the size check hold
on them. The counts are checked against the real kube-scheduler in
tests/integration/test_real_slices.py."""

from __future__ import annotations

import pytest

from gpusessions.core.availability import Inventory, count_free, size_match, size_problems
from gpusessions.core.claims import GPURequest
from gpusessions.hub import sizecheck
from localcluster import realslices
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import device_classes, load_shape, node_devices, parse_shape

CLASSES = {dc["metadata"]["name"]: dc for dc in device_classes()}
DUMPS = {p.name: realslices.load(p) for p in realslices.dump_files()}
GPU, MIG = "gpu.nvidia.com", "mig.nvidia.com"
# Attributes an older driver published under a name 25.12 replaced (README point 1).
RENAMED = {"pcieBusID": "resource.kubernetes.io/pciBusID"}


def _profile(p: str) -> tuple[str, ...]:
    return (f"device.attributes['gpu.nvidia.com'].profile == '{p}'",)


# Per dump: (size, selectors) -> what the picker counts free on an empty cluster.
EXPECTED = {
    "real-whole-gpu-t4-openshift.yaml": {(GPU, ()): 2},
    "real-whole-gpu-p100-v1beta1-alauda.yaml": {(GPU, ()): 1},
    "real-static-mig-h100-excerpt-hrishi.yaml": {
        (MIG, _profile("4g.40gb")): 1,
        (MIG, _profile("3g.40gb")): 1,
    },
    "real-static-mig-a100-issue719-fragments.yaml": {(MIG, _profile("1g.10gb")): 2},
}


def _inv(dump: realslices.Dump) -> Inventory:
    return Inventory.from_slices(dump.slices)


def test_every_dump_is_covered_and_loads_or_says_why() -> None:
    assert set(DUMPS) == set(EXPECTED) | {"real-dynamic-mig-a30-pr1018-fragment.yaml"}
    for name, dump in DUMPS.items():
        if name in EXPECTED:
            assert dump.slices and not dump.reason, name
            for s in dump.slices:
                assert s["apiVersion"] == "resource.k8s.io/v1"
                assert all("basic" not in d for d in s["spec"]["devices"])
        else:
            assert dump.slices == [] and "only the first attributes" in dump.reason
            assert dump.devices[0]["attributes"]["productName"] == {"string": "NVIDIA A30"}
    assert DUMPS["real-whole-gpu-p100-v1beta1-alauda.yaml"].api_version == "resource.k8s.io/v1beta1"


def _sim_attribute_types() -> dict[str, set[str]]:
    """Attribute name -> value types over every device the simulated driver publishes."""
    shapes = [load_shape(n, SHAPES_DIR) for n in ("demo", "demo-dynamic")]
    out: dict[str, set[str]] = {}
    for shape in shapes:
        for node in shape.nodes:
            for d in node_devices(node)[0]:
                for k, v in d["attributes"].items():
                    out.setdefault(k, set()).update(v)
    return out


@pytest.mark.parametrize("name", sorted(DUMPS))
def test_the_simulated_driver_publishes_the_real_attribute_names_and_types(name: str) -> None:
    sim = _sim_attribute_types()
    for d in DUMPS[name].devices:
        for k, v in d["attributes"].items():
            k = RENAMED.get(k, k)
            assert k in sim, f"{name}: the simulation lacks attribute {k}"
            assert set(v) <= sim[k], f"{name}: {k} is {set(v)} on the real driver, {sim[k]} simulated"


def test_real_mig_capacities_are_the_simulated_ones() -> None:
    """memorySlice<N> on static MIG, and the same capacity names."""
    sim = parse_shape(
        "t",
        {"nodes": [{"name": "n", "gpus": [{"model": "A100-80GB", "mig": "static", "layout": ["1g.10gb"]}]}]},
    )
    [sim_dev] = node_devices(sim.nodes[0])[0]
    [real] = [
        d
        for d in DUMPS["real-static-mig-a100-issue719-fragments.yaml"].devices
        if d["name"] == "gpu-0-mig-19-3-1"
    ]
    strip = {k for k in real["capacity"] if k.startswith("memorySlice")}
    assert strip == {"memorySlice3"}
    assert set(real["capacity"]) - strip == set(sim_dev["capacity"]) - {"memorySlice0"}
    assert real["capacity"]["memory"] == sim_dev["capacity"]["memory"] == {"value": "9728Mi"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_picker_counts_on_each_dump(name: str) -> None:
    inv = _inv(DUMPS[name])
    for (dc, sel), want in EXPECTED[name].items():
        match = size_match([dc], list(sel), CLASSES)
        assert match is not None
        keys = [k for k in inv.candidates(match) if k not in inv.cut]
        assert count_free(inv, match, set(), candidates=keys)[:2] == (want, want), (dc, sel)
        assert size_problems(GPURequest(dc, 1, sel), inv, CLASSES) == []


def test_a_whole_gpu_size_never_takes_a_gpu_cut_into_mig_devices() -> None:
    """Driver 25.8.0 published gpu-0 of the MIG node whole too: the picker does not count it,
    and the size check (hub start, spawner) names it."""
    inv = _inv(DUMPS["real-static-mig-a100-issue719-fragments.yaml"])
    assert {k[2] for k in inv.cut} == {"gpu-0"}
    [line] = size_problems(GPURequest(GPU, 1, ()), inv, CLASSES)
    assert "node aks-migpool-68842551-vmss000001 publishes gpu-0 as a whole GPU" in line
    assert "25.8.1" in line
    # The simulated driver (25.12) never publishes a cut GPU whole.
    for shape in ("demo", "small", "scale"):
        slices = [s for n in load_shape(shape, SHAPES_DIR).nodes for s in _slices(n)]
        assert Inventory.from_slices(slices).cut == set()


def _slices(node: object) -> list[dict]:
    from localcluster.shapes import build_slices

    return build_slices(node)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "selector", "attribute", "node"),
    [
        # A size written for 25.8 (bare pcieBusID) on a 25.12 cluster.
        (
            "real-whole-gpu-t4-openshift.yaml",
            "device.attributes['gpu.nvidia.com'].pcieBusID == '0000:00:04.0'",
            "pcieBusID",
            "harpatil4220c-g9kfm-gpu-c-rd8r8",
        ),
        # A size written for 25.12 (addressingMode) on an older driver's cluster.
        (
            "real-whole-gpu-p100-v1beta1-alauda.yaml",
            "device.attributes['gpu.nvidia.com'].addressingMode == 'HMM'",
            "addressingMode",
            "192.168.140.59",
        ),
    ],
)
def test_a_selector_on_a_missing_attribute_is_caught_by_the_size_check(
    name: str, selector: str, attribute: str, node: str
) -> None:
    inv = _inv(DUMPS[name])
    profiles = [
        {"slug": "cpu"},
        {"slug": "bad", "kubespawner_override": {"gpu_device_class": GPU, "gpu_selectors": [selector]}},
        {"slug": "ok", "kubespawner_override": {"gpu_device_class": GPU}},
    ]
    config = {"KubeSpawner": {"profile_list": profiles}}
    [line] = sizecheck.problems(sizecheck.requests_of(config), inv, CLASSES)
    assert line.startswith("profile bad: ")
    assert f"reads '{attribute}', which device gpu-0 on node {node} lacks" in line


def test_a_profile_list_function_is_left_to_each_start(caplog: pytest.LogCaptureFixture) -> None:
    """KubeSpawner's profile_list may be a function of the spawner; the hub-start check has
    none to call it with, and says so instead of failing ('function' is not iterable)."""
    config = {"KubeSpawner": {"profile_list": lambda spawner: [{"slug": "x"}]}}
    with caplog.at_level("INFO", logger=sizecheck.log.name):
        assert sizecheck.requests_of(config) == []
    assert "profile_list is a function; each start checks its size" in caplog.text


def test_a_partitionable_gpu_is_not_cut() -> None:
    """Dynamic MIG publishes the whole GPU beside its partitions, sharing counters: not a cut GPU."""
    slices = [s for n in load_shape("small-dynamic", SHAPES_DIR).nodes for s in _slices(n)]
    inv = Inventory.from_slices(slices)
    assert inv.cut == set()
    assert size_problems(GPURequest(GPU, 1, ()), inv, CLASSES) == []


def test_me_profiles_count_as_their_slice() -> None:
    """`1g.10gb+me` (dynamic MIG publishes it) is 1/7 of a GPU, in the picker and in KAI quota."""
    from gpusessions.core.queues import device_equivalent
    from gpusessions.core.sizes import mig_slices

    me = {"attributes": {"type": {"string": "mig"}, "profile": {"string": "1g.10gb+me"}}}
    assert mig_slices(me) == 1
    assert device_equivalent(me) * 7 == 1
