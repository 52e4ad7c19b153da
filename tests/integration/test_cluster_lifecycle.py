"""Start, reuse and stop: a second, throwaway cluster in its own folder and ports."""

from __future__ import annotations

import json
import os
import re
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import cluster as lc
from localcluster import procs, waits
from localcluster.certs import PKI, issue_client_cert
from localcluster.kubeapi import ApiError, Credentials, KubeAPI
from localcluster.paths import REPO_ROOT, ClusterPaths
from localcluster.shapes import K8S_VERSION
from localcluster.testing import exec_pod

pytestmark = pytest.mark.cluster

# 200 above the test cluster's ports, so clusters of two checkouts never meet.
PORT_BASE = int(os.environ.get("DEVCLUSTER_PORT_BASE", lc.DEFAULT_PORT_BASE)) + 200


@pytest.fixture
def own_paths(tmp_path: Path, cluster: object) -> Iterator[ClusterPaths]:
    paths = ClusterPaths(tmp_path / "dc", bin_dir=ClusterPaths.default().bin)
    yield paths
    lc.down(paths)


def test_up_reuse_down_stops_every_process_and_frees_ports(own_paths: ClusterPaths) -> None:
    first = lc.up("cpu-only", PORT_BASE, own_paths)
    again = lc.up("cpu-only", PORT_BASE, own_paths)
    assert again.pids == first.pids, "a second up reuses the running cluster"
    with pytest.raises(lc.ClusterError, match="already running"):
        lc.up("small", PORT_BASE, own_paths)

    api = KubeAPI.from_kubeconfig(own_paths.kubeconfig)
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "lc"}})
    api.create(exec_pod("p", command=["sleep", "3600"]), "lc")
    waits.pod_ready(api, "lc", "p")
    owned = procs.owned_pids(own_paths.root)
    # etcd, apiserver, controller-manager, scheduler, runtime and the pod's process
    assert len(owned) >= 6

    assert lc.down(own_paths) is True
    assert not any(procs.alive(p) for p in owned)
    assert procs.owned_pids(own_paths.root) == []
    for port in first.ports.values():
        assert procs.port_free(port), f"port {port} still busy after down"
    assert lc.status(own_paths) == {"running": False}


def test_tests_refuse_a_running_cluster_of_another_shape_in_one_line(own_paths: ClusterPaths) -> None:
    """As after `make demo`: pytest stops at once with one line saying what to run, and leaves the
    running cluster alone."""
    state = lc.up("cpu-only", PORT_BASE, own_paths)
    env = {**os.environ, "DEVCLUSTER_DIR": str(own_paths.root), "DEVCLUSTER_BIN": str(own_paths.bin)}
    env.pop("DEVCLUSTER_TEST_SHAPE", None)
    for name in [k for k in env if k.startswith("PYTEST_XDIST")]:
        env.pop(name)  # a worker's own cluster folder is not the one this test started
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            f"{__file__}::test_status_reports_components",
        ],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == pytest.ExitCode.USAGE_ERROR, r.stdout + r.stderr
    [line] = [ln for ln in r.stdout.splitlines() if "shape 'cpu-only' is running" in ln]
    assert "the tests need shape 'small': run 'make demo-down' or 'make cluster-down' first" in line
    assert "Traceback" not in r.stdout + r.stderr and "ClusterError" not in r.stdout
    assert lc.healthy(own_paths, state), "the running cluster is left alone"


def test_a_busy_port_is_one_clear_error(own_paths: ClusterPaths) -> None:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", PORT_BASE))
        s.listen()
        with pytest.raises(lc.ClusterError) as err:
            lc.up("cpu-only", PORT_BASE, own_paths)
    msg = str(err.value)
    assert f"port {PORT_BASE} (for kube-apiserver)" in msg and "DEVCLUSTER_PORT_BASE" in msg
    assert "\n" not in msg
    assert procs.owned_pids(own_paths.root) == []


