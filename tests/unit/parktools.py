"""Real IPython kernels for the park tests: start one, run a cell, read its messages.

The kernel imports this worktree's `gpusessions` (PYTHONPATH), as the holder's kernels import
the installed package. Every wait is on a message (the cell's idle status), never a sleep."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import start_new_kernel

from gpusessions.park.kernelcode import MIME

SPAWNER = Path(__file__).resolve().parents[2] / "spawner"


@dataclass
class Cell:
    displays: list[dict[str, Any]] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)  # stdout and stderr
    stdout: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    status: str = ""

    @property
    def report(self) -> dict[str, Any]:
        assert len(self.displays) == 1, self
        return self.displays[0][MIME]

    @property
    def out(self) -> str:
        assert not self.errors, self.errors
        return "".join(self.stdout)


class Kernel:
    def __init__(self, km: Any, kc: Any) -> None:
        self.km, self.kc = km, kc

    @property
    def pid(self) -> int:
        return int(self.km.provisioner.process.pid)

    def run(self, code: str, timeout: float = 60) -> Cell:
        msg_id = self.kc.execute(code, silent=False, store_history=False)
        cell = Cell()
        while True:
            msg = self.kc.get_iopub_msg(timeout=timeout)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "display_data":
                cell.displays.append(content["data"])
            elif kind == "stream":
                cell.streams.append(content["text"])
                if content["name"] == "stdout":
                    cell.stdout.append(content["text"])
            elif kind == "execute_result":
                cell.results.append(content["data"])
            elif kind == "error":
                cell.errors.append("\n".join(content["traceback"]))
            elif kind == "status" and content["execution_state"] == "idle":
                break
        reply = self.kc.get_shell_msg(timeout=timeout)
        cell.status = reply["content"]["status"]
        return cell

    def value(self, expr: str) -> Any:
        """A JSON-able expression's value, printed by the kernel and read back."""
        return json.loads(self.run(f"print(__import__('json').dumps({expr}))").out)

    def vmhwm_kib(self) -> int:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")

    def reset_hwm(self) -> None:
        """Linux resets the peak RSS on writing 5 to clear_refs (own uid)."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")


@contextmanager
def kernel() -> Iterator[Kernel]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SPAWNER), os.environ.get("PYTHONPATH", "")])}
    km, kc = start_new_kernel(kernel_name="python3", env=env, startup_timeout=60)
    try:
        yield Kernel(km, kc)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
