"""Things the hub tells a user about their GPU outside a spawn (kept in the hub's memory).

The spawner posts them (for example when a holder pod was lost); the hub's warnings
endpoint serves them with the culler's warnings to the home page and to JupyterLab.
They are not kept across a hub restart; each is also logged.
"""

from __future__ import annotations

import time
from collections import defaultdict, deque
from typing import Any

MAX_PER_USER = 20
MAX_AGE = 24 * 3600.0

_notices: dict[str, deque[dict[str, Any]]] = defaultdict(lambda: deque(maxlen=MAX_PER_USER))


def post(
    user: str, server: str, text: str, level: str = "warning", now: float | None = None
) -> dict[str, Any]:
    notice = {"server": server, "text": text, "level": level, "at": time.time() if now is None else now}
    _notices[user].append(notice)
    return notice


def post_once(user: str, server: str, text: str, since: float, level: str = "warning") -> bool:
    """`post`, unless the same text was posted for this server at or after `since` (an event
    that two polls of one stop both see is told once). True if posted."""
    if any(n["server"] == server and n["text"] == text and n["at"] >= since for n in _notices.get(user, ())):
        return False
    post(user, server, text, level)
    return True


def for_user(user: str, server: str | None = None, now: float | None = None) -> list[dict[str, Any]]:
    """Recent notices of the user (of one server when given), oldest first."""
    now = time.time() if now is None else now
    return [
        dict(n)
        for n in _notices.get(user, ())
        if now - n["at"] <= MAX_AGE and (server is None or n["server"] == server)
    ]


def clear(user: str | None = None) -> None:
    if user is None:
        _notices.clear()
    else:
        _notices.pop(user, None)
