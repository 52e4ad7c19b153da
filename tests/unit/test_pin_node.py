"""The notebook pod names its claim's node, so the scheduler looks at that node only."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio.client import ApiClient, V1Container, V1Pod, V1PodSpec

from gpusessions.core.notebook_pod import pin_to_node


def _pod(affinity: object = None) -> V1Pod:
    return V1Pod(spec=V1PodSpec(containers=[V1Container(name="notebook")], affinity=affinity))


def _required(pod: V1Pod) -> list[dict]:
    async def serialize() -> dict:
        async with ApiClient() as client:
            return client.sanitize_for_serialization(pod)  # type: ignore[no-any-return]

    body = asyncio.run(serialize())
    return body["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]


def test_a_pod_without_affinity_gets_one_term_with_the_node() -> None:
    pod = _pod()
    pin_to_node(pod, "gpu-0042")
    assert _required(pod) == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-0042"]}]}
    ]


def test_configured_terms_keep_their_conditions_and_each_gets_the_node() -> None:
    # KubeSpawner's node_affinity_required passes the configured terms through as dicts.
    from kubernetes_asyncio.client import V1Affinity, V1NodeAffinity, V1NodeSelector

    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
    ]
    pod = _pod(
        V1Affinity(
            node_affinity=V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=V1NodeSelector(node_selector_terms=terms)
            )
        )
    )
    pin_to_node(pod, "gpu-0007")
    got = _required(pod)
    assert [t["matchExpressions"][0]["values"] for t in got] == [["a"], ["b"]]
    assert all(
        t["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["gpu-0007"]}] for t in got
    )
