"""The park's writer: O_DIRECT through an aligned buffer (and buffered where refused), the
checksum computed beside the writes, the .npy layout numpy itself reads."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

from gpusessions.park import formats
from gpusessions.park.files import CheckedWriter, Damaged, read_range_into
from gpusessions.park.restorer import restore
from gpusessions.park.saver import park

SHM = Path("/dev/shm")


@pytest.mark.parametrize("direct", [True, False])
def test_odd_sizes_come_out_whole(tmp_path: Path, direct: bool) -> None:
    data = np.random.default_rng(0).integers(0, 255, 3 * 2**20 + 4097, dtype=np.uint8).tobytes()
    with CheckedWriter(tmp_path / "f", direct=direct, chunk=1 << 20) as w:
        for i in range(0, len(data), 777_777):
            w.write(data[i : i + 777_777])
    assert (tmp_path / "f").read_bytes() == data
    assert (w.size, w.crc) == (len(data), zlib.crc32(data))


@pytest.mark.skipif(not SHM.is_dir(), reason="no /dev/shm")
def test_tmpfs_round_trips(tmp_path: Path) -> None:
    """tmpfs takes O_DIRECT since Linux 6.6, refuses it before (then the file is buffered)."""
    folder = Path(SHM / f"park-test-{tmp_path.name}")
    folder.mkdir()
    try:
        a = np.arange(3 << 20, dtype=np.float32)  # 12 MiB: over DIRECT_MIN
        meta = formats.write_npy(folder / "a.npy", a, chunk=1 << 20)
        assert np.array_equal(np.load(folder / "a.npy", allow_pickle=False), a)
        assert np.array_equal(formats.read_npy(folder / "a.npy", meta), a)
    finally:
        for f in folder.iterdir():
            f.unlink()
        folder.rmdir()


def test_npy_layouts_and_damage(tmp_path: Path) -> None:
    for i, a in enumerate(
        [
            np.asfortranarray(np.arange(24.0).reshape(4, 6)),
            np.arange(100)[::7],
            np.array(3.5),
            np.zeros((0, 3)),
            np.array(["2026-01-01"], dtype="datetime64[D]"),
            np.zeros(3, dtype=[("x", "<i4"), ("y", "<f8")]),
        ]
    ):
        meta = formats.write_npy(tmp_path / f"{i}.npy", a, chunk=64)
        for b in (
            np.load(tmp_path / f"{i}.npy", allow_pickle=False),
            formats.read_npy(tmp_path / f"{i}.npy", meta),
        ):
            assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(b, a)
    meta = formats.write_npy(tmp_path / "big.npy", np.ones(1 << 20), chunk=1 << 16)
    raw = bytearray((tmp_path / "big.npy").read_bytes())
    raw[4000] ^= 1
    (tmp_path / "big.npy").write_bytes(raw)
    with pytest.raises(Damaged, match="checksum mismatch"):
        formats.read_npy(tmp_path / "big.npy", meta)


def test_a_second_park_replaces_the_first_whole(tmp_path: Path) -> None:
    target = tmp_path / "srv" / "k1"
    assert park({"a": np.arange(10), "_mine": 1, "_": 2, "_i3": "x", "Out": {}}, target, 1 << 30)["ok"]
    r = park({"b": np.ones(3)}, target, 1 << 30, hidden={"hidden_by_ipython"})
    assert r["ok"] and r["saved"] == ["b"]
    assert sorted(p.name for p in target.parent.iterdir()) == ["k1"]
    new: dict[str, object] = {}
    assert restore(new, target)["restored"] == ["b"] and "a" not in new


def test_only_the_users_names_are_parked(tmp_path: Path) -> None:
    ns = {
        "a": 1,
        "_mine": 2,
        "_": 3,
        "__": 4,
        "_i3": "x",
        "_7": 5,
        "Out": {},
        "In": [],
        "h": 6,
        "__doc__": None,
    }
    r = park(ns, tmp_path / "k", 1 << 30, hidden={"h"})
    assert r["saved"] == ["a", "_mine"], r


def test_direct_reads_from_an_unaligned_start_and_see_truncation(tmp_path: Path) -> None:
    data = np.random.default_rng(1).integers(0, 255, 5 * 2**20 + 333, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    out = bytearray(len(data) - 128)
    crc = read_range_into(tmp_path / "f", 128, memoryview(out), zlib.crc32(data[:128]), chunk=1 << 20)
    assert bytes(out) == data[128:] and crc == zlib.crc32(data)
    (tmp_path / "g").write_bytes(data[: 3 * 2**20 + 5])
    with pytest.raises(Damaged, match="file truncated: 3 of 5 MiB"):
        read_range_into(tmp_path / "g", 128, memoryview(out), 0, chunk=1 << 20)
