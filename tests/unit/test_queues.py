"""Team queues and the GPU-equivalent quota (pure)."""

from __future__ import annotations

import asyncio
from fractions import Fraction

from gpusessions.core import queues as Q
from gpusessions.core.availability import Inventory
from gpusessions.core.claims import Alternative, GPURequest
from gpusessions.core.sizes import size_selectors
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import build_slices, device_classes, load_shape

CLASSES = {dc["metadata"]["name"]: dc for dc in device_classes()}
INV = Inventory.from_slices([s for n in load_shape("small", SHAPES_DIR).nodes for s in build_slices(n)])


def mig(profile: str, count: int = 1) -> GPURequest:
    return GPURequest("mig.nvidia.com", count, size_selectors({"attributes": {"profile": profile}}))


def claim(name: str, queue: str | None, device: str | None = None, charged: str | None = None) -> dict:
    md: dict = {"name": name, "namespace": "ns", "labels": {}, "annotations": {}}
    if queue:
        md["labels"]["kai.scheduler/queue"] = queue
    if charged:
        md["annotations"][Q.EQUIVALENTS_ANNOTATION] = charged
    c: dict = {"metadata": md}
    if device:
        c["status"] = {
            "allocation": {
                "devices": {"results": [{"driver": "gpu.nvidia.com", "pool": "gpu-node-0", "device": device}]}
            }
        }
    return c


def test_resolve_a_name_a_group_mapping_a_callable_and_the_default() -> None:
    run = asyncio.run
    assert run(Q.resolve("team-a", None, [])) == "team-a"
    mapping = {"physics": "team-a", "biology": "team-b", "*": "shared"}
    assert run(Q.resolve(mapping, None, ["biology", "physics"])) == "team-a", "first in the mapping's order"
    assert run(Q.resolve(mapping, None, ["art"])) == "shared"
    assert run(Q.resolve({"physics": "team-a"}, None, ["art"])) is None
    assert run(Q.resolve({"physics": "team-a"}, None, ["art"], default="fallback")) == "fallback"
    assert run(Q.resolve(lambda sp: f"q-{sp}", "x", [])) == "q-x"

    async def lookup(sp: object) -> str | None:
        return None

    assert run(Q.resolve(lookup, None, [])) is None
    assert run(Q.resolve("", None, [])) is None


def test_equivalents_of_devices_and_requests() -> None:
    assert Q.device_equivalent(
        INV.by_key[("gpu.nvidia.com", "gpu-node-0", "gpu-0-mig-3g40gb-9-4")]
    ) == Fraction(3, 7)
    assert Q.device_equivalent(INV.by_key[("gpu.nvidia.com", "gpu-node-0", "gpu-1")]) == 1
    assert Q.request_equivalent(mig("1g.10gb"), INV, CLASSES) == Fraction(1, 7)
    assert Q.request_equivalent(mig("1g.10gb", count=2), INV, CLASSES) == Fraction(2, 7)
    assert Q.request_equivalent(GPURequest("gpu.nvidia.com"), INV, CLASSES) == 1
    first = GPURequest(
        first_available=(
            Alternative("mig.nvidia.com", 1, mig("1g.10gb").selectors),
            Alternative("mig.nvidia.com", 1, mig("3g.40gb").selectors),
        )
    )
    assert Q.request_equivalent(first, INV, CLASSES) == Fraction(3, 7), "the most it may take"
    weird = GPURequest("mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile.startsWith('1g')",))
    assert Q.request_equivalent(weird, INV, CLASSES) == 1, "unreadable CEL: charged a whole GPU"


def test_team_use_counts_allocated_devices_and_charges_pending_claims() -> None:
    claims = [
        claim("a", "team-a", "gpu-0-mig-3g40gb-9-4"),
        claim("b", "team-a", "gpu-0-mig-1g10gb-19-2"),
        claim("c", "team-a", charged="2/7"),  # waiting for its device
        claim("d", "team-b", "gpu-1"),
        claim("e", None, "gpu-0-mig-1g10gb-19-3"),
    ]
    use = Q.team_use(claims, "team-a", INV)
    assert (use.used, use.sessions) == (Fraction(6, 7), 3)
    assert Q.team_use(claims, "team-a", INV, exclude=("ns", "a")).used == Fraction(3, 7)
    assert Q.over_quota(use, 1, Fraction(1, 7), "MIG 1g.10gb") is None, "6/7 + 1/7 fits in 1"
    msg = Q.over_quota(use, 1, Fraction(3, 7), "MIG 3g.40gb")
    assert msg is not None
    assert msg.startswith("Your team's queue team-a may hold 1 GPU (a 1g.10gb slice counts 1/7)")
    assert "its 3 session(s) hold 0.86 GPU now" in msg and "MIG 3g.40gb (0.43 GPU)" in msg
