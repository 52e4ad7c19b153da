"""KAI's Evict events read as a reclaim of a session (pure)."""

from __future__ import annotations

from gpusessions.core import reclaim

NS = "jhub"


def event(pod: str, ns: str = NS, when: str = "2026-12-01T03:00:00Z", reason: str = "Evict") -> dict:
    return {
        "reason": reason,
        "lastTimestamp": when,
        "message": f"Pod {ns}/{pod} was preempted by workload {ns}/pg-gpu-holder-ann-1234.\n"
        "team-b uses <GPU: 2, CPU: 0.01 (cores), memory: 0.033 (GB)> with a quota of <GPU: 0, CPU: "
        "Unlimited (cores), memory: Unlimited (GB)>, fair-share of <GPU: 2, CPU: 0.01 (cores), "
        "memory: 0.033 (GB)> and queue priority of <100>.",
    }


def test_an_evict_event_of_the_sessions_pod_names_the_workload() -> None:
    events = [event("gpu-holder-other"), event("gpu-holder-cy")]
    assert reclaim.evicted_by(events, NS, ["gpu-holder-cy", "jupyter-cy"]) == f"{NS}/pg-gpu-holder-ann-1234"


def test_other_pods_namespaces_reasons_and_older_events_do_not_count() -> None:
    pods = ["gpu-holder-cy", "jupyter-cy"]
    assert reclaim.evicted_by([event("gpu-holder-bo")], NS, pods) is None
    assert reclaim.evicted_by([event("jupyter-cy", ns="other")], NS, pods) is None
    assert reclaim.evicted_by([event("jupyter-cy", reason="Unschedulable")], NS, pods) is None
    since = 1796094000.0  # 2026-12-01T03:00:00Z is 1796094000
    assert reclaim.evicted_by([event("jupyter-cy")], NS, pods, since=since + 1) is None
    assert reclaim.evicted_by([event("jupyter-cy")], NS, pods, since=since - 1) is not None


def test_the_notice_names_the_queue_and_says_what_happened() -> None:
    text = reclaim.notice("team-b", f"{NS}/pg-gpu-holder-ann-1234")
    assert "your team's queue team-b was using GPUs beyond its share" in text
    assert "(pg-gpu-holder-ann-1234)" in text and "GPU released" in text
