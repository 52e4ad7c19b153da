"""Fixtures for integration tests on the local cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.hubproc import Hub
from localcluster.paths import ClusterPaths

from .hubtools import gpu_hub


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    """A JupyterHub with GPUSessionSpawner on this test's namespace (modules may override it)."""
    h = gpu_hub(namespace, tmp_path / "hub")
    yield h
    h.stop()


@pytest.fixture
def load_file() -> Iterator[Path]:
    """The simulated NVML's load file (per device UUID); restored after the test."""
    path = ClusterPaths.default().root / "fake-nvml" / "load.json"
    before = path.read_text()
    yield path
    path.write_text(before)
