"""park(): a kernel's namespace to files, name by name, within the user's size limit.

Two passes. The plan decides each name's kind and serializes what needs the serializer
(into memory: arrays and tensors inside are only referred to), so the park's size is known
before anything is written; over the limit, nothing is written. Then the files go into a
temporary folder beside the target, one name after another, each recorded in the journal
once on disk, and the folder is renamed to the target when the manifest is written.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpusessions.park import classify as c
from gpusessions.park import formats, torchio
from gpusessions.park.files import DEFAULT_CHUNK, DIR_MODE, CheckedWriter, make_private_dir
from gpusessions.park.manifest import Journal, Manifest

# Arrays inside pickled values smaller than this stay in the pickle (a file each for a
# dict of ten thousand small arrays would cost more than it saves).
NESTED_ARRAY_MIN = 64 << 10
_JSON_SCALARS = (str, int, float, bool, type(None))


def gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**29 else f"{n / 2**20:.1f} MiB"


def temp_dir_for(target: Path) -> Path:
    return target.parent / f".{target.name}.parking-{os.getpid()}"


@dataclass
class Planned:
    name: str
    kind: str
    type: str
    value: Any
    estimate: int = 0
    blob: bytes = b""
    refs: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class Externals:
    """Arrays and tensors kept in files of their own, once per object (by identity)."""

    def __init__(self) -> None:
        self.by_id: dict[int, str] = {}
        self.objects: dict[str, Any] = {}  # file -> object (kept alive: ids stay unique)
        self.sizes: dict[str, int] = {}
        self.failed: dict[str, str] = {}
        self._n = 0
        self._seen: list[str] | None = None

    def add(self, obj: Any, file: str) -> str:
        self.by_id[id(obj)] = file
        self.objects[file] = obj
        self.sizes[file] = int(obj.nbytes) if isinstance(obj, np.ndarray) else torchio.nbytes(obj)
        return file

    def ref(self, obj: Any) -> str | None:
        """The pickler's persistent_id: a file name for an array or tensor, else None."""
        file = self.by_id.get(id(obj))
        if file is None:
            if type(obj) is np.ndarray and not obj.dtype.hasobject and obj.nbytes >= NESTED_ARRAY_MIN:
                self._n += 1
                file = self.add(obj, f"x.{self._n}.npy")
            elif c.is_tensor(obj):
                self._n += 1
                file = self.add(obj, f"x.{self._n}.tensor")
            else:
                return None
        if self._seen is not None:
            self._seen.append(file)
        return file

    def dumps(self, value: Any) -> tuple[bytes, list[str]]:
        self._seen = []
        try:
            blob = formats.dumps(value, self.ref)
            return blob, list(dict.fromkeys(self._seen))
        finally:
            self._seen = None


def plan(namespace: dict[str, Any], hidden: set[str] | frozenset[str]) -> tuple[list[Planned], Externals]:
    items: list[Planned] = []
    ext = Externals()
    first: dict[int, str] = {}
    for name in c.visible_names(namespace, hidden):
        value = namespace[name]
        p = Planned(name, "", c.type_name(value), value)
        if id(value) in first:
            p.kind, p.extra = c.ALIAS, {"of": first[id(value)]}
            items.append(p)
            continue
        first[id(value)] = name
        d = c.decide(value)
        p.kind = d.kind
        if d.kind == c.UNSAVEABLE:
            p.extra = {"reason": d.reason}
        elif d.kind == c.IMPORT:
            p.extra = {"module": d.module}
        elif d.kind == c.GLOBAL:
            p.extra = {"module": d.module, "qualname": d.qualname}
        elif d.kind in (c.ARRAY, c.TENSOR):
            file = ext.add(value, f"v.{name}.{'npy' if d.kind == c.ARRAY else 'tensor'}")
            p.refs, p.estimate = [file], ext.sizes[file]
        elif d.kind in (c.FRAME, c.SERIES) and (d.kind == c.FRAME or isinstance(value.name, _JSON_SCALARS)):
            p.estimate = (
                int(value.memory_usage(index=True, deep=True).sum())
                if d.kind == c.FRAME
                else int(value.memory_usage(index=True, deep=True))
            )
            if d.kind == c.SERIES:
                p.extra = {"series_name": value.name}
        else:
            p.kind = c.PICKLE
        items.append(p)
    for p in items:
        if p.kind == c.PICKLE:
            serialize(p, ext)
    return items, ext


def serialize(p: Planned, ext: Externals) -> None:
    try:
        p.blob, p.refs = ext.dumps(p.value)
        p.kind, p.estimate = c.PICKLE, len(p.blob)
    except Exception as e:  # the serializer's refusal, in its own words
        p.kind = c.UNSAVEABLE
        p.extra = {"reason": f"the serializer refused it: {type(e).__name__}: {e}"[:300]}


