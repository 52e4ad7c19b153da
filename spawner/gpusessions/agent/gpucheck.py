"""`make gpu-check`: the agent's reading of this machine's GPUs through the real NVML.

    python -m gpusessions.agent.gpucheck [--interval 1]

Finds the devices as the agent in a holder does (NVML enumeration, or the UUIDs in
NVIDIA_VISIBLE_DEVICES), samples twice (GPM SM activity of a MIG device is a rate between two
samples) and prints one line per device: memory, compute processes, and utilization (whole GPU)
or GPM SM activity (MIG on Hopper and newer), "unknown" where NVML says NotSupported (A100 MIG).
Read-only: it never changes MIG mode, clocks or any setting. Without an NVIDIA GPU (no NVML
library, no driver, no device) it says so in one line and exits 1.

Then (`--park-gib 1,8`) it parks and restores a CUDA allocation of each size on the first
visible device, as a park of a GPU tensor does (`gpusessions.park.cudamem`: pinned staging
buffer, 64 MiB chunks, O_DIRECT files in `--park-dir`), and prints the GiB/s each way beside the
two limits measured in the same run: the device's bytes to the host alone, and as many bytes
written to the same disk alone. Allocating and copying memory is all it does on the GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from gpusessions.agent.collect import Collector, Reading, discover
from gpusessions.park import cudamem

GIB = 2**30


def _gib(n: int | None) -> str:
    return "?" if n is None else f"{n / GIB:.1f}"


def activity_text(r: Reading) -> str:
    if r.activity_source == "utilization":
        return f"utilization {r.activity:.0f}%"
    if r.activity_source == "gpm-sm-activity":
        return f"GPM SM activity {r.activity:.1f}%"
    return "activity unknown (NVML: NotSupported)"


def report_lines(readings: list[Reading]) -> list[str]:
    """One line per device."""
    out = []
    for r in readings:
        if r.error:
            out.append(f"{r.uuid}  {r.kind}  {r.name or '?'}  error: {r.error}")
            continue
        out.append(
            f"{r.uuid}  {r.kind}  {r.name}  memory {_gib(r.memory_used)}/{_gib(r.memory_total)} GiB  "
            f"processes {r.processes if r.processes is not None else '?'}  {activity_text(r)}"
        )
    return out


def check(nvml: ModuleType, visible: str | None, interval: float) -> tuple[int, list[str]]:
    """(exit status, lines) for this NVML module."""
    try:
        nvml.nvmlInit()
    except Exception as e:  # NVMLError (no driver), OSError (no library)
        return 1, [f"gpu-check: no NVIDIA GPU here: NVML cannot start ({e})"]
    try:
        uuids, problem = discover(nvml, visible)
        if not uuids:
            return 1, [f"gpu-check: no NVIDIA GPU here: {problem}"]
        collector = Collector(nvml, uuids)
        collector.read()
        time.sleep(interval)
        readings = collector.read()
        when = time.strftime("%Y-%m-%d %H:%M:%S %Z")
        head = [f"gpu-check: {len(uuids)} device(s), driver {_driver(nvml)}, {when}"]
        return (1 if any(r.error for r in readings) else 0), head + report_lines(readings)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _driver(nvml: ModuleType) -> str:
    try:
        v = nvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else str(v)
    except Exception:
        return "?"


def park_line(m: cudamem.Measured) -> str:
    limit = min(m.rate(m.to_host_s), m.rate(m.disk_write_s))
    park, restore = m.rate(m.park_s), m.rate(m.restore_s)
    checked = "restored bytes equal" if m.problem is None else f"FAILED: {m.problem}"
    return (
        f"  {m.nbytes / GIB:g} GiB: park {m.park_s:.2f} s ({park:.2f} GiB/s), restore {m.restore_s:.2f} s "
        f"({restore:.2f} GiB/s); device to host alone {m.rate(m.to_host_s):.2f} GiB/s, disk write alone "
        f"{m.rate(m.disk_write_s):.2f} GiB/s: park / slower limit {park / limit:.2f}; {checked}"
    )


def park_check(
    memory_for: Callable[[int], cudamem.Memory],
    staging: memoryview,
    sizes_gib: list[float],
    folder: Path,
    device: str,
    chunk: int = cudamem.CHUNK,
) -> tuple[int, list[str]]:
    """Park and restore an allocation of each size (`memory_for(nbytes)` makes and fills one)."""
    lines = [f"gpu-check: park and restore of a CUDA allocation on {device}, files in {folder}:"]
    rc = 0
    for gib in sizes_gib:
        nbytes = int(gib * GIB)
        free = shutil.disk_usage(folder).free
        if free < nbytes + (1 << 30):
            lines.append(
                f"  {gib:g} GiB: not run: {free / GIB:.1f} GiB free in {folder}, it needs {gib + 1:g}"
            )
            rc = 1
            continue
        memory = memory_for(nbytes)
        try:
            m = cudamem.measure(memory, folder, staging, chunk)
        except (cudamem.CudaError, cudamem.Damaged, OSError) as e:
            lines.append(f"  {gib:g} GiB: FAILED: {e}")
            rc = 1
            continue
        finally:
            free_memory = getattr(memory, "free", None)
            if free_memory is not None:
                free_memory()
        lines.append(park_line(m))
        rc = rc or (m.problem is not None)
    return rc, lines


def cuda_park_check(sizes_gib: list[float], park_dir: str | None) -> tuple[int, list[str]]:
    driver, why = cudamem.Driver.load(0)
    if driver is None:
        return 1, [f"gpu-check: park not checked: {why}"]
    base = Path(park_dir or tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    try:
        pinned = driver.pinned(cudamem.CHUNK * cudamem.SLOTS)
    except cudamem.CudaError as e:
        driver.close()
        return 1, [f"gpu-check: park not checked: {e}"]
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-check-park-", dir=base) as folder:
            return park_check(driver.alloc, pinned.view(), sizes_gib, Path(folder), driver.name)
    finally:
        pinned.free()
        driver.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpusessions.agent.gpucheck", description=__doc__)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between the two samples")
    ap.add_argument(
        "--park-gib",
        default="1,8",
        help="sizes (GiB, comma-separated) of the CUDA allocations to park and restore; empty: none",
    )
    ap.add_argument("--park-dir", default=None, help="where the parked files go (default: the temp folder)")
    args = ap.parse_args(argv)
    try:
        sizes = [float(x) for x in args.park_gib.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--park-gib: sizes in GiB separated by commas, not {args.park_gib!r}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the deprecated `pynvml` wrapper says so
            # Imported here: a machine without the NVIDIA bindings gets the line below, not a traceback.
            import pynvml
    except ImportError as e:
        print(f"gpu-check: no NVIDIA GPU here: the NVML bindings are missing ({e})")
        return 1
    rc, lines = check(pynvml, os.environ.get("NVIDIA_VISIBLE_DEVICES"), args.interval)
    print("\n".join(lines), flush=True)
    if rc == 0 and sizes:
        prc, plines = cuda_park_check(sizes, args.park_dir)
        print("\n".join(plines))
        rc = prc
    return rc


if __name__ == "__main__":
    sys.exit(main())
