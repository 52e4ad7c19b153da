"""Faults on the local cluster: components stopped or restarted under a running hub.

Each test leaves the cluster whole again (localcluster.faults starts what it stopped).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from kubernetes_asyncio import config as kube_config
from kubespawner.clients import shared_client

from gpusessions.kube import watch as kube_watch
from localcluster import cluster as lc
from localcluster import faults, procs, supervise, waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI
from localcluster.paths import ClusterPaths
from localcluster.testing import exec_pod

from .cullertools import culler_hub
from .hubtools import gpu_hub, gpu_objects, progress_messages, server_model, spawn, start, stop, wait_ready

pytestmark = pytest.mark.cluster
ONE_G = {"profile": "mig-1g-10gb"}


def counts(api: KubeAPI, namespace: str) -> tuple[int, int, int]:
    o = gpu_objects(api, namespace)
    return len(o["claims"]), len(o["holders"]), len(o["notebooks"])


def test_scheduler_down_the_spawn_fails_clearly_in_time_and_leaves_nothing(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    with faults.stopped("kube-scheduler"):
        # Waits 4 s for a GPU: fails within the hub's 10 s of a synchronous start.
        code, body = start(hub, "sam", {"profile": "gpu-short"})
        message = body["message"] if code == 400 else progress_messages(hub, "sam", timeout=60)[-1]
        assert "the scheduler never looked at the request" in message, (code, message)
        assert "tell your admin" in message
        waits.wait_for(lambda: counts(api, namespace) == (0, 0, 0), 30, "the withdrawn request to be cleaned")
    spawn(hub, "sam", ONE_G)
    assert counts(api, namespace) == (1, 1, 1)


def test_a_control_plane_component_that_dies_is_started_again(api: KubeAPI, namespace: str) -> None:
    """As the kubelet restarts static pods. kube-scheduler 1.35.4 exits on purpose when it finds
    its cache inconsistent (seen after an apiserver restart during a binding); without a restart
    no pod is ever scheduled again."""
    paths = ClusterPaths.default()
    state = lc.State.load(paths.state)
    assert state is not None
    supervisor = state.pids["kube-scheduler"]
    (scheduler,) = procs.children(supervisor)
    time.sleep(max(0.0, supervise.GRACE + 0.5 - _age(scheduler)))  # past start-up: a crash, then
    os.kill(scheduler, signal.SIGKILL)
    waits.wait_for(lambda: procs.children(supervisor) not in ([], [scheduler]), 30, "a new kube-scheduler")
    api.create(exec_pod("after-crash", command=["sleep", "3600"]), namespace)
    waits.pod_ready(api, namespace, "after-crash", timeout=60)
    assert "kube-scheduler exited with code -9" in paths.log("kube-scheduler").read_text()
    assert lc.healthy(paths)


def _age(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    with open("/proc/uptime") as f:
        return float(f.read().split()[0]) - started


def test_apiserver_restart_during_a_spawn_is_ridden_out(hub: Hub, api: KubeAPI, namespace: str) -> None:
    code, _ = start(hub, "ada", ONE_G)
    assert code in (201, 202)
    faults.restart("kube-apiserver")
    wait_ready(hub, "ada", timeout=120)
    assert counts(api, namespace) == (1, 1, 1)
    stop(hub, "ada")
    spawn(hub, "ada", ONE_G)
    assert counts(api, namespace) == (1, 1, 1)


def test_etcd_restart_keeps_the_session(hub: Hub, api: KubeAPI, namespace: str) -> None:
    spawn(hub, "eda", ONE_G)
    uid = api.get("ResourceClaim", "gpu-eda", namespace)["metadata"]["uid"]
    faults.restart("etcd")
    waits.wait_for(
        lambda: api.get_or_none("ResourceClaim", "gpu-eda", namespace), 60, "the API to answer again"
    )
    stop(hub, "eda")
    spawn(hub, "eda", ONE_G)
    assert api.get("ResourceClaim", "gpu-eda", namespace)["metadata"]["uid"] == uid, "the same claim, kept"
    assert counts(api, namespace) == (1, 1, 1)


def test_culler_rides_out_an_apiserver_restart(api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    hub = culler_hub(namespace, tmp_path / "hub")
    try:
        spawn(hub, "cal", ONE_G)
        faults.restart("kube-apiserver")
        # Idle on both counts: warned, then culled, by a culler whose watches had to reconnect.
        waits.wait_for(
            lambda: api.get_or_none("ResourceClaim", "gpu-cal", namespace) is None,
            90,
            "the culler to cull cal's idle GPU after the restart",
            lambda: hub.log_tail(3000),
        )
        assert f"cull {namespace}/gpu-cal" in hub.log_text()
    finally:
        hub.stop()


def _poll_hub(
    namespace: str, workdir: Path, extra: str = "", ports: tuple[int, int, int] | None = None
) -> Hub:
    from localcluster.hubproc import start_hub

    from .hubtools import GPU_HUB_CONFIG

    return start_hub(
        GPU_HUB_CONFIG.format(namespace=namespace) + "\nc.KubeSpawner.poll_interval = 2\n" + extra,
        workdir,
        ports=ports,
    )


def _notices(hub: Hub, user: str) -> list[str]:
    code, body = hub.api("GET", f"/gpusessions/users/{user}/warnings")
    return [n["text"] for n in (body or {}).get("notices", [])] if code == 200 else []


def test_a_lost_holder_is_recreated_and_the_user_told(api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    hub = _poll_hub(namespace, tmp_path / "hub")
    try:
        spawn(hub, "hal", ONE_G)
        claim = api.get("ResourceClaim", "gpu-hal", namespace)
        old = api.get("Pod", "gpu-holder-hal", namespace)
        api.delete("Pod", "gpu-holder-hal", namespace, grace_period=0)

        def new_holder() -> dict | None:
            p = api.get_or_none("Pod", "gpu-holder-hal", namespace)
            ok = (
                p and p["metadata"]["uid"] != old["metadata"]["uid"] and p["status"].get("phase") == "Running"
            )
            return p if ok else None

        pod = waits.wait_for(new_holder, 60, "the holder to be recreated", lambda: hub.log_tail(2000))
        assert pod["spec"]["nodeName"] == old["spec"]["nodeName"]
        now = api.get("ResourceClaim", "gpu-hal", namespace)
        assert now["metadata"]["uid"] == claim["metadata"]["uid"]
        assert now["status"]["allocation"] == claim["status"]["allocation"], "the same GPU"
        [text] = waits.wait_for(lambda: _notices(hub, "hal"), 30, "the user to be told")
        assert "recreated" in text and "Kernels running beside the GPU were lost" in text
        stop(hub, "hal")
        spawn(hub, "hal", ONE_G)
        assert counts(api, namespace) == (1, 1, 1)
    finally:
        hub.stop()


def test_a_holder_lost_after_a_hub_restart_keeps_the_profile_placement(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """The profile's node_selector and tolerations hold for a holder recreated by a restarted
    hub (which has not applied the profile's overrides: KubeSpawner does that at a start)."""
    node = api.list("Node")["items"][0]["metadata"]["name"]
    toleration = {"key": "gpusessions.io/test", "operator": "Exists", "effect": "NoSchedule"}
    extra = f"""
from gpusessions.core.profiles import mig_profile
c.KubeSpawner.profile_list = [
    mig_profile("1g.10gb", "pinned", node_selector={{"kubernetes.io/hostname": {node!r}}},
                tolerations=[{toleration!r}]),
]
"""
    hub = _poll_hub(namespace, tmp_path / "hub", extra)
    try:
        spawn(hub, "pia", ONE_G)
        hub.stop()
        hub = _poll_hub(namespace, tmp_path / "hub", extra, ports=hub.ports)
        wait_ready(hub, "pia")
        old = api.get("Pod", "gpu-holder-pia", namespace)
        api.delete("Pod", "gpu-holder-pia", namespace, grace_period=0)
        pod = waits.wait_for(
            lambda: (
                (p := api.get_or_none("Pod", "gpu-holder-pia", namespace))
                and p["metadata"]["uid"] != old["metadata"]["uid"]
                and p
            ),
            60,
            "the holder to be recreated by the restarted hub",
            lambda: hub.log_tail(2000),
        )
        assert pod["spec"]["nodeSelector"] == {"kubernetes.io/hostname": node}
        assert toleration in pod["spec"]["tolerations"]
    finally:
        hub.stop()


def test_a_lost_holder_stops_and_releases_when_so_configured(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    hub = _poll_hub(namespace, tmp_path / "hub", 'c.GPUSessionSpawner.on_holder_loss = "release"\n')
    try:
        spawn(hub, "rel", ONE_G)
        api.delete("Pod", "gpu-holder-rel", namespace, grace_period=0)
        waits.wait_for(
            lambda: counts(api, namespace) == (0, 0, 0), 60, "the server to stop and the GPU to go"
        )
        [text] = _notices(hub, "rel")
        assert "server was stopped and its GPU released" in text
        _, user = hub.api("GET", "/users/rel")
        assert not user["servers"].get("", {}).get("ready")
    finally:
        hub.stop()


def test_every_pod_meets_the_restricted_pod_security_level(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """The apiserver's PodSecurity admission refuses any pod below `restricted` in this namespace."""
    api.patch(
        "Namespace",
        namespace,
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    from localcluster.kubeapi import ApiError
    from localcluster.testing import exec_pod

    with pytest.raises(ApiError) as err:  # the level is enforced here: a plain pod is refused
        api.create(exec_pod("plain", command=["sleep", "1"]), namespace)
    assert "violates PodSecurity" in str(err.value)
    hub = gpu_hub(namespace, tmp_path / "hub")
    try:
        spawn(hub, "rita", ONE_G)  # notebook, holder with agent and kernel host
        spawn(hub, "cora", {"profile": "cpu"})
        for pod in api.list("Pod", namespace)["items"]:
            spec = pod["spec"]
            assert spec.get("automountServiceAccountToken") is False, pod["metadata"]["name"]
            for c in spec["containers"]:
                sc = c.get("securityContext") or {}
                assert sc.get("allowPrivilegeEscalation") is False, (pod["metadata"]["name"], c["name"])
                assert sc.get("capabilities", {}).get("drop") == ["ALL"], (pod["metadata"]["name"], c["name"])
        holder = api.get("Pod", "gpu-holder-rita", namespace)
        assert holder["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    finally:
        hub.stop()


def test_a_node_that_disappears_has_its_sessions_cleaned(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    hub = culler_hub(namespace, tmp_path / "hub", args=("--idle-limit", "100000"))
    try:
        spawn(hub, "nia", ONE_G)
        node = api.get("Pod", "gpu-holder-nia", namespace)["spec"]["nodeName"]
        with faults.node_removed(node):
            waits.wait_for(
                lambda: api.get_or_none("ResourceClaim", "gpu-nia", namespace) is None,
                60,
                "the culler to clean the session of the vanished node",
                lambda: hub.log_tail(3000),
            )
            log = hub.log_text()
            assert f"node-gone {namespace}/gpu-nia (nia/): the node of this GPU ({node}) is gone" in log
            waits.wait_for(
                lambda: not (hub.api("GET", "/users/nia")[1]["servers"].get("", {}).get("ready")),
                60,
                "nia's server to be stopped",
            )
        spawn(hub, "nia", ONE_G)
    finally:
        hub.stop()


def test_watches_resume_from_their_last_version_and_ride_out_an_apiserver_restart(
    api: KubeAPI, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared watch (kube/watch.py's Cache, the hub's and the culler's) on the real
    apiserver: each watch the apiserver ends (after 1 s here) is resumed from the last
    resourceVersion, not listed again; across an apiserver restart it resumes (or, on 410
    Gone, lists once, NotOlderThan that version) and sees what changed."""
    monkeypatch.setattr(kube_watch, "WATCH_SECONDS", 1)

    def configmap(name: str) -> dict:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "b"}}

    async def until(cond: Callable[[], object], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not cond():  # a witness: the cache's own state, looked at ten times a second
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.1)

    async def main() -> dict[str, int]:
        await kube_config.load_kube_config(config_file=str(ClusterPaths.default().kubeconfig))
        core = shared_client("CoreV1Api")
        cache = kube_watch.Cache(
            "configmaps", partial(core.list_namespaced_config_map, namespace), lambda: None
        )
        task = asyncio.ensure_future(cache.run())
        try:
            await asyncio.wait_for(cache.ready.wait(), 30)
            await asyncio.to_thread(api.create, configmap("before"), namespace)
            await until(lambda: f"{namespace}/before" in cache.objects, 30, "the watch to see 'before'")
            await until(lambda: cache.watches >= 4, 30, "three watches ended by the apiserver")
            resumed = {"lists": cache.lists, "watches": cache.watches}
            await asyncio.to_thread(faults.restart, "kube-apiserver")
            await asyncio.to_thread(api.create, configmap("after"), namespace)
            await until(lambda: f"{namespace}/after" in cache.objects, 60, "the watch to see 'after'")
            await until(lambda: cache.error is None, 30, "the watch to be healthy again")
            return {**resumed, "lists_after_restart": cache.lists}
        finally:
            task.cancel()

    seen = asyncio.run(main())
    assert seen["lists"] == 1, f"a watch the apiserver ended was listed again: {seen}"
    assert seen["lists_after_restart"] <= 2, f"more than one list for one restart: {seen}"


# Notebook and holder pods without a process each (the runtime answers their HTTP), so a few
# dozen spawns cost the hub's work and the cluster's, not a JupyterLab per user.
CHEAP_PODS = """
c.KubeSpawner.image = "localcluster/fake-singleuser:1"
c.GPUSessionSpawner.holder_image = "localcluster/fake-holder:1"
c.GPUSessionSpawner.persist_kernels = False
c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 300}  # the POST answers when ready or failed
c.KubeSpawner.start_timeout = 120
c.GPUSessionSpawner.gpu_allocation_timeout = 90
"""
# Every session idle (nobody uses the fake notebooks): warned after 4 s, culled after 6 s.
FAST_CULL = ("--idle-limit", "6", "--warn-before", "2", "--gpu-idle-limit", "0")
FAULT_SPAWNS = int(os.environ.get("GPUSESSIONS_FAULT_SPAWNS", "12"))


def _one_claim_per_server(api: KubeAPI, namespace: str) -> list[dict]:
    claims = gpu_objects(api, namespace)["claims"]
    owners = [
        ((c["metadata"].get("annotations") or {}).get("gpusessions.io/user"), c["metadata"]["name"])
        for c in claims
    ]
    users = [u for u, _ in owners]
    assert len(users) == len(set(users)), f"two claims for one server: {sorted(owners)}"
    return claims


def test_apiserver_restart_during_concurrent_spawns_and_culls_leaks_nothing(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """FAULT_SPAWNS users spawn at once (GPUSESSIONS_FAULT_SPAWNS: 12 in make test, 50 measured
    in docs/devcluster.md) on a hub whose culler culls every session 6 s after its start, and
    the apiserver restarts in the middle: three sessions ready before are being warned and
    culled then, the others are being created and allocated (9 MIG 1g.10gb slices: most wait
    for one a cull frees). Every spawn ends ready or refused in words; in the end the culler
    has released everything, no claim, holder or notebook pod is left, and no server ever had
    two claims."""
    from concurrent.futures import ThreadPoolExecutor

    hub = culler_hub(namespace, tmp_path / "hub", args=FAST_CULL, config=CHEAP_PODS)
    t0 = time.monotonic()
    try:
        first = [f"early{i}" for i in range(3)]
        for user in first:
            spawn(hub, user, ONE_G)
        users = [f"burst{i:02d}" for i in range(FAULT_SPAWNS)]
        for user in users:
            hub.api("POST", f"/users/{user}")

        def one(user: str) -> tuple[str, int, object]:
            code, body = hub.api("POST", f"/users/{user}/server", {"user_options": ONE_G}, timeout=300)
            return user, code, body

        with ThreadPoolExecutor(len(users)) as pool:
            spawns = [pool.submit(one, u) for u in users]
            faults.restart("kube-apiserver")
            restarted = time.monotonic() - t0
            results = [f.result(timeout=360) for f in spawns]
            _one_claim_per_server(api, namespace)
        for user, code, body in results:
            if code not in (201, 202):
                message = body.get("message", "") if isinstance(body, dict) else str(body)
                assert message and "Traceback" not in message, (user, code, body)
        ok = [u for u, code, _ in results if code in (201, 202)]
        assert ok, f"no spawn came through the restart: {results}"

        def all_released() -> bool:
            o = gpu_objects(api, namespace)
            _one_claim_per_server(api, namespace)
            running = [
                u
                for u in first + users
                if (m := server_model(hub, u)) and (m.get("ready") or m.get("pending"))
            ]
            return not (o["claims"] or o["holders"] or o["notebooks"] or running)

        waits.wait_for(all_released, 240, "the culler to release every session", lambda: hub.log_tail(4000))
        log = hub.log_text()
        culled = log.count(f"cull {namespace}/gpu-")
        assert culled >= len(first) + len(ok), f"{culled} culls for {len(first) + len(ok)} sessions"
        orphans = api.list("Pod", namespace)["items"]
        assert orphans == [], [p["metadata"]["name"] for p in orphans]
        print(
            f"\n{FAULT_SPAWNS} concurrent spawns: {len(ok)} ready, {len(users) - len(ok)} refused in words; "
            f"apiserver restarted at {restarted:.0f} s; all released at {time.monotonic() - t0:.0f} s"
        )
    finally:
        hub.stop()
