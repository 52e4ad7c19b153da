"""The kernels hosted in this holder (persist_kernels), with the GPU memory each one holds.

The gateway lists its kernels (`/api/kernels`, with the session's token). NVML lists the
compute processes per device with their memory; a kernel's process is found by its
connection file name (`kernel-<id>.json`) in /proc/<pid>/cmdline, which the agent can read
because the holder pod shares one process namespace.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

_KERNEL_FILE = re.compile(r"kernel-([0-9a-f-]{36})\.json")


def kernel_pids(proc: Path = Path("/proc")) -> dict[str, int]:
    """kernel id -> pid of the process started with that kernel's connection file."""
    out: dict[str, int] = {}
    for d in proc.iterdir() if proc.is_dir() else []:
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        m = _KERNEL_FILE.search(cmd)
        if m:
            out.setdefault(m.group(1), int(d.name))
    return out


def descendants(pid: int, proc: Path = Path("/proc")) -> set[int]:
    """pid and every process below it (a kernel may run its GPU work in children)."""
    children: dict[int, list[int]] = {}
    for d in proc.iterdir() if proc.is_dir() else []:
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(d.name))
    seen, todo = set(), [pid]
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            todo += children.get(p, [])
    return seen


def join(
    models: Iterable[dict[str, Any]],
    pids: dict[str, int],
    gpu_memory: dict[int, int],
    tree: Any = descendants,
) -> list[dict[str, Any]]:
    """The gateway's kernel models with their pid and the GPU memory of their processes."""
    out = []
    for m in models:
        kid = str(m.get("id", ""))
        pid = pids.get(kid)
        mem = None
        if pid is not None and gpu_memory:
            mine = tree(pid)
            mem = sum(v for p, v in gpu_memory.items() if p in mine)
        out.append(
            {
                "id": kid,
                "name": m.get("name"),
                "execution_state": m.get("execution_state"),
                "last_activity": m.get("last_activity"),
                "connections": m.get("connections"),
                "pid": pid,
                "gpu_memory": mem,
            }
        )
    return out


class KernelView:
    """Reads the gateway's kernels; configured from the holder's environment."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.url = (url if url is not None else os.environ.get("GPUSESSIONS_KERNELS_URL", "")).rstrip("/")
        self.token = token if token is not None else os.environ.get("GPUSESSIONS_KERNELS_TOKEN", "")
        self.kernels: list[dict[str, Any]] | None = None
        self.error: str | None = None

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    async def refresh(self, gpu_memory: dict[int, int]) -> None:
        if not self.enabled:
            return
        req = HTTPRequest(
            self.url + "/api/kernels",
            headers={"Authorization": f"token {self.token}"},
            request_timeout=3,
            connect_timeout=2,
        )
        try:
            resp = await AsyncHTTPClient().fetch(req)
            models = json.loads(resp.body)
        except Exception as e:  # the gateway restarting: say so
            self.kernels, self.error = None, f"kernel gateway: {e}"
            return
        self.kernels = join(models, kernel_pids(), gpu_memory)
        self.error = None
