"""`make gpu-check`: the agent's reading of this machine's GPUs through the real NVML.

    python -m gpusessions.agent.gpucheck [--interval 1]

Finds the devices as the agent in a holder does (NVML enumeration, or the UUIDs in
NVIDIA_VISIBLE_DEVICES), samples twice (GPM SM activity of a MIG device is a rate between two
samples) and prints one line per device: memory, compute processes, and utilization (whole GPU)
or GPM SM activity (MIG on Hopper and newer), "unknown" where NVML says NotSupported (A100 MIG).
Read-only: it never changes MIG mode, clocks or any setting. Without an NVIDIA GPU (no NVML
library, no driver, no device) it says so in one line and exits 1.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from types import ModuleType

from gpusessions.agent.collect import Collector, Reading, discover

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpusessions.agent.gpucheck", description=__doc__)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between the two samples")
    args = ap.parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # the deprecated `pynvml` wrapper says so
            # Imported here: a machine without the NVIDIA bindings gets the line below, not a traceback.
            import pynvml
    except ImportError as e:
        print(f"gpu-check: no NVIDIA GPU here: the NVML bindings are missing ({e})")
        return 1
    rc, lines = check(pynvml, os.environ.get("NVIDIA_VISIBLE_DEVICES"), args.interval)
    print("\n".join(lines))
    return rc


if __name__ == "__main__":
    sys.exit(main())
