"""Run a real JupyterHub (with configurable-http-proxy) against the devcluster.

Used by tests and by `make demo`. The hub and proxy listen on 127.0.0.1; the
hub's database and logs live in the given working folder.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import re
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .paths import REPO_ROOT, ClusterPaths
from .procs import port_free, terminate

CHP = REPO_ROOT / ".cache" / "node" / "node_modules" / ".bin" / "configurable-http-proxy"


class HubError(RuntimeError):
    pass


# Below Linux's ephemeral range (32768-60999 by default) and above the local clusters'
# (16443 + n*1000 .. +404): a hub restarted in place must find its ports free, and an
# ephemeral port can be taken meanwhile by any outgoing connection (the fuzzer's hub restart
# once failed so: "Address already in use").
PORT_RANGE = (21000, 32000)
# Polling noise in a hub's log: the access-log line of an answered GET (JupyterHub logs each
# request it served), and the proxy's 404 for the hub API while the hub is not up yet.
_POLL_LINE = re.compile(r"\] 2\d\d GET |: 404 GET /hub/api/")


_given: set[int] = set()  # ports handed out by this process: never twice (a hub's three must differ)


def _slice() -> tuple[int, int]:
    """This process's share of PORT_RANGE: the test processes that run side by side (two
    pytest-xdist workers and the emulated passes) each have their own DEVCLUSTER_PORT_BASE
    (16443, 20443, 24443, 28443), so each picks from its own quarter and two of them never
    pick the same port between the look and the hub's bind."""
    base = int(os.environ.get("DEVCLUSTER_PORT_BASE", "16443"))
    width = (PORT_RANGE[1] - PORT_RANGE[0]) // 4
    low = PORT_RANGE[0] + width * ((base // 4000) % 4)
    return low, low + width - 1


def _cluster_port(port: int) -> bool:
    """A port a local cluster uses or will use (its base, x443, and the ports after it)."""
    return 443 <= port % 1000 < 470


def free_port() -> int:
    """A free port on 127.0.0.1 outside the ephemeral range and the clusters' ports, in this
    process's slice, not handed out before."""
    low, high = _slice()
    for _ in range(200):
        port = random.randint(low, high)
        if port not in _given and not _cluster_port(port) and port_free(port):
            _given.add(port)
            return port
    raise RuntimeError(f"no free port in {low}-{high} on 127.0.0.1")


@dataclass
class Hub:
    proc: subprocess.Popen[bytes]
    url: str  # public (proxy) URL
    hub_api: str  # http://127.0.0.1:<hub>/hub/api
    token: str  # a service token with admin scopes
    workdir: Path
    log: Path
    ports: tuple[int, int, int]  # proxy, hub, proxy API
    log_since: int = 0  # where this user of the hub's log begins (a hub shared by several tests)

    def log_text(self) -> str:
        """The hub's log from `log_since` on: what it wrote for this test."""
        with open(self.log, "rb") as f:
            f.seek(self.log_since)
            return f.read().decode(errors="replace")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of `log_text`, without the access-log lines of answered GETs (a test that
        polls the hub fills its log with them): what a failed wait shows of the hub."""
        lines = [line for line in self.log_text().splitlines() if not _POLL_LINE.search(line)]
        return "\n".join(lines)[-chars:]

    def from_here(self) -> Hub:
        """This hub, its log read from now on (for the next test that shares it)."""
        return dataclasses.replace(self, log_since=self.log.stat().st_size)

    def api(
        self, method: str, path: str, body: Any = None, timeout: float = 30, token: str | None = None
    ) -> tuple[int, Any]:
        """A hub API call, as the hub's service token or as `token` (a user's, say)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.hub_api + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {token or self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def base_config(hub_port: int, proxy_port: int, api_port: int, token: str, workdir: Path) -> str:
    """Hub settings every devcluster hub shares; callers append their own."""
    return f"""
c = get_config()  # noqa
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = {proxy_port}
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {hub_port}
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{api_port}"
c.ConfigurableHTTPProxy.command = [{str(CHP)!r}]
c.ConfigurableHTTPProxy.should_start = True
c.JupyterHub.db_url = "sqlite:///{workdir}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{workdir}/cookie_secret"
c.JupyterHub.pid_file = "{workdir}/jupyterhub.pid"
c.JupyterHub.cleanup_servers = True
c.JupyterHub.services = [{{"name": "devcluster-admin", "api_token": {token!r}}}]
c.JupyterHub.load_roles = [{{
    "name": "devcluster-admin",
    "scopes": ["admin:users", "admin:servers", "access:servers", "read:users", "admin-ui", "tokens"],
    "services": ["devcluster-admin"],
}}]
"""


def start_hub(
    extra_config: str,
    workdir: Path,
    timeout: float = 60,
    ports: tuple[int, int, int] | None = None,
    token: str | None = None,
    env_extra: dict[str, str] | None = None,
) -> Hub:
    """Start JupyterHub in its own session; `ports` are (proxy, hub, proxy API). Ports picked
    here that something else took before the hub bound them are picked again (twice at most)."""
    if not CHP.exists():
        raise HubError(f"configurable-http-proxy is not installed at {CHP}; run 'make node-deps'")
    workdir.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        try:
            return _start_hub(extra_config, workdir, timeout, ports, token, env_extra)
        except _PortTaken:
            if ports is not None or attempt == 2:
                raise
    raise AssertionError("unreachable")


class _PortTaken(HubError):
    """The hub could not bind a port it was given."""


def _start_hub(
    extra_config: str,
    workdir: Path,
    timeout: float,
    ports: tuple[int, int, int] | None,
    token: str | None,
    env_extra: dict[str, str] | None,
) -> Hub:
    proxy_port, hub_port, api_port = ports or (free_port(), free_port(), free_port())
    if len({proxy_port, hub_port, api_port}) != 3:
        raise HubError(
            f"the proxy, hub and proxy API ports must differ: {proxy_port}, {hub_port}, {api_port}"
        )
    for port in (proxy_port, hub_port, api_port):
        if not port_free(port):
            raise HubError(f"port {port} on 127.0.0.1 is in use by another program; stop it and retry")
    token = token or secrets.token_hex(24)
    cfg = workdir / "jupyterhub_config.py"
    cfg.write_text(base_config(hub_port, proxy_port, api_port, token, workdir) + extra_config)
    log = workdir / "jupyterhub.log"
    env = dict(os.environ)
    paths = ClusterPaths.default()
    env.setdefault("KUBECONFIG", str(paths.kubeconfig))
    env["CONFIGPROXY_AUTH_TOKEN"] = secrets.token_hex(24)
    env.update(env_extra or {})
    exe = Path(sys.executable).parent / "jupyterhub"
    start_at = log.stat().st_size if log.exists() else 0
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(exe), "-f", str(cfg)],
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    hub = Hub(
        proc,
        f"http://127.0.0.1:{proxy_port}",
        f"http://127.0.0.1:{hub_port}/hub/api",
        token,
        workdir,
        log,
        (proxy_port, hub_port, api_port),
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _stop_proxy(workdir)  # a hub that dies at start leaves the proxy it started
            text = log.read_bytes()[start_at:].decode(errors="replace")
            tail = [line for line in text.splitlines() if not _POLL_LINE.search(line)][-15:]
            kind = _PortTaken if "Address already in use" in text else HubError
            raise kind("JupyterHub exited during start-up:\n" + "\n".join(tail))
        try:
            with urllib.request.urlopen(hub.url + "/hub/api/", timeout=2) as r:
                if r.status == 200:
                    return hub
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.3)
    hub.stop()
    _stop_proxy(workdir)
    raise HubError(f"JupyterHub did not answer within {timeout:.0f}s; see {log}")


def _stop_proxy(workdir: Path) -> None:
    """Stop the configurable-http-proxy a hub in `workdir` started (its pid file), if running."""
    try:
        pid = int((workdir / "jupyterhub-proxy.pid").read_text().strip())
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"configurable-http-proxy" not in f.read():
                return
    except (OSError, ValueError):
        return
    terminate([pid], timeout=5)
