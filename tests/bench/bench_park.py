"""Benchmark: parking and restoring a kernel's numpy state against the disk's own speed.

    .venv/bin/python tests/bench/bench_park.py [--gib 0.5,2] [--dir /tmp] [--json out.json]

For each size: a real IPython kernel builds that much numpy state (arrays of 256 MiB from
np.random: the "re-run the cells" baseline), parks it into --dir (park_source, as the
holder's orchestration runs it); the park's files are dropped from the page cache
(posix_fadvise DONTNEED after the park's fsync), and a fresh kernel restores them
(restore_source). Beside it, in the same run and on the same filesystem, dd writes and
reads a file of the same size with O_DIRECT (oflag=direct conv=fsync / iflag=direct): the
ratios park/dd-write and restore/dd-read are the figures (target >= 0.5). A restore also
fills memory the new kernel never touched; how fast this machine does that (a fresh process
filling as many bytes) is measured too, and restore is compared with the slower of the two.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "spawner"), str(ROOT)]

from tests.unit.parktools import kernel  # noqa: E402

from gpusessions.park.kernelcode import park_source, restore_source  # noqa: E402

PIECE = 256 << 20


def build_cell(nbytes: int) -> str:
    n = max(nbytes // PIECE, 1)
    per = nbytes // n // 8
    return (
        "import numpy as np\n"
        "_rng = np.random.default_rng(0)\n"
        f"state = [_rng.random({per}) for _ in range({n})]\n"
        "del _rng\n"
    )


def drop_cache(folder: Path) -> None:
    for f in folder.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def dd(nbytes: int, where: Path) -> tuple[float, float]:
    """GiB/s of an O_DIRECT write (fsynced) and read of nbytes on the filesystem of `where`."""
    f = where / "dd.bin"
    count = max(nbytes // (64 << 20), 1)
    t0 = time.perf_counter()
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={f}", "bs=64M", f"count={count}", "oflag=direct", "conv=fsync"],
        check=True,
        capture_output=True,
    )
    t1 = time.perf_counter()
    subprocess.run(
        ["dd", f"if={f}", "of=/dev/null", "bs=64M", "iflag=direct"], check=True, capture_output=True
    )
    t2 = time.perf_counter()
    f.unlink()
    gib = count * (64 << 20) / 2**30
    return gib / (t1 - t0), gib / (t2 - t1)


FRESH = """
import sys, time, numpy as np
n = int(sys.argv[1])
t = time.perf_counter(); a = np.empty(n, np.uint8); a.fill(1); print(n / (time.perf_counter() - t) / 2**30)
"""


def fresh_memory(nbytes: int) -> float:
    """GiB/s at which a new process fills memory it never touched: what a restore (and a
    rebuild) writes into. On a VM whose host backs guest memory on first use (Firecracker,
    this machine) it is slower than the disk."""
    out = subprocess.run(
        [sys.executable, "-c", FRESH, str(nbytes)], check=True, capture_output=True, text=True
    )
    return float(out.stdout)


def one(nbytes: int, where: Path) -> dict[str, Any]:
    target = where / "parked" / "srv" / "k1"
    with kernel() as k:
        t0 = time.perf_counter()
        assert k.run(build_cell(nbytes), timeout=3600).status == "ok"
        rebuild = time.perf_counter() - t0
        t0 = time.perf_counter()
        p = k.run(park_source(str(target), limit_bytes=1 << 50), timeout=3600).report
        park_wall = time.perf_counter() - t0
    assert p["ok"], p
    drop_cache(target)
    with kernel() as k:
        t0 = time.perf_counter()
        r = k.run(restore_source(str(target)), timeout=3600).report
        restore_wall = time.perf_counter() - t0
        assert r["ok"] and "state" in r["restored"], r
    shutil.rmtree(where / "parked")
    dd_w, dd_r = dd(nbytes, where)
    mem = fresh_memory(nbytes)
    gib = p["bytes"] / 2**30
    return {
        "gib": round(gib, 3),
        "rebuild_s": round(rebuild, 2),
        "park_s": round(p["seconds"], 2),
        "park_wall_s": round(park_wall, 2),
        "restore_s": round(r["seconds"], 2),
        "restore_wall_s": round(restore_wall, 2),
        "park_gib_s": round(gib / p["seconds"], 3),
        "restore_gib_s": round(gib / r["seconds"], 3),
        "dd_write_gib_s": round(dd_w, 3),
        "dd_read_gib_s": round(dd_r, 3),
        "park_over_dd_write": round(gib / p["seconds"] / dd_w, 2),
        "restore_over_dd_read": round(gib / r["seconds"] / dd_r, 2),
        "fresh_memory_gib_s": round(mem, 3),
        "restore_over_min_dd_read_fresh_memory": round(gib / r["seconds"] / min(dd_r, mem), 2),
        "restore_over_rebuild": round(r["seconds"] / rebuild, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", default="0.5,2", help="comma-separated state sizes in GiB")
    ap.add_argument("--dir", default=tempfile.gettempdir(), help="where to park (the filesystem measured)")
    ap.add_argument("--json", default="", help="write the result here")
    args = ap.parse_args()
    sizes = [float(g) for g in args.gib.split(",") if g]
    where = Path(tempfile.mkdtemp(prefix="bench-park-", dir=args.dir))
    rows = []
    try:
        for g in sizes:
            row = one(int(g * 2**30), where)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    print(
        "| state | park | dd write | park/dd | restore | dd read | restore/dd | rebuild | restore/rebuild |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['gib']:g} GiB | {r['park_s']:.2f} s ({r['park_gib_s']:.2f} GiB/s) "
            f"| {r['dd_write_gib_s']:.2f} GiB/s "
            f"| {r['park_over_dd_write']:.2f} | {r['restore_s']:.2f} s ({r['restore_gib_s']:.2f} GiB/s) "
            f"| {r['dd_read_gib_s']:.2f} GiB/s | {r['restore_over_dd_read']:.2f} "
            f"| {r['fresh_memory_gib_s']:.2f} GiB/s | {r['restore_over_min_dd_read_fresh_memory']:.2f} "
            f"| {r['rebuild_s']:.2f} s "
            f"| {r['restore_over_rebuild']:.2f} |"
        )
    result = {
        "command": f"tests/bench/bench_park.py --gib {args.gib}",
        "date": time.strftime("%Y-%m-%d"),
        "figures": {f"{r['gib']:g}GiB": r for r in rows},
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
