"""Pure builders for kernels hosted in the holder, and the agent's kernel view."""

from __future__ import annotations

from pathlib import Path

from gpusessions.agent.kernels import join, kernel_pids
from gpusessions.core import kernels as K
from gpusessions.core.claims import HolderSettings, build_holder_pod

CLAIM = {"metadata": {"name": "gpu-ann", "namespace": "ns", "uid": "u-1"}}


def settings(**kw: object) -> K.KernelSettings:
    base: dict[str, object] = {"image": "nb:1", "secret": K.secret_name("gpu-holder-ann")}
    base.update(kw)
    return K.KernelSettings(**base)  # type: ignore[arg-type]


def test_holder_with_kernels_runs_a_gateway_on_the_same_claim_without_its_token_in_the_spec() -> None:
    pod = build_holder_pod(
        "gpu-holder-ann", "ns", "gpu-ann", HolderSettings("holder:1", {}), "ann", "", kernels=settings()
    )
    holder, gw = pod["spec"]["containers"]
    assert gw["name"] == "kernels" and gw["image"] == "nb:1"
    assert gw["command"] == ["jupyter", "kernelgateway"]
    assert gw["resources"]["claims"] == holder["resources"]["claims"] == [{"name": "gpu"}]
    env = {e["name"]: e for e in gw["env"]}
    assert env["KG_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "gpu-holder-ann-kernels",
        "key": "token",
    }
    assert env["KG_LIST_KERNELS"]["value"] == "True"
    assert "NVIDIA_VISIBLE_DEVICES" in env["KG_ENV_PROCESS_WHITELIST"]["value"].split(",")
    assert "KG_AUTH_TOKEN" not in env["KG_ENV_PROCESS_WHITELIST"]["value"]
    assert gw["readinessProbe"]["tcpSocket"]["port"] == 8888
    sc = gw["securityContext"]
    assert sc["runAsNonRoot"] and sc["runAsUser"] == 1000 and not sc["allowPrivilegeEscalation"]
    assert pod["spec"]["shareProcessNamespace"] is True
    assert pod["spec"]["automountServiceAccountToken"] is False
    holder_env = {e["name"]: e for e in holder["env"]}
    assert holder_env["GPUSESSIONS_KERNELS_URL"]["value"] == "http://$(POD_IP):8888"
    assert "value" not in holder_env["GPUSESSIONS_KERNELS_TOKEN"]
    for c in pod["spec"]["containers"]:
        for e in c["env"]:
            assert "TOKEN" not in e["name"] or "value" not in e, e


def test_holder_without_kernels_is_unchanged() -> None:
    pod = build_holder_pod("h", "ns", "c", HolderSettings("holder:1", {}), "ann", "")
    assert [c["name"] for c in pod["spec"]["containers"]] == ["holder"]
    assert "shareProcessNamespace" not in pod["spec"]


def test_secret_is_owned_by_the_claim() -> None:
    s = K.build_secret("gpu-holder-ann-kernels", "ns", "tok", "ann", "", CLAIM)
    assert s["stringData"] == {"token": "tok"}
    [ref] = s["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "name": "gpu-ann",
        "uid": "u-1",
    }
    assert K.owned_by_claim(s["metadata"], CLAIM)
    assert not K.owned_by_claim(s["metadata"], {"metadata": {"uid": "other"}})
    assert len(K.new_token()) >= 40 and K.new_token() != K.new_token()


def test_gateway_url_only_when_the_kernels_container_is_ready() -> None:
    pod = {
        "metadata": {},
        "status": {"podIP": "127.1.0.9", "containerStatuses": [{"name": "kernels", "ready": False}]},
    }
    assert K.gateway_url(pod, 8888) is None
    pod["status"]["containerStatuses"][0]["ready"] = True
    assert K.gateway_url(pod, 8888) == "http://127.1.0.9:8888"
    pod["status"]["podIP"] = "fd00::5"
    assert K.gateway_url(pod, 8888) == "http://[fd00::5]:8888"
    pod["metadata"]["deletionTimestamp"] = "now"
    assert K.gateway_url(pod, 8888) is None


def test_agent_maps_kernels_to_pids_and_gpu_memory(tmp_path: Path) -> None:
    kid = "0b6ee0b8-5b2c-4a43-9c35-4f2c0a3c6a11"
    for pid, cmd in (
        (41, f"python -m ipykernel_launcher -f /r/kernel-{kid}.json"),
        (7, "jupyter kernelgateway"),
    ):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(cmd.replace(" ", "\0").encode())
    (tmp_path / "self").mkdir()
    assert kernel_pids(tmp_path) == {kid: 41}
    models = [{"id": kid, "name": "python3", "execution_state": "idle"}, {"id": "gone"}]
    out = join(models, {kid: 41}, {41: 3 * 2**30, 42: 2**30, 99: 5}, tree=lambda pid: {pid, 42})
    assert out[0]["pid"] == 41 and out[0]["gpu_memory"] == 4 * 2**30
    assert out[1]["pid"] is None and out[1]["gpu_memory"] is None
    assert join(models[:1], {kid: 41}, {})[0]["gpu_memory"] is None


def test_network_policy_admits_only_the_sessions_notebook_to_the_gateway() -> None:
    np = K.build_network_policy("gpu-holder-ann-kernels", "ns", CLAIM, 8888, 9400, "ann", "")
    spec = np["spec"]
    assert spec["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "gpusessions",
        "gpusessions.io/claim": "gpu-ann",
        "app.kubernetes.io/component": "holder",
    }
    assert spec["policyTypes"] == ["Ingress"]
    gateway, agent = spec["ingress"]
    # The notebook pod keeps KubeSpawner's app.kubernetes.io/* labels: ours is gpusessions.io/component.
    assert gateway["from"][0]["podSelector"]["matchLabels"] == {
        "gpusessions.io/claim": "gpu-ann",
        "gpusessions.io/component": "notebook",
    }
    # The agent: that notebook (its GPU panel) and the culler (the chart's, or the hub's pod).
    assert agent["ports"] == [{"port": 9400, "protocol": "TCP"}]
    assert agent["from"] == [gateway["from"][0], *K.AGENT_READERS]
    only = K.build_network_policy("p", "ns", CLAIM, 8888, 9400, "ann", "", (K.CHART_CULLER,))
    assert only["spec"]["ingress"][1]["from"] == [gateway["from"][0], K.CHART_CULLER]
    assert np["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    pod = build_holder_pod("gpu-holder-ann", "ns", "gpu-ann", HolderSettings("holder:1", {}), "ann", "")
    assert pod["metadata"]["labels"]["gpusessions.io/claim"] == "gpu-ann"


def test_agent_token_comes_from_its_secret() -> None:
    pod = build_holder_pod(
        "h", "ns", "c", HolderSettings("holder:1", {}, agent_token_secret="gpusessions-agent"), "ann", ""
    )
    env = {e["name"]: e for e in pod["spec"]["containers"][0]["env"]}
    ref = env["GPUSESSIONS_AGENT_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "gpusessions-agent", "key": "token"}
