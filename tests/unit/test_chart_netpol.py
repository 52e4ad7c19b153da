"""One sandbox for all user code: every pod that runs it (the notebook, a holder with kernels,
a notebook job's pods) is under an egress policy at least as strict as Zero to JupyterHub 4.4's
singleuser one, with the same knobs; a holder's kernel gateway and GPU agent admit only their
own session's notebook (and the culler, to the agent). The rendered chart and the objects the
spawner and the jobs code build, compared destination by destination (the local cluster does
not enforce NetworkPolicy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

import kubeschemas
from gpusessions.core import jobdefs as D
from gpusessions.core import jobs as J
from gpusessions.core import kernels as K
from gpusessions.core.claims import GPURequest, HolderSettings, build_holder_pod
from helmtools import Z2JH_VALUES, HelmError, by_kind, template
from netpoltools import (
    METADATA_IP,
    Dest,
    egress_allowed,
    ingress_allowed,
    policies_for,
    policy,
    z2jh_singleuser_egress,
)

from .jobsamples import MIG, SETTINGS

NS = "jhub"
Z2JH_RELEASE = "jhub"


def _claim(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}"}}


def _holder(claim: str, user: str, kernels: bool = True) -> dict[str, Any]:
    ks = K.KernelSettings(image="nb:1", secret="s") if kernels else None
    return build_holder_pod(
        f"gpu-holder-{user}", NS, claim, HolderSettings("holder:1", {}), user, "", kernels=ks
    )


def _notebook_labels(claim: str) -> dict[str, str]:
    """A notebook pod's labels: z2jh's (KubeSpawner's, via its config) and ours."""
    return {
        "app": "jupyterhub",
        "release": Z2JH_RELEASE,
        "component": "singleuser-server",
        "hub.jupyter.org/network-access-hub": "true",
        "gpusessions.io/claim": claim,
        "gpusessions.io/component": "notebook",
    }


def _job_pod_labels() -> list[dict[str, str]]:
    req = J.check_request({"name": "t", "input": "t.ipynb", "size": "x"})
    job = J.build_job("abc123def456", NS, "ann", req, SETTINGS, GPURequest("gpu.nvidia.com"), "H100")
    d = D.check_definition(
        {"name": "n", "input": "t.ipynb", "size": "x", "schedule": "0 3 * * *"}, J.Limits(), 15
    )
    cj = D.build_cronjob("abc123def456", NS, "ann", d, SETTINGS, MIG, "MIG")
    return [
        job["spec"]["template"]["metadata"]["labels"],
        cj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"],
    ]


def _z2jh_singleuser(allow: dict[str, Any] | None = None, extra: list[Any] | None = None) -> dict[str, Any]:
    selector = {"app": "jupyterhub", "release": Z2JH_RELEASE, "component": "singleuser-server"}
    return policy("singleuser", selector, z2jh_singleuser_egress(Z2JH_RELEASE, allow, extra))


KUBE_DNS = {"k8s-app": "kube-dns"}
DESTS = [
    Dest(METADATA_IP, 80),
    Dest(METADATA_IP, 443),
    Dest(METADATA_IP, 53, "UDP"),
    Dest("10.96.0.10", 53, "UDP"),
    Dest("10.0.0.1", 443),
    Dest("172.20.0.5", 6443),
    Dest("192.168.1.1", 22),
    Dest("8.8.8.8", 443),
    Dest("1.1.1.1", 53, "UDP"),
    Dest("100.64.0.1", 80),
    Dest("10.1.0.3", 53, "UDP", KUBE_DNS, "kube-system"),
    Dest("10.1.0.3", 443, "TCP", KUBE_DNS, "kube-system"),
    Dest("10.1.0.5", 8081, "TCP", {"app": "jupyterhub", "release": Z2JH_RELEASE, "component": "hub"}),
    Dest("10.1.0.7", 5432, "TCP", {"app": "db"}),
    Dest("10.1.0.9", 8888, "TCP", _holder("gpu-bob", "bob")["metadata"]["labels"]),
]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return template(tmp_path_factory.mktemp("chart"), namespace=NS)


def _user_code_pods() -> dict[str, dict[str, str]]:
    jobs = _job_pod_labels()
    return {
        "holder with kernels": _holder("gpu-ann", "ann")["metadata"]["labels"],
        "holder without kernels": _holder("gpu-ann", "ann", kernels=False)["metadata"]["labels"],
        "job pod": jobs[0],
        "scheduled job pod": jobs[1],
    }


def test_every_pod_running_user_code_is_as_strict_as_z2jhs_notebooks(rendered: list[dict[str, Any]]) -> None:
    ours = by_kind(rendered, "NetworkPolicy")
    for p in ours:
        kubeschemas.validate(p)
    singleuser = [_z2jh_singleuser()]
    notebook = _notebook_labels("gpu-ann")
    for name, labels in _user_code_pods().items():
        assert policies_for(ours, labels, "Egress"), f"{name}: no egress policy selects it"
        for dest in DESTS:
            mine = egress_allowed(ours, labels, dest)
            theirs = egress_allowed(singleuser, notebook, dest)
            assert not mine or theirs, f"{name} may reach {dest}, z2jh's notebooks may not"
            if not dest.labels:  # an address: the same answer as the notebook's, not only stricter
                assert mine == theirs, f"{name} -> {dest}: {mine}, a notebook: {theirs}"
        assert not egress_allowed(ours, labels, Dest(METADATA_IP, 80)), name
        assert not egress_allowed(ours, labels, Dest("10.0.0.1", 443)), name
    # The notebook pod itself: z2jh's policy, and the egress our z2jh values add (its holders).
    assert egress_allowed(singleuser, notebook, Dest("8.8.8.8", 443))
    assert not egress_allowed(singleuser, notebook, Dest(METADATA_IP, 80))


@pytest.mark.parametrize(
    "allow",
    [
        {"privateIPs": True},
        {"cloudMetadataServer": True, "dnsPortsPrivateIPs": False},
        {"nonPrivateIPs": False, "dnsPortsKubeSystemNamespace": False, "dnsPortsCloudMetadataServer": False},
    ],
)
def test_the_knobs_are_z2jhs(tmp_path: Path, allow: dict[str, bool]) -> None:
    extra = [{"to": [{"ipBlock": {"cidr": "10.5.0.0/16"}}], "ports": [{"port": 5432, "protocol": "TCP"}]}]
    values = {"networkPolicy": {"egressAllowRules": allow, "egress": extra}}
    ours = by_kind(template(tmp_path, values, namespace=NS), "NetworkPolicy")
    singleuser = [_z2jh_singleuser(allow, extra)]
    dests = [*DESTS, Dest("10.5.1.1", 5432), Dest("10.5.1.1", 5433)]
    for name, labels in _user_code_pods().items():
        for dest in dests:
            mine = egress_allowed(ours, labels, dest)
            theirs = egress_allowed(singleuser, _notebook_labels("gpu-ann"), dest)
            assert not mine or theirs, f"{allow}: {name} may reach {dest}, a notebook may not"
            if not dest.labels:
                assert mine == theirs, f"{allow}: {name} -> {dest}: {mine}, a notebook: {theirs}"


def test_a_notebook_reaches_its_own_holder_and_nothing_of_other_sessions(
    rendered: list[dict[str, Any]],
) -> None:
    z2jh_values = yaml.safe_load(Z2JH_VALUES.read_text())
    extra = z2jh_values["singleuser"]["networkPolicy"]["egress"]
    policies = [
        *by_kind(rendered, "NetworkPolicy"),
        _z2jh_singleuser(extra=extra),
        # The hub's per-session policies (hub/kernelhost.py) of two sessions.
        K.build_network_policy("gpu-holder-ann-kernels", NS, _claim("gpu-ann"), 8888, 9400, "ann", ""),
        K.build_network_policy("gpu-holder-bob-kernels", NS, _claim("gpu-bob"), 8888, 9400, "bob", ""),
    ]
    ann_nb = Dest("10.1.1.1", 0, labels=_notebook_labels("gpu-ann"))
    bob_nb = Dest("10.1.1.2", 0, labels=_notebook_labels("gpu-bob"))
    culler = Dest(
        "10.1.1.3",
        0,
        labels={
            "app.kubernetes.io/name": "gpusessions",
            "app.kubernetes.io/instance": "gs",
            "app.kubernetes.io/component": "culler",
        },
    )
    stranger = Dest("10.1.1.4", 0, labels={"app": "db"})
    ann_holder = _holder("gpu-ann", "ann")["metadata"]["labels"]
    job = _job_pod_labels()[0]

    def reach(src: Dest, labels: dict[str, str], port: int) -> bool:
        out = egress_allowed(policies, src.labels, Dest("10.2.0.1", port, labels=labels))
        return out and ingress_allowed(policies, labels, src, port)

    assert reach(ann_nb, ann_holder, 8888) and reach(ann_nb, ann_holder, 9400), "ann's own kernels and agent"
    assert not reach(bob_nb, ann_holder, 8888) and not reach(bob_nb, ann_holder, 9400), "bob: not ann's"
    assert reach(culler, ann_holder, 9400) and not reach(culler, ann_holder, 8888), "the culler: the agent"
    for port in (8888, 9400, 22):
        assert not reach(stranger, ann_holder, port), port
        assert not reach(ann_nb, job, port) and not reach(stranger, job, port), port
    # Without the chart's policy for holders without kernels, the culler still admitted alone.
    bare = _holder("gpu-cy", "cy", kernels=False)["metadata"]["labels"]
    assert reach(culler, bare, 9400) and not reach(ann_nb, bare, 9400)


def test_the_policies_can_be_left_to_the_cluster(tmp_path: Path) -> None:
    off = template(tmp_path, {"networkPolicy": {"enabled": False}}, namespace=NS)
    assert [p["metadata"]["name"] for p in by_kind(off, "NetworkPolicy")] == ["gpusessions-culler"]
    with pytest.raises(HelmError, match="allowAll"):
        template(tmp_path, {"networkPolicy": {"egressAllowRules": {"allowAll": True}}}, namespace=NS)
