"""Team queues on the local cluster: labels, priority, refusals and the GPU-equivalent quota,
with holder and notebook pods scheduled by the cluster's real KAI Scheduler (team-a and team-b
are KAI Queues under one parent, made here; team-c has no KAI Queue: the picker's line for it is
the hub's own count, as on a cluster without KAI)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import waits
from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI

from .hubtools import (
    GPU_HUB_CONFIG,
    availability,
    gpu_objects,
    logged_in,
    progress_messages,
    spawn,
    start,
    stop,
    user_token,
)
from .kaitools import make_queues, queue

pytestmark = pytest.mark.cluster

QUEUES = """
c.GPUSessionSpawner.kai_queue = {"physics": "team-a", "biology": "team-b", "chemistry": "team-c"}
c.GPUSessionSpawner.kai_gpu_quota = {"team-a": 0.5}
c.JupyterHub.load_groups = {
    "physics": {"users": ["ann", "bo"]},
    "biology": {"users": ["cy"]},
    "chemistry": {"users": ["di"]},
}
"""


# KAI's GPU quota of a team: MIG devices (class mig.nvidia.com) cost nothing in KAI's eyes; a
# whole GPU shared by holder and notebook needs 2 when KAI admits the notebook (its scheduler
# charges the notebook again, docs/queues.md), and counts 1 in the Queue's status once both run.
KAI_QUEUES = [
    queue("research", 4, -1),
    queue("team-a", 2, 2, parent="research"),
    queue("team-b", 2, 2, parent="research"),
]


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    for _ in make_queues(api, KAI_QUEUES):
        h = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + QUEUES, tmp_path / "hub")
        yield h
        h.stop()


def refusal(hub: Hub, user: str, options: dict) -> str:
    code, body = start(hub, user, options)
    if code == 400:
        return str(body["message"])
    return progress_messages(hub, user)[-1]


def queue_of(api: KubeAPI, namespace: str, claim: str) -> str | None:
    return api.get("ResourceClaim", claim, namespace)["metadata"].get("labels", {}).get("kai.scheduler/queue")


def owned(api: KubeAPI, namespace: str, user: str) -> list[dict]:
    return [
        o
        for objs in gpu_objects(api, namespace).values()
        for o in objs
        if (o["metadata"].get("annotations") or {}).get("gpusessions.io/user") == user
    ]


def test_sessions_go_to_their_team_queue_and_the_quota_counts_mig_slices(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "ann", {"profile": "mig-1g-10gb"})
    claim = api.get("ResourceClaim", "gpu-ann", namespace)
    assert claim["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert claim["metadata"]["annotations"]["gpusessions.io/gpu-equivalents"] == "1/7"
    for pod in ("gpu-holder-ann", "jupyter-ann"):
        p = api.get("Pod", pod, namespace)
        assert p["metadata"]["labels"]["kai.scheduler/queue"] == "team-a", pod
        assert p["spec"]["priorityClassName"] == "build" and p["spec"]["priority"] == 100, pod
        assert p["spec"]["schedulerName"] == "kai-scheduler", pod
        assert p["metadata"]["annotations"].get("pod-group-name"), pod  # KAI's podgrouper took it

    # team-a holds 1/7; a 3g.40gb (3/7) would bring it to 4/7 > 0.5: refused, nothing made.
    msg = refusal(hub, "bo", {"profile": "mig-3g-40gb"})
    assert "Your team's queue team-a may hold 0.50 GPU" in msg, msg
    assert "1 session(s) hold 0.14 GPU now" in msg and "MIG 3g.40gb (0.43 GPU)" in msg
    assert owned(api, namespace, "bo") == []
    spawn(hub, "bo", {"profile": "mig-1g-10gb"})  # 2/7 fits

    # Another team has no such limit; a user in no team is refused, not sent to default-queue.
    spawn(hub, "cy", {"profile": "mig-3g-40gb"})
    assert (
        api.get("ResourceClaim", "gpu-cy", namespace)["metadata"]["labels"]["kai.scheduler/queue"] == "team-b"
    )
    msg = refusal(hub, "eve", {"profile": "cpu"})
    assert "You are in no team with a GPU queue (you are in no group)" in msg, msg
    assert api.get_or_none("Pod", "jupyter-eve", namespace) is None

    # A user cannot pick a queue: it is not an option.
    code, body = start(hub, "bo", {"profile": "mig-1g-10gb", "queue": "team-b"}, server="other")
    assert code == 400 and "Unknown option(s) for profile 'mig-1g-10gb': queue" in body["message"]


def test_a_kept_claim_without_its_queue_label_is_put_back_in_the_queue(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "ann", {"profile": "mig-1g-10gb"})
    stop(hub, "ann")
    api.patch("ResourceClaim", "gpu-ann", {"metadata": {"labels": {"kai.scheduler/queue": None}}}, namespace)
    spawn(hub, "ann", {"profile": "mig-1g-10gb"})
    assert (
        api.get("ResourceClaim", "gpu-ann", namespace)["metadata"]["labels"]["kai.scheduler/queue"]
        == "team-a"
    )


def team_figures(hub: Hub, token: str, sessions: int) -> dict[str, dict]:
    """The picker's queue figures per size once its watch has seen `sessions` claims of the team."""

    def caught_up() -> dict[str, dict] | None:
        body = availability(hub, token)
        figures = {p["slug"]: p["queue"] for p in body["profiles"]}
        return figures if figures["cpu"] and figures["cpu"]["sessions"] == sessions else None

    return waits.wait_for(caught_up, 20, f"the picker to see {sessions} session(s) of the team")


