"""The DRA behaviour the gpusessions design stands on, proven on the real
kube-apiserver, kube-scheduler and resourceclaim controller of the devcluster.

Each test would fail if Kubernetes behaved differently (see ../shared/facts.md).
Runs on the `small` shape: gpu-node-0 with GPU 0 statically split into
3g.40gb + 2g.20gb + 2 x 1g.10gb, GPU 1 whole and GPU 2 split into 7 x 1g.10gb;
the dynamic MIG tests run on a
second cluster of shape `small-dynamic` (a cluster is static or dynamic MIG, as
one NVIDIA driver install is): gpu-node-d with a partitionable H100 (GPU 0) and
an A100 in MIG mode (GPU 1, partitions only).
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from localcluster import waits
from localcluster.kubeapi import ApiError, KubeAPI
from localcluster.shapes import gpu_uuid, mig_uuid
from localcluster.testing import allocated, claim, exec_pod, printed_env, slice_device, visible_devices

pytestmark = pytest.mark.cluster

GI = 1024**3
MIG = "mig.nvidia.com"
GPU = "gpu.nvidia.com"


def _quantity_bytes(q: str) -> int:
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4}
    for suffix, mult in units.items():
        if q.endswith(suffix):
            return int(q[: -len(suffix)]) * mult
    return int(q)


def _start(api: KubeAPI, ns: str, name: str, claim_obj: dict | None, pod_name: str | None = None) -> None:
    if claim_obj:
        api.create(claim_obj, ns)
    api.create(exec_pod(pod_name or f"{name}-pod", claim_name=name if claim_obj else None), ns)


def test_mig_profile_selector_gets_that_profile(api: KubeAPI, namespace: str) -> None:
    api.create(claim("c", MIG, ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]), namespace)
    api.create(exec_pod("p", claim_name="c"), namespace)
    waits.pod_ready(api, namespace, "p")
    c = waits.claim_allocated(api, namespace, "c")
    [(pool, device)] = allocated(c)
    dev = slice_device(api, pool, device)
    assert dev["attributes"]["type"] == {"string": "mig"}
    assert dev["attributes"]["profile"] == {"string": "1g.10gb"}
    # The runtime injected exactly this device into the container.
    parent = dev["attributes"]["parentUUID"]["string"]
    expected = dev["attributes"].get("uuid", {}).get("string") or mig_uuid(
        parent, "1g.10gb", int(device.rsplit("-", 1)[1])
    )
    assert waits.wait_for(lambda: visible_devices(namespace, "p") == expected, 10, "device env") is True


def test_profile_that_does_not_exist_waits(api: KubeAPI, namespace: str) -> None:
    api.create(claim("c", MIG, ["device.attributes['gpu.nvidia.com'].profile == '9g.99gb'"]), namespace)
    api.create(exec_pod("p", claim_name="c"), namespace)
    msg = waits.pod_unschedulable(api, namespace, "p")
    assert "cannot allocate all claims" in msg
    assert not (api.get("ResourceClaim", "c", namespace).get("status") or {}).get("allocation")


def test_memory_selector_with_quantity_compare(api: KubeAPI, namespace: str) -> None:
    sel = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('{}')) >= 0"
    # MIG devices of at least 30Gi: only 3g.40gb and larger qualify.
    api.create(claim("big-mig", MIG, [sel.format("30Gi")]), namespace)
    api.create(exec_pod("p1", claim_name="big-mig"), namespace)
    c = waits.claim_allocated(api, namespace, "big-mig")
    [(pool, device)] = allocated(c)
    dev = slice_device(api, pool, device)
    assert _quantity_bytes(dev["capacity"]["memory"]["value"]) >= 30 * GI
    assert dev["attributes"]["profile"]["string"] in {"3g.40gb", "4g.40gb", "7g.80gb"}
    # Nothing has 100Gi: the claim is never allocated and the pod says why.
    api.create(claim("huge", GPU, [sel.format("100Gi")]), namespace)
    api.create(exec_pod("p2", claim_name="huge"), namespace)
    assert "cannot allocate all claims" in waits.pod_unschedulable(api, namespace, "p2")


def test_a_40gb_mig_device_has_less_than_40gi(api: KubeAPI, namespace: str) -> None:
    """NVML reports 3g.40gb and 4g.40gb below their label (H100 40448 MiB, A100 40192 MiB),
    so `>= 40Gi` (40960 MiB) matches only 7g.80gb; `40000Mi` is the bound that takes them.
    (The 7g.80gb side: test_forty_gi_on_a_partitionable_gpu_is_the_7g_80gb.)"""
    sel = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('{}')) >= 0"
    is_3g = "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'"
    # GPU 0's static 3g.40gb is free, but 40448 MiB is less than 40Gi ...
    api.create(claim("forty-gi-3g", MIG, [sel.format("40Gi"), is_3g]), namespace)
    api.create(exec_pod("p2", claim_name="forty-gi-3g"), namespace)
    assert "cannot allocate all claims" in waits.pod_unschedulable(api, namespace, "p2")
    # ... and 40000Mi takes it.
    api.create(claim("forty-k-mi-3g", MIG, [sel.format("40000Mi"), is_3g]), namespace)
    api.create(exec_pod("p3", claim_name="forty-k-mi-3g"), namespace)
    [(pool, device)] = allocated(waits.claim_allocated(api, namespace, "forty-k-mi-3g"))
    dev = slice_device(api, pool, device)
    assert dev["attributes"]["profile"] == {"string": "3g.40gb"}
    assert _quantity_bytes(dev["capacity"]["memory"]["value"]) == 40448 * 1024**2


@pytest.mark.parametrize(
    ("expression", "hint"),
    [
        # The form seen in blog posts: not CEL (quantities have no >= and 40Gi is no literal).
        ("device.capacity['gpu.nvidia.com'].memory >= 40Gi", "compil"),
        # Valid syntax, wrong types: a quantity cannot be compared with an int.
        ("device.capacity['gpu.nvidia.com'].memory >= 40", "no matching overload"),
    ],
)
def test_invalid_cel_is_refused_by_the_apiserver(
    api: KubeAPI, namespace: str, expression: str, hint: str
) -> None:
    with pytest.raises(ApiError) as err:
        api.create(claim("bad", MIG, [expression]), namespace)
    assert err.value.status == 422
    assert "selectors[0].cel.expression" in err.value.message
    assert hint in err.value.message.lower()
    assert api.get_or_none("ResourceClaim", "bad", namespace) is None


def test_standalone_claim_is_deallocated_when_its_only_pod_goes(api: KubeAPI, namespace: str) -> None:
    api.create(claim("c", MIG, ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]), namespace)
    api.create(exec_pod("p", claim_name="c"), namespace)
    waits.pod_ready(api, namespace, "p")
    assert waits.claim_allocated(api, namespace, "c")["status"]["reservedFor"][0]["name"] == "p"
    api.delete("Pod", "p", namespace)
    c = waits.claim_deallocated(api, namespace, "c")
    assert not c["status"].get("reservedFor")
    # The claim object stays, empty: only its allocation went.
    assert c["metadata"]["name"] == "c"


def test_holder_pod_keeps_the_device_across_notebook_recreation(api: KubeAPI, namespace: str) -> None:
    api.create(claim("c", MIG, ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]), namespace)
    api.create(exec_pod("holder", claim_name="c"), namespace)
    api.create(exec_pod("notebook", claim_name="c"), namespace)
    waits.pod_ready(api, namespace, "holder")
    nb = waits.pod_ready(api, namespace, "notebook")
    first = allocated(waits.claim_allocated(api, namespace, "c"))
    devices_before = visible_devices(namespace, "notebook")
    assert devices_before == visible_devices(namespace, "holder")

    api.delete("Pod", "notebook", namespace)
    waits.gone(api, "Pod", "notebook", namespace)

    # The resourceclaim controller drops a deleted pod from reservedFor after the pod is gone
    # (asynchronously: a CI run read the claim before it had).
    def reserved_for_holder_only() -> dict[str, Any] | None:
        c = api.get("ResourceClaim", "c", namespace)
        names = [r["name"] for r in c["status"].get("reservedFor") or []]
        return c if names == ["holder"] else None

    c = waits.wait_for(reserved_for_holder_only, 30, "the claim reserved for the holder alone")
    assert c["status"].get("allocation"), "the holder should keep the claim allocated"

    api.create(exec_pod("notebook", claim_name="c"), namespace)
    nb2 = waits.pod_ready(api, namespace, "notebook")
    assert allocated(api.get("ResourceClaim", "c", namespace)) == first
    assert nb2["spec"]["nodeName"] == nb["spec"]["nodeName"]
    assert waits.wait_for(lambda: visible_devices(namespace, "notebook") == devices_before, 10, "same device")


def test_pod_with_an_allocated_claim_lands_on_the_claims_node(api: KubeAPI, namespace: str) -> None:
    # Extra Ready nodes without devices: plain pods may go anywhere, a pod
    # sharing the claim must go where the claim is allocated.
    extra = [f"{namespace}-n{i}"[:63] for i in range(3)]
    try:
        for n in extra:
            api.create(
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"test-extra": "1"}}}
            )
            api.patch(
                "Node",
                n,
                {
                    "status": {
                        "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                        "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
                        "conditions": [
                            {"type": "Ready", "status": "True", "reason": "Test", "message": "extra"}
                        ],
                    }
                },
                subresource="status",
            )
        plain = [f"plain-{i}" for i in range(8)]
        for p in plain:
            api.create(exec_pod(p, command=["sleep", "3600"]), namespace)

        def placed() -> list[str] | None:
            nodes = [api.get("Pod", p, namespace)["spec"].get("nodeName") for p in plain]
            return nodes if all(nodes) else None

        nodes = waits.wait_for(placed, 30, "plain pods to be scheduled")
        assert set(nodes) & set(extra), f"the scheduler never used the extra nodes: {nodes}"

        api.create(claim("c", MIG, ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]), namespace)
        api.create(exec_pod("holder", claim_name="c"), namespace)
        c = waits.claim_allocated(api, namespace, "c")
        claim_node = c["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0][
            "values"
        ][0]
        for i in range(4):
            api.create(exec_pod(f"nb-{i}", claim_name="c"), namespace)
        for i in range(4):
            assert waits.pod_ready(api, namespace, f"nb-{i}")["spec"]["nodeName"] == claim_node
    finally:
        for p in api.list("Pod", namespace)["items"]:
            if p["spec"].get("nodeName") in extra:
                api.delete("Pod", p["metadata"]["name"], namespace, grace_period=0)
        for n in extra:
            api.delete("Node", n)


def test_forty_gi_on_a_partitionable_gpu_is_the_7g_80gb(dynamic_api: KubeAPI, dynamic_namespace: str) -> None:
    """With dynamic MIG the only MIG devices of 40Gi or more are the 7g.80gb partitions, each of
    which takes a whole GPU."""
    api, namespace = dynamic_api, dynamic_namespace
    sel = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0"
    api.create(claim("forty-gi", MIG, [sel]), namespace)
    api.create(exec_pod("p1", claim_name="forty-gi"), namespace)
    [(pool, device)] = allocated(waits.claim_allocated(api, namespace, "forty-gi"))
    assert slice_device(api, pool, device)["attributes"]["profile"] == {"string": "7g.80gb"}


def test_partitionable_gpu_hands_out_dynamic_mig_and_counters_refuse_overallocation(
    dynamic_api: KubeAPI, dynamic_namespace: str, dynamic_cluster: Any
) -> None:
    api, namespace, paths = dynamic_api, dynamic_namespace, dynamic_cluster.paths
    node = "gpu-node-d"
    parent = gpu_uuid(node, 0)  # GPU 0 of small-dynamic: a partitionable H100
    on_gpu0 = f"device.attributes['gpu.nvidia.com'].parentUUID == '{parent}'"
    profile = "device.attributes['gpu.nvidia.com'].profile == '{}'"

    api.create(claim("four", MIG, [on_gpu0, profile.format("4g.40gb")]), namespace)
    api.create(exec_pod("p-four", claim_name="four"), namespace)
    waits.pod_ready(api, namespace, "p-four")
    [(_, dev4)] = allocated(api.get("ResourceClaim", "four", namespace))
    assert dev4 == "gpu-0-mig-4g40gb-5-0"
    assert "uuid" not in slice_device(api, node, dev4)["attributes"], "made at prepare: no uuid published"
    assert waits.wait_for(
        lambda: visible_devices(namespace, "p-four", paths=paths) == mig_uuid(parent, "4g.40gb", 0),
        10,
        "dynamic MIG uuid",
    )

    # The 4g.40gb took memory slices 0-3: a 3g.40gb fits only at placement 4 ...
    api.create(claim("three-a", MIG, [on_gpu0, profile.format("3g.40gb")]), namespace)
    api.create(exec_pod("p-three-a", claim_name="three-a"), namespace)
    waits.pod_ready(api, namespace, "p-three-a")
    assert allocated(api.get("ResourceClaim", "three-a", namespace)) == [(node, "gpu-0-mig-3g40gb-9-4")]
    # ... and a second one does not fit at all, nor does the whole GPU.
    api.create(claim("three-b", MIG, [on_gpu0, profile.format("3g.40gb")]), namespace)
    api.create(exec_pod("p-three-b", claim_name="three-b"), namespace)
    api.create(claim("whole", GPU, [f"device.attributes['gpu.nvidia.com'].uuid == '{parent}'"]), namespace)
    api.create(exec_pod("p-whole", claim_name="whole"), namespace)
    assert "cannot allocate all claims" in waits.pod_unschedulable(api, namespace, "p-three-b")
    # The scheduler's verdict on p-whole is the witness: it writes an allocation only when it
    # binds a pod, and it has just found that this one fits nowhere.
    assert "cannot allocate all claims" in waits.pod_unschedulable(api, namespace, "p-whole")
    assert not (api.get("ResourceClaim", "whole", namespace).get("status") or {}).get("allocation")

    # Give the counters back: the waiting whole-GPU claim is then allocated.
    api.delete("Pod", "p-three-b", namespace)
    api.delete("Pod", "p-four", namespace)
    api.delete("Pod", "p-three-a", namespace)
    waits.claim_deallocated(api, namespace, "four")
    waits.claim_deallocated(api, namespace, "three-a")
    waits.pod_ready(api, namespace, "p-whole", timeout=60)
    assert allocated(api.get("ResourceClaim", "whole", namespace)) == [(node, "gpu-0")]
    assert waits.wait_for(
        lambda: visible_devices(namespace, "p-whole", paths=paths) == parent, 10, "whole GPU uuid"
    )


def test_ampere_in_mig_mode_offers_partitions_only(dynamic_api: KubeAPI, dynamic_namespace: str) -> None:
    """GPU 1 of small-dynamic is an A100 with MIG mode on: no whole GPU of it, its 7g.80gb instead."""
    api, namespace = dynamic_api, dynamic_namespace
    a100 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'"
    api.create(claim("whole-a100", GPU, [a100]), namespace)
    api.create(exec_pod("p-whole", claim_name="whole-a100"), namespace)
    assert "cannot allocate all claims" in waits.pod_unschedulable(api, namespace, "p-whole")
    seven = "device.attributes['gpu.nvidia.com'].profile == '7g.80gb'"
    api.create(claim("seven-a100", MIG, [a100, seven]), namespace)
    api.create(exec_pod("p-seven", claim_name="seven-a100"), namespace)
    [(_, device)] = allocated(waits.claim_allocated(api, namespace, "seven-a100"))
    assert device == "gpu-1-mig-7g80gb-0-0"


def test_a_container_gets_its_devices_as_cdi_gives_them(api: KubeAPI, namespace: str) -> None:
    """NVIDIA_VISIBLE_DEVICES=void (the driver's CDI spec), the device itself injected."""
    api.create(claim("c", MIG, ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]), namespace)
    api.create(exec_pod("p", claim_name="c"), namespace)
    waits.pod_ready(api, namespace, "p")
    assert waits.wait_for(lambda: printed_env(namespace, "p", "NVIDIA_VISIBLE_DEVICES") == "void", 10, "env")
    assert visible_devices(namespace, "p").startswith("MIG-")


