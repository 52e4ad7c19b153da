"""Starting and stopping the devcluster's processes.

Every process the devcluster starts carries DEVCLUSTER_OWNER=<cluster dir> in
its environment, so `down` can find and stop all of them (pod processes
included) even when the state file is lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

OWNER_ENV = "DEVCLUSTER_OWNER"


def spawn(cmd: list[str], log: Path, owner: Path, env: dict[str, str] | None = None) -> int:
    """Start a detached process (own session) that logs to `log`; return its pid."""
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = dict(os.environ if env is None else env)
    full_env[OWNER_ENV] = str(owner)
    with open(log, "ab") as out:
        out.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(cmd)}\n".encode())
        out.flush()
        p = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=full_env,
            close_fds=True,
        )
    return p.pid


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """Direct children of a process (a supervisor's component); [] if it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def owned_pids(owner: Path) -> list[int]:
    """Every live process whose environment marks it as belonging to `owner`."""
    marker = f"{OWNER_ENV}={owner}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if marker in env and alive(int(entry)):
            found.append(int(entry))
    return found


def terminate(pids: Iterable[int], timeout: float = 10.0) -> None:
    """SIGTERM the processes (and their process groups), then SIGKILL what is left."""
    pids = [p for p in pids if alive(p)]
    for p in pids:
        with contextlib.suppress(OSError):
            os.killpg(p, signal.SIGTERM)
        with contextlib.suppress(OSError):
            os.kill(p, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        _reap()
        time.sleep(0.1)
    for p in pids:
        if alive(p):
            with contextlib.suppress(OSError):
                os.killpg(p, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
    _reap()


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def last_lines(path: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-400:]
