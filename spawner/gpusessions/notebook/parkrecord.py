"""Where a parked session lives in the user's home, and its record.

    ~/.gpusessions/parked/<server>/session.json      the record (0600; folders 0700)
    ~/.gpusessions/parked/<server>/<kernel id>/      one kernel's saved namespace
    ~/.gpusessions/parked/<server>.restored-<time>/  a park restored in full (the last one kept)
    ~/.gpusessions/parked/<server>.unrestored-<time>/ a park set aside by a newer park, unrestored

The holder's park supervisor (`parkhost`) writes it; the notebook server (`restore`) reads it,
restores the kernels and notes the outcome in it. `<server>` is the JupyterHub server name
(`_default` for the default server). The home is the notebook's: the holder mounts the same
volumes as the notebook pod (`KernelSettings.volumes`), so both see one folder.

The code that runs inside the kernels (`park_source`, `restore_source`, `MIME`) comes from
`gpusessions.park.kernelcode`, or the module `GPUSESSIONS_PARK_CODE` names, imported only when a
park or restore runs (it may import numpy and friends: never at a notebook server's start).
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import importlib
import json
import os
import re
import shutil
import sqlite3
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from jupyter_core.paths import jupyter_data_dir

Obj = dict[str, Any]
PARK_CODE_ENV = "GPUSESSIONS_PARK_CODE"
PARK_CODE = "gpusessions.park.kernelcode"
RECORD = "session.json"
VERSION = 1
KERNEL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$")


def park_code(env: dict[str, str] | None = None) -> ModuleType:
    """The in-kernel code's module (`park_source`, `restore_source`, `MIME`)."""
    env = dict(os.environ) if env is None else env
    return importlib.import_module(env.get(PARK_CODE_ENV) or PARK_CODE)


def server_key(env: dict[str, str] | None = None) -> str:
    env = dict(os.environ) if env is None else env
    return env.get("JUPYTERHUB_SERVER_NAME", "") or "_default"


def state_dir(env: dict[str, str] | None = None) -> Path:
    """The notebook server's kept-kernels state (sessions.db, kernels.json), per server, in the
    home directory (a volume that outlives the notebook pod)."""
    return Path(jupyter_data_dir()) / "gpusessions" / server_key(env)


def parked_root(home: str | None = None) -> Path:
    return Path(home or os.path.expanduser("~")) / ".gpusessions" / "parked"


def park_dir(server: str, home: str | None = None) -> Path:
    return parked_root(home) / server


def stamp(at: float | None = None) -> str:
    return datetime.datetime.fromtimestamp(at or time.time(), datetime.UTC).strftime("%Y%m%dT%H%M%SZ")


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)
    return path


def write_record(folder: Path, record: Obj) -> None:
    """The record, written whole (a temporary file renamed), readable by the user only."""
    private_dir(folder)
    tmp = folder / f".{RECORD}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    tmp.replace(folder / RECORD)


def read_record(folder: Path) -> Obj | None:
    try:
        data = json.loads((folder / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def make_private(folder: Path) -> None:
    """Folders 0700, files 0600 under `folder` (what a kernel wrote there)."""
    for root, dirs, files in os.walk(folder):
        with contextlib.suppress(OSError):
            os.chmod(root, 0o700)
        for f in files:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, f), 0o600)
        for d in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, d), 0o700)


