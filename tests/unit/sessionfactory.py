"""One culler `Session` for the culler's unit tests: an allocated claim of user "a"'s default
server, known to the hub, created at `t0`; any field given overrides it."""

from __future__ import annotations

from typing import Any

from gpusessions.culler.model import Session


def make_session(t0: float, **fields: Any) -> Session:
    base: dict[str, Any] = dict(
        namespace="ns",
        claim="gpu-a",
        user="a",
        server="",
        created=t0,
        allocated=True,
        hub_user=True,
        hub_server=True,
    )
    base.update(fields)
    return Session(**base)
