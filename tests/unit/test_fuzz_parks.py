"""The lifecycle fuzzer's park invariant (tests/fuzz/lifecycle.py, check 8) fails when a deleted
user's or deleted named server's parks are left in a home, and only then."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tests.fuzz.lifecycle import PARKED, Fuzz


def _fuzz(homes: Path) -> Fuzz:
    return Fuzz(
        api=None, namespace="fz-1", workdir=homes, rng=random.Random(1), users=["u0", "u1"], homes=homes
    )  # type: ignore[arg-type]


def _park(homes: Path, home: str, folder: str) -> None:
    d = homes / "fz-1" / home / PARKED / folder
    d.mkdir(parents=True)
    (d / "session.json").write_text("{}")


def test_parks_outliving_their_user_or_server_are_violations(tmp_path: Path) -> None:
    fz = _fuzz(tmp_path)
    hub: dict[str, dict[str, Any]] = {"u0": {"": {}}, "u1": {"": {}, "exp": {}}}
    _park(tmp_path, "u0", "_default")
    _park(tmp_path, "u1--exp", "exp")
    assert fz.park_violations(set(hub), hub) == []
    del hub["u1"]["exp"]  # the named server deleted, its park left
    [v] = fz.park_violations(set(hub), hub)
    assert "deleted server u1/exp" in v and "exp" in v
    del hub["u0"]  # the user deleted, the park left
    out = fz.park_violations(set(hub), hub)
    assert any("deleted user u0" in v and "_default" in v for v in out), out
    (tmp_path / "fz-1" / "u0" / PARKED / "_default" / "session.json").unlink()
    (tmp_path / "fz-1" / "u0" / PARKED / "_default").rmdir()
    assert not any("u0" in v for v in fz.park_violations(set(hub), hub)), "an empty park folder is no park"
