"""The culler service with a real JupyterHub, the local cluster and agents on the fake NVML."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core.claims import GPURequest, build_claim
from localcluster import waits
from localcluster.hubproc import free_port, start_hub
from localcluster.kubeapi import KubeAPI
from promtext import value

from .cullertools import annotations, culler_hub, culler_looked_after, metrics, sessions
from .hubtools import GPU_HUB_CONFIG, gpu_hub, process_env, server_model, spawn, start, stop, wait_stopped

pytestmark = pytest.mark.cluster
ONE_G = {"profile": "mig-1g-10gb"}


def _claim_gone(api: KubeAPI, ns: str, name: str) -> bool:
    return api.get_or_none("ResourceClaim", name, ns) is None


def test_culler_keeps_busy_and_exempt_sessions_and_culls_idle_stopped_and_orphans(
    api: KubeAPI, namespace: str, tmp_path: Path, load_file: Path
) -> None:
    # Every session here parks (the hub's persist_kernels and park_kernels are on): carol's idle
    # session is culled by the parking rule (8 s), not by the plain one, which is out of reach.
    hub = culler_hub(namespace, tmp_path / "hub", args=("--idle-limit", "100000", "--park-idle-limit", "8"))
    try:
        # bob trains with the browser closed: his GPU is busy.
        spawn(hub, "bob", ONE_G)
        bob_gpu = process_env(api, namespace, "gpu-holder-bob")["DEVCLUSTER_CDI_DEVICES"]
        load_file.write_text(json.dumps({bob_gpu: {"activity": 85, "processes": 1}}))
        # dave asked to keep his GPU for a day.
        spawn(hub, "dave", ONE_G)
        waits.wait_for(lambda: "gpu-dave" in sessions(hub), 30, "the culler to see dave's session")
        req = urllib.request.Request(
            hub.url + f"/services/gpusessions/api/sessions/{namespace}/gpu-dave/keep",
            data=json.dumps({"until": time.time() + 86400}).encode(),
            method="POST",
            headers={"Authorization": f"token {hub.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert "kept_until" in json.loads(r.read())
        # carol leaves her session idle on both counts.
        spawn(hub, "carol", ONE_G)
        assert annotations(api, namespace, "gpu-carol")["gpusessions.io/parks"] == "true"
        spawn(hub, "alice", ONE_G)
        # alice stops: her GPU is kept for a while, then released.
        stop(hub, "alice")
        # An orphan: a claim of ours for a user the hub does not know.
        orphan = build_claim("gpu-ghost", namespace, GPURequest("mig.nvidia.com"), "ghost", "")
        api.create(orphan)
        # A session of another hub, in another namespace: not this culler's to touch.
        other_ns = namespace[:50] + "-other"
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other_ns}})
        api.create(build_claim("gpu-stranger", other_ns, GPURequest("mig.nvidia.com"), "stranger", ""))

        waits.wait_for(
            lambda: _claim_gone(api, namespace, "gpu-carol"),
            40,
            "carol's idle GPU to be culled",
            lambda: hub.log_tail(3000),
        )
        waits.wait_for(
            lambda: _claim_gone(api, namespace, "gpu-alice"), 40, "alice's kept GPU to be released"
        )
        waits.wait_for(
            lambda: _claim_gone(api, namespace, "gpu-ghost"), 40, "the orphan claim to be released"
        )
        assert (
            _claim_gone(api, namespace, "gpu-holder-carol")
            or api.get_or_none("Pod", "gpu-holder-carol", namespace) is None
        )
        carol = hub.api("GET", "/users/carol")[1]
        assert not carol["servers"].get("", {}).get("ready"), "carol's server was stopped"
        # bob (busy GPU, idle browser) and dave (exempt) are still there, well past the idle limit.
        for user in ("bob", "dave"):
            assert api.get_or_none("ResourceClaim", f"gpu-{user}", namespace) is not None, user
            assert hub.api("GET", f"/users/{user}")[1]["servers"][""]["ready"], user
        log = hub.log_text()
        # Warned before culled, each with its reason.
        assert log.index(f"warn {namespace}/gpu-carol") < log.index(f"cull {namespace}/gpu-carol")
        assert "notebook and GPU idle" in log
        assert log.index(f"warn {namespace}/gpu-alice") < log.index(f"release {namespace}/gpu-alice")
        assert f"orphan {namespace}/gpu-ghost (ghost/): orphan: the hub has no such user" in log
        assert api.get_or_none("ResourceClaim", "gpu-stranger", other_ns) is not None
        assert "gpu-stranger" not in log
        api.delete("Namespace", other_ns)
        view = sessions(hub)
        assert view["gpu-bob"]["decision"] == "none" and view["gpu-bob"]["gpu"][0]["busy"]
        assert view["gpu-bob"]["gpu_idle_seconds"] == 0
        assert view["gpu-dave"]["keep_until"]
        # The gauge follows the culler's last cycle, which may predate carol's stop by a second.
        held = {"state": "running", "profile": "mig-1g-10gb", "queue": ""}
        text = waits.wait_for(
            lambda: next((m for m in [metrics(hub)] if value(m, "gpusessions_held_gpus", **held) == 2), None),
            15,
            "the held-GPU gauge to show bob and dave running",
            lambda: metrics(hub),
        )
        assert value(text, "gpusessions_culler_actions_total", action="cull") == 1
        assert value(text, "gpusessions_culls_total", reason="idle") == 1
        assert value(text, "gpusessions_culls_total", reason="stopped") == 1
        assert value(text, "gpusessions_culls_total", reason="orphan") == 1
        assert value(text, "gpusessions_idle_gpu_seconds_total", profile="mig-1g-10gb") is not None
    finally:
        hub.stop()


def test_non_admins_are_refused(api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    hub = culler_hub(namespace, tmp_path / "hub")
    try:
        hub.api("POST", "/users/eve")
        code, tok = hub.api("POST", "/users/eve/tokens", {"note": "t"})
        assert code == 201
        with pytest.raises(urllib.error.HTTPError) as err:
            sessions(hub, tok["token"])
        assert err.value.code == 403
        waits.wait_for(lambda: sessions(hub) is not None, 30, "admins to be served")
    finally:
        hub.stop()


def test_dry_run_changes_nothing(api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    hub = culler_hub(namespace, tmp_path / "hub", dry_run=True)
    try:
        spawn(hub, "frank", ONE_G)
        # Idle past the limit: the culler would warn (and, a warning later, cull), but changes nothing.
        waits.wait_for(
            lambda: f"DRY RUN: would warn {namespace}/gpu-frank" in hub.log_text(),
            60,
            "a dry-run decision",
        )
        culler_looked_after(hub, time.time())  # and again, deciding the same and doing nothing
        assert api.get_or_none("ResourceClaim", "gpu-frank", namespace) is not None
        claim = api.get("ResourceClaim", "gpu-frank", namespace)
        assert "gpusessions.io/warned-at" not in (claim["metadata"].get("annotations") or {})
        assert hub.api("GET", "/users/frank")[1]["servers"][""]["ready"]
    finally:
        hub.stop()


def test_hub_restart_in_the_middle_of_a_cull_is_safe(api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    """Warned, then the hub (and its culler) restarts: the warning is remembered, one cull follows."""
    hub = culler_hub(namespace, tmp_path / "hub")
    try:
        spawn(hub, "ivan", ONE_G)

        def warned() -> str | None:
            ann = api.get("ResourceClaim", "gpu-ivan", namespace)["metadata"].get("annotations") or {}
            return ann.get("gpusessions.io/warned-at")

        first_warning = waits.wait_for(warned, 60, "the warning")
        uid = api.get("ResourceClaim", "gpu-ivan", namespace)["metadata"]["uid"]
    finally:
        hub.stop()
    before = len(hub.log_text())
    hub2 = culler_hub(namespace, hub.workdir, ports=hub.ports)
    try:
        waits.wait_for(
            lambda: _claim_gone(api, namespace, "gpu-ivan"),
            60,
            "the cull after the restart",
            lambda: hub2.log.read_text()[before:][-3000:],
        )
        log = hub2.log.read_text()[before:]
        assert log.count(f"cull {namespace}/gpu-ivan") == 1
        assert f"warn {namespace}/gpu-ivan" not in log, "the warning from before the restart was kept"
        assert first_warning
        assert api.list("ResourceClaim", namespace)["items"] == [] or all(
            c["metadata"]["uid"] != uid for c in api.list("ResourceClaim", namespace)["items"]
        )
        assert not hub2.api("GET", "/users/ivan")[1]["servers"].get("", {}).get("ready")
    finally:
        hub2.stop()


def test_agents_answer_only_the_culler_token(api: KubeAPI, namespace: str, tmp_path: Path) -> None:

    token = "agent-" + "x" * 32
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "gpusessions-agent", "namespace": namespace},
            "stringData": {"token": token},
        }
    )
    cfg = GPU_HUB_CONFIG.format(namespace=namespace) + (
        'c.GPUSessionSpawner.agent_token_secret = "gpusessions-agent"\n'
        "from gpusessions.hub.cullerservice import configure_culler\n"
        f'configure_culler(c, admins=["admin"], port={free_port()}, agent_token={token!r},\n'
        '    args=["--interval", "1", "--idle-limit", "100000"])\n'
        'c.JupyterHub.load_roles[0]["scopes"].append("custom:gpusessions:admin")\n'
    )
    hub = start_hub(cfg, tmp_path / "hub")
    try:
        spawn(hub, "alma", ONE_G)
        ip = api.get("Pod", "gpu-holder-alma", namespace)["status"]["podIP"]

        def agent(tok: str | None) -> int:
            headers = {"Authorization": f"Bearer {tok}"} if tok else {}
            req = urllib.request.Request(f"http://{ip}:9400/api/status", headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code

        waits.wait_for(lambda: agent(token) == 200, 30, "the agent to answer its token")
        assert agent(None) == 401 and agent("wrong") == 401
        # The culler, holding the token, still reads the GPU.
        view = waits.wait_for(lambda: sessions(hub).get("gpu-alma", {}).get("gpu"), 30, "GPU readings")
        assert view[0]["uuid"].startswith("MIG-")
        assert not sessions(hub)["gpu-alma"]["gpu_error"]
    finally:
        hub.stop()


def _static_slice(api: KubeAPI, profile: str) -> tuple[str, str]:
    """(uuid, parent uuid) of a static MIG slice of that profile (dynamic ones have no uuid)."""
    for sl in api.list("ResourceSlice")["items"]:
        for d in sl["spec"].get("devices") or []:
            attrs = {k: next(iter(v.values())) for k, v in (d.get("attributes") or {}).items()}
            if attrs.get("type") == "mig" and attrs.get("uuid") and attrs.get("profile") == profile:
                return attrs["uuid"], attrs["parentUUID"]
    raise AssertionError(f"no static {profile} slice on this cluster")


def _device(api: KubeAPI, ns: str, claim: str) -> str | None:
    obj = api.get_or_none("ResourceClaim", claim, ns) or {}
    results = ((obj.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return f"{results[0]['pool']}/{results[0]['device']}" if results else None


def test_a_kept_gpu_goes_to_a_waiting_user_after_the_short_keep(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """anna stops, keeping the only device of the size "solo"; ben's start waits for it; the
    culler releases anna's GPU after --stopped-keep-contended (not --stopped-keep) and ben gets it."""
    uuid, parent = _static_slice(api, "2g.20gb")
    selector = (
        f"device.attributes['gpu.nvidia.com'].parentUUID == {parent!r} && "
        f"device.attributes['gpu.nvidia.com'].uuid == {uuid!r}"
    )
    solo = (
        'EXTRA.append({"display_name": "The one 2g.20gb slice", "slug": "solo", "kubespawner_override": '
        f'{{"gpu_device_class": "mig.nvidia.com", "gpu_selectors": [{selector!r}]}}}})\n'
    )
    args = ("--stopped-keep", "600", "--stopped-keep-contended", "2")
    hub = culler_hub(namespace, tmp_path / "hub", args=args, config=solo)
    try:
        spawn(hub, "anna", {"profile": "solo"})
        device = _device(api, namespace, "gpu-anna")
        stop(hub, "anna")

        def stopped_since() -> str | None:
            claim = api.get("ResourceClaim", "gpu-anna", namespace)
            return (claim["metadata"].get("annotations") or {}).get("gpusessions.io/stopped-since")

        since = float(waits.wait_for(stopped_since, 20, "the culler to see anna stopped"))
        culler_looked_after(hub, since + 4)  # past the short keep, but nobody waits: anna keeps her GPU
        assert _device(api, namespace, "gpu-anna") == device

        code, body = start(hub, "ben", {"profile": "solo"})
        assert code in (201, 202), (code, body)
        waits.wait_for(
            lambda: _claim_gone(api, namespace, "gpu-anna"),
            40,
            "anna's kept GPU to be released for ben",
            lambda: hub.log_tail(3000),
        )
        # ben gets that device (his notebook then starts as any other: not waited for here).
        waits.wait_for(lambda: _device(api, namespace, "gpu-ben") == device, 30, "ben to get anna's GPU")
        log = hub.log_text()
        why = "while 1 user waits for mig.nvidia.com"
        assert f"warn {namespace}/gpu-anna (anna/): stopped" in log and why in log
        assert log.index(f"warn {namespace}/gpu-anna") < log.index(f"release {namespace}/gpu-anna")
        assert value(metrics(hub), "gpusessions_culls_total", reason="stopped-contended") == 1
    finally:
        hub.stop()


