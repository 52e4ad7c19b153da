"""QueuePolicy: every decision about the scheduler's queues, in one place (pure)."""

from __future__ import annotations

import asyncio
from fractions import Fraction
from types import SimpleNamespace

import pytest

from gpusessions.core import queues as Q
from gpusessions.core.availability import Inventory
from gpusessions.core.claims import GPURequest
from gpusessions.core.progress import Refused
from gpusessions.core.sizes import size_selectors
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import build_slices, device_classes, load_shape

CLASSES = {dc["metadata"]["name"]: dc for dc in device_classes()}
INV = Inventory.from_slices([s for n in load_shape("small", SHAPES_DIR).nodes for s in build_slices(n)])
ONE_G = GPURequest("mig.nvidia.com", 1, size_selectors({"attributes": {"profile": "1g.10gb"}}))
THREE_G = GPURequest("mig.nvidia.com", 1, size_selectors({"attributes": {"profile": "3g.40gb"}}))
POLICY = Q.QueuePolicy(
    queues={"physics": "team-a", "biology": "team-b"}, default_queue="", gpu_quota={"team-a": 0.5}
)


def claim(name: str, queue: str, device: str) -> dict:
    result = {"driver": "gpu.nvidia.com", "pool": "gpu-node-0", "device": device}
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": {"kai.scheduler/queue": queue}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_the_policy_is_read_from_the_spawner_settings() -> None:
    spawner = SimpleNamespace(
        kai_queue="team-a",
        kai_default_queue="",
        kai_scheduler_name="kai-scheduler",
        kai_priority_class="build-preemptible",
        kai_gpu_quota={"team-a": 2},
    )
    policy = Q.QueuePolicy.of(spawner)
    assert policy.enabled and policy.priority_class == "build-preemptible" and policy.limit("team-a") == 2.0
    assert not Q.QueuePolicy.of(SimpleNamespace()).enabled, "a spawner without kai_* settings: no queues"


def test_queue_of_resolves_and_refuses_with_reasons() -> None:
    run = asyncio.run
    assert run(Q.QueuePolicy().queue_of(None, ["physics"])) is None, "no queues configured"
    assert run(POLICY.queue_of(None, ["biology", "physics"])) == "team-a"
    with pytest.raises(Refused) as e:
        run(POLICY.queue_of(None, ["art"]))
    assert e.value.reason == "no-queue" and "(your groups: art)" in e.value.message
    with pytest.raises(Refused) as e:
        run(POLICY.queue_of(None, []))
    assert "(you are in no group)" in e.value.message
    with pytest.raises(Refused) as e:
        run(Q.QueuePolicy(queues="not a label!").queue_of(None, []))
    assert e.value.reason == "invalid-queue"
    assert run(Q.QueuePolicy(queues={"x": "y"}, default_queue="shared").queue_of(None, [])) == "shared"


def test_the_picker_sees_no_team_without_raising() -> None:
    run = asyncio.run
    assert run(Q.QueuePolicy().team_of(None, [])) is None

    def broken(spawner: object) -> str:
        raise RuntimeError("directory down")

    assert run(Q.QueuePolicy(queues=broken).team_of(None, [])) is None, "a failing setting: no team shown"
    assert run(POLICY.team_of(None, ["art"])) == Q.Team(None)
    assert run(POLICY.team_of(None, ["physics"])) == Q.Team("team-a", None, 0.5)
    assert Q.Team(None).figure(Fraction(1)) == Q.NO_TEAM
    unknown = Q.Team("team-a", None, 0.5).figure(Fraction(1))
    assert unknown["text"] == "Team team-a: GPU use unknown right now." and unknown["limit"] == 0.5


def test_labels_and_pod_scheduling_fields() -> None:
    assert POLICY.labels("team-a") == {"kai.scheduler/queue": "team-a"}
    assert POLICY.labels(None) == {} and POLICY.scheduling(None) is None
    assert POLICY.scheduling("team-a") == Q.Scheduling(
        "kai-scheduler", "build", {"kai.scheduler/queue": "team-a"}
    )
    assert Q.QueuePolicy(queues="q", priority_class="").scheduling("q") == Q.Scheduling(
        "kai-scheduler", None, {"kai.scheduler/queue": "q"}
    ), "no priority class: the field is left out"


