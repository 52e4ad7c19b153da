"""One placement for every pod of a profile (core/placement.py): a profile's node selector,
tolerations, affinity and pull secrets reach the session's holder pod, the notebook pod and the
profile's notebook jobs alike; the pods are validated against strict Kubernetes 1.35 schemas."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import kubeschemas
from gpusessions.core import jobs as J
from gpusessions.core import queues as Q
from gpusessions.core.claims import GPURequest, build_holder_pod
from gpusessions.core.placement import affinity_of, placement, pull_secrets
from gpusessions.hub.jobs import NotebookJobs, settings_for
from gpusessions.hub.spawner import GPUSessionSpawner

from .spawnertools import notebook_pod

NODE_TERM = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}
ANTI = {
    "weight": 10,
    "podAffinityTerm": {
        "labelSelector": {"matchLabels": {"component": "job"}},
        "topologyKey": "kubernetes.io/hostname",
    },
}
TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# A profile's placement, as a hub's profile_list gives it.
OVERRIDE: dict[str, Any] = {
    "node_selector": {"gpu": "h100"},
    "tolerations": [TOLERATION],
    "node_affinity_required": [NODE_TERM],
    "pod_anti_affinity_preferred": [ANTI],
    "image_pull_secrets": ["registry"],
}
PROFILE = {"slug": "h100", "display_name": "H100", "kubespawner_override": OVERRIDE}
AFFINITY = {
    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [NODE_TERM]}},
    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [ANTI]},
}
PLACED = {
    "nodeSelector": {"gpu": "h100"},
    "tolerations": [TOLERATION],
    "affinity": AFFINITY,
    "imagePullSecrets": [{"name": "registry"}],
}


def test_affinity_is_composed_as_kubespawner_composes_it() -> None:
    assert affinity_of(OVERRIDE.get) == AFFINITY
    assert affinity_of({}.get) is None
    both = affinity_of(
        {
            "pod_affinity_required": {"b": {"topologyKey": "b"}, "a": {"topologyKey": "a"}},
            "node_affinity_preferred": [{"weight": 1, "preference": NODE_TERM}],
        }.get
    )
    assert both == {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "a"}, {"topologyKey": "b"}]
        },
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": NODE_TERM}]
        },
    }
    assert placement(J.JobSettings(image="x")) == {}
    assert pull_secrets(["a", {"name": "b"}, {"name": ""}]) == ("a", "b")
    assert pull_secrets("legacy") == ("legacy",)


@pytest.mark.usefixtures("kubeconfig")
def test_a_profiles_placement_reaches_its_holder_notebook_and_job_pods() -> None:
    async def build() -> tuple[Any, J.JobSettings, J.JobSettings]:
        # The session: KubeSpawner applies the profile's override to the spawner at the start.
        session = GPUSessionSpawner(_mock=True, **OVERRIDE)
        holder = build_holder_pod("gpu-holder-ann", "ns", "gpu-ann", session._holder_settings(), "ann", "")
        # The profile's job: submitted later, through a spawner with the hub's settings only.
        hub = GPUSessionSpawner(_mock=True)
        job = settings_for(hub, NotebookJobs(), PROFILE, None, Q.QueuePolicy.of(hub))
        plain = settings_for(hub, NotebookJobs(), None, None, Q.QueuePolicy.of(hub))
        return holder, job, plain

    holder, settings, plain = asyncio.run(build())
    kubeschemas.validate(holder)
    assert {k: holder["spec"][k] for k in PLACED} == PLACED
    notebook = notebook_pod(None, **OVERRIDE)["spec"]
    assert notebook["nodeSelector"] == PLACED["nodeSelector"]
    assert notebook["tolerations"] == PLACED["tolerations"]
    assert notebook["affinity"]["podAntiAffinity"] == AFFINITY["podAntiAffinity"]
    (term,) = notebook["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"] == NODE_TERM["matchExpressions"]  # and the claim's node
    req = J.check_request({"name": "t", "input": "t.ipynb", "size": "h100"})
    job = J.build_job("abc123def456", "ns", "ann", req, settings, GPURequest("gpu.nvidia.com"), "H100")
    kubeschemas.validate(job)
    pod = job["spec"]["template"]["spec"]
    assert {k: pod[k] for k in PLACED} == PLACED
    # Without the profile, neither gets any of it.
    pod = J.build_job("abc123def456", "ns", "ann", req, plain, None)["spec"]["template"]["spec"]
    assert not set(PLACED) & set(pod)


@pytest.mark.usefixtures("kubeconfig")
def test_a_job_of_another_size_does_not_inherit_the_running_sessions_profile() -> None:
    """The hub builds a job through the user's spawner, on which KubeSpawner left the running
    session's profile (its overrides): a job of a size without those settings gets the hub's
    configured ones, not the session's."""
    from traitlets.config import Config

    async def build() -> J.JobSettings:
        c = Config()
        c.KubeSpawner.cpu_limit = 2.0
        c.KubeSpawner.environment = {"TEAM": "ml"}
        running = GPUSessionSpawner(_mock=True, config=c)
        # The session's profile, applied to the spawner as KubeSpawner applies it.
        for name, value in {**OVERRIDE, "image": "session:1", "cpu_limit": 16.0, "uid": 4242}.items():
            setattr(running, name, value)
        other = {"slug": "cpu", "display_name": "CPU", "kubespawner_override": {"mem_limit": "4G"}}
        return settings_for(running, NotebookJobs(), other, None, Q.QueuePolicy.of(running))

    s = asyncio.run(build())
    assert (s.node_selector, s.tolerations, s.affinity, s.image_pull_secrets) == ({}, (), None, ())
    assert s.image != "session:1" and s.security.uid != 4242
    assert s.resources == {"limits": {"cpu": "2.0", "memory": "4G"}}
    assert s.env.get("TEAM") == "ml"
