"""GPUSessionSpawner on the local cluster with a real JupyterHub and proxy."""

from __future__ import annotations

import itertools
import json
import threading
from pathlib import Path

import pytest

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .hubtools import (
    follow_spawn,
    gpu_hub,
    gpu_objects,
    notebook_get,
    process_env,
    progress_messages,
    server_model,
    spawn,
    start,
    stop,
    wait_ready,
)

pytestmark = pytest.mark.cluster
ONE_G = {"profile": "mig-1g-10gb"}


def _claim(api: KubeAPI, ns: str, name: str) -> dict:
    return api.get("ResourceClaim", name, ns)


def _devices(claim: dict) -> list[tuple[str, str]]:
    return [(r["pool"], r["device"]) for r in claim["status"]["allocation"]["devices"]["results"]]


@pytest.mark.shared_hub
def test_mig_session_reaches_notebook_and_keeps_its_device_across_restarts(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    model = spawn(hub, "alice", ONE_G)
    objs = gpu_objects(api, namespace)
    assert [c["metadata"]["name"] for c in objs["claims"]] == ["gpu-alice"]
    assert [h["metadata"]["name"] for h in objs["holders"]] == ["gpu-holder-alice"]
    claim = _claim(api, namespace, "gpu-alice")
    assert claim["metadata"]["labels"]["hub.jupyter.org/username"] == "alice"
    assert claim["metadata"]["annotations"]["gpusessions.io/user"] == "alice"
    first = _devices(claim)
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == ["gpu-holder-alice", "jupyter-alice"]

    # The notebook pod references the claim; the notebook process sees the device.
    nb = api.get("Pod", "jupyter-alice", namespace)
    assert nb["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "gpu-alice"}]
    assert nb["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert (
        nb["spec"]["nodeName"]
        == claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][
            0
        ]
    )
    env = process_env(api, namespace, "jupyter-alice")
    holder_env = process_env(api, namespace, "gpu-holder-alice")
    # As with CDI injection: the devices (here the runtime's record of them), no UUIDs in
    # NVIDIA_VISIBLE_DEVICES.
    assert env["NVIDIA_VISIBLE_DEVICES"] == holder_env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["DEVCLUSTER_CDI_DEVICES"].startswith("MIG-")
    assert env["DEVCLUSTER_CDI_DEVICES"] == holder_env["DEVCLUSTER_CDI_DEVICES"]
    assert env["GPUSESSIONS_CLAIM"] == "gpu-alice"
    assert env["GPUSESSIONS_PROFILE"] == "mig-1g-10gb"
    assert env["GPUSESSIONS_GPU"] == "MIG 1g.10gb"
    assert env["GPUSESSIONS_DEVICES"] == ",".join(f"{p}/{d}" for p, d in first)
    info = json.loads(Path(env["GPUSESSIONS_SESSION_FILE"]).read_text())
    assert info["claim"] == "gpu-alice" and info["node"] == env["GPUSESSIONS_NODE"]
    assert [(d["pool"], d["device"]) for d in info["devices"]] == first

    # Through the proxy to jupyterhub-singleuser on the pod IP.
    code, status = notebook_get(hub, model["url"] + "api/status")
    assert code == 200 and "started" in status

    holder = api.get("Pod", "gpu-holder-alice", namespace)
    stop(hub, "alice")
    waits.gone(api, "Pod", "jupyter-alice", namespace)
    kept = _claim(api, namespace, "gpu-alice")
    assert _devices(kept) == first, "the claim stays allocated while the server is stopped"
    assert [r["name"] for r in kept["status"]["reservedFor"]] == ["gpu-holder-alice"]

    (code, _), messages = follow_spawn(hub, "alice", ONE_G)
    assert code in (201, 202)
    wait_ready(hub, "alice")
    # On the spawn page's progress stream, not only in the hub log.
    kept_message = "GPU kept from your last start, reattaching: MIG 1g.10gb, device gpu-node-0/"
    assert any(m.startswith(kept_message) for m in messages), messages
    assert "alice: " + kept_message in hub.log_text()
    assert _devices(_claim(api, namespace, "gpu-alice")) == first
    holder2 = api.get("Pod", "gpu-holder-alice", namespace)
    assert holder2["metadata"]["uid"] == holder["metadata"]["uid"]
    assert holder2["status"]["containerStatuses"][0]["restartCount"] == 0
    assert (
        process_env(api, namespace, "jupyter-alice")["DEVCLUSTER_CDI_DEVICES"]
        == env["DEVCLUSTER_CDI_DEVICES"]
    )


@pytest.mark.shared_hub
def test_progress_tells_the_wait_and_the_allocation(hub: Hub, api: KubeAPI, namespace: str) -> None:
    """Every 3g.40gb place is taken; the user is told so, then told when one frees up.
    (small is static MIG: its one 3g.40gb is on GPU 0; the whole GPU 1 is taken too.)"""
    from localcluster.shapes import gpu_uuid
    from localcluster.testing import claim, exec_pod

    blockers = {
        "b-static": [
            "device.attributes['gpu.nvidia.com'].profile == '3g.40gb'",
            f"device.attributes['gpu.nvidia.com'].parentUUID == '{gpu_uuid('gpu-node-0', 0)}'",
        ],
        "b-whole": [f"device.attributes['gpu.nvidia.com'].uuid == '{gpu_uuid('gpu-node-0', 1)}'"],
    }
    for name, sels in blockers.items():
        api.create(claim(name, "gpu.nvidia.com" if name == "b-whole" else "mig.nvidia.com", sels), namespace)
        api.create(exec_pod(name, claim_name=name, command=["sleep", "3600"]), namespace)
        waits.claim_allocated(api, namespace, name)

    result: dict = {}
    starter = threading.Thread(target=lambda: result.update(r=start(hub, "bob", {"profile": "mig-3g-40gb"})))
    starter.start()
    waits.wait_for(lambda: (server_model(hub, "bob") or {}).get("pending") == "spawn", 30, "bob pending")
    messages: list[str] = []
    reader = threading.Thread(target=lambda: messages.extend(progress_messages(hub, "bob", live=messages)))
    reader.start()
    waits.wait_for(
        lambda: any("none free right now" in m for m in messages),
        30,
        "the waiting message",
        lambda: str(messages),
    )
    api.delete("Pod", "b-static", namespace)
    reader.join(90)
    starter.join(30)
    wait_ready(hub, "bob")
    waiting = next(m for m in messages if "none free right now" in m)
    assert waiting.startswith("Waiting for a GPU (MIG 3g.40gb): none free right now (scheduler: 0/1 nodes")
    allocated = [
        m for m in messages if m.startswith("GPU allocated: MIG 3g.40gb, device gpu-node-0/gpu-0-mig")
    ]
    assert allocated and allocated[0].endswith("on node gpu-node-0"), messages
    assert messages.index(waiting) < messages.index(allocated[0])
    # Each thing is said once: the page does not repeat "Waiting for a GPU ..." lines.
    said = [m for m in messages if m.startswith("Waiting for a GPU")]
    assert all(a != b for a, b in itertools.pairwise(said)), said


@pytest.mark.shared_hub
def test_changing_the_profile_releases_the_old_device(hub: Hub, api: KubeAPI, namespace: str) -> None:
    spawn(hub, "carol", ONE_G)
    old = _claim(api, namespace, "gpu-carol")
    stop(hub, "carol")
    spawn(hub, "carol", {"profile": "mig-3g-40gb"})
    new = _claim(api, namespace, "gpu-carol")
    assert new["metadata"]["uid"] != old["metadata"]["uid"], "the old claim is gone, a new one made"
    assert _devices(new) != _devices(old)
    assert "3g40gb" in _devices(new)[0][1]
    assert len(gpu_objects(api, namespace)["claims"]) == 1


@pytest.mark.shared_hub
def test_named_servers_get_their_own_claims_and_deleting_one_frees_it(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "dave", ONE_G)
    spawn(hub, "dave", ONE_G, server="exp1")
    names = sorted(c["metadata"]["name"] for c in gpu_objects(api, namespace)["claims"])
    assert names == ["gpu-dave", "gpu-dave--exp1"]
    assert _devices(_claim(api, namespace, "gpu-dave")) != _devices(_claim(api, namespace, "gpu-dave--exp1"))
    code, body = hub.api("DELETE", "/users/dave/servers/exp1", {"remove": True})
    assert code in (202, 204), body
    waits.gone(api, "ResourceClaim", "gpu-dave--exp1", namespace)
    waits.gone(api, "Pod", "gpu-holder-dave--exp1", namespace)
    assert api.get_or_none("ResourceClaim", "gpu-dave", namespace) is not None


@pytest.mark.shared_hub
def test_no_capacity_is_a_clear_refusal_not_a_timeout(hub: Hub, api: KubeAPI, namespace: str) -> None:
    from localcluster.testing import claim, exec_pod

    # The only whole GPU of the small shape is taken.
    api.create(claim("blocker", "gpu.nvidia.com"), namespace)
    api.create(exec_pod("blocker", claim_name="blocker", command=["sleep", "3600"]), namespace)
    waits.claim_allocated(api, namespace, "blocker")
    (code, body), messages = follow_spawn(hub, "erin", {"profile": "gpu-short"})
    model = server_model(hub, "erin")
    assert model is None or not model.get("ready")
    # What the spawn page shows: the wait, then what was waited for and what was seen.
    assert any(m.startswith("Waiting for a GPU (whole GPU): none free right now") for m in messages), messages
    assert messages[-1].startswith("Spawn failed: No GPU (whole GPU) became free within 4 seconds;"), messages
    assert "none free right now" in messages[-1] and "SpawnException" not in messages[-1]
    assert code in (400, 202), (code, body)
    if code == 400:
        assert "No GPU (whole GPU) became free within 4 seconds" in body["message"]
    objs = gpu_objects(api, namespace)
    assert objs["claims"] == [] and objs["holders"] == [], "a refused request leaves nothing behind"
    assert "Traceback" not in hub.log_text()


@pytest.mark.shared_hub
def test_a_size_that_does_not_exist_is_refused_at_once(hub: Hub, api: KubeAPI, namespace: str) -> None:
    code, body = start(hub, "erin", {"profile": "huge"})
    assert code == 400, (code, body)
    assert "No GPU of this size (whole GPU) exists on this cluster" in body["message"]
    assert gpu_objects(api, namespace)["claims"] == []


@pytest.mark.shared_hub
def test_a_size_the_cluster_does_not_offer_is_refused_at_once(hub: Hub, api: KubeAPI, namespace: str) -> None:
    code, body = start(hub, "frank", {"profile": "tpu"})
    assert code == 400, (code, body)
    assert "not offered on this cluster" in body["message"]
    assert "DeviceClass 'tpu.example.com' does not exist" in body["message"]
    assert gpu_objects(api, namespace)["claims"] == []


@pytest.mark.shared_hub
def test_stop_releases_when_the_profile_says_so(hub: Hub, api: KubeAPI, namespace: str) -> None:
    spawn(hub, "gina", {"profile": "mig-nokeep"})
    assert api.get_or_none("ResourceClaim", "gpu-gina", namespace)
    stop(hub, "gina")
    waits.gone(api, "ResourceClaim", "gpu-gina", namespace)
    waits.gone(api, "Pod", "gpu-holder-gina", namespace)


@pytest.mark.hub_side
def test_stop_after_a_hub_restart_still_follows_the_profile(hub: Hub, api: KubeAPI, namespace: str) -> None:
    """The profile's keep_gpu_on_stop=False holds after a restart, when the new hub has not
    applied the profile's overrides (KubeSpawner applies them only at a start)."""
    spawn(hub, "gina", {"profile": "mig-nokeep"})
    assert api.get_or_none("ResourceClaim", "gpu-gina", namespace)
    hub.stop()
    hub2 = gpu_hub(namespace, hub.workdir, hub.ports)
    try:
        wait_ready(hub2, "gina")
        stop(hub2, "gina")
        waits.gone(api, "ResourceClaim", "gpu-gina", namespace)
        waits.gone(api, "Pod", "gpu-holder-gina", namespace)
    finally:
        hub2.stop()


@pytest.mark.shared_hub
@pytest.mark.hub_side
def test_release_my_gpu_endpoint(hub: Hub, api: KubeAPI, namespace: str) -> None:
    spawn(hub, "hank", ONE_G)
    # Another user may not release hank's GPU.
    hub.api("POST", "/users/ivy")
    code, tok = hub.api("POST", "/users/ivy/tokens", {"note": "t"})
    assert code == 201
    import urllib.error
    import urllib.request

    req = urllib.request.Request(
        hub.hub_api + "/gpusessions/users/hank/release",
        data=b"",
        method="POST",
        headers={"Authorization": f"token {tok['token']}"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=30)
    assert err.value.code in (403, 404)
    assert api.get_or_none("ResourceClaim", "gpu-hank", namespace) is not None
    # ... but her own (she holds none).
    req = urllib.request.Request(
        hub.hub_api + "/gpusessions/users/ivy/release",
        data=b"",
        method="POST",
        headers={"Authorization": f"token {tok['token']}"},
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert json.loads(r.read()) == {"released": False, "stopped": False, "claim": ""}
    # The admin (service token with admin scopes) can.
    code, body = hub.api("POST", "/gpusessions/users/hank/release")
    assert code == 200, body
    assert body == {"released": True, "stopped": True, "claim": "gpu-hank"}
    waits.gone(api, "ResourceClaim", "gpu-hank", namespace)
    waits.gone(api, "Pod", "gpu-holder-hank", namespace)
    assert not (server_model(hub, "hank") or {}).get("ready")
    code, body = hub.api("POST", "/gpusessions/users/hank/release")
    assert code == 200 and body["released"] is False


@pytest.mark.shared_hub
@pytest.mark.hub_side
def test_release_route_of_a_named_server_releases_that_server_only(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "uma", ONE_G)
    spawn(hub, "uma", ONE_G, server="exp1")
    code, body = hub.api("POST", "/gpusessions/users/uma/servers/exp1/release")
    assert code == 200, body
    assert body == {"released": True, "stopped": True, "claim": "gpu-uma--exp1"}
    waits.gone(api, "ResourceClaim", "gpu-uma--exp1", namespace)
    waits.gone(api, "Pod", "gpu-holder-uma--exp1", namespace)
    assert not (server_model(hub, "uma", "exp1") or {}).get("ready")
    assert (server_model(hub, "uma") or {}).get("ready"), "the default server runs on"
    assert api.get_or_none("ResourceClaim", "gpu-uma", namespace) is not None
    code, body = hub.api("POST", "/gpusessions/users/uma/servers/nope/release")
    assert code == 404 and body["message"] == "uma has no server named nope", body


@pytest.mark.hub_side
def test_hub_restart_while_running_and_while_stopped_loses_and_duplicates_nothing(
    hub: Hub, api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    spawn(hub, "jill", ONE_G)
    before = _claim(api, namespace, "gpu-jill")
    holder = api.get("Pod", "gpu-holder-jill", namespace)
    nb = api.get("Pod", "jupyter-jill", namespace)
    hub.stop()
    hub2 = gpu_hub(namespace, hub.workdir, hub.ports)
    try:
        model = wait_ready(hub2, "jill")
        assert api.get("Pod", "jupyter-jill", namespace)["metadata"]["uid"] == nb["metadata"]["uid"]
        code, _ = notebook_get(hub2, model["url"] + "api/status")
        assert code == 200
        stop(hub2, "jill")
        hub2.stop()
        hub3 = gpu_hub(namespace, hub.workdir, hub.ports)
        try:
            spawn(hub3, "jill", ONE_G)
            after = _claim(api, namespace, "gpu-jill")
            assert after["metadata"]["uid"] == before["metadata"]["uid"]
            assert _devices(after) == _devices(before)
            assert (
                api.get("Pod", "gpu-holder-jill", namespace)["metadata"]["uid"] == holder["metadata"]["uid"]
            )
            objs = gpu_objects(api, namespace)
            assert (len(objs["claims"]), len(objs["holders"]), len(objs["notebooks"])) == (1, 1, 1)
        finally:
            hub3.stop()
    finally:
        hub2.stop()


@pytest.mark.shared_hub
def test_cpu_profile_spawns_like_kubespawner(hub: Hub, api: KubeAPI, namespace: str) -> None:
    spawn(hub, "kim", {"profile": "cpu"})
    pod = api.get("Pod", "jupyter-kim", namespace)
    assert "resourceClaims" not in pod["spec"]
    assert gpu_objects(api, namespace)["claims"] == []
    assert "NVIDIA_VISIBLE_DEVICES" not in process_env(api, namespace, "jupyter-kim")
    assert "DEVCLUSTER_CDI_DEVICES" not in process_env(api, namespace, "jupyter-kim")


@pytest.mark.shared_hub
def test_first_available_takes_the_first_alternative_that_exists(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "lena", {"profile": "firstavail"})
    claim = _claim(api, namespace, "gpu-lena")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert result["request"] == "gpu/alt1"
    assert "1g10gb" in result["device"]
    assert process_env(api, namespace, "jupyter-lena")["DEVCLUSTER_CDI_DEVICES"].startswith("MIG-")


@pytest.mark.shared_hub
def test_a_claim_that_is_not_ours_is_never_adopted(hub: Hub, api: KubeAPI, namespace: str) -> None:
    from localcluster.testing import claim

    api.create(claim("gpu-mike", "mig.nvidia.com"), namespace)
    before = api.get("ResourceClaim", "gpu-mike", namespace)
    code, body = start(hub, "mike", ONE_G)
    assert code == 400, (code, body)
    assert "already exists" in body["message"] and "does not belong to this server" in body["message"]
    after = api.get("ResourceClaim", "gpu-mike", namespace)
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert api.get_or_none("Pod", "gpu-holder-mike", namespace) is None


@pytest.mark.hub_side
def test_a_start_without_options_names_the_default_profile(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """REST starts without options get the default profile; the claim, the session's
    environment and the admin page say which (they said nothing before)."""
    from localcluster.hubproc import start_hub

    from .hubtools import GPU_HUB_CONFIG

    extra = """
from gpusessions.core.profiles import default_profiles
c.KubeSpawner.profile_list = [
    {**p, "default": p["slug"] == "mig-1g-10gb"} for p in default_profiles()
]
"""
    hub = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + extra, tmp_path / "hub")
    try:
        spawn(hub, "dee", None)
        claim = api.get("ResourceClaim", "gpu-dee", namespace)
        assert claim["metadata"]["annotations"]["gpusessions.io/profile"] == "mig-1g-10gb"
        assert process_env(api, namespace, "jupyter-dee")["GPUSESSIONS_PROFILE"] == "mig-1g-10gb"
        assert server_model(hub, "dee")["user_options"] == {"profile": "mig-1g-10gb"}  # type: ignore[index]
    finally:
        hub.stop()


@pytest.mark.shared_hub
def test_a_pod_in_the_way_of_a_no_keep_start_keeps_the_new_gpu(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    """KubeSpawner's start stops and retries when the notebook pod's name is taken (a 409):
    that stop is not the user's, so a profile that releases its GPU at stop keeps the one it
    just got."""
    from localcluster.testing import exec_pod

    api.create(exec_pod("jupyter-lena", command=["sleep", "3600"]), namespace)
    spawn(hub, "lena", {"profile": "mig-nokeep"})
    claim = api.get("ResourceClaim", "gpu-lena", namespace)
    assert claim["status"].get("allocation"), "the GPU is still allocated"
    assert (
        api.get("Pod", "jupyter-lena", namespace)["spec"]["resourceClaims"][0]["resourceClaimName"]
        == "gpu-lena"
    )
