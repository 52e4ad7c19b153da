"""How the runtime reads pods: images, argv, environment and claims."""

from __future__ import annotations

from typing import Any

import pytest

from localcluster import podspec


def test_image_modes() -> None:
    assert podspec.image_mode("quay.io/jupyterhub/singleuser:5") == podspec.SINGLEUSER
    assert podspec.image_mode("quay.io/jupyterhub/k8s-singleuser-sample:4.0") == podspec.SINGLEUSER
    assert podspec.image_mode("jupyter/scipy-notebook@sha256:abc") == podspec.SINGLEUSER
    assert podspec.image_mode("ghcr.io/x/gpusessions-holder:0.1") == podspec.HOLDER
    assert podspec.image_mode("localcluster/exec") == podspec.EXEC
    assert podspec.image_mode("registry.k8s.io/pause:3.10") == podspec.NONE


def test_singleuser_argv_drops_image_wrappers_and_allows_root() -> None:
    c = {"args": ["tini", "-g", "--", "start-notebook.sh", "--ServerApp.ip=0.0.0.0"]}
    argv = podspec.container_argv(c, podspec.SINGLEUSER, [], as_root=True)
    assert argv == ["jupyterhub-singleuser", "--ServerApp.ip=0.0.0.0", "--ServerApp.allow_root=True"]
    assert podspec.container_argv({}, podspec.SINGLEUSER, [], as_root=False) == ["jupyterhub-singleuser"]


def test_bind_rewrites_wildcard_to_pod_ip() -> None:
    assert podspec.bind_to_pod_ip(["http://0.0.0.0:8888/user/a/"], "127.1.0.9") == [
        "http://127.1.0.9:8888/user/a/"
    ]


def test_claim_name_from_spec_or_template_status() -> None:
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimName": "c1"},
                {"name": "t", "resourceClaimTemplateName": "tmpl"},
            ]
        },
        "status": {"resourceClaimStatuses": [{"name": "t", "resourceClaimName": "p-t-xyz"}]},
    }
    assert podspec.claim_name(pod, "gpu") == "c1"
    assert podspec.claim_name(pod, "t") == "p-t-xyz"
    assert podspec.claim_name(pod, "nope") is None


def test_allocated_devices_by_request_and_subrequest() -> None:
    claim = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu/small", "driver": "gpu.nvidia.com", "pool": "n", "device": "d1"},
                        {"request": "other", "driver": "gpu.nvidia.com", "pool": "n", "device": "d2"},
                    ]
                }
            }
        }
    }
    assert podspec.allocated_devices(claim, "gpu") == [("gpu.nvidia.com", "n", "d1")]
    assert len(podspec.allocated_devices(claim, None)) == 2


def test_claim_ready_needs_allocation_and_reservation() -> None:
    c = {"status": {"allocation": {"devices": {"results": []}}, "reservedFor": [{"uid": "u1"}]}}
    assert podspec.claim_ready_for(c, "u1")
    assert not podspec.claim_ready_for(c, "u2")
    assert not podspec.claim_ready_for({"status": {"reservedFor": [{"uid": "u1"}]}}, "u1")


def test_env_expansion_and_escape() -> None:
    pod = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {}}
    c = {"env": [{"name": "A", "value": "x"}, {"name": "B", "value": "$(A)/$$(A)/$(MISSING)"}]}
    env = podspec.container_env(pod, c, "127.1.0.2", "127.200.0.1", lambda *a: None)
    assert env["B"] == "x/$(A)/$(MISSING)"


def test_a_missing_secret_or_key_stops_the_container_unless_optional() -> None:
    """As a kubelet: CreateContainerConfigError in its words (the agent's token Secret, deleted
    under a hub that thought it was there, once started agents without a token here)."""
    pod = {"metadata": {"namespace": "ns", "name": "p"}, "spec": {}}
    secrets = {("Secret", "ns", "s"): {"token": "t"}}

    def lookup(kind: str, ns: str, name: str) -> dict[str, str] | None:
        return secrets.get((kind, ns, name))

    def ref(name: str, key: str = "token", **extra: Any) -> dict[str, Any]:
        return {"name": "T", "valueFrom": {"secretKeyRef": {"name": name, "key": key, **extra}}}

    assert podspec.container_env(pod, {"env": [ref("s")]}, "", "", lookup) == {"T": "t"}
    with pytest.raises(podspec.ConfigError, match='secret "gone" not found'):
        podspec.container_env(pod, {"env": [ref("gone")]}, "", "", lookup)
    with pytest.raises(podspec.ConfigError, match="couldn't find key other in Secret ns/s"):
        podspec.container_env(pod, {"env": [ref("s", "other")]}, "", "", lookup)
    assert podspec.container_env(pod, {"env": [ref("gone", optional=True)]}, "", "", lookup) == {}
    with pytest.raises(podspec.ConfigError, match='configmap "cm" not found'):
        podspec.container_env(pod, {"envFrom": [{"configMapRef": {"name": "cm"}}]}, "", "", lookup)
    assert (
        podspec.container_env(
            pod, {"envFrom": [{"secretRef": {"name": "x", "optional": True}}]}, "", "", lookup
        )
        == {}
    )


def test_pod_ips_of_two_local_clusters_never_meet() -> None:
    from localcluster.runtime import IPAllocator

    a, b = IPAllocator.for_port_base(16443), IPAllocator.for_port_base(17443)
    first_a, first_b = a.allocate(), b.allocate()
    assert first_a == "127.1.0.1" and first_b.startswith("127.17.")
    a._next = a._end
    assert a.allocate() == "127.4.255.254" and a.allocate() == "127.1.0.2", "wraps within its block"
    assert not {first_a} & {b.allocate() for _ in range(1000)}


def test_a_container_sees_only_its_devices_in_the_fake_nvml() -> None:
    """As with CDI injection: a whole GPU with MIG mode off, or a MIG parent with only the
    container's MIG devices."""
    from localcluster.fakedriver import fake_nvml_gpus, visible_gpus
    from localcluster.paths import SHAPES_DIR
    from localcluster.shapes import device_uuids, load_shape

    shape = load_shape("small", SHAPES_DIR)
    gpus = fake_nvml_gpus(shape.nodes[0])
    uuids = device_uuids(shape)
    mig = uuids[("gpu-node-0", "gpu-0-mig-1g10gb-19-3")]
    whole = uuids[("gpu-node-0", "gpu-1")]
    [parent] = visible_gpus(gpus, [mig])
    assert [m["uuid"] for m in parent["mig"]] == [mig]
    [gpu] = visible_gpus(gpus, [whole])
    assert gpu["uuid"] == whole and gpu["mig"] == []
    assert visible_gpus(gpus, []) == []
