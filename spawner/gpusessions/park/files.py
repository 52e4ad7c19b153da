"""Private, checksummed files: what a park writes and a restore reads.

Every file is created 0600 and every folder 0700 (the kernel runs as the user, so the owner is
the user; the home volume may be readable by a group). Each file's CRC-32 is computed while it
is written or read, in chunks, so a damaged or truncated file is told apart from a whole one
without a second pass over the data.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import zlib
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

FILE_MODE = 0o600
DIR_MODE = 0o700
# Reads and copies go through buffers of this size at most (host memory stays bounded).
DEFAULT_CHUNK = 64 << 20


def make_private_dir(path: Path) -> None:
    """Creates the folder (and missing parents) 0700; an existing one is narrowed to 0700."""
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    os.chmod(path, DIR_MODE)


# Chunks at least this big have their CRC computed on a helper thread.
_THREAD_MIN = 1 << 20


class Crc:
    """A running CRC-32 of successive chunks, on a helper thread for big ones: zlib releases
    the GIL, so on two cores the checksum costs no time beside the disk (measured: inline,
    it added 40% to a park). Chunks stay referenced until checksummed: at most two ahead."""

    def __init__(self) -> None:
        self.value = 0
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[Future[None]] = deque()

    def _step(self, view: memoryview) -> None:
        self.value = zlib.crc32(view, self.value)

    def add(self, view: memoryview) -> None:
        if len(view) < _THREAD_MIN and not self._pending:
            self._step(view)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="park-crc")
        self._pending.append(self._pool.submit(self._step, view))
        while len(self._pending) > 2:
            self._pending.popleft().result()

    def result(self) -> int:
        while self._pending:
            self._pending.popleft().result()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        return self.value


# Files at least this big are written with O_DIRECT through an aligned buffer (below).
DIRECT_MIN = 8 << 20
_ALIGN = 4096


class CheckedWriter:
    """A new file, 0600, whose CRC-32 and length are counted as bytes go in.

    `direct=True` writes through one page-aligned buffer of `chunk` bytes with O_DIRECT, past
    the page cache: measured on the development machine, buffered writes of 2 GiB ran at
    0.3-0.5 GiB/s (the page cache's own allocation and writeback), O_DIRECT at 0.95, dd's
    speed. Where the filesystem refuses O_DIRECT (tmpfs) the file is written buffered.
    `close()` fsyncs: a park is followed by the GPU's release, and a file that is only in the
    page cache of a network home is not yet the user's."""

    def __init__(self, path: Path, direct: bool = False, chunk: int = DEFAULT_CHUNK) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        self.path = path
        self._crc = Crc()
        self.crc = 0
        self.size = 0
        self._closed = False
        self._buf: mmap.mmap | None = None
        if direct and hasattr(os, "O_DIRECT"):
            try:
                fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) | os.O_DIRECT)
                cap = max(-(-chunk // _ALIGN) * _ALIGN, 1 << 20)
                self._buf = mmap.mmap(-1, cap)
                self._view = memoryview(self._buf)
                self._fill = 0
            except OSError:
                self._buf = None

    def fileno(self) -> int:
        return self.fd

    def _write_all(self, view: memoryview) -> None:
        done = 0
        while done < len(view):
            done += os.write(self.fd, view[done:])

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Appends `data`. Its checksum may still be computed on the helper thread after this
        returns (`Crc`: up to two chunks behind): a caller that refills one buffer must rotate
        three (`cudamem.park`), or the checksum is of the refilled bytes."""
        view = memoryview(data).cast("B")
        length = len(view)
        self._crc.add(view)
        self.size += length
        if self._buf is None:
            self._write_all(view)
            return length
        cap = len(self._view)
        while len(view):
            n = min(len(view), cap - self._fill)
            self._view[self._fill : self._fill + n] = view[:n]
            self._fill += n
            view = view[n:]
            if self._fill == cap:
                self._write_all(self._view)
                self._fill = 0
        return length

    def write_chunks(self, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
        for chunk in chunks:
            self.write(chunk)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.crc = self._crc.result()
            if self._buf is not None:
                aligned = self._fill // _ALIGN * _ALIGN
                self._write_all(self._view[:aligned])
                # The tail is not a whole block: written without O_DIRECT.
                fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
                self._write_all(self._view[aligned : self._fill])
            os.fsync(self.fd)
        finally:
            if self._buf is not None:
                self._view.release()
                self._buf.close()
            os.close(self.fd)

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


def read_into(file: Any, target: memoryview, crc: int, chunk: int = DEFAULT_CHUNK) -> int:
    """Fills `target` from `file` (raw, unbuffered) chunk by chunk; returns the running CRC-32."""
    target = target.cast("B")
    running = Crc()
    running.value = crc
    done = 0
    try:
        while done < len(target):
            n = file.readinto(target[done : done + chunk])
            if not n:
                raise Damaged(f"file truncated: {done / 2**20:.0f} of {len(target) / 2**20:.0f} MiB data")
            running.add(target[done : done + n])
            done += n
    finally:
        crc = running.result()
    return crc


def read_range_into(path: Path, start: int, target: memoryview, crc: int, chunk: int = DEFAULT_CHUNK) -> int:
    """Bytes [start, start + len(target)) of the file into `target`, with O_DIRECT through one
    aligned buffer where the filesystem allows it; returns the running CRC-32.

    Past the page cache: a buffered read fills page-cache pages and then the target, twice
    the fresh memory, and filling fresh memory is what bounds a restore on a VM (docs/parking.md)."""
    target = target.cast("B")
    total = len(target)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    except OSError:
        with open(path, "rb", buffering=0) as f:
            f.seek(start)
            return read_into(f, target, crc, chunk)
    cap = max(-(-chunk // _ALIGN) * _ALIGN, 1 << 20)
    buf = mmap.mmap(-1, cap)
    view = memoryview(buf)
    running = Crc()
    running.value = crc
    pos = start // _ALIGN * _ALIGN
    skip = start - pos
    done = 0
    try:
        while done < total:
            n = os.preadv(fd, [view], pos)
            if n <= skip:
                raise Damaged(f"file truncated: {done / 2**20:.0f} of {total / 2**20:.0f} MiB data")
            take = min(n - skip, total - done)
            target[done : done + take] = view[skip : skip + take]
            running.add(target[done : done + take])
            done += take
            pos += n
            skip = 0
            if n % _ALIGN and done < total:  # a short read that is not a whole block: the end
                raise Damaged(f"file truncated: {done / 2**20:.0f} of {total / 2**20:.0f} MiB data")
    finally:
        crc = running.result()
        view.release()
        buf.close()
        os.close(fd)
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