def test_a_component_that_fails_at_start_up_is_one_line_with_its_log(tmp_path: Path, cluster: object) -> None:
    """`make cluster` with a kube-scheduler that refuses its flags: one line naming it, its log and
    the log's last lines; nothing left running."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for b in ClusterPaths.default().bin.iterdir():
        (bin_dir / b.name).symlink_to(b)
    (bin_dir / "kube-scheduler").unlink()
    (bin_dir / "kube-scheduler").write_text(
        '#!/bin/sh\necho "Error: unknown flag: --no-such-flag" >&2\nexit 1\n'
    )
    (bin_dir / "kube-scheduler").chmod(0o755)
    paths = ClusterPaths(tmp_path / "dc", bin_dir=bin_dir)
    env = {**os.environ, "DEVCLUSTER_DIR": str(paths.root), "DEVCLUSTER_BIN": str(bin_dir)}
    env["PYTHONPATH"] = str(REPO_ROOT / "devcluster")
    try:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "localcluster",
                "up",
                "--shape",
                "cpu-only",
                "--port-base",
                str(PORT_BASE),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        owned = procs.owned_pids(paths.root)
    finally:
        lc.down(paths)
    assert r.returncode == 1
    [line] = r.stderr.splitlines()
    log = paths.log("kube-scheduler")
    assert line.startswith(
        f"devcluster: error: kube-scheduler exited during start-up; see {log} (last lines: "
    )
    assert "unknown flag: --no-such-flag" in line
    assert "Traceback" not in r.stdout + r.stderr
    assert owned == []


def test_missing_binaries_say_how_to_build_them(tmp_path: Path) -> None:
    paths = ClusterPaths(tmp_path / "dc", bin_dir=tmp_path / "nothing")
    with pytest.raises(lc.ClusterError, match="make devcluster-build"):
        lc.up("cpu-only", PORT_BASE, paths)


def test_server_reports_its_real_version(api: KubeAPI) -> None:
    v = api.request("GET", "/version")
    assert v["gitVersion"] == K8S_VERSION == "v1.36.5"
    assert (v["major"], v["minor"]) == ("1", "36")
    script = (REPO_ROOT / "devcluster/scripts/build.sh").read_text()
    built = re.search(r'^K8S_VERSION="(v[\d.]+)"$', script, re.M)
    assert built and built.group(1) == K8S_VERSION, "build.sh and shapes.K8S_VERSION differ"


def test_rbac_is_on(cluster: object, tmp_path: Path) -> None:
    """An authenticated identity without bindings is refused; binding a role grants exactly that."""
    paths = ClusterPaths.default()
    pki = PKI(paths.pki)
    issue_client_cert(pki, "rbac-probe", (), tmp_path / "c.crt", tmp_path / "c.key")
    admin = KubeAPI.from_kubeconfig(paths.kubeconfig)
    probe = KubeAPI(
        Credentials(admin.creds.server, str(pki.ca_crt), str(tmp_path / "c.crt"), str(tmp_path / "c.key"))
    )
    with pytest.raises(ApiError) as err:
        probe.list("Pod", "default")
    assert err.value.status == 403
    # Anonymous requests are refused too.
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    with pytest.raises(urllib.error.HTTPError) as anon:
        urllib.request.urlopen(admin.creds.server + "/api/v1/pods", context=ctx, timeout=10)
    assert anon.value.code == 401
    # What a role grants is allowed, nothing more.
    admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "rbac-probe"},
            "rules": [{"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]}],
        }
    )
    admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "rbac-probe"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rbac-probe"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "rbac-probe"}],
        }
    )
    try:
        waits.wait_for(lambda: probe.list("ResourceSlice")["items"], 10, "the binding to take effect")
        with pytest.raises(ApiError) as err:
            probe.list("Pod", "default")
        assert err.value.status == 403
    finally:
        admin.delete("ClusterRoleBinding", "rbac-probe")
        admin.delete("ClusterRole", "rbac-probe")


def test_status_reports_components(cluster: object) -> None:
    st = lc.status(ClusterPaths.default())
    assert st["running"] is True
    assert set(st["components"]) == {
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kai-podgrouper",
        "kai-scheduler",
        "kai-binder",
        "kai-podgroupcontroller",
        "kai-queuecontroller",
        "runtime",
    }
    assert all(st["components"].values())
    assert json.dumps(st)


def test_make_cluster_and_cluster_down_are_the_fixed_interface(own_paths: ClusterPaths) -> None:
    """`make cluster SHAPE=...` starts it with the kubeconfig and every component's log in the
    cluster folder, a second `make cluster` reuses it, `make cluster-down` frees its ports."""
    base = PORT_BASE + 100
    env = {
        **os.environ,
        "DEVCLUSTER_DIR": str(own_paths.root),
        "DEVCLUSTER_BIN": str(own_paths.bin),
        "DEVCLUSTER_PORT_BASE": str(base),
    }

    def make(*args: str) -> str:
        r = subprocess.run(
            ["make", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout + r.stderr

    assert "cluster ready" in make("cluster", "SHAPE=cpu-only")
    api = KubeAPI.from_kubeconfig(own_paths.kubeconfig)
    assert api.request("GET", "/version")["gitVersion"] == K8S_VERSION
    for name in ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "runtime"):
        assert own_paths.log(name).stat().st_size > 0, f"{name} logs to {own_paths.log(name)}"
    assert "reusing the running cluster" in make("cluster", "SHAPE=cpu-only")
    owned = procs.owned_pids(own_paths.root)
    make("cluster-down")
    assert not any(procs.alive(p) for p in owned)
    assert all(procs.port_free(base + i) for i in range(5))