def test_an_idle_running_gpu_is_reclaimed_for_a_waiting_user_after_warning_and_keep(
    api: KubeAPI, namespace: str, tmp_path: Path, load_file: Path
) -> None:
    """anna runs on the only device of the size "solo", her tab open; ben waits for that size.
    While anna's GPU is busy nothing happens; once it is idle past --gpu-idle-limit-contended
    she is warned (the notice she would see in JupyterLab), clicks Keep, and keeps it; her keep
    is for an hour (gpu_keep_extension), but while ben waits it holds only --keep-contended:
    then, her GPU still idle, she is warned again, culled, and ben gets the GPU."""
    uuid, parent = _static_slice(api, "2g.20gb")
    selector = (
        f"device.attributes['gpu.nvidia.com'].parentUUID == {parent!r} && "
        f"device.attributes['gpu.nvidia.com'].uuid == {uuid!r}"
    )
    solo = (
        'EXTRA.append({"display_name": "The one 2g.20gb slice", "slug": "solo", "kubespawner_override": '
        f'{{"gpu_device_class": "mig.nvidia.com", "gpu_selectors": [{selector!r}]}}}})\n'
        "c.GPUSessionSpawner.gpu_keep_extension = 3600\n"
    )
    args = (
        "--idle-limit",
        "600",
        "--gpu-idle-limit",
        "600",
        "--gpu-idle-limit-contended",
        "4",
        "--warn-before",
        "2",
        "--keep-contended",
        "8",
    )
    hub = culler_hub(namespace, tmp_path / "hub", args=args, config=solo)
    try:
        spawn(hub, "anna", {"profile": "solo"})
        device = _device(api, namespace, "gpu-anna")
        anna_gpu = process_env(api, namespace, "gpu-holder-anna")["DEVCLUSTER_CDI_DEVICES"]
        load_file.write_text(json.dumps({anna_gpu: {"activity": 90, "processes": 1}}))
        code, body = start(hub, "ben", {"profile": "solo"})
        assert code in (201, 202), (code, body)
        waits.wait_for(lambda: sessions(hub).get("gpu-ben", {}).get("state") == "starting", 30, "ben to wait")
        assert _device(api, namespace, "gpu-ben") is None  # no device for him: he waits

        def warned() -> list[dict[str, Any]]:
            code, body = hub.api("GET", "/gpusessions/users/anna/warnings")
            assert code == 200, body
            return body["warnings"]

        culler_looked_after(hub, time.time() + 8)  # twice the contended limit: anna's GPU is busy
        assert not warned() and _device(api, namespace, "gpu-anna") == device
        load_file.write_text("{}")  # anna's GPU goes idle (her tab stays open)
        first = waits.wait_for(warned, 30, "anna to be warned", lambda: hub.log_tail(3000))
        assert "while 1 user waits for" in first[0]["reason"], first
        code, body = hub.api("POST", "/gpusessions/users/anna/keep")  # "Keep my GPU"
        assert code == 200, body
        assert body["kept_until"] > time.time() + 3000  # an hour's keep...
        ann = api.get("ResourceClaim", "gpu-anna", namespace)["metadata"]["annotations"]
        assert abs(float(ann["gpusessions.io/kept-at"]) - time.time()) < 30  # ...clicked by her now
        culler_looked_after(hub, time.time() + 3)  # within the keep: anna keeps her GPU, ben still waits
        assert _device(api, namespace, "gpu-anna") == device and not warned()
        assert _device(api, namespace, "gpu-ben") is None
        # The keep runs out for the waiter's sake (--keep-contended, counted from the warning it
        # answered): that warning counts as given, the cull follows without a second one.
        waits.wait_for(
            lambda: _claim_gone(api, namespace, "gpu-anna"),
            60,
            "anna's idle GPU to be reclaimed for ben after her keep ran out",
            lambda: hub.log_tail(3000),
        )
        waits.wait_for(lambda: _device(api, namespace, "gpu-ben") == device, 30, "ben to get anna's GPU")
        log = hub.log_text()
        assert log.count(f"warn {namespace}/gpu-anna") >= 1
        assert log.rindex(f"warn {namespace}/gpu-anna") < log.index(f"cull {namespace}/gpu-anna")
        assert value(metrics(hub), "gpusessions_culls_total", reason="gpu-idle-contended") == 1
        # The record: the reclaim, its warnings, and the time it gave back ahead of the plain
        # 600 s limits (a size given by device selectors reads as one GPU-equivalent per device),
        # on the admin page's JSON and in /metrics.
        req = urllib.request.Request(
            hub.url + "/services/gpusessions/api/sessions", headers={"Authorization": f"token {hub.token}"}
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            record = json.loads(r.read())["record"]
        row = next(r for r in record["today"]["rows"] if r["profile"] == "solo")
        assert row["reclaims"] == 1 and row["culls"] == 1 and row["warnings"] >= 1, row
        assert 0 < row["reclaimed"] <= 600 / 3600, row
        assert row["idle"] > 0 and row["held"] >= row["idle"], row
        reclaimed = value(
            metrics(hub), "gpusessions_gpu_hours", kind="reclaimed", window="today", profile="solo", queue=""
        )
        assert reclaimed and reclaimed > 0
        m = server_model(hub, "anna")
        assert not (m and m.get("ready")), m  # her server was stopped with the GPU
    finally:
        hub.stop()


def test_a_keep_and_a_cull_that_cross_are_answered_in_one_place(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """The culler's cull goes through the hub, which answers it together with the user's Keep
    my GPU: a cull acting on a warning the user has since answered stops nothing; a keep that
    comes after the cull began is refused in words (the user must not start work on a GPU that
    is going); bad requests create nothing; once the server runs again, keeps work again."""
    hub = gpu_hub(namespace, tmp_path / "hub")
    try:
        spawn(hub, "cara", ONE_G)
        warned = time.time()  # the warning the culler would act on
        time.sleep(0.05)
        code, body = hub.api("POST", "/gpusessions/users/cara/keep")  # she answers it
        assert code == 200, body
        code, body = hub.api("POST", "/gpusessions/users/cara/cull", {"since": warned, "reason": "idle"})
        assert (code, body.get("outcome")) == (409, "kept"), (code, body)
        assert (server_model(hub, "cara") or {}).get("ready"), "a kept server was stopped"
        # Tampered or wrong requests: a clear 4xx, nothing stopped.
        code, body = hub.api("POST", "/gpusessions/users/cara/cull", {"since": "soon"})
        assert code == 400 and "since" in body["message"], (code, body)
        code, body = hub.api("POST", "/gpusessions/users/nobody/cull", {"since": time.time()})
        assert code == 404 and "nobody" in body["message"], (code, body)
        code, body = hub.api("POST", "/gpusessions/users/cara/servers/nope/cull", {"since": time.time()})
        assert code == 404, (code, body)
        assert (server_model(hub, "cara") or {}).get("ready")
        # A later warning, not answered: the cull begins; her keep now is refused, in words.
        code, body = hub.api("POST", "/gpusessions/users/cara/cull", {"since": time.time(), "reason": "idle"})
        assert (code, body.get("outcome")) == (202, "stopping"), (code, body)
        code, body = hub.api("POST", "/gpusessions/users/cara/keep")
        assert code == 409 and "being released" in body["message"], (code, body)
        wait_stopped(hub, "cara")
        code, body = hub.api("POST", "/gpusessions/users/cara/keep")
        assert code == 409 and "being released" in body["message"], (code, body)
        code, body = hub.api("POST", "/gpusessions/users/cara/cull", {"since": time.time()})
        assert (code, body.get("outcome")) == (200, "not-running"), (code, body)
        # She starts it again: her keeps count again.
        spawn(hub, "cara", ONE_G)
        code, body = hub.api("POST", "/gpusessions/users/cara/keep")
        assert code == 200, body
        assert "Culling cara/: idle" in hub.log_text()
    finally:
        hub.stop()