def unrestored(record: Obj | None) -> list[Obj]:
    """The record's kernels that parked and were not restored yet."""
    if not record:
        return []
    return [
        k
        for k in record.get("kernels") or []
        if isinstance(k, dict)
        and k.get("status") in ("parked", "incomplete")
        and not (k.get("restore") or {}).get("ok")
        and not (k.get("restore") or {}).get("kept")
        and KERNEL_ID.match(str(k.get("id", "")))
    ]


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """The record's lock (`<parked>/.<server>.lock`, flock): a park (the holder's supervisor, or
    the stopping notebook server) and a restore (the next notebook server) of one server read and
    write one record, and may run at the same time (a reclaim during a restore)."""
    private_dir(folder.parent)
    fd = os.open(folder.parent / f".{folder.name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def new_token() -> str:
    """Each park's own mark in its record (`park`): a restore that finds another one there
    knows a newer park took the record over while it ran, and leaves it alone."""
    return uuid.uuid4().hex


def restore_targets(record: Obj | None) -> set[str]:
    """The new kernels a restore of this record was filling and did not finish: their state is
    partial (the park still holds the whole of it)."""
    out: set[str] = set()
    for k in unrestored(record):
        target = (k.get("restore") or {}).get("kernel")
        if target:
            out.add(str(target))
    return out


def carry_over(record: Obj | None) -> list[Obj]:
    """A park's kernels that were never restored (the restore runs now, was cut off by a reclaim,
    or brought nothing back), for a newer park of the same server: they stay parked, pending
    again, with the kernels their restores were filling (`tried`: their sessions are theirs)."""
    out = []
    for k in unrestored(record):
        tried = [str(t) for t in k.get("tried") or []]
        target = (k.get("restore") or {}).get("kernel")
        if target and str(target) not in tried:
            tried.append(str(target))
        entry = {key: v for key, v in k.items() if key != "restore"}
        entry.update(tried=tried, carried_from=(record or {}).get("parked_at"))
        out.append(entry)
    return out


def kernel_bytes(folder: Path, kernel_ids: list[str]) -> int:
    """What these kernels' saved files hold."""
    return sum(_tree_bytes(folder / k) for k in kernel_ids if KERNEL_ID.match(k))


def set_aside(folder: Path) -> Path | None:
    """A park folder already there (a newer park comes): renamed, never deleted."""
    if not folder.exists():
        return None
    aside = folder.with_name(f"{folder.name}.unrestored-{stamp()}")
    folder.rename(aside)
    return aside


def paths_by_kernel(db: Path) -> dict[str, list[str]]:
    """kernel id -> the notebook paths using it, from the notebook server's sessions file."""
    if not db.exists():
        return {}
    out: dict[str, list[str]] = {}
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            for path, kid in con.execute("SELECT path, kernel_id FROM session"):
                out.setdefault(str(kid), []).append(str(path))
        finally:
            con.close()
    except sqlite3.Error:
        return {}
    return out


def remap(
    db: Path, old: str, new: str, paths: list[str] | None = None, tried: list[str] | None = None
) -> int:
    """Point the sessions of kernel `old` (and of the kernels earlier restores of it were filling,
    `tried`) at kernel `new`, and give each notebook path the park recorded that lost its session
    meanwhile (a start whose restore a reclaim cut off answered without that kernel) a session on
    `new` again: JupyterLab re-attaches the open notebooks to the restored kernel. The number of
    sessions moved or made."""
    if not db.exists() and (not paths or not db.parent.is_dir()):
        return 0
    con = sqlite3.connect(str(db), timeout=5)
    try:
        with con:
            con.execute("CREATE TABLE IF NOT EXISTS session (session_id, path, name, type, kernel_id)")
            moved = 0
            for kid in [old, *(tried or [])]:
                moved += con.execute("UPDATE session SET kernel_id=? WHERE kernel_id=?", (new, kid)).rowcount
            for path in paths or []:
                if con.execute("SELECT 1 FROM session WHERE path=?", (path,)).fetchone() is None:
                    con.execute(
                        "INSERT INTO session VALUES (?, ?, ?, ?, ?)",
                        (str(uuid.uuid4()), path, os.path.basename(path), "notebook", new),
                    )
                    moved += 1
            return moved
    except sqlite3.Error:
        return 0
    finally:
        con.close()


def gib(n: float) -> str:
    """Bytes as the user reads them (the park package's own words: "12.3 GiB", "40.0 MiB")."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**29 else f"{n / 2**20:.1f} MiB"


def _tree_bytes(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def held_bytes(server: str, home: str | None = None) -> int:
    """Bytes this user's parks hold besides the one `server` is about to write: every other
    server's park waiting for its start, and every park set aside unrestored (this server's
    too). A park restored in full (`<server>.restored-*`, the last one kept as a copy) does not
    count: its state is back in a kernel. Only the kernels' saved state counts, not a park's
    record (a folder set aside with a record and no kernel state holds nothing of the user's)."""
    root = parked_root(home)
    if not root.is_dir():
        return 0
    total = 0
    for entry in root.iterdir():
        if not entry.is_dir() or entry.is_symlink() or ".restored-" in entry.name:
            continue
        if entry.name == server:
            continue
        total += kernel_bytes(entry, [k.name for k in entry.iterdir() if k.is_dir() and not k.is_symlink()])
    return total


def limit_message(state_bytes: int, limit: int, held: int) -> str:
    """Why a park was refused by the user's parking limit (`park_max_bytes`), in words;
    `held`: what the user's other parks hold."""
    if held <= 0:
        return f"the session's state is {gib(state_bytes)}, over your parking limit ({gib(limit)})"
    left = max(limit - held, 0)
    return (
        f"the session's state is {gib(state_bytes)}, over what is left of your parking limit "
        f"({gib(left)} of {gib(limit)}: your other parked sessions hold {gib(held)})"
    )


def over_limit(report: Obj) -> bool:
    """The park package refused the park for its size (`saver.park`'s "over your limit")."""
    return not report.get("ok") and "over your limit" in str(report.get("error") or "")


def drop_kernel_park(folder: Path, kernel_id: str) -> None:
    """A kernel's saved files, removed (its park was refused after the fact: over the limit)."""
    if KERNEL_ID.match(kernel_id):
        shutil.rmtree(folder / kernel_id, ignore_errors=True)


def finish_record(folder: Path, record: Obj) -> None:
    """The park's final record (the one place a finished park is written: `parking`)."""
    write_record(folder, record)
