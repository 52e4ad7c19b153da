"""Fixtures for integration tests on the local cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localcluster.paths import ClusterPaths


@pytest.fixture
def load_file() -> Iterator[Path]:
    """The simulated NVML's load file (per device UUID); restored after the test."""
    path = ClusterPaths.default().root / "fake-nvml" / "load.json"
    before = path.read_text()
    yield path
    path.write_text(before)
