"""Times as Kubernetes and JupyterHub write them (RFC 3339), read and written once.

Kubernetes writes `2026-12-01T10:00:00Z` (and MicroTime with fractional seconds), JupyterHub's
REST API `2026-12-01T10:00:00.123456Z`, JupyterHub's database a naive UTC `datetime`, and the
Kubernetes client a `datetime` with its zone. `epoch` reads any of them as unix seconds; a time
without a zone is UTC.
"""

from __future__ import annotations

import datetime
from typing import Any


def epoch(value: Any) -> float | None:
    """Unix seconds of an RFC 3339 string or a `datetime`; None for nothing or an unreadable value."""
    if isinstance(value, datetime.datetime):
        dt = value
    elif not value:
        return None
    else:
        try:
            dt = datetime.datetime.fromisoformat(str(value))  # 3.11+: `Z` and any fraction of a second
        except ValueError:
            return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.UTC)
    return dt.timestamp()


def rfc3339(ts: float | None) -> str | None:
    """Unix seconds as RFC 3339 in UTC, to the second (`2026-12-01T10:00:00Z`); None stays None."""
    if ts is None:
        return None
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