def total_estimate(items: list[Planned], ext: Externals) -> int:
    referenced = {r for p in items for r in p.refs}
    blobs = sum(p.estimate for p in items if p.kind in (c.PICKLE, c.FRAME, c.SERIES))
    return blobs + sum(ext.sizes[f] for f in referenced)


def make_private_dirs(path: Path) -> None:
    """Each missing folder up to `path` created 0700 (mkdir's parents= ignores the mode)."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(mode=DIR_MODE, exist_ok=True)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_external(folder: Path, file: str, ext: Externals, journal: Journal, chunk: int) -> None:
    obj = ext.objects[file]
    try:
        if isinstance(obj, np.ndarray):
            meta = formats.write_npy(folder / file, obj, chunk)
        else:
            meta = torchio.write_tensor(folder / file, obj, c.torch_module(), chunk)
    except OSError:
        raise  # the disk: the whole park fails
    except Exception as e:
        ext.failed[file] = f"{type(e).__name__}: {e}"[:300]
        return
    journal.file(file, meta)


def write_item(folder: Path, p: Planned, ext: Externals, journal: Journal, chunk: int) -> None:
    entry: dict[str, Any] = {"kind": p.kind, "type": p.type, **p.extra}
    files: list[str] = []
    if p.kind in (c.FRAME, c.SERIES):
        file = f"v.{p.name}.arrow"
        try:
            journal.file(file, formats.write_frame(folder / file, p.value))
            files = [file]
        except formats.ARROW_ERRORS:
            (folder / file).unlink(missing_ok=True)
            serialize(p, ext)  # Arrow cannot hold it: pickled, its arrays kept apart
            entry = {"kind": p.kind, "type": p.type, **p.extra}
    if p.kind == c.UNSAVEABLE:
        journal.not_saved({"name": p.name, "type": p.type, "reason": p.extra["reason"]})
        return
    for ref in p.refs:
        if ref not in journal.manifest.files and ref not in ext.failed:
            write_external(folder, ref, ext, journal, chunk)
    broken = [ext.failed[r] for r in p.refs if r in ext.failed]
    if broken:
        journal.not_saved({"name": p.name, "type": p.type, "reason": f"could not be copied: {broken[0]}"})
        return
    if p.kind == c.PICKLE:
        file = f"v.{p.name}.pkl"
        with CheckedWriter(folder / file) as w:
            w.write(p.blob)
        journal.file(file, {"format": "pickle", "bytes": w.size, "crc32": w.crc})
        files = [file]
    files += p.refs
    metas = [journal.manifest.files[f] for f in files]
    devices = sorted({m["device"] for m in metas if "device" in m} - {"cpu"})
    entry.update(
        files=files, bytes=sum(int(m["bytes"]) for m in metas), device=devices[0] if devices else "cpu"
    )
    journal.name(p.name, entry)


def swap_in(tmp: Path, target: Path) -> None:
    """The finished folder becomes the target; an older park there goes (after, not before)."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
    tmp.rename(target)
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    for stale in target.parent.glob(f".{target.name}.parking-*"):
        shutil.rmtree(stale, ignore_errors=True)


def park(
    namespace: dict[str, Any],
    target_dir: str | os.PathLike[str],
    limit_bytes: int,
    chunk_bytes: int = DEFAULT_CHUNK,
    hidden: set[str] | frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Parks the namespace into target_dir; the report (kernelcode.park_source's), never raises."""
    t0 = time.monotonic()
    target = Path(target_dir).expanduser()
    report: dict[str, Any] = {"ok": False, "dir": str(target), "bytes": 0, "seconds": 0.0}
    report.update(saved=[], not_saved=[], error=None)
    try:
        items, ext = plan(namespace, hidden)
        total = total_estimate(items, ext)
        report["bytes"] = total
        report["not_saved"] = [
            {"name": p.name, "type": p.type, "reason": p.extra["reason"]}
            for p in items
            if p.kind == c.UNSAVEABLE
        ]
        if total > limit_bytes:
            report["error"] = f"the session's state is {gib(total)}, over your limit of {gib(limit_bytes)}"
            return report
        make_private_dirs(target.parent)
        free = shutil.disk_usage(target.parent).free
        if total > free:
            report["error"] = (
                f"the session's state is {gib(total)}, more than the {gib(free)} free in {target.parent}"
            )
            return report
        tmp = temp_dir_for(target)
        shutil.rmtree(tmp, ignore_errors=True)
        make_private_dir(tmp)
        manifest = Manifest()
        journal = Journal(tmp, manifest)
        for p in items:
            write_item(tmp, p, ext, journal, max(int(chunk_bytes), 1 << 16))
        journal.finish()
        fsync_dir(tmp)
        swap_in(tmp, target)
        report.update(
            ok=True,
            bytes=manifest.total_bytes,
            saved=list(manifest.names),
            not_saved=manifest.not_saved,
        )
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        report["seconds"] = round(time.monotonic() - t0, 3)
    return report
