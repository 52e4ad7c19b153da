"""A short budget of the lifecycle fuzzer (tests/fuzz/lifecycle.py) in every test run, on the
real KAI Scheduler (sessions and notebook jobs in two team queues).

The full run: `make fuzz SEED=<n> OPS=<n>`. Here: FUZZ_SEED (default 194: its 20 operations include
every job operation and every park operation, restore twice, and a user deleted after a park of
theirs), FUZZ_OPS (default 20).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.fuzz.lifecycle import Violation, run

from localcluster.kubeapi import KubeAPI

pytestmark = pytest.mark.cluster


def test_lifecycle_fuzz_short(api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("FUZZ_SEED", "194"))
    ops = int(os.environ.get("FUZZ_OPS", "20"))
    try:
        log = run(api, namespace, tmp_path / "hub", seed, ops, users=5)
    except Violation as v:
        pytest.fail(f"seed {seed}: {v}\nreproduce: make fuzz SEED={seed} OPS={ops}", pytrace=False)
    assert len(log) == ops + 1  # and the end: the users with jobs deleted, nothing of theirs left
