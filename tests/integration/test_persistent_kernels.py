"""Kernels hosted in the GPU holder survive notebook restarts (real processes, local cluster)."""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gpusessions.core import kernels as K
from gpusessions.core.labels import SESSION_ANNOTATION as SESSION
from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .cullertools import culler_hub, sessions
from .hubtools import (
    container_pid,
    nb,
    open_notebook,
    process_env,
    spawn,
    start,
    stop,
    wait_ready,
    wait_stopped,
)
from .kerneltools import execute, watch_status

pytestmark = pytest.mark.cluster
ONE_G = {"profile": "mig-1g-10gb"}


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, does not count)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.shared_hub
def test_kernel_state_survives_a_notebook_restart_and_is_lost_plainly_with_the_holder(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "alice", ONE_G)
    env = process_env(api, namespace, "jupyter-alice")
    assert env["JUPYTER_GATEWAY_URL"].startswith("http://127.")
    assert env["GPUSESSIONS_PERSIST_KERNELS"] == "1"
    pod = api.get("Pod", "jupyter-alice", namespace)
    nb_env = pod["spec"]["containers"][0]["env"]
    [token_env] = [e for e in nb_env if e["name"] == "JUPYTER_GATEWAY_AUTH_TOKEN"]
    assert "value" not in token_env, "the gateway token comes from the Secret, not the pod spec"

    code, s = nb(
        hub,
        "POST",
        "/user/alice/api/sessions",
        {"path": "train.ipynb", "name": "train.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    assert code == 201, code
    kid = s["kernel"]["id"]
    out = execute(
        hub.url,
        "alice",
        kid,
        hub.token,
        "import os\nmodel = {'weights': 41 + 1}\nbuf = bytearray(64 * 2**20)\n"
        "print(os.getpid(), os.environ.get('NVIDIA_VISIBLE_DEVICES'))",
    )
    kernel_pid, devices = int(out.split()[0]), out.split()[1]
    # The kernel runs in the holder's gateway container, which was given the session's GPU (CDI
    # injection: NVIDIA_VISIBLE_DEVICES=void there, the device itself recorded by the runtime).
    holder_env = process_env(api, namespace, "gpu-holder-alice", "kernels")
    assert devices == holder_env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert holder_env["DEVCLUSTER_CDI_DEVICES"].startswith("MIG-")
    # The kernel has the session's variables and session file, as a terminal of the notebook
    # does (README, step 3), and numpy and pandas.
    seen = json.loads(
        execute(
            hub.url,
            "alice",
            kid,
            hub.token,
            "import json, os, numpy, pandas\n"
            "print(json.dumps({'file': json.load(open(os.environ['GPUSESSIONS_SESSION_FILE'])),"
            " 'env': {k: v for k, v in os.environ.items() if k.startswith('GPUSESSIONS_')},"
            " 'sum': int(numpy.arange(4).sum()), 'rows': len(pandas.DataFrame({'a': [1, 2]}))}))",
        )
    )
    notebook_file = json.loads(api.get("Pod", "jupyter-alice", namespace)["metadata"]["annotations"][SESSION])
    assert seen["file"] == notebook_file and seen["file"]["claim"] == "gpu-alice"
    assert seen["file"]["devices"] and seen["file"]["node"] == "gpu-node-0"
    assert seen["env"]["GPUSESSIONS_CLAIM"] == "gpu-alice"
    assert (
        seen["env"]["GPUSESSIONS_PROFILE"] == "mig-1g-10gb"
        and seen["env"]["GPUSESSIONS_NODE"] == "gpu-node-0"
    )
    assert seen["env"]["GPUSESSIONS_GPU"] == "MIG 1g.10gb"
    assert (seen["sum"], seen["rows"]) == (6, 2)

    stop(hub, "alice")
    assert api.get_or_none("Pod", "jupyter-alice", namespace) is None
    assert alive(kernel_pid), "stopping the notebook server must not stop the kernel"

    spawn(hub, "alice", ONE_G)
    code, sessions = nb(hub, "GET", "/user/alice/api/sessions")
    assert code == 200
    assert [(x["path"], x["kernel"]["id"]) for x in sessions] == [("train.ipynb", kid)]
    code, kernels = nb(hub, "GET", "/user/alice/api/kernels")
    assert [k["id"] for k in kernels] == [kid]
    assert execute(hub.url, "alice", kid, hub.token, "print(model['weights'], len(buf))").strip() == (
        "42 67108864"
    )

    # The kernel process crashes: the gateway restarts it and says so on the kernel's channel
    # (JupyterLab shows "kernel restarting"); the kernel's variables are gone, the kernel stays.
    watcher = watch_status(hub.url, "alice", kid, hub.token, {"restarting", "dead"})
    os.kill(kernel_pid, signal.SIGKILL)
    assert "restarting" in watcher.result(timeout=60)
    assert execute(hub.url, "alice", kid, hub.token, "print('model' in dir())").strip() == "False"
    kernel_pid = int(execute(hub.url, "alice", kid, hub.token, "import os; print(os.getpid())"))

    # The holder's kernel host dies: the kernels go with it, and the user is told plainly.
    os.kill(container_pid(api, namespace, "gpu-holder-alice", "kernels"), signal.SIGKILL)
    waits.wait_for(lambda: not alive(kernel_pid), 30, "the kernel to end with its gateway")

    def lost() -> list[dict[str, Any]] | None:
        code, body = nb(hub, "GET", "/user/alice/gpusessions/warnings")
        return (body or {}).get("lost_kernels") if code == 200 else None

    [event] = waits.wait_for(lost, 60, "the notebook to report the lost kernel")
    assert event["count"] == 1 and event["kernels"] == [kid]
    assert "restarted" in event["reason"] and "GPU memory" in event["reason"]
    code, kernels = nb(hub, "GET", "/user/alice/api/kernels")
    assert code == 200 and kernels == []


@pytest.mark.shared_hub
def test_a_gateway_answers_only_its_own_token_and_goes_with_the_gpu(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "alice", ONE_G)
    spawn(hub, "bob", ONE_G)
    alice = process_env(api, namespace, "jupyter-alice")
    bob = process_env(api, namespace, "jupyter-bob")
    assert alice["JUPYTER_GATEWAY_AUTH_TOKEN"] != bob["JUPYTER_GATEWAY_AUTH_TOKEN"]

    def gateway(url: str, token: str | None) -> int:
        headers = {"Authorization": f"token {token}"} if token else {}
        req = urllib.request.Request(url + "/api/kernels", headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert gateway(alice["JUPYTER_GATEWAY_URL"], alice["JUPYTER_GATEWAY_AUTH_TOKEN"]) == 200
    assert gateway(alice["JUPYTER_GATEWAY_URL"], bob["JUPYTER_GATEWAY_AUTH_TOKEN"]) in (401, 403)
    assert gateway(alice["JUPYTER_GATEWAY_URL"], None) in (401, 403)

    # The network side: a policy per session admits the gateway port only from that
    # session's notebook pod (the process runtime cannot enforce it; a real cluster's CNI does).
    policy = api.get("NetworkPolicy", "gpu-holder-alice-kernels", namespace)

    def selected(match: dict[str, str]) -> list[str]:
        sel = ",".join(f"{k}={v}" for k, v in match.items())
        return sorted(p["metadata"]["name"] for p in api.list("Pod", namespace, label_selector=sel)["items"])

    assert selected(policy["spec"]["podSelector"]["matchLabels"]) == ["gpu-holder-alice"]
    gateway_rule, agent_rule = policy["spec"]["ingress"]
    assert gateway_rule["ports"] == [{"port": 8888, "protocol": "TCP"}]
    [peer] = gateway_rule["from"]
    assert selected(peer["podSelector"]["matchLabels"]) == ["jupyter-alice"]
    # The agent port: that notebook (its GPU panel) and the culler only.
    assert agent_rule["ports"] == [{"port": 9400, "protocol": "TCP"}]
    notebook, *cullers = agent_rule["from"]
    assert selected(notebook["podSelector"]["matchLabels"]) == ["jupyter-alice"]
    assert cullers == [dict(p) for p in K.AGENT_READERS]
    assert policy["metadata"]["ownerReferences"][0]["name"] == "gpu-alice"

    # Releasing the GPU ends the kernels and removes the token and the policy.
    gw_pid = container_pid(api, namespace, "gpu-holder-alice", "kernels")
    code, _ = hub.api("POST", "/gpusessions/users/alice/release")
    assert code == 200
    waits.wait_for(lambda: not alive(gw_pid), 30, "the gateway to end with the released GPU")
    waits.wait_for(
        lambda: api.get_or_none("Secret", "gpu-holder-alice-kernels", namespace) is None,
        30,
        "the gateway token to be deleted",
    )
    waits.wait_for(
        lambda: api.get_or_none("NetworkPolicy", "gpu-holder-alice-kernels", namespace) is None,
        30,
        "the claim's garbage collection to delete the policy",
    )
    assert api.get_or_none("Secret", "gpu-holder-bob-kernels", namespace) is not None
    assert api.get_or_none("NetworkPolicy", "gpu-holder-bob-kernels", namespace) is not None


def test_admin_view_shows_each_kernel_with_its_gpu_memory(
    api: KubeAPI, namespace: str, tmp_path: Path, load_file: Path
) -> None:
    hub = culler_hub(namespace, tmp_path / "hub", args=("--idle-limit", "600"))
    try:
        spawn(hub, "alice", ONE_G)
        code, s = nb(hub, "POST", "/user/alice/api/kernels", {"name": "python3"})
        assert code == 201, code
        kid = s["id"]
        pid = int(execute(hub.url, "alice", kid, hub.token, "import os; print(os.getpid())"))
        gpu = process_env(api, namespace, "gpu-holder-alice", "kernels")["DEVCLUSTER_CDI_DEVICES"]
        # NVML (simulated) reports the kernel's process holding 2 GiB on the session's device.
        load_file.write_text(json.dumps({gpu: {"activity": 50, "pids": {str(pid): 2048}}}))

        def kernels() -> list[dict[str, Any]] | None:
            ks = sessions(hub).get("gpu-alice", {}).get("kernels")
            return ks if ks and ks[0].get("gpu_memory") else None

        [k] = waits.wait_for(kernels, 60, "the admin view to show the kernel's GPU memory")
        assert k["id"] == kid and k["pid"] == pid and k["name"] == "python3"
        assert k["gpu_memory"] == 2048 * 2**20
    finally:
        hub.stop()


def test_a_session_kept_from_before_kernels_were_on_still_starts(
    api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    from localcluster.hubproc import start_hub

    from .hubtools import GPU_HUB_CONFIG

    cfg = GPU_HUB_CONFIG.format(namespace=namespace)
    hub = start_hub(cfg + "\nc.GPUSessionSpawner.persist_kernels = False\n", tmp_path / "hub")
    try:
        spawn(hub, "carl", ONE_G)
        assert [c["name"] for c in api.get("Pod", "gpu-holder-carl", namespace)["spec"]["containers"]] == [
            "holder"
        ]
        stop(hub, "carl")
    finally:
        hub.stop()
    # The admin turns kept kernels on and restarts the hub; carl's kept session still starts.
    hub = start_hub(cfg, tmp_path / "hub", ports=hub.ports)
    try:
        spawn(hub, "carl", ONE_G)
        assert "JUPYTER_GATEWAY_URL" not in process_env(api, namespace, "jupyter-carl")
        assert "has no kernel host" in hub.log_text()
    finally:
        hub.stop()


# -- parking: the holder's termination saves the kernels, the next start restores them --------
ARRAY_LEN = 100 * 2**20 // 8  # a 100 MiB float64 array

BUILD_STATE = f"""
import numpy as np, pandas as pd
arr = np.arange({ARRAY_LEN}, dtype=np.float64)
df = pd.DataFrame({{"a": range(1000), "b": ["x"] * 1000}})
class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __eq__(self, other):
        return (self.x, self.y) == (other.x, other.y)
p = Point(1, 2)
def make_adder(k):
    return lambda x: x + k
add3 = make_adder(3)
f = open("park-open-file.txt", "w")
answer = 42
print("built")
"""

CHECK_STATE = f"""
import json, numpy as np, pandas as pd
ns = globals()
checks = {{
    "arr": "arr" in ns and arr.shape == ({ARRAY_LEN},)
    and bool((arr[:: 2**16] == np.arange(0, {ARRAY_LEN}, 2**16)).all()),
    "df": "df" in ns and df.equals(pd.DataFrame({{"a": range(1000), "b": ["x"] * 1000}})),
    "p": "p" in ns and (p.x, p.y) == (1, 2),
    "add3": "add3" in ns and add3(4) == 7,
    "answer": ns.get("answer") == 42,
}}
print(json.dumps(checks))
"""


def home_of(cluster_root: Path, namespace: str, user: str) -> Path:
    return cluster_root / "homes" / namespace / user


@pytest.mark.shared_hub
def test_a_released_gpu_parks_the_kernels_and_the_next_start_restores_them(
    hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    grace = 120 + K.PARK_MARGIN  # park_timeout's default and the margin
    spawn(hub, "dora", ONE_G)
    holder = api.get("Pod", "gpu-holder-dora", namespace)
    assert holder["spec"]["terminationGracePeriodSeconds"] == grace
    old = open_notebook(hub, "dora", "work/train.ipynb")
    assert execute(hub.url, "dora", old, hub.token, BUILD_STATE, timeout=120).strip() == "built"

    # The user releases the GPU: the hub deletes the holder with its grace period, and the
    # holder's kernel host parks the kernel before its gateway stops.
    code, body = hub.api("POST", "/gpusessions/users/dora/release")
    assert code == 200 and body["released"], body
    folder = home_of(cluster.paths.root, namespace, "dora") / ".gpusessions" / "parked" / "_default"

    def parked() -> dict[str, Any] | None:
        try:
            rec = json.loads((folder / "session.json").read_text())
        except (OSError, ValueError):
            return None
        return rec if rec["kernels"][0]["status"] != "parking" else None

    record = waits.wait_for(parked, 90, "the holder's termination to park the kernel")
    [k] = record["kernels"]
    assert (k["id"], k["name"], k["paths"], k["status"]) == (
        old,
        "python3",
        ["work/train.ipynb"],
        "parked",
    ), k
    assert record["complete"] and record["seconds"] < 120
    saved = set(k["report"]["saved"])
    assert {"arr", "df", "p", "add3", "answer"} <= saved, k["report"]
    assert [n["name"] for n in k["report"]["not_saved"] if n["name"] == "f"] == ["f"], k["report"]
    assert (folder / "session.json").stat().st_mode & 0o777 == 0o600
    assert folder.stat().st_mode & 0o777 == 0o700
    killing = [e for e in waits.events_for(api, namespace, "Pod", "gpu-holder-dora") if "grace period" in e]
    assert any(f"grace period {grace}s" in e for e in killing), killing
    waits.wait_for(
        lambda: api.get_or_none("Pod", "gpu-holder-dora", namespace) is None, 90, "the holder to go"
    )

    # The next start (a new GPU, a new gateway): the first kernel request restores the
    # kernel, and the notebook's path maps to the restored kernel.
    spawn(hub, "dora", ONE_G)
    code, sessions = nb(hub, "GET", "/user/dora/api/sessions")
    assert code == 200, code
    [(path, new)] = [(x["path"], x["kernel"]["id"]) for x in sessions]
    assert path == "work/train.ipynb" and new != old
    code, status = nb(hub, "GET", "/user/dora/gpusessions/restore")
    assert code == 200 and status["state"] == "restored", status
    assert status["message"].startswith("Restored your session from ") and "not kept" in status["message"]
    [ks] = status["kernels"]
    assert ks["restored"] and ks["kernel"] == new and "f" in " ".join(ks["not_kept"])
    restored = set(ks["variables"])
    assert {"arr", "df", "p", "add3", "answer"} <= restored <= saved
    checks = json.loads(execute(hub.url, "dora", new, hub.token, CHECK_STATE))
    assert checks["arr"] and checks["df"] and checks["answer"], checks
    assert checks == dict.fromkeys(checks, True), checks  # the class instance and the closure too
    # The park was restored in full: moved aside, not deleted; none is pending.
    assert not folder.exists()
    assert [p.name.split("-")[0] for p in folder.parent.glob("_default.restored-*")] == ["_default.restored"]


@pytest.mark.shared_hub
def test_a_holder_deleted_directly_parks_its_kernels(
    hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    """A drain or KAI's reclaim deletes the holder pod with its default grace period."""
    spawn(hub, "erin", ONE_G)
    code, s = nb(hub, "POST", "/user/erin/api/kernels", {"name": "python3"})
    assert code == 201, code
    kid = s["id"]
    assert execute(hub.url, "erin", kid, hub.token, "answer = 42\nprint('ok')").strip() == "ok"
    api.delete("Pod", "gpu-holder-erin", namespace)
    folder = home_of(cluster.paths.root, namespace, "erin") / ".gpusessions" / "parked" / "_default"

    def parked() -> dict[str, Any] | None:
        try:
            rec = json.loads((folder / "session.json").read_text())
        except (OSError, ValueError):
            return None
        return rec if rec["kernels"][0]["status"] == "parked" else None

    [k] = waits.wait_for(parked, 90, "the deleted holder to park its kernel")["kernels"]
    assert k["id"] == kid and "answer" in k["report"]["saved"]

    # An admin deletes erin: the hub cannot read her home, so a pod that runs as her notebook
    # does (her home volume, her uid) deletes her parked sessions there, and goes too.
    code, _ = hub.api("DELETE", "/users/erin")
    assert code == 204, code
    assert not folder.parent.exists(), sorted(p.name for p in folder.parent.iterdir())
    assert folder.parent.parent.exists(), "only the parks go, not the rest of the home's files"
    assert api.get_or_none("Pod", "gpu-park-cleanup-erin", namespace) is None
    assert "erin: deleted the parked sessions in ~/.gpusessions/parked" in hub.log_text()


# -- kernels in the notebook pod (no kernel host): parked when the notebook server stops -------
TIGHT = (
    '\nEXTRA.append(mig_profile("1g.10gb", "tight", park_timeout=5, park_max_bytes=50 << 20)'
    ' | {"slug": "tight", "display_name": "MIG 1g.10gb, a 5 s park of at most 50 MiB"})\n'
)
# A cell that holds its kernel past the park's budget (an interrupt does not end it: SIGINT is
# ignored from its first line; the file it writes then says it holds, see `hold`).
HOLD = """
import signal, pathlib, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
pathlib.Path.home().joinpath(".holding").write_text("holding")
while True:
    time.sleep(3600)
"""


def submit(hub: Hub, user: str, kid: str, code: str) -> None:
    """Send a cell and do not wait for it (it runs on after the socket closes)."""
    try:
        execute(hub.url, user, kid, hub.token, code, timeout=1)
    except TimeoutError:
        return
    raise AssertionError("the cell ended")


def test_kernels_in_the_notebook_pod_park_when_it_stops_and_come_back_what_could_be_kept(
    api: KubeAPI, namespace: str, tmp_path: Path, cluster: Any
) -> None:
    """persist_kernels off: the kernels run in the notebook pod, and its server parks them when
    the hub stops it (with the pod's grace period, not KubeSpawner's 1 s).

    gus: one kernel with every kind of value, one whose array file is truncated and one whose
    manifest is damaged between the park and the next start: all three come back (the first
    whole, the open file named; the damaged ones with the rest, the damage named), the notebook
    re-attached to its restored kernel. fay ("tight": 5 s, 50 MiB): a kernel over her limit and
    one busy past the budget are not parked, and her next start says what was lost, in words."""
    from localcluster.hubproc import start_hub

    from .hubtools import GPU_HUB_CONFIG

    cfg = GPU_HUB_CONFIG.format(namespace=namespace) + TIGHT
    hub = start_hub(cfg + "\nc.GPUSessionSpawner.persist_kernels = False\n", tmp_path / "hub")
    try:
        code, _ = start(hub, "gus", ONE_G)
        assert code in (201, 202)
        spawn(hub, "fay", {"profile": "tight"})
        wait_ready(hub, "gus")
        pod = api.get("Pod", "jupyter-gus", namespace)
        assert pod["spec"]["terminationGracePeriodSeconds"] == 120 + K.PARK_MARGIN
        assert "JUPYTER_GATEWAY_URL" not in process_env(api, namespace, "jupyter-gus")
        code, s = nb(
            hub,
            "POST",
            "/user/gus/api/sessions",
            {
                "path": "work/train.ipynb",
                "name": "train.ipynb",
                "type": "notebook",
                "kernel": {"name": "python3"},
            },
        )
        assert code == 201, code
        k1 = s["kernel"]["id"]
        assert execute(hub.url, "gus", k1, hub.token, BUILD_STATE, timeout=120).strip() == "built"
        k2, k3 = (nb(hub, "POST", "/user/gus/api/kernels", {"name": "python3"})[1]["id"] for _ in "ab")
        state2 = "import numpy as np\nx = np.ones(2**18)\ny = np.arange(10)\nanswer = 7\nprint('ok')"
        assert execute(hub.url, "gus", k2, hub.token, state2).strip() == "ok"
        assert (
            execute(hub.url, "gus", k3, hub.token, "z = [1, 2, 3]\nw = 'kept'\nprint('ok')").strip() == "ok"
        )
        f1, f2 = (nb(hub, "POST", "/user/fay/api/kernels", {"name": "python3"})[1]["id"] for _ in "ab")
        big = "import numpy as np\nbig = np.zeros(100 * 2**20 // 8)\nprint('ok')"  # 100 MiB
        assert execute(hub.url, "fay", f1, hub.token, big).strip() == "ok"
        submit(hub, "fay", f2, HOLD)
        # The stop's interrupt must find the cell holding, not about to start (an interrupt then
        # ends it, and the kernel would park).
        holding = home_of(cluster.paths.root, namespace, "fay") / ".holding"
        waits.wait_for(holding.exists, 60, "fay's cell to hold its kernel")

        # The hub stops both servers: each notebook server parks its kernels first.
        for user in ("gus", "fay"):
            code, body = hub.api("DELETE", f"/users/{user}/server")
            assert code in (202, 204), (code, body)
        homes = {
            u: home_of(cluster.paths.root, namespace, u) / ".gpusessions" / "parked" / "_default"
            for u in ("gus", "fay")
        }

        def parked(user: str) -> dict[str, Any] | None:
            try:
                rec = json.loads((homes[user] / "session.json").read_text())
            except (OSError, ValueError):
                return None
            return rec if all(k["status"] != "parking" for k in rec["kernels"]) else None

        gus = waits.wait_for(lambda: parked("gus"), 90, "gus's server to park its kernels")
        fay = waits.wait_for(lambda: parked("fay"), 90, "fay's server to park its kernels")
        wait_stopped(hub, "gus")
        wait_stopped(hub, "fay")
        assert gus["trigger"] == "notebook-stopping" and gus["complete"], gus
        by_id = {k["id"]: k for k in gus["kernels"]}
        assert by_id[k1]["paths"] == ["work/train.ipynb"] and set(by_id) == {k1, k2, k3}
        assert {"arr", "df", "p", "add3", "answer"} <= set(by_id[k1]["report"]["saved"])
        for user, grace in (("gus", 120 + K.PARK_MARGIN), ("fay", 5 + K.PARK_MARGIN)):
            events = waits.events_for(api, namespace, "Pod", f"jupyter-{user}")
            assert any(f"grace period {grace}s" in e for e in events), events
        fk = {k["id"]: k for k in fay["kernels"]}
        assert fk[f1]["status"] == "failed" and fk[f1]["refused"] == "limit", fk[f1]
        assert fk[f1]["error"] == "the session's state is 100.0 MiB, over your parking limit (50.0 MiB)"
        assert fk[f2]["status"] == "timeout", fk[f2]

        # Damage two of gus's parks in his home: a truncated array file, a corrupted manifest.
        arr = homes["gus"] / k2 / "v.x.npy"
        with open(arr, "r+b") as fh:
            fh.truncate(arr.stat().st_size // 2)
        (homes["gus"] / k3 / "manifest.json").write_text("{not json")

        spawn(hub, "gus", ONE_G)
        spawn(hub, "fay", {"profile": "tight"})
        code, sessions = nb(hub, "GET", "/user/gus/api/sessions")
        assert code == 200, code
        [(path, new1)] = [(x["path"], x["kernel"]["id"]) for x in sessions]
        assert path == "work/train.ipynb" and new1 != k1
        code, status = nb(hub, "GET", "/user/gus/gpusessions/restore")
        assert code == 200 and status["state"] == "restored", status
        new = {k["id"]: k for k in status["kernels"]}
        assert all(new[k]["restored"] for k in (k1, k2, k3)) and new[k1]["kernel"] == new1, status
        checks = json.loads(execute(hub.url, "gus", new1, hub.token, CHECK_STATE))
        assert checks == dict.fromkeys(checks, True), checks
        assert any(n.startswith("f: open file") for n in new[k1]["not_kept"]), new[k1]
        assert [n for n in new[k2]["not_kept"] if n.startswith("x: file truncated")], new[k2]
        out = execute(
            hub.url, "gus", new[k2]["kernel"], hub.token, "print(int(y.sum()), answer, 'x' in dir())"
        )
        assert out.split() == ["45", "7", "False"], out
        assert (
            execute(hub.url, "gus", new[k3]["kernel"], hub.token, "print(z, w)").strip() == "[1, 2, 3] kept"
        )
        assert "x: file truncated" in status["message"] and "not kept" in status["message"], status

        code, kernels = nb(hub, "GET", "/user/fay/api/kernels")
        assert code == 200 and kernels == [], kernels
        code, status = nb(hub, "GET", "/user/fay/gpusessions/restore")
        assert code == 200 and status["state"] == "failed", status
        message = status["message"]
        assert message.startswith("Your session from ") and "could not be parked (" in message, message
        assert "the session's state is 100.0 MiB, over your parking limit (50.0 MiB)" in message, message
        assert "its park did not finish within its 5 s budget" in message, message
        assert message.endswith("its variables were lost; new kernels start empty."), message
    finally:
        hub.stop()
