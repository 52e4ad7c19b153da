"""The agent on this machine's real NVML (`make gpu-check`; not part of `make test`, which
deselects the `gpu` marker). Read-only: nothing here changes MIG mode, clocks or settings."""

from __future__ import annotations

import os

import pytest

from gpusessions.agent.collect import Collector, discover

pytestmark = pytest.mark.gpu


def test_every_visible_device_is_read() -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        uuids, problem = discover(pynvml, os.environ.get("NVIDIA_VISIBLE_DEVICES"))
        assert uuids, problem
        readings = Collector(pynvml, uuids).read()
        for r in readings:
            assert r.error is None, r
            assert r.memory_total and r.memory_total > 0
            assert r.processes is not None
            assert r.kind in ("gpu", "mig")
            if r.kind == "gpu":
                assert r.activity_source == "utilization"
    finally:
        pynvml.nvmlShutdown()
