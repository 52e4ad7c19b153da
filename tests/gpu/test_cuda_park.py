"""Park and restore of a CUDA allocation on this machine's GPU (`make gpu-check`; deselected in
`make test`). Allocates and copies memory only: no device setting is read or changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusessions.park import cudamem

pytestmark = pytest.mark.gpu


def test_a_cuda_allocation_parks_and_restores_equal(tmp_path: Path) -> None:
    driver, why = cudamem.Driver.load(0)
    assert driver is not None, why
    pinned = driver.pinned(cudamem.CHUNK * cudamem.SLOTS)
    memory = driver.alloc(256 << 20)
    try:
        m = cudamem.measure(memory, tmp_path, pinned.view())
        assert m.problem is None, m.problem
        assert m.park_s > 0 and m.restore_s > 0
    finally:
        memory.free()
        pinned.free()
        driver.close()