def test_the_picker_shows_the_teams_use_and_limit(hub: Hub, api: KubeAPI, namespace: str) -> None:
    bo = user_token(hub, "bo")
    q = team_figures(hub, bo, 0)
    assert q["mig-1g-10gb"]["name"] == "team-a" and q["mig-1g-10gb"]["limit"] == 0.5
    # The line: KAI's Queue team-a (2 deserved, limit 2; MIG devices cost it nothing), then the
    # hub's own MIG quota in GPU-equivalents.
    assert q["mig-1g-10gb"]["text"] == (
        "Team team-a: 0 of 2 GPUs in use (KAI queue: 2 deserved). "
        "MIG quota: 0 of 0.50 GPU-equivalents (1g.10gb counts 1/7)."
    )
    assert not q["mig-3g-40gb"]["exceeds"]  # 3/7 fits in 0.5
    assert q["gpu"]["exceeds"] and "would pass its limit of 0.50 GPU" in q["gpu"]["note"]

    spawn(hub, "ann", {"profile": "mig-1g-10gb"})
    # A colleague of the same team sees ann's slice counted: 1/7 in use, so a 3g.40gb (3/7) would pass.
    q = team_figures(hub, bo, 1)
    one, three = q["mig-1g-10gb"], q["mig-3g-40gb"]
    assert one["text"] == (
        "Team team-a: 0 of 2 GPUs in use (KAI queue: 2 deserved). "
        "MIG quota: 0.14 of 0.50 GPU-equivalents (1g.10gb counts 1/7)."
    )
    assert one["sessions"] == 1
    assert abs(one["used"] - 1 / 7) < 1e-9 and one["size"] == pytest.approx(1 / 7)
    assert not one["exceeds"] and one["note"] == ""
    assert three["exceeds"] and three["size"] == pytest.approx(3 / 7)
    assert "This size counts 0.43 GPU" in three["note"] and "refused" in three["note"]
    # ... and the spawner refuses what the picker says would pass the limit.
    assert "may hold 0.50 GPU" in refusal(hub, "bo", {"profile": "mig-3g-40gb"})

    # The form says it in plain words, on the size it concerns.
    page = logged_in(hub, "bo").open(hub.url + "/hub/spawn/bo", timeout=30).read().decode()
    assert (
        "MIG quota: 0.14 of 0.50 GPU-equivalents" in page
        and "KAI Scheduler's figures for your team's queue" in page
    )
    note = re.search(r'id="gs-team-mig-3g-40gb"[^>]*data-exceeds="true">([^<]*)<', page)
    assert note and "would pass its limit" in note.group(1), page[:3000]
    assert re.search(r'id="gs-team-mig-1g-10gb"[^>]*data-exceeds="false"></div>', page)

    # Another team's user sees their own team, which has no limit; ann herself is not refused a
    # restart on her kept claim, and the picker does not count it twice for her.
    cy = team_figures(hub, user_token(hub, "cy"), 0)
    assert cy["gpu"]["text"] == "Team team-b: 0 of 2 GPUs in use (KAI queue: 2 deserved)."
    assert not cy["gpu"]["exceeds"]
    # A team without a KAI Queue: the hub's own count, as on a cluster without KAI.
    di = team_figures(hub, user_token(hub, "di"), 0)
    assert di["gpu"]["text"] == "Team team-c: 0 GPUs in use (no team limit)." and di["gpu"]["kai"] is None
    ann = team_figures(hub, user_token(hub, "ann"), 1)
    assert ann["mig-3g-40gb"]["text"] == one["text"] and not ann["mig-3g-40gb"]["exceeds"]
    # A user in no team is told so, and there is no figure to show.
    eve = availability(hub, user_token(hub, "eve"))["profiles"][0]["queue"]
    assert eve["name"] is None and "You are in no team with a GPU queue" in eve["text"]


def test_the_team_line_is_kais_queue_spec_and_status(hub: Hub, api: KubeAPI, namespace: str) -> None:
    """The picker reads KAI's Queue (not a guess): a whole GPU shows as KAI's allocation, and an
    edit of the Queue's spec shows on the next view."""
    cy = user_token(hub, "cy")

    def line(text: str) -> dict:
        def now() -> dict | None:
            q = availability(hub, cy)["profiles"][0]["queue"]
            return q if q["text"] == text else None

        last = lambda: f"the picker says: {availability(hub, cy)['profiles'][0]['queue']}"  # noqa: E731
        return waits.wait_for(now, 20, f"the picker to say {text!r}", explain=last)

    line("Team team-b: 0 of 2 GPUs in use (KAI queue: 2 deserved).")
    spawn(hub, "cy", {"profile": "gpu"})
    # KAI's queuecontroller sums the PodGroups: holder and notebook share the claim, counted once.
    q = line("Team team-b: 1 of 2 GPUs in use (KAI queue: 2 deserved).")
    assert q["kai"] == {"queue": "team-b", "quota": 2.0, "limit": 2.0, "allocated": 1.0}
    assert api.get("Queue", "team-b")["status"]["allocated"]["gpu.nvidia.com"] == "1"
    # The admin gives team-b more: the picker shows KAI's new spec.
    api.patch("Queue", "team-b", {"spec": {"resources": {"gpu": {"quota": 3, "limit": 5}}}})
    q = line("Team team-b: 1 of 5 GPUs in use (KAI queue: 3 deserved).")
    assert q["kai"]["limit"] == 5.0
    api.patch("Queue", "team-b", {"spec": {"resources": {"gpu": {"quota": 2, "limit": -1}}}})
    line("Team team-b: 1 GPUs in use (KAI queue: 2 deserved, no limit).")
    stop(hub, "cy")
