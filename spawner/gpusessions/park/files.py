"""Private, checksummed files: what a park writes and a restore reads.

Every file is created 0600 and every folder 0700 (the kernel runs as the user, so the owner is
the user; the home volume may be readable by a group). Each file's CRC-32 is computed while it
is written or read, in chunks, so a damaged or truncated file is told apart from a whole one
without a second pass over the data.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

FILE_MODE = 0o600
DIR_MODE = 0o700
# Reads and copies go through buffers of this size at most (host memory stays bounded).
DEFAULT_CHUNK = 64 << 20


def make_private_dir(path: Path) -> None:
    """Creates the folder (and missing parents) 0700; an existing one is narrowed to 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)


class CheckedWriter:
    """A new file, 0600, whose CRC-32 and length are counted as bytes go in.

    `close()` flushes and fsyncs: a park is followed by the GPU's release, and a file that is
    only in the page cache of a network home is not yet the user's."""

    def __init__(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        self.path = path
        self.file: BinaryIO = os.fdopen(fd, "wb", buffering=0)
        self.crc = 0
        self.size = 0

    def write(self, data: bytes | bytearray | memoryview) -> int:
        view = memoryview(data).cast("B")
        self.crc = zlib.crc32(view, self.crc)
        done = 0
        while done < len(view):
            done += self.file.write(view[done:])
        self.size += len(view)
        return len(view)

    def write_chunks(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def close(self) -> None:
        if not self.file.closed:
            os.fsync(self.file.fileno())
            self.file.close()

    def __enter__(self) -> CheckedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Damaged(Exception):
    """A file is missing, shorter than recorded, or its checksum differs: the reason in words."""


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def check_size(path: Path, expected: int) -> None:
    """Raises `Damaged` with "file truncated: 12 of 400 MiB" (or missing) before any read."""
    try:
        have = path.stat().st_size
    except FileNotFoundError:
        raise Damaged(f"file missing: {path.name}") from None
    if have < expected:
        raise Damaged(f"file truncated: {have / 2**20:.0f} of {mib(expected)}")
    if have > expected:
        raise Damaged(f"file longer than recorded: {mib(have)}, expected {mib(expected)}")


def read_into(file: BinaryIO, target: memoryview, crc: int, chunk: int = DEFAULT_CHUNK) -> int:
    """Fills `target` from `file` chunk by chunk; returns the running CRC-32."""
    target = target.cast("B")
    done = 0
    while done < len(target):
        n = file.readinto(target[done : done + chunk])
        if not n:
            raise Damaged(f"file truncated: {done / 2**20:.0f} of {mib(len(target))}")
        crc = zlib.crc32(target[done : done + n], crc)
        done += n
    return crc


def read_checked(path: Path, size: int, crc: int) -> bytes:
    """The whole (small) file, its length and checksum verified."""
    check_size(path, size)
    data = path.read_bytes()
    if zlib.crc32(data) != crc:
        raise Damaged(f"file damaged: checksum mismatch in {path.name}")
    return data


def file_crc(path: Path, chunk: int = DEFAULT_CHUNK) -> tuple[int, int]:
    """(size, CRC-32) of a file written by another library (pyarrow), read back in chunks."""
    crc = 0
    size = 0
    buf = bytearray(min(chunk, max(path.stat().st_size, 1)))
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(view):
            crc = zlib.crc32(view[:n], crc)
            size += n
    return size, crc
