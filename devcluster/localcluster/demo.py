"""`make demo`: the local simulated GPU cluster plus JupyterHub on 127.0.0.1:8000.

`up` starts (or reuses) the cluster with the demo shape and a JupyterHub using
hub_config/demo_config.py, writes .cache/demo/hub.json (hub URL, demo password,
admin API token) and prints how to log in. `down` stops the hub and the cluster.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path

from . import cluster, kai
from .hubproc import HubError, start_hub
from .kubeapi import ApiError, KubeAPI
from .paths import REPO_ROOT, ClusterPaths
from .procs import OWNER_ENV, alive, terminate

# Fixed for people (.cache/demo/hub.json); a test runs a second demo in a folder of its own.
DEMO_DIR = Path(os.environ.get("GPUSESSIONS_DEMO_DIR", str(REPO_ROOT / ".cache" / "demo")))
HUB_JSON = DEMO_DIR / "hub.json"
NAMESPACE = "gpusessions-demo"
PORTS = (8000, 8081, 8001)  # proxy (public), hub, proxy API
USERS = ["alice", "bob", "carol", "dave"]


def _running() -> dict[str, object] | None:
    try:
        info = json.loads(HUB_JSON.read_text())
    except (OSError, ValueError):
        return None
    pid = info.get("pid")
    return info if isinstance(pid, int) and alive(pid) else None


def _print(info: dict[str, object]) -> None:
    print()
    print(f"  gpusessions demo is up:  {info['url']}")
    print(f"  log in as one of {', '.join(USERS)} (users) or 'admin', password: {info['password']}")
    print(f"  details: {HUB_JSON}   hub log: {DEMO_DIR / 'jupyterhub.log'}")
    print("  stop everything with Ctrl-C here (or 'make demo-down' from another shell)")
    print()


def up(foreground: bool = True) -> int:
    paths = ClusterPaths.default()
    cluster.up("demo", paths=paths)
    info = _running()
    if info:
        print("demo: JupyterHub is already running")
        _print(info)
        return 0
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    with contextlib.suppress(ApiError):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    for q in kai.demo_queues():
        api.apply(q)
    password = secrets.token_urlsafe(9)
    # Run in this config's namespace, as z2jh runs hub.extraConfig: a load_subconfig()ed file
    # starts from an empty config whose lists replace ours (the admin service and its role).
    demo_config = str(REPO_ROOT / "hub_config" / "demo_config.py")
    extra = f"\nexec(compile(open({demo_config!r}).read(), {demo_config!r}, 'exec'))\n"
    env = {
        "GPUSESSIONS_DEMO_PASSWORD": password,
        "GPUSESSIONS_DEMO_NAMESPACE": NAMESPACE,
        "KUBECONFIG": str(paths.kubeconfig),
        # So that `make cluster-down` stops the hub too.
        OWNER_ENV: str(paths.root),
    }
    print("demo: starting JupyterHub and configurable-http-proxy on 127.0.0.1:8000 ...")
    hub = start_hub(extra, DEMO_DIR, timeout=90, ports=PORTS, env_extra=env)
    info = {
        "url": hub.url + "/hub/",
        "password": password,
        "users": USERS,
        "admin_user": "admin",
        "api_url": hub.hub_api,
        "api_token": hub.token,
        "namespace": NAMESPACE,
        "kubeconfig": str(paths.kubeconfig),
        "pid": hub.proc.pid,
    }
    HUB_JSON.write_text(json.dumps(info, indent=2))
    HUB_JSON.chmod(0o600)
    _print(info)
    if foreground:
        _wait_for_interrupt(hub.proc.pid)
        print("\ndemo: stopping ...")
        down()
    return 0


def _wait_for_interrupt(hub_pid: int) -> None:
    """Block until Ctrl-C / SIGTERM, or until the hub is gone (then say so)."""
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    while not stop:
        if not alive(hub_pid):
            print(f"demo: JupyterHub exited; see {DEMO_DIR / 'jupyterhub.log'}", file=sys.stderr)
            return
        time.sleep(0.5)


def down() -> int:
    info = _running()
    if info and isinstance(info.get("pid"), int):
        pid = int(info["pid"])  # type: ignore[call-overload]
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
        terminate([pid], timeout=15)
        print("demo: JupyterHub stopped")
    with contextlib.suppress(FileNotFoundError):
        HUB_JSON.unlink()
    cluster.down()
    print("demo: cluster stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="localcluster.demo")
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("--background", action="store_true", help="start and return (stop with 'down')")
    args = ap.parse_args(argv)
    try:
        return up(foreground=not args.background) if args.action == "up" else down()
    except (cluster.ClusterError, HubError) as e:
        print(f"demo: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
