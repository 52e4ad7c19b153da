"""Kernels in the notebook server itself (no kernel host in the holder): parked when the server
stops, restored by the next server before its first kernel or session answer, the open notebook's
session pointed at its restored kernel; the user's parking limit across servers (real kernels)."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager

from gpusessions.notebook import parking
from gpusessions.notebook import parkrecord as R
from gpusessions.notebook.localkernels import ParkingKernelManager, ParkingSessionManager, enabled

SPAWNER = Path(__file__).resolve().parents[2] / "spawner"
MIB = 2**20


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(home / ".local" / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTERHUB_SERVER_NAME", "")
    monkeypatch.setenv("PYTHONPATH", str(SPAWNER))  # the kernels import this worktree's package
    monkeypatch.setenv("GPUSESSIONS_PARK_KERNELS", "1")
    monkeypatch.delenv("JUPYTER_GATEWAY_URL", raising=False)
    monkeypatch.delenv("GPUSESSIONS_PARK_MAX_BYTES", raising=False)
    monkeypatch.chdir(home)
    return home


async def execute(km: Any, kid: str, code: str, timeout: float = 60) -> str:
    """Run a cell; its stdout (an error fails the test)."""
    kc = km.get_kernel(kid).client()
    kc.start_channels()
    try:
        msg_id = kc.execute(code)
        out: list[str] = []
        while True:
            m = await kc.get_iopub_msg(timeout=timeout)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout":
                out.append(m["content"]["text"])
            assert m["msg_type"] != "error", m["content"]
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return "".join(out)
    finally:
        kc.stop_channels()


def managers(home: Path) -> tuple[ParkingKernelManager, ParkingSessionManager]:
    db = R.state_dir() / "sessions.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    km = ParkingKernelManager(root_dir=str(home))
    return km, ParkingSessionManager(kernel_manager=km, database_filepath=str(db))


async def end(km: ParkingKernelManager) -> None:
    """The test's own cleanup: the kernels shut down without a park."""
    await AsyncMappingKernelManager.shutdown_all(km, now=True)


BUILD = """
import numpy as np
a = np.arange(200_000, dtype=np.float64)
class Point:
    def __init__(self, x):
        self.x = x
p = Point(3)
f = open("open-file.txt", "w")
print("built")
"""


def test_the_servers_own_kernels_park_at_its_stop_and_the_next_server_restores_them(home: Path) -> None:
    async def run() -> None:
        assert enabled()
        km, sm = managers(home)
        kid = await km.start_kernel(kernel_name="python3")
        await sm.save_session(
            str(uuid.uuid4()), path="work/a.ipynb", name="a.ipynb", type="notebook", kernel_id=kid
        )
        assert (await execute(km, kid, BUILD)).strip() == "built"
        await km.shutdown_all()  # what jupyter_server's stop does: the park first
        assert not km.list_kernel_ids()
        record = R.read_record(R.park_dir("_default"))
        assert record is not None and record["trigger"] == "notebook-stopping" and record["complete"]
        [k] = record["kernels"]
        assert (k["id"], k["status"], k["paths"]) == (kid, "parked", ["work/a.ipynb"]), k
        assert {"a", "p", "np"} <= set(k["report"]["saved"])
        assert [n["name"] for n in k["report"]["not_saved"]] == ["f"]

        km2, sm2 = managers(home)
        [session] = await sm2.list_sessions()  # restored before the first answer
        new = session["kernel"]["id"]
        assert session["path"] == "work/a.ipynb" and new != kid and new in km2
        status = km2.restore.status()
        assert status["state"] == "restored" and "f: open file handle" in status["message"], status
        out = await execute(km2, new, "print(a.sum() == np.arange(200_000).sum(), p.x, isinstance(p, Point))")
        assert out.split() == ["True", "3", "True"]
        await end(km2)

    asyncio.run(run())


def test_the_users_limit_counts_the_other_servers_parks_and_a_refused_park_is_told(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another server's park holds 1 MiB of a 2 MiB limit: a kernel of 1.5 MiB is refused
    with the reason in words; the next start says its variables were lost, once."""
    other = R.private_dir(R.park_dir("gpu2") / "k1")
    (other / "v.a.npy").write_bytes(b"\0" * MIB)
    assert R.held_bytes("_default") == MIB
    monkeypatch.setenv("GPUSESSIONS_PARK_MAX_BYTES", str(2 * MIB))

    async def run() -> None:
        km, _ = managers(home)
        kid = await km.start_kernel(kernel_name="python3")
        await execute(km, kid, "import numpy as np\nbig = np.zeros(3 * 2**16)")  # 1.5 MiB
        await km.shutdown_all()
        [k] = R.read_record(R.park_dir("_default"))["kernels"]  # type: ignore[index]
        assert k["status"] == "failed" and k["refused"] == "limit"
        assert k["error"] == (
            "the session's state is 1.5 MiB, over what is left of your parking limit "
            "(1.0 MiB of 2.0 MiB: your other parked sessions hold 1.0 MiB)"
        ), k["error"]
        km2, _ = managers(home)
        assert await km2.list_kernels() == []
        status = km2.restore.status()
        assert status["state"] == "failed", status
        assert (
            status["message"].startswith("Your session from ")
            and "could not be parked (python3: " in status["message"]
        )
        assert "over what is left of your parking limit" in status["message"]
        assert "its variables were lost" in status["message"]
        assert not (R.park_dir("_default") / kid).exists()  # nothing restores it: removed
        km3, _ = managers(home)
        await km3.list_kernels()
        assert km3.restore.status() == {"state": "none"}  # told once

    asyncio.run(run())


def test_kernels_parked_together_keep_within_what_is_left(tmp_path: Path) -> None:
    """Each kernel is given what is left; two that together pass it lose the larger park."""
    folder = R.private_dir(tmp_path / "p")
    for kid in ("k1", "k2"):
        R.private_dir(folder / kid)
    kernels = [
        {"id": "k1", "status": "parked", "report": {"ok": True, "bytes": 6 * MIB}},
        {"id": "k2", "status": "parked", "report": {"ok": True, "bytes": 3 * MIB}},
    ]
    parking.enforce_limit(folder, kernels, limit=8 * MIB, held=0)
    assert [k["status"] for k in kernels] == ["failed", "parked"]
    assert kernels[0]["error"] == "the session's state is 9.0 MiB, over your parking limit (8.0 MiB)"
    assert not (folder / "k1").exists() and (folder / "k2").exists()
    assert json.dumps(kernels)  # the record stays JSON
    assert os.path.isdir(folder)
