"""restore(): a park's files back into a (fresh) kernel's namespace, as much as is whole.

Only this code, inside the user's own kernel, reads parked files: the hub and the culler
never unpickle anything. A damaged park restores what it can: a missing, truncated or
corrupt file costs the names that need it (named, with the reason), a damaged manifest
falls back to the journal, and without either the self-describing files (.npy, Arrow) are
read but nothing is unpickled (no checksum would vouch for it).
"""

from __future__ import annotations

import importlib
import time
import types
from pathlib import Path
from typing import Any

from gpusessions.park import classify as c
from gpusessions.park import formats, torchio
from gpusessions.park.files import Damaged, read_checked
from gpusessions.park.manifest import JOURNAL, MANIFEST, Manifest, read_journal, read_manifest

_ORDER = {c.IMPORT: 0, c.GLOBAL: 1, c.ALIAS: 3}


class Loader:
    """Files to objects, each file once (the same array in two names is one object again)."""

    def __init__(self, folder: Path, files: dict[str, dict[str, Any]], device: str | None) -> None:
        self.folder = folder
        self.files = files
        self.device = device
        self.cache: dict[str, Any] = {}
        self.notes: list[str] = []
        self.bytes = 0
        self._torch: Any = None

    def torch(self) -> Any:
        if self._torch is None:
            try:
                self._torch = importlib.import_module("torch")
            except ImportError:
                raise Damaged("a tensor, and torch is not installed in this kernel") from None
        return self._torch

    def target_device(self, parked: str) -> str:
        want = self.device or parked
        if not want.startswith("cuda"):
            return want
        torch = self.torch()
        if not torch.cuda.is_available():
            self.notes.append(f"parked on {parked}, restored on CPU: this server has no GPU")
            return "cpu"
        index = int(want.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            self.notes.append(f"parked on {parked}, restored on cuda:0: this server has no {want}")
            return "cuda:0"
        return want

    def load(self, file: str) -> Any:
        if file in self.cache:
            return self.cache[file]
        meta = self.files.get(file)
        if meta is None:
            raise Damaged(f"file not recorded: {file} (the park did not finish it)")
        path = self.folder / file
        if meta.get("format") == "npy":
            value: Any = formats.read_npy(path, meta)
        elif meta.get("format") == "tensor":
            torch = self.torch()
            value = torchio.read_tensor(path, meta, self.target_device(str(meta.get("device", "cpu"))), torch)
        else:
            raise Damaged(f"unknown format {meta.get('format')!r} of {file}")
        self.bytes += int(meta["bytes"])
        self.cache[file] = value
        return value


def rebind(value: Any, namespace: dict[str, Any], done: set[int]) -> Any:
    """A function or class defined in the notebook, restored by value, gets the kernel's
    namespace as its globals again (the serializer gives it a private copy of the few it used),
    so it sees the user's later assignments as it did before the park."""
    if isinstance(value, types.FunctionType):
        if value.__module__ != "__main__" or value.__globals__ is namespace:
            return value
        f = types.FunctionType(
            value.__code__, namespace, value.__name__, value.__defaults__, value.__closure__
        )
        f.__kwdefaults__ = value.__kwdefaults__
        f.__qualname__ = value.__qualname__
        f.__doc__ = value.__doc__
        f.__annotations__ = value.__annotations__
        f.__dict__.update(value.__dict__)
        return f
    cls = value if isinstance(value, type) else type(value)
    if cls.__module__ == "__main__" and id(cls) not in done:
        done.add(id(cls))
        for key, attr in list(vars(cls).items()):
            if isinstance(attr, types.FunctionType):
                setattr(cls, key, rebind(attr, namespace, done))
            elif isinstance(attr, staticmethod | classmethod) and isinstance(
                attr.__func__, types.FunctionType
            ):
                setattr(cls, key, type(attr)(rebind(attr.__func__, namespace, done)))
    return value


def load_entry(name: str, entry: dict[str, Any], loader: Loader, namespace: dict[str, Any]) -> Any:
    kind = entry.get("kind")
    files = list(entry.get("files") or [])
    if kind == c.IMPORT:
        return importlib.import_module(str(entry["module"]))
    if kind == c.GLOBAL:
        return c.resolve_global(str(entry["module"]), str(entry["qualname"]))
    if kind in (c.ARRAY, c.TENSOR):
        return loader.load(files[0])
    if kind in (c.FRAME, c.SERIES):
        meta = loader.files.get(files[0])
        if meta is None:
            raise Damaged(f"file not recorded: {files[0]}")
        value = formats.read_frame(loader.folder / files[0], meta, kind == c.SERIES)
        loader.bytes += int(meta["bytes"])
        return value.rename(entry.get("series_name")) if kind == c.SERIES else value
    if kind == c.PICKLE:
        meta = loader.files.get(files[0])
        if meta is None:
            raise Damaged(f"file not recorded: {files[0]}")
        data = read_checked(loader.folder / files[0], int(meta["bytes"]), int(meta["crc32"]))
        loader.bytes += len(data)
        return formats.loads(data, loader.load)
    raise Damaged(f"unknown kind {kind!r}")


def find_park(folder: Path, notices: list[str]) -> Path | None:
    """The park folder, or the newest interrupted one beside it (a park killed part-way)."""
    if folder.is_dir():
        return folder
    partial = sorted(
        folder.parent.glob(f".{folder.name}.parking-*"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    if partial:
        notices.append("the park was interrupted before it finished: what it had saved is restored")
        return partial[0]
    return None


def read_contents(folder: Path, notices: list[str]) -> Manifest | None:
    try:
        m = read_manifest(folder)
        if not m.complete:
            notices.append("the park is marked incomplete")
        return m
    except FileNotFoundError:
        if not (folder / JOURNAL).exists():
            notices.append(f"no {MANIFEST} or journal in {folder}")
            return None
    except Exception as e:
        notices.append(f"the park's {MANIFEST} is damaged ({type(e).__name__}): restored from its journal")
    try:
        return read_journal(folder)
    except Exception as e:
        notices.append(f"the park's journal is unreadable too ({type(e).__name__})")
        return None


def from_bare_files(folder: Path, namespace: dict[str, Any], report: dict[str, Any]) -> None:
    """No manifest, no journal: arrays and frames by their files' names, unchecked; nothing
    unpickled."""
    report["notices"].append("without a manifest: arrays and frames read unchecked, nothing unpickled")
    for path in sorted(folder.glob("v.*")):
        name, _, suffix = path.name[2:].rpartition(".")
        try:
            if suffix == "npy":
                namespace[name] = formats.read_npy(path, None)
            elif suffix == "arrow":
                namespace[name] = formats.read_frame(path, None, series=False)
            else:
                report["not_restored"].append({"name": name, "reason": "the manifest is lost (no checksum)"})
                continue
            report["restored"].append(name)
            report["bytes"] += path.stat().st_size
        except Exception as e:
            report["not_restored"].append({"name": name, "reason": f"{type(e).__name__}: {e}"[:300]})


def restore(namespace: dict[str, Any], park_dir: str | Path, device: str | None = None) -> dict[str, Any]:
    """Loads the park into the namespace; the report (kernelcode.restore_source's), never raises."""
    t0 = time.monotonic()
    report: dict[str, Any] = {"ok": False, "parked_at": "", "restored": [], "not_restored": []}
    report.update(notices=[], bytes=0, seconds=0.0, error=None)
    try:
        folder = find_park(Path(park_dir).expanduser(), report["notices"])
        if folder is None:
            report["error"] = f"nothing is parked in {park_dir}"
            return report
        manifest = read_contents(folder, report["notices"])
        if manifest is None:
            from_bare_files(folder, namespace, report)
            report["ok"] = not report["not_restored"] and bool(report["restored"])
            return report
        report["parked_at"] = manifest.parked_at
        loader = Loader(folder, manifest.files, device)
        done: set[int] = set()
        entries = sorted(manifest.names.items(), key=lambda kv: _ORDER.get(str(kv[1].get("kind")), 2))
        for name, entry in entries:
            loader.notes = []
            try:
                if entry.get("kind") == c.ALIAS:
                    of = str(entry.get("of"))
                    if of not in report["restored"]:
                        raise Damaged(f"the same object as {of}, which was not restored")
                    namespace[name] = namespace[of]
                else:
                    namespace[name] = rebind(load_entry(name, entry, loader, namespace), namespace, done)
                report["restored"].append(name)
            except Exception as e:
                reason = str(e) if isinstance(e, Damaged) else f"{type(e).__name__}: {e}"
                report["not_restored"].append({"name": name, "reason": reason[:300]})
            report["notices"] += [f"{name}: {note}" for note in dict.fromkeys(loader.notes)]
        for item in manifest.not_saved:
            report["not_restored"].append(
                {"name": item.get("name", "?"), "reason": f"not parked: {item.get('reason')}"}
            )
        report["bytes"] = loader.bytes
        report["ok"] = not any(not r["reason"].startswith("not parked") for r in report["not_restored"])
    except Exception as e:
        report["error"] = f"{type(e).__name__}: {e}"[:500]
    finally:
        report["seconds"] = round(time.monotonic() - t0, 3)
    return report