def test_admit_charges_in_gpu_equivalents_and_refuses_past_the_quota() -> None:
    claims = [claim("a", "team-a", "gpu-0-mig-1g10gb-19-2"), claim("b", "team-b", "gpu-1")]
    one = POLICY.charge(ONE_G, INV, CLASSES)
    three = POLICY.charge(THREE_G, INV, CLASSES)
    assert (one, three) == (Fraction(1, 7), Fraction(3, 7))
    assert POLICY.claim_annotations(three) == {Q.EQUIVALENTS_ANNOTATION: "3/7"}
    POLICY.admit("team-a", ONE_G, one, claims, INV)  # 1/7 + 1/7 <= 0.5
    with pytest.raises(Refused) as e:
        POLICY.admit("team-a", THREE_G, three, claims, INV)  # 1/7 + 3/7 > 0.5
    assert e.value.reason == "team-quota" and "MIG 3g.40gb (0.43 GPU) would pass that" in e.value.message
    POLICY.admit("team-a", THREE_G, three, claims, INV, exclude=("ns", "a"))  # the claim being replaced
    POLICY.admit("team-b", THREE_G, Fraction(7), claims, INV)  # no quota for team-b


def test_the_team_counted_for_the_picker_does_not_count_the_users_own_claim_twice() -> None:
    mine = claim("a", "team-a", "gpu-0-mig-3g40gb-9-4")
    claims = [mine, claim("b", "team-a", "gpu-0-mig-1g10gb-19-2")]
    team = POLICY.counted(Q.Team("team-a", None, 0.6), claims, INV, mine)
    assert team.use is not None and team.use.used == Fraction(4, 7) and team.own == Fraction(3, 7)
    f = team.figure(Fraction(3, 7))
    assert not f["exceeds"], "a restart reuses the user's own claim: 1/7 + 3/7 fits in 0.6"
    assert POLICY.counted(Q.Team("team-a", None, 0.6), claims, INV, None).figure(Fraction(3, 7))["exceeds"]
    other = claim("c", "team-b", "gpu-1")
    assert POLICY.counted(Q.Team("team-a", None, 0.5), claims, INV, other).own == 0, "not in this queue"
    assert POLICY.counted(Q.Team(None), claims, INV, mine) == Q.Team(None)


def kai_queue_obj(quota: float, limit: float, allocated: dict | None) -> dict:
    q: dict = {
        "metadata": {"name": "team-a"},
        "spec": {"resources": {"gpu": {"quota": quota, "limit": limit, "overQuotaWeight": 1}}},
    }
    if allocated is not None:
        q["status"] = {"allocated": allocated}
    return q


def test_kais_queue_figures_are_read_from_its_spec_and_status() -> None:
    # KAI lists DRA GPUs under their device class (a name with "gpu") and device-plugin GPUs as
    # nvidia.com/gpu; CPU, memory and classes without "gpu" (mig.nvidia.com) are no GPUs to it.
    q = Q.KaiQueue.of(
        kai_queue_obj(
            2,
            4,
            {
                "gpu.nvidia.com": "1",
                "gpusessions-mig-1g-10gb": "1",
                "nvidia.com/gpu": "500m",
                "mig.nvidia.com": "3",
                "cpu": "2",
                "memory": "1Gi",
            },
        )
    )
    assert (q.name, q.quota, q.limit, q.allocated) == ("team-a", 2.0, 4.0, Fraction(5, 2))
    assert q.text() == "Team team-a: 2.50 of 4 GPUs in use (KAI queue: 2 deserved)."
    assert Q.KaiQueue.of(kai_queue_obj(-1, -1, {})).text() == (
        "Team team-a: 0 GPUs in use (KAI queue: no fixed share, no limit)."
    )
    # A queue that never held anything has no status: nothing allocated.
    fresh = Q.KaiQueue.of(kai_queue_obj(1, 1, None))
    assert fresh.allocated == 0 and fresh.text() == "Team team-a: 0 of 1 GPUs in use (KAI queue: 1 deserved)."


def test_the_team_line_comes_from_kai_where_its_queue_exists() -> None:
    kai = Q.KaiQueue.of(kai_queue_obj(2, 4, {"gpu.nvidia.com": "1"}))
    use = Q.TeamUse("team-a", Fraction(1, 7), 1)
    fig = Q.Team("team-a", use, 0.5, kai=kai).figure(Fraction(3, 7))
    assert fig["text"] == (
        "Team team-a: 1 of 4 GPUs in use (KAI queue: 2 deserved). "
        "MIG quota: 0.14 of 0.50 GPU-equivalents (1g.10gb counts 1/7)."
    )
    assert fig["kai"] == {"queue": "team-a", "quota": 2.0, "limit": 4.0, "allocated": 1.0}
    # The hub's own quota check is unchanged (what the spawner refuses).
    assert fig["exceeds"] and fig["used"] == float(Fraction(1, 7)) and fig["limit"] == 0.5
    # Without a KAI Queue (a cluster without KAI), the hub's own count, as before.
    plain = Q.Team("team-a", use, 0.5).figure(Fraction(3, 7))
    assert plain["text"] == "Team team-a: 0.14 of 0.50 GPUs in use." and plain["kai"] is None
    # Not counted yet, KAI's figures still show.
    assert Q.Team("team-a", None, None, kai=kai).figure(Fraction(1))["text"] == kai.text()