def test_the_cluster_runs_as_the_kubernetes_version_it_says(api: KubeAPI) -> None:
    """The local cluster's 1.36 binaries run as 1.36, or (DEVCLUSTER_EMULATE: `make test`'s
    emulated pass) as 1.35 or 1.34 with `--emulated-version`: the apiserver says so, and its
    feature defaults are that version's (consumable capacity: beta and on in 1.36, alpha and
    off before), with partitionable devices on in all three (a gate before 1.36)."""
    emulate = os.environ.get("DEVCLUSTER_EMULATE") or "1.36"
    v = api.request("GET", "/version")
    assert (v["gitVersion"].rsplit(".", 1)[0], f"{v['emulationMajor']}.{v['emulationMinor']}") == (
        "v1.36",
        emulate,
    ), v
    metrics = api.request("GET", "/metrics")["message"]

    def feature(name: str) -> tuple[str, str]:
        m = re.search(rf'^kubernetes_feature_enabled\{{name="{name}",stage="(\w*)"\}} (\d)$', metrics, re.M)
        assert m, f"no kubernetes_feature_enabled for {name}"
        return m.group(1), m.group(2)

    assert feature("DRAConsumableCapacity") == (("BETA", "1") if emulate == "1.36" else ("ALPHA", "0"))
    assert feature("DRAPartitionableDevices")[1] == "1"
