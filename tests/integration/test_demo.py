"""`make demo` as the README walks through it: a second, throwaway demo (its own cluster folder,
ports and demo folder) started in the foreground, used through its login and hub.json, and
stopped with Ctrl-C."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster import cluster as lc
from localcluster import procs, waits
from localcluster.demo import NAMESPACE, PORTS
from localcluster.kubeapi import KubeAPI
from localcluster.paths import REPO_ROOT, ClusterPaths
from localcluster.testing import allocated

from .hubtools import logged_in, spawn_form

pytestmark = pytest.mark.cluster
SIZE = "mig-1g-10gb"


class Demo:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "demo"
        self.paths = ClusterPaths(tmp_path / "dc", bin_dir=ClusterPaths.default().bin)
        base = int(os.environ.get("DEVCLUSTER_PORT_BASE", lc.DEFAULT_PORT_BASE)) + 400
        env = {
            **os.environ,
            "DEVCLUSTER_DIR": str(self.paths.root),
            "DEVCLUSTER_BIN": str(self.paths.bin),
            "DEVCLUSTER_PORT_BASE": str(base),
            "GPUSESSIONS_DEMO_DIR": str(self.dir),
            "PYTHONPATH": str(REPO_ROOT / "devcluster"),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "localcluster.demo", "up"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def wait_for_line(self, pattern: str, timeout: float) -> str:
        def seen() -> str | None:
            while True:
                try:
                    line = self.lines.get_nowait()
                except queue.Empty:
                    return None
                if re.search(pattern, line):
                    return line

        return waits.wait_for(seen, timeout, f"the demo to print {pattern!r}", lambda: "".join(self.output))


@pytest.fixture
def demo(tmp_path: Path) -> Iterator[Demo]:
    busy = [p for p in PORTS if not procs.port_free(p)]
    if busy:
        pytest.fail(f"ports {busy} are in use (a `make demo` running?); stop it with `make demo-down`")
    d = Demo(tmp_path)
    try:
        yield d
    finally:
        if d.proc.poll() is None:
            d.proc.kill()
            d.proc.wait(10)
        procs.terminate(procs.owned_pids(d.paths.root), timeout=10)
        lc.down(d.paths)


def _start_from_the_form(opener: urllib.request.OpenerDirector, url: str, user: str) -> None:
    page, xsrf = spawn_form(opener, url, user)
    for size in ("CPU only", "MIG 1g.10gb", "MIG 3g.40gb", "Whole GPU"):
        assert size in page, f"the picker offers {size}"
    form = urllib.parse.urlencode({"profile": SIZE, "_xsrf": xsrf}).encode()
    opener.open(url + f"/hub/spawn/{user}", data=form, timeout=60).read()


def _api(info: dict[str, str], method: str, path: str) -> tuple[int, object]:
    req = urllib.request.Request(
        info["api_url"] + path, method=method, headers={"Authorization": f"token {info['api_token']}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def _ready(info: dict[str, str], user: str) -> bool:
    code, body = _api(info, "GET", f"/users/{user}")
    return code == 200 and bool(((body or {}).get("servers") or {}).get("", {}).get("ready"))  # type: ignore[union-attr]


def test_make_demo_walkthrough_and_ctrl_c_stops_everything(demo: Demo) -> None:
    demo.wait_for_line(r"gpusessions demo is up:\s+http://127\.0\.0\.1:8000/hub/", 240)
    info = json.loads((demo.dir / "hub.json").read_text())
    assert info["url"] == "http://127.0.0.1:8000/hub/"
    assert info["password"] and info["password"] in "".join(demo.output), "the password is printed"
    assert oct((demo.dir / "hub.json").stat().st_mode & 0o777) == "0o600"
    api = KubeAPI.from_kubeconfig(demo.paths.kubeconfig)
    assert len(api.list("Node")["items"]) == 3, "the demo shape: three GPU nodes"

    # 1-3: log in, pick MIG 1g.10gb, the notebook starts with its GPU.
    hub_url = info["url"].removesuffix("/hub/")
    with urllib.request.urlopen(hub_url + "/hub/login", timeout=30) as r:
        assert "Demo only" in r.read().decode(), "the login page says it is for the demo only"
    opener = logged_in(hub_url, "alice", info["password"])
    _start_from_the_form(opener, hub_url, "alice")
    waits.wait_for(lambda: _ready(info, "alice"), 120, "alice's notebook to be ready")
    with opener.open(info["url"].replace("/hub/", "/user/alice/lab"), timeout=60) as r:
        assert "JupyterLab" in r.read().decode(), "JupyterLab through the proxy, after the hub's OAuth"
    claim = api.get("ResourceClaim", "gpu-alice", NAMESPACE)
    device = allocated(claim)
    assert device and "1g10gb" in device[0][1], device

    # 4: stop; the GPU stays reserved.
    assert _api(info, "DELETE", "/users/alice/server")[0] in (202, 204)
    waits.wait_for(lambda: not _ready(info, "alice"), 60, "alice's server to stop")
    assert allocated(api.get("ResourceClaim", "gpu-alice", NAMESPACE)) == device

    # 5: start again: the same device.
    _start_from_the_form(opener, hub_url, "alice")
    waits.wait_for(lambda: _ready(info, "alice"), 120, "alice's notebook to be ready again")
    assert allocated(api.get("ResourceClaim", "gpu-alice", NAMESPACE)) == device

    # Ctrl-C stops hub, proxy, notebooks and cluster; hub.json goes.
    owned = procs.owned_pids(demo.paths.root)
    assert len(owned) >= 8, "cluster, hub, proxy and pod processes"
    demo.proc.send_signal(signal.SIGINT)
    assert demo.proc.wait(90) == 0, "".join(demo.output)
    assert "demo: cluster stopped" in "".join(demo.output)
    assert not any(procs.alive(p) for p in owned)
    assert procs.owned_pids(demo.paths.root) == []
    assert all(procs.port_free(p) for p in PORTS)
    assert not (demo.dir / "hub.json").exists()
