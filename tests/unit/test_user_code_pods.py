"""Every pod that runs user code gets the notebook pod's sandbox: the holder with kernels and a
notebook job's pods get z2jh's block-cloud-metadata init container as the notebook pod does, and
a job runs non-root with the notebook's security context (pure builders and the spawner's glue;
the pods validated against strict Kubernetes 1.35 schemas)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client
from traitlets.config import Config

import kubeschemas
from gpusessions.core import jobs as J
from gpusessions.core import queues as Q
from gpusessions.core.claims import GPURequest, build_holder_pod
from gpusessions.hub.jobs import NotebookJobs, settings_for
from gpusessions.hub.spawner import GPUSessionSpawner


def _z2jh_config() -> Config:
    """The notebook settings z2jh 4.4's hub config makes by default (singleuser.uid, fsGid,
    cloudMetadata.blockWithIptables: its jupyterhub_config.py appends a V1Container)."""
    c = Config()
    c.KubeSpawner.uid = 1000
    c.KubeSpawner.fs_gid = 100
    c.KubeSpawner.init_containers = [
        client.V1Container(
            name="block-cloud-metadata",
            image="quay.io/jupyterhub/k8s-network-tools:4.4.0",
            command=[
                "iptables",
                "--append",
                "OUTPUT",
                "--protocol",
                "tcp",
                "--destination",
                "169.254.169.254",
                "--destination-port",
                "80",
                "--jump",
                "DROP",
            ],
            security_context=client.V1SecurityContext(
                privileged=True, run_as_user=0, capabilities=client.V1Capabilities(add=["NET_ADMIN"])
            ),
        ),
        {"name": "fetch-dotfiles", "image": "busybox"},  # not for user code beside the notebook
    ]
    return c


def _effective(pod: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    return {**pod.get("securityContext", {}), **c.get("securityContext", {})}


@pytest.mark.usefixtures("kubeconfig")
def test_a_holder_with_kernels_gets_the_metadata_block_and_one_without_does_not() -> None:
    async def build() -> tuple[Any, ...]:
        spawner = GPUSessionSpawner(_mock=True, config=_z2jh_config())
        off = Config(_z2jh_config())
        off.GPUSessionSpawner.user_code_init_containers = []
        return (
            spawner._holder_settings(),
            spawner._kernel_settings(),
            GPUSessionSpawner(_mock=True)._kernel_settings(),
            GPUSessionSpawner(_mock=True, config=off)._kernel_settings(),
        )

    holder, kernels, plain, off = asyncio.run(build())
    with_kernels = build_holder_pod("h", "ns", "c", holder, "ann", "", kernels=kernels)
    kubeschemas.validate(with_kernels)
    spec = with_kernels["spec"]
    (init,) = spec["initContainers"]
    assert init["name"] == "block-cloud-metadata" and "169.254.169.254" in init["command"]
    assert init["securityContext"] == {
        "privileged": True,
        "runAsUser": 0,
        "capabilities": {"add": ["NET_ADMIN"]},
    }
    # The pod-wide runAsNonRoot would refuse that root init container; ours each say it.
    assert "runAsNonRoot" not in spec["securityContext"]
    for c in spec["containers"]:
        assert _effective(spec, c)["runAsNonRoot"] is True, c["name"]
    bare = build_holder_pod("h", "ns", "c", holder, "ann", "")
    assert "initContainers" not in bare["spec"], "no user code in a holder without kernels"
    assert bare["spec"]["securityContext"]["runAsNonRoot"] is True
    # None to copy (not z2jh, or the setting empty): the holder is as before.
    assert plain.init_containers == () and off.init_containers == ()


@pytest.mark.usefixtures("kubeconfig")
def test_a_jobs_pod_runs_non_root_with_the_notebooks_context_and_the_metadata_block() -> None:
    async def build(c: Config) -> J.JobSettings:
        hub = GPUSessionSpawner(_mock=True, config=c)
        return settings_for(hub, NotebookJobs(), None, None, Q.QueuePolicy.of(hub))

    settings = asyncio.run(build(_z2jh_config()))
    req = J.check_request({"name": "t", "input": "t.ipynb", "size": "x"})
    job = J.build_job("abc123def456", "ns", "ann", req, settings, GPURequest("gpu.nvidia.com"), "H100")
    kubeschemas.validate(job)
    pod = job["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    # The notebook's: GPUSessionSpawner's default container_security_context, uid, fs_gid.
    assert ctr["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
        "runAsUser": 1000,
    }
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": 100}
    assert [c["name"] for c in pod["initContainers"]] == ["block-cloud-metadata"]
    # An admin's own context wins, as on the notebook pod; the floor stays where it says nothing.
    c = _z2jh_config()
    c.KubeSpawner.container_security_context = {"readOnlyRootFilesystem": True}
    c.KubeSpawner.pod_security_context = {"supplementalGroups": [5]}
    c.KubeSpawner.gid = 100
    s = asyncio.run(build(c))
    assert s.security.container_context() == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsUser": 1000,
        "runAsGroup": 100,
        "readOnlyRootFilesystem": True,
    }
    assert s.security.pod_context()["supplementalGroups"] == [5]
    # Without z2jh's init container there is none to copy.
    assert (
        "initContainers"
        not in J.build_job("abc123def456", "ns", "ann", req, J.JobSettings(image="x"), None)["spec"][
            "template"
        ]["spec"]
    )
