"""Parking raw device memory (`make gpu-check`'s park of a CUDA allocation), driven here with
host memory standing in for the device: the same chunked copy, files and checks."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from gpusessions.agent import gpucheck
from gpusessions.park import cudamem
from gpusessions.park.files import Damaged

MIB = 2**20
FAKE_CUDA = Path(__file__).parent / "fakecuda" / "fakecuda.c"


def test_a_parked_allocation_restores_byte_for_byte_a_chunk_at_a_time(tmp_path: Path) -> None:
    nbytes = 3 * MIB + 4096 * 3  # not a whole number of chunks, nor of O_DIRECT blocks
    memory = cudamem.HostMemory(nbytes)
    staging = memoryview(bytearray(3 * MIB))
    cudamem.fill_pattern(memory, MIB)
    parked = bytes(memory.data)
    size, crc = cudamem.park(memory, tmp_path / "a.bin", staging, MIB)
    assert size == nbytes and (tmp_path / "a.bin").stat().st_mode & 0o777 == 0o600
    assert memory.copies == 4  # four chunks to the host, never the whole allocation at once
    memory.fill(0, 0, nbytes)
    cudamem.restore(memory, tmp_path / "a.bin", crc, staging, MIB)
    assert bytes(memory.data) == parked
    assert cudamem.check_pattern(memory, staging, MIB) is None


def test_a_damaged_or_short_park_is_refused_in_words(tmp_path: Path) -> None:
    memory = cudamem.HostMemory(2 * MIB)
    staging = memoryview(bytearray(3 * MIB))
    cudamem.fill_pattern(memory, MIB)
    _, crc = cudamem.park(memory, tmp_path / "a.bin", staging, MIB)
    with (tmp_path / "a.bin").open("r+b") as f:
        f.seek(MIB + 5)
        f.write(b"\xff")
    with pytest.raises(Damaged, match=r"checksum mismatch in a\.bin"):
        cudamem.restore(memory, tmp_path / "a.bin", crc, staging, MIB)
    (tmp_path / "a.bin").write_bytes(b"x" * MIB)
    with pytest.raises(Damaged, match="file truncated: 1 of 2 MiB"):
        cudamem.restore(memory, tmp_path / "a.bin", crc, staging, MIB)


def test_a_changed_byte_after_the_restore_is_reported() -> None:
    memory = cudamem.HostMemory(2 * MIB)
    staging = memoryview(bytearray(3 * MIB))
    cudamem.fill_pattern(memory, MIB)
    memory.data[MIB + 7] ^= 1
    assert cudamem.check_pattern(memory, staging, MIB) == (
        "the restored bytes differ from the parked ones in the chunk at 0.00 GiB"
    )


def test_the_check_prints_each_size_with_the_two_limits(tmp_path: Path) -> None:
    staging = memoryview(bytearray(3 * MIB))
    rc, lines = gpucheck.park_check(
        cudamem.HostMemory, staging, [2 / 1024, 1 / 1024], tmp_path, "a stand-in", MIB
    )
    assert rc == 0, lines
    assert lines[0] == f"gpu-check: park and restore of a CUDA allocation on a stand-in, files in {tmp_path}:"
    assert len(lines) == 3 and lines[1].startswith("  0.00195312 GiB: park ")
    for line in lines[1:]:
        assert "GiB/s), restore" in line and "device to host alone" in line and "disk write alone" in line
        assert line.endswith("restored bytes equal")
    assert list(tmp_path.iterdir()) == []  # the files are removed


def test_without_the_cuda_driver_library_the_check_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cudamem, "LIBRARY", "libcuda-not-here.so.1")
    rc, lines = gpucheck.cuda_park_check([1], str(tmp_path))
    assert rc == 1 and len(lines) == 1
    assert lines[0].startswith("gpu-check: park not checked: the CUDA driver library cannot be loaded")


def test_park_sizes_that_are_not_numbers_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        gpucheck.main(["--park-gib", "1,eight"])
    assert "--park-gib: sizes in GiB separated by commas, not '1,eight'" in capsys.readouterr().err


@pytest.fixture(scope="module")
def fake_libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The driver API calls through ctypes, as on a GPU machine, against a stand-in library."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc builds the stand-in libcuda for this test (Debian: build-essential)"
    lib = tmp_path_factory.mktemp("fakecuda") / "libcuda.so.1"
    subprocess.run([gcc, "-shared", "-fPIC", "-O2", "-o", str(lib), str(FAKE_CUDA)], check=True)
    return lib


def test_the_driver_calls_park_and_restore_through_ctypes_and_free_what_they_took(
    fake_libcuda: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(cudamem, "LIBRARY", str(fake_libcuda))
    rc, lines = gpucheck.cuda_park_check([3 / 1024, 130 / 1024], str(tmp_path))
    assert rc == 0, lines
    assert lines[0].startswith("gpu-check: park and restore of a CUDA allocation on Fake GPU, files in ")
    assert [x.split(":")[0] for x in lines[1:]] == ["  0.00292969 GiB", "  0.126953 GiB"]
    assert all(x.endswith("restored bytes equal") for x in lines[1:]), lines
    assert ctypes.CDLL(str(fake_libcuda)).fakecuda_live() == 0  # every allocation freed
    assert list(tmp_path.iterdir()) == []


def test_a_driver_error_is_named_in_the_drivers_words(
    fake_libcuda: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cudamem, "LIBRARY", str(fake_libcuda))
    driver, why = cudamem.Driver.load(0)
    assert driver is not None, why
    driver.close()  # no current context: the next call fails as the driver's would
    with pytest.raises(
        cudamem.CudaError, match="cuMemAlloc_v2 failed: CUDA error 201: invalid device context"
    ):
        driver.alloc(4096)
    assert cudamem.Driver.load(1) == (None, "cuDeviceGet failed: CUDA error 101: unknown error")
