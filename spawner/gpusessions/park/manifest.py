"""The park's table of contents: manifest.json, and the journal a killed park leaves.

A park writes into a temporary folder beside its target and appends one line to
`journal.jsonl` after each file is on disk (fsynced) and after each name whose files are
all there; `manifest.json` is written last, then the folder is renamed to the target. So:

- a target folder with a readable manifest is a whole park (`complete: true`);
- a park killed part-way leaves its temporary folder (`.<kernel>.parking-<pid>`): its
  journal names what was finished, and a restore takes that, marked incomplete;
- a target whose manifest is damaged still has the journal (the same entries).

Format version 1 (`FORMAT`). A reader refuses a newer major version rather than guess.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpusessions.park.files import CheckedWriter

FORMAT = 1
MANIFEST = "manifest.json"
JOURNAL = "journal.jsonl"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def python_version() -> str:
    return ".".join(str(v) for v in sys.version_info[:3])


@dataclass
class Manifest:
    """What a park holds.

    `files`: file name -> {"format", "bytes", "crc32", ...} (tensors add dtype, shape, device,
    requires_grad, parameter; arrays dtype and shape).
    `names`: variable -> {"kind", "type", "bytes", "device", "files", ...} in the order saved.
    `not_saved`: [{"name", "type", "reason"}].
    """

    parked_at: str = field(default_factory=utc_now)
    python: str = field(default_factory=python_version)
    complete: bool = False
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    names: dict[str, dict[str, Any]] = field(default_factory=dict)
    not_saved: list[dict[str, str]] = field(default_factory=list)
    format: int = FORMAT

    @property
    def total_bytes(self) -> int:
        return sum(int(f.get("bytes", 0)) for f in self.files.values())

    def document(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "parked_at": self.parked_at,
            "python": self.python,
            "complete": self.complete,
            "total_bytes": self.total_bytes,
            "files": self.files,
            "names": self.names,
            "not_saved": self.not_saved,
        }

    @classmethod
    def from_document(cls, doc: Any) -> Manifest:
        if not isinstance(doc, dict) or not isinstance(doc.get("names"), dict):
            raise ValueError("not a park manifest")
        if int(doc.get("format", 0)) > FORMAT:
            raise ValueError(f"park format {doc.get('format')} is newer than this code's ({FORMAT})")
        return cls(
            parked_at=str(doc.get("parked_at", "")),
            python=str(doc.get("python", "")),
            complete=bool(doc.get("complete", False)),
            files=dict(doc.get("files") or {}),
            names=dict(doc["names"]),
            not_saved=list(doc.get("not_saved") or []),
            format=int(doc.get("format", FORMAT)),
        )


class Journal:
    """Appends one JSON line per finished file or name, each fsynced: what a SIGKILL leaves."""

    def __init__(self, folder: Path, manifest: Manifest) -> None:
        self.folder = folder
        self.manifest = manifest
        self._w = CheckedWriter(folder / JOURNAL)
        self._line({"header": {"format": FORMAT, "parked_at": manifest.parked_at, "python": manifest.python}})

    def _line(self, doc: dict[str, Any]) -> None:
        self._w.write((json.dumps(doc, separators=(",", ":")) + "\n").encode())
        os.fsync(self._w.file.fileno())

    def file(self, name: str, meta: dict[str, Any]) -> None:
        self.manifest.files[name] = meta
        self._line({"file": name, "meta": meta})

    def name(self, name: str, entry: dict[str, Any]) -> None:
        self.manifest.names[name] = entry
        self._line({"name": name, "entry": entry})

    def not_saved(self, item: dict[str, str]) -> None:
        self.manifest.not_saved.append(item)
        self._line({"not_saved": item})

    def finish(self) -> None:
        """The manifest, complete, beside the journal (which stays: a second copy)."""
        self._w.close()
        self.manifest.complete = True
        with CheckedWriter(self.folder / MANIFEST) as w:
            w.write(json.dumps(self.manifest.document(), indent=1).encode())


def read_manifest(folder: Path) -> Manifest:
    """The whole manifest; raises (ValueError, OSError) when it is missing or damaged."""
    return Manifest.from_document(json.loads((folder / MANIFEST).read_text()))


def read_journal(folder: Path) -> Manifest:
    """What the journal's whole lines say (a torn last line is skipped); complete stays False."""
    m = Manifest(parked_at="", python="")
    with open(folder / JOURNAL, "rb") as f:
        for raw in f:
            try:
                doc = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(doc, dict):
                continue
            if "header" in doc:
                m.parked_at = str(doc["header"].get("parked_at", ""))
                m.python = str(doc["header"].get("python", ""))
            elif "file" in doc:
                m.files[str(doc["file"])] = dict(doc.get("meta") or {})
            elif "name" in doc:
                m.names[str(doc["name"])] = dict(doc.get("entry") or {})
            elif "not_saved" in doc:
                m.not_saved.append(dict(doc["not_saved"]))
    return m
