"""Park a real IPython kernel's state and restore it into a second, fresh kernel.

One kernel builds the state (a 256 MiB array and smaller ones, a pandas frame of mixed
dtypes with an index, a class defined in the notebook and an instance, a closure, a lambda,
a partial, imports, an open file) and parks it once; a fresh kernel restores it; a third
restores damaged copies. Checks: every value equal, the open file named, one display_data
and nothing else, the namespace unchanged, file modes, bounded host memory, the limit."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.unit.parktools import Kernel, kernel

from gpusessions.park.kernelcode import park_source, restore_source

BIG_MIB = 256
STATE = f"""
import numpy as np
import pandas as pd
import functools
from os.path import join
big = np.random.default_rng(1).random({BIG_MIB} * 2**20 // 8)
same = big
nested = {{"w": np.arange(3 * 2**20, dtype=np.int32).reshape(3, -1), "k": [1, 2.5, "x"], "big": big}}
fortran = np.asfortranarray(np.arange(12.0).reshape(3, 4))
strided = np.arange(100)[::3]
df = pd.DataFrame(
    {{
        "i": np.arange(1000),
        "f": np.linspace(0, 1, 1000),
        "s": [f"r{{i}}" for i in range(1000)],
        "c": pd.Categorical(["a", "b"] * 500),
        "t": pd.date_range("2026-01-01", periods=1000, freq="h", tz="UTC"),
        "b": [True, False] * 500,
    }},
    index=pd.Index(np.arange(1000) * 10, name="row"),
)
ser = pd.Series([1.5, None, 3.0], index=["x", "y", "z"], name="v")
OFFSET = 100

class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def norm(self):
        return (self.x ** 2 + self.y ** 2) ** 0.5 + OFFSET

pt = Point(3, 4)

def make_counter(start):
    n = [start]
    def inc():
        n[0] += 1
        return n[0]
    return inc

counter = make_counter(10)
square = lambda v: v * v
pow2 = functools.partial(pow, 2)
fh = open({__file__!r})
"""

CHECK = {
    "np.array_equal(big, np.random.default_rng(1).random(len(big)))": True,
    "same is big and nested['big'] is big": True,
    "np.array_equal(nested['w'], np.arange(3 * 2**20, dtype=np.int32).reshape(3, -1))": True,
    "nested['k']": [1, 2.5, "x"],
    "bool(fortran.flags.f_contiguous) and fortran.tolist() == np.arange(12.0).reshape(3, 4).tolist()": True,
    "strided.tolist() == list(range(0, 100, 3))": True,
    "df.index.name": "row",
    "list(df.dtypes.astype(str))": None,  # compared with the parking kernel's
    "df.to_json()": None,
    "ser.to_json()": None,
    "ser.name": "v",
    "[pt.x, pt.y, pt.norm(), isinstance(pt, Point), Point(6, 8).norm()]": [3, 4, 105.0, True, 110.0],
    "counter.__closure__[0].cell_contents": [10],  # not called here: calls change it
    "square(7)": 49,
    "pow2(10)": 1024,
    "[np.__name__, pd.__name__, join('a', 'b')]": ["numpy", "pandas", "a/b"],
}


def names(k: Kernel) -> dict[str, int]:
    return k.value("{n: id(v) for n, v in get_ipython().user_ns.items() if not n.startswith('_')}")


@pytest.fixture(scope="module")
def parked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("home")
    target = home / ".gpusessions" / "parked" / "srv" / "k1"
    with kernel() as k:
        assert k.run(STATE).status == "ok"
        before = names(k)
        expected = {e: k.value(e) for e in CHECK}
        k.reset_hwm()
        hwm_before = k.vmhwm_kib()
        refused = k.run(park_source(str(home / "refused"), limit_bytes=100 << 20))
        cell = k.run(park_source(str(target), limit_bytes=2 << 30, chunk_bytes=16 << 20))
        hwm_after = k.vmhwm_kib()
        after = names(k)
        fh_open = k.value("not fh.closed")
        yield {
            "home": home,
            "target": target,
            "cell": cell,
            "refused": refused,
            "before": before,
            "after": after,
            "expected": expected,
            "hwm": (hwm_before, hwm_after),
            "fh_open": fh_open,
        }


def test_park_publishes_one_report_and_nothing_else(parked: dict[str, Any]) -> None:
    cell = parked["cell"]
    assert (cell.status, cell.streams, cell.results, cell.errors) == ("ok", [], [], [])
    r = cell.report
    assert r["ok"] and r["error"] is None, r
    assert r["dir"] == str(parked["target"])
    assert r["bytes"] > BIG_MIB << 20 and r["seconds"] > 0
    for name in (
        "big",
        "same",
        "nested",
        "df",
        "ser",
        "Point",
        "pt",
        "counter",
        "square",
        "pow2",
        "np",
        "join",
    ):
        assert name in r["saved"], name
    assert {"name": "fh", "type": "_io.TextIOWrapper", "reason": "open file handle"} in r["not_saved"]
    assert not {"In", "Out", "get_ipython", "exit", "quit", "_", "__builtins__"} & set(r["saved"])


def test_the_namespace_is_unchanged_by_a_park(parked: dict[str, Any]) -> None:
    assert parked["after"] == parked["before"]
    assert parked["fh_open"] is True


def test_host_memory_during_a_park_stays_bounded(parked: dict[str, Any]) -> None:
    before, after = parked["hwm"]
    growth_mib = (after - before) / 1024
    assert growth_mib < BIG_MIB / 4, f"peak RSS grew by {growth_mib:.0f} MiB while parking {BIG_MIB} MiB"


def test_files_are_private(parked: dict[str, Any]) -> None:
    target: Path = parked["target"]
    for d in (target, target.parent, target.parent.parent, target.parent.parent.parent):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    files = list(target.iterdir())
    assert {"manifest.json", "journal.jsonl", "v.big.npy", "v.df.arrow"} <= {f.name for f in files}
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")], "a temporary folder is left"


def test_over_the_limit_nothing_is_written(parked: dict[str, Any]) -> None:
    r = parked["refused"].report
    assert not r["ok"] and r["saved"] == []
    assert r["error"].startswith("the session's state is ") and "over your limit of 100.0 MiB" in r["error"]
    assert not (parked["home"] / "refused").exists()
    assert not [p for p in parked["home"].iterdir() if p.name.startswith(".refused")]


def test_restore_in_a_fresh_kernel(parked: dict[str, Any]) -> None:
    with kernel() as k:
        cell = k.run(restore_source(str(parked["target"])))
        assert (cell.status, cell.streams, cell.results, cell.errors) == ("ok", [], [], [])
        r = cell.report
        assert r["ok"], r
        assert set(r["restored"]) == set(parked["cell"].report["saved"])
        assert r["not_restored"] == [{"name": "fh", "reason": "not parked: open file handle"}]
        assert r["parked_at"].endswith("Z") and r["bytes"] > BIG_MIB << 20
        got = {e: k.value(e) for e in CHECK}
        for expr, want in CHECK.items():
            assert got[expr] == (parked["expected"][expr] if want is None else want), expr
        assert k.value("[counter(), counter()]") == [11, 12]
        assert "fh" not in k.value("list(get_ipython().user_ns)")
        # A function restored by value sees the kernel's names, as before the park.
        assert k.value("[globals().__setitem__('OFFSET', 0), pt.norm()][1]") == 5.0


def damaged_copy(src: Path, dst: Path, *, truncate: str = "", drop: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True)
    for f in src.iterdir():
        if f.name in drop:
            continue
        if f.name == truncate:
            with open(f, "rb") as i, open(dst / f.name, "wb") as o:
                o.write(i.read(12 << 20))
        else:
            os.link(f, dst / f.name)
    return dst


def test_damaged_parks_restore_the_rest(parked: dict[str, Any], tmp_path: Path) -> None:
    src: Path = parked["target"]
    truncated = damaged_copy(src, tmp_path / "truncated", truncate="v.big.npy")
    bad_manifest = damaged_copy(src, tmp_path / "bad", drop=("manifest.json",))
    (bad_manifest / "manifest.json").write_text('{"format": 1, "names": [trunc')
    bare = damaged_copy(src, tmp_path / "bare", drop=("manifest.json", "journal.jsonl"))
    with kernel() as k:
        r = k.run(restore_source(str(truncated))).report
        assert not r["ok"]
        lost = {d["name"]: d["reason"] for d in r["not_restored"]}
        assert lost["big"] == f"file truncated: 12 of {BIG_MIB} MiB"
        # same is big; nested refers to it: they go with it, the rest comes back.
        assert {"same", "nested", "fh"} <= set(lost) and "df" in r["restored"] and "pt" in r["restored"]
        assert k.value("pt.norm()") == 105.0

        r = k.run(restore_source(str(bad_manifest))).report
        assert any("manifest.json is damaged" in n for n in r["notices"]), r
        assert {"big", "df", "pt"} <= set(r["restored"])

        r = k.run(restore_source(str(bare))).report
        assert {"big", "df"} <= set(r["restored"]) and "pt" not in r["restored"]
        assert {"name": "pt", "reason": "the manifest is lost (no checksum)"} in r["not_restored"]
        assert k.value("bool(np.array_equal(big, np.random.default_rng(1).random(len(big))))") is True

        r = k.run(restore_source(str(tmp_path / "nothing-here"))).report
        assert not r["ok"] and "nothing is parked" in r["error"]
        assert k.value("1 + 1") == 2  # the kernel still answers


def test_a_killed_park_leaves_a_partial_park_that_restores(parked: dict[str, Any], tmp_path: Path) -> None:
    """A SIGKILL between two names: the temporary folder with its journal (no manifest)."""
    src: Path = parked["target"]
    partial = tmp_path / ".k9.parking-123"
    damaged_copy(src, partial, drop=("manifest.json",))
    lines = (src / "journal.jsonl").read_text().splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if '"name":"df"' in ln)
    (partial / "journal.jsonl").write_text("".join(lines[: cut + 1]) + lines[cut + 1][:20])
    with kernel() as k:
        r = k.run(restore_source(str(tmp_path / "k9"))).report
        assert any("interrupted" in n for n in r["notices"]), r
        assert "df" in r["restored"] and "big" in r["restored"]
        assert "pt" not in r["restored"]
        assert shutil.which("true")  # nothing else to check: the kernel answered
