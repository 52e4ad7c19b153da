"""Pure builders of the claim and holder pod, validated against strict 1.35 schemas."""

from __future__ import annotations

import pytest

import kubeschemas
from gpusessions.core import claims as C
from gpusessions.core import labels as L

ONE_G = ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",)


def _validate(obj: dict) -> None:
    kubeschemas.validate(obj)


def test_exact_claim_is_valid_and_marked() -> None:
    req = C.GPURequest("mig.nvidia.com", 1, ONE_G)
    claim = C.build_claim("gpu-alice", "ns", req, "alice", "", profile="mig-1g-10gb")
    _validate(claim)
    exactly = claim["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly == {
        "deviceClassName": "mig.nvidia.com",
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": ONE_G[0]}}],
    }
    md = claim["metadata"]
    assert md["labels"][L.MANAGED_BY] == "gpusessions"
    assert md["labels"][L.COMPONENT] == "claim"
    assert md["annotations"][L.USER_ANNOTATION] == "alice"
    assert md["annotations"][L.REQUEST_HASH] == req.hash()
    assert C.claim_matches(claim, req)
    assert not C.claim_matches(claim, C.GPURequest("mig.nvidia.com", 2, ONE_G))


def test_first_available_claim_is_valid() -> None:
    req = C.GPURequest(
        first_available=(C.Alternative("mig.nvidia.com", 1, ONE_G), C.Alternative("gpu.nvidia.com"))
    )
    claim = C.build_claim("gpu-bob", "ns", req, "bob", "exp1")
    _validate(claim)
    alts = claim["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [a["name"] for a in alts] == ["alt0", "alt1"]
    assert req.describe() == "MIG 1g.10gb or whole GPU"


def test_holder_pod_is_valid_hardened_and_holds_the_claim() -> None:
    settings = C.HolderSettings(
        image="gpusessions-holder:0.1.0",
        resources={"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
        node_selector={"pool": "gpu"},
        tolerations=({"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},),
        scheduler_name="kai-scheduler",
        priority_class="build",
    )
    pod = C.build_holder_pod("gpu-holder-alice", "ns", "gpu-alice", settings, "alice", "")
    _validate(pod)
    spec = pod["spec"]
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "gpu-alice"}]
    c = spec["containers"][0]
    assert c["resources"]["claims"] == [{"name": "gpu"}]
    assert c["resources"]["limits"] == {"memory": "64Mi"}
    assert spec["restartPolicy"] == "Always"
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert spec["schedulerName"] == "kai-scheduler" and spec["priorityClassName"] == "build"
    assert pod["metadata"]["labels"][L.COMPONENT] == "holder"


def test_request_hash_is_stable_and_order_sensitive_only_where_it_matters() -> None:
    a = C.GPURequest("mig.nvidia.com", 1, ONE_G)
    assert a.hash() == C.GPURequest("mig.nvidia.com", 1, ONE_G).hash()
    assert a.hash() != C.GPURequest("gpu.nvidia.com").hash()
    assert not C.GPURequest().wants_gpu


def test_allocation_readers() -> None:
    claim = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"}
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
                    ]
                },
            },
            "reservedFor": [{"resource": "pods", "name": "gpu-holder-a", "uid": "1"}],
        }
    }
    assert C.allocated_node(claim) == "n1"
    assert C.allocated_devices(claim) == [("gpu.nvidia.com", "n1", "gpu-0")]
    assert C.reserved_for(claim) == ["gpu-holder-a"]
    assert C.allocated_node({}) is None


@pytest.mark.parametrize(
    "name", ["alice", "Ünïcødé.Üser@example.com", "a.b", "q" * 200, "o'brien", "-lead", "trail-", ""]
)
def test_label_values_are_valid_for_any_name(name: str) -> None:
    import re

    v = L.label_value(name)
    assert len(v) <= 63
    assert re.fullmatch(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?", v), v


def test_similar_names_get_different_label_values() -> None:
    assert L.label_value("a.b") != L.label_value("a-b")
    assert L.label_value("q" * 200) != L.label_value("q" * 199)


def test_owned_by_needs_the_exact_user_and_server() -> None:
    md = {
        "labels": {L.MANAGED_BY: "gpusessions"},
        "annotations": {L.USER_ANNOTATION: "a.b", L.SERVER_ANNOTATION: ""},
    }
    assert L.owned_by(md, "a.b", "")
    assert not L.owned_by(md, "a-b", "")
    assert not L.owned_by(md, "a.b", "exp1")
    assert not L.owned_by({"labels": {}, "annotations": md["annotations"]}, "a.b", "")


def test_the_agents_sampling_interval_reaches_the_holder_only_when_set() -> None:
    plain = C.HolderSettings(image="h:1", resources={})
    env = C.build_holder_pod("h", "ns", "c", plain, "alice", "")["spec"]["containers"][0]["env"]
    assert "GPUSESSIONS_AGENT_INTERVAL" not in {e["name"] for e in env}  # the agent's own 2 s
    fast = C.HolderSettings(image="h:1", resources={}, agent_interval=0.25)
    pod = C.build_holder_pod("h", "ns", "c", fast, "alice", "")
    _validate(pod)
    env = pod["spec"]["containers"][0]["env"]
    assert {"name": "GPUSESSIONS_AGENT_INTERVAL", "value": "0.25"} in env
