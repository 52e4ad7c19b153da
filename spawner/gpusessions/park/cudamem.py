"""Parking raw GPU memory: a CUDA allocation to a file and back, a chunk at a time.

What a park of a GPU tensor does underneath (`torchio`), without torch: `make gpu-check` uses
it to measure park and restore of a CUDA allocation on a real GPU, where torch is often not
installed and cannot be (a GPU machine without internet). The CUDA driver API is reached
through ctypes (`libcuda.so.1`, which every NVIDIA driver installs); nothing is compiled.

Only memory is allocated, copied and freed: no device setting is read or changed.

`park(memory, path, staging)` copies the device's bytes to the host a chunk (64 MiB) at a time
(into a pinned buffer of three chunks from `cuMemAllocHost`, page-aligned, so the file is
written with O_DIRECT through `CheckedWriter`) and returns (bytes, CRC-32);
`restore(memory, path, crc, staging)` reads the file back chunk by chunk into the staging
buffer and copies each chunk to the device, then checks the CRC. `memory` is anything with
`nbytes`, `to_host(view, offset)`, `from_host(offset, view)` and `fill`: a `CudaAllocation`,
or `HostMemory` (a test's stand-in).
"""

from __future__ import annotations

import ctypes
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from gpusessions.park.files import CheckedWriter, Damaged, check_size, read_range_into

CHUNK = 64 << 20
SLOTS = 3  # chunks in a park's staging buffer (see `park`)
LIBRARY = "libcuda.so.1"


class Memory(Protocol):
    nbytes: int

    def to_host(self, view: memoryview, offset: int) -> None: ...

    def from_host(self, offset: int, view: memoryview) -> None: ...

    def fill(self, offset: int, value: int, nbytes: int) -> None: ...


class CudaError(Exception):
    """A CUDA driver call failed: the call and the driver's own words."""


class Driver:
    """The few CUDA driver API calls a park needs, on the primary context of one device."""

    def __init__(self, lib: Any, ordinal: int = 0) -> None:
        self.lib = lib
        self._call("cuInit", ctypes.c_uint(0))
        dev = ctypes.c_int()
        self._call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(ordinal))
        self.device = dev
        name = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", name, ctypes.c_int(256), dev)
        self.name = name.value.decode(errors="replace")
        ctx = ctypes.c_void_p()
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.ctx = ctx
        self._call("cuCtxSetCurrent", ctx)

    @classmethod
    def load(cls, ordinal: int = 0) -> tuple[Driver | None, str]:
        """(driver, "") or (None, why not in words)."""
        try:
            lib = ctypes.CDLL(LIBRARY)
        except OSError as e:
            return None, f"the CUDA driver library cannot be loaded ({LIBRARY}: {e})"
        try:
            return cls(lib, ordinal), ""
        except CudaError as e:
            return None, str(e)

    def _call(self, name: str, *args: Any) -> None:
        rc = getattr(self.lib, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            words = "?"
            if self.lib.cuGetErrorString(ctypes.c_int(rc), ctypes.byref(text)) == 0 and text.value:
                words = text.value.decode(errors="replace")
            raise CudaError(f"{name} failed: CUDA error {rc}: {words}")

    def alloc(self, nbytes: int) -> CudaAllocation:
        ptr = ctypes.c_uint64()
        self._call("cuMemAlloc_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        return CudaAllocation(self, ptr.value, nbytes)

    def pinned(self, nbytes: int) -> PinnedBuffer:
        ptr = ctypes.c_void_p()
        self._call("cuMemAllocHost_v2", ctypes.byref(ptr), ctypes.c_size_t(nbytes))
        assert ptr.value is not None
        return PinnedBuffer(self, ptr.value, nbytes)

    def close(self) -> None:
        self._call("cuDevicePrimaryCtxRelease_v2", self.device)


@dataclass
class PinnedBuffer:
    driver: Driver
    address: int
    nbytes: int

    def view(self) -> memoryview:
        return memoryview((ctypes.c_char * self.nbytes).from_address(self.address)).cast("B")

    def free(self) -> None:
        self.driver._call("cuMemFreeHost", ctypes.c_void_p(self.address))


@dataclass
class CudaAllocation:
    driver: Driver
    address: int
    nbytes: int

    def _host(self, view: memoryview) -> ctypes.c_void_p:
        # The staging view is a pinned buffer's (or a slice of one): its own address.
        return ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(view)))

    def to_host(self, view: memoryview, offset: int) -> None:
        self.driver._call(
            "cuMemcpyDtoH_v2",
            self._host(view),
            ctypes.c_uint64(self.address + offset),
            ctypes.c_size_t(len(view)),
        )

    def from_host(self, offset: int, view: memoryview) -> None:
        self.driver._call(
            "cuMemcpyHtoD_v2",
            ctypes.c_uint64(self.address + offset),
            self._host(view),
            ctypes.c_size_t(len(view)),
        )

    def fill(self, offset: int, value: int, nbytes: int) -> None:
        self.driver._call(
            "cuMemsetD32_v2",
            ctypes.c_uint64(self.address + offset),
            ctypes.c_uint(value),
            ctypes.c_size_t(nbytes // 4),
        )
        self.driver._call("cuCtxSynchronize")

    def free(self) -> None:
        self.driver._call("cuMemFree_v2", ctypes.c_uint64(self.address))


class HostMemory:
    """Host bytes standing in for a device allocation (tests; a machine without a GPU)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.data = bytearray(nbytes)
        self.copies = 0

    def to_host(self, view: memoryview, offset: int) -> None:
        view[:] = memoryview(self.data)[offset : offset + len(view)]
        self.copies += 1

    def from_host(self, offset: int, view: memoryview) -> None:
        memoryview(self.data)[offset : offset + len(view)] = view
        self.copies += 1

    def fill(self, offset: int, value: int, nbytes: int) -> None:
        self.data[offset : offset + nbytes] = struct.pack("<I", value) * (nbytes // 4)

    def free(self) -> None:
        self.data = bytearray()


def pattern_value(chunk_index: int) -> int:
    """The 32-bit word a check fills chunk `chunk_index` with (each chunk its own)."""
    return (chunk_index * 0x9E3779B1 + 0x5BD1E995) & 0xFFFFFFFF


def fill_pattern(memory: Memory, chunk: int = CHUNK) -> None:
    for i, off in enumerate(range(0, memory.nbytes, chunk)):
        memory.fill(off, pattern_value(i), min(chunk, memory.nbytes - off))


def check_pattern(memory: Memory, staging: memoryview, chunk: int = CHUNK) -> str | None:
    """None when every chunk holds its pattern again, else the first difference in words."""
    for i, off in enumerate(range(0, memory.nbytes, chunk)):
        n = min(chunk, memory.nbytes - off)
        memory.to_host(staging[:n], off)
        if staging[:n] != struct.pack("<I", pattern_value(i)) * (n // 4):
            return f"the restored bytes differ from the parked ones in the chunk at {off / 2**30:.2f} GiB"
    return None


def park(memory: Memory, path: Path, staging: memoryview, chunk: int = CHUNK) -> tuple[int, int]:
    """The device's bytes into a new file (0600, O_DIRECT where the filesystem allows it):
    (bytes, CRC-32). `staging` holds `SLOTS` chunks, used in turn: the writer's checksum thread
    may still read the two chunks before the one being copied (`files.Crc`). Host memory used:
    the staging buffer and the writer's own chunk."""
    slots = [staging[i * chunk : (i + 1) * chunk] for i in range(SLOTS)]
    assert len(slots[-1]) == chunk, f"the staging buffer holds {SLOTS} chunks"
    with CheckedWriter(path, direct=True, chunk=chunk) as w:
        for i, off in enumerate(range(0, memory.nbytes, chunk)):
            n = min(chunk, memory.nbytes - off)
            slot = slots[i % SLOTS][:n]
            memory.to_host(slot, off)
            w.write(slot)
    return w.size, w.crc


def restore(memory: Memory, path: Path, crc: int, staging: memoryview, chunk: int = CHUNK) -> None:
    """The file back into the device a chunk at a time (the first chunk of `staging`);
    `Damaged` (in words) when it is short or its checksum differs."""
    check_size(path, memory.nbytes)
    running = 0
    for off in range(0, memory.nbytes, chunk):
        n = min(chunk, memory.nbytes - off)
        running = read_range_into(path, off, staging[:n], running, chunk)
        memory.from_host(off, staging[:n])
    if running != crc:
        raise Damaged(f"file damaged: checksum mismatch in {path.name}")


@dataclass
class Measured:
    nbytes: int
    park_s: float
    restore_s: float
    to_host_s: float  # the device's bytes to the host alone (no disk)
    disk_write_s: float  # as many bytes to a file alone (no device), O_DIRECT
    problem: str | None  # the restored bytes, checked; None: equal

    def rate(self, seconds: float) -> float:
        return self.nbytes / 2**30 / seconds if seconds > 0 else float("inf")


def measure(memory: Memory, folder: Path, staging: memoryview, chunk: int = CHUNK) -> Measured:
    """Fill `memory` with a pattern, time copying it to the host alone and writing as many
    bytes to disk alone (the two limits of a park), then park it, scramble it, restore it and
    check every chunk. The files are removed. `staging`: `SLOTS` chunks."""
    fill_pattern(memory, chunk)
    t = time.perf_counter()
    for off in range(0, memory.nbytes, chunk):
        memory.to_host(staging[: min(chunk, memory.nbytes - off)], off)
    to_host_s = time.perf_counter() - t
    disk = folder / "disk-alone.bin"
    t = time.perf_counter()
    with CheckedWriter(disk, direct=True, chunk=chunk) as w:
        for off in range(0, memory.nbytes, chunk):
            w.write(staging[: min(chunk, memory.nbytes - off)])
    disk_write_s = time.perf_counter() - t
    disk.unlink()
    target = folder / "parked.bin"
    try:
        t = time.perf_counter()
        _, crc = park(memory, target, staging, chunk)
        park_s = time.perf_counter() - t
        for off in range(0, memory.nbytes, chunk):  # what a new allocation would hold: not the data
            memory.fill(off, 0, min(chunk, memory.nbytes - off))
        t = time.perf_counter()
        restore(memory, target, crc, staging, chunk)
        restore_s = time.perf_counter() - t
    finally:
        target.unlink(missing_ok=True)
    problem = check_pattern(memory, staging, chunk)
    return Measured(memory.nbytes, park_s, restore_s, to_host_s, disk_write_s, problem)
