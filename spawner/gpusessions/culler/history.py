"""The culler's own record of GPU time: held, busy, idle, kept, waiting, reclaimed.

Time is cut into buckets (5 minutes by default); each bucket keeps, per (profile,
queue), named counters in GPU-equivalent-seconds (a MIG slice Ng.* is N/7 of a
GPU). The admin page's charts and totals and the `gpusessions_gpu_hours` metric
read it, so neither needs Prometheus. It is written to a JSON file (atomically,
at most once a minute) so a restarted culler keeps its last days.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from gpusessions.culler.model import Session

log = logging.getLogger("gpusessions.culler")

FORMAT = 1
# Counters observe() writes; add() may write any other name.
HELD, BUSY, IDLE, KEPT, WAITING = "held", "busy", "idle", "kept", "waiting"
_MIG = re.compile(r"MIG (\d+)g\.")
_COUNT = re.compile(r"^(\d+) x ")

Key = tuple[str, str]  # (profile, queue)


def session_equivalent(s: Session) -> float:
    """GPU-equivalents a session holds: N/7 per MIG slice Ng.*, 1 per whole GPU.

    Read from the size in words (`Session.size`, one alternative); a size with
    alternatives (firstAvailable) or in words we do not know counts 1 per device.
    """
    n_devices = max(1, len(s.devices))
    size = s.size or ""
    if " or " in size:
        return float(n_devices)
    m = _MIG.search(size)
    if m is None:
        return float(n_devices)
    count = _COUNT.match(size)
    return int(m.group(1)) / 7 * (int(count.group(1)) if count else 1)


class History:
    """Buckets of counters per (profile, queue), kept for `keep_days` and saved to `path`."""

    def __init__(
        self,
        path: str | None = None,
        bucket_seconds: float = 300.0,
        keep_days: float = 8.0,
        save_every: float = 60.0,
    ) -> None:
        if bucket_seconds <= 0:
            raise ValueError("bucket_seconds must be positive")
        self.path = path or None
        self.bucket_seconds = float(bucket_seconds)
        self.keep_seconds = float(keep_days) * 86400.0
        self.save_every = float(save_every)
        self.buckets: dict[float, dict[Key, dict[str, float]]] = {}
        self._last_save: float | None = None
        self.load_error: str | None = None
        if self.path and os.path.exists(self.path):
            self._load(self.path)

    # --- writing ---------------------------------------------------------------
    def _bucket(self, now: float) -> float:
        return math.floor(now / self.bucket_seconds) * self.bucket_seconds

    def add(self, now: float, profile: str, queue: str, **amounts: float) -> None:
        """Add named amounts to the (profile, queue) counters of the bucket of `now`."""
        cell = self.buckets.setdefault(self._bucket(now), {}).setdefault((profile, queue), {})
        for name, v in amounts.items():
            if v:
                cell[name] = cell.get(name, 0.0) + float(v)

    def observe(self, now: float, sessions: Iterable[Session], dt: float) -> None:
        """Account `dt` seconds of every session's GPU time to the bucket of `now`."""
        if dt <= 0:
            return
        for s in sessions:
            if s.deleting:
                continue
            if not s.allocated:
                if s.running or s.pending or s.holder_phase == "Pending":
                    self.add(now, s.profile, s.queue, **{WAITING: dt})
                continue
            eq = dt * session_equivalent(s)
            amounts = {HELD: eq}
            if s.gpu_busy_now:
                amounts[BUSY] = eq
            elif s.gpu_known or not s.gpu_error:
                # The agent answered and says idle (or has not been asked yet: a new claim).
                amounts[IDLE] = eq
            if not s.running and not s.pending:
                amounts[KEPT] = eq
            self.add(now, s.profile, s.queue, **amounts)

    # --- reading ---------------------------------------------------------------
    def totals(self, since: float, until: float | None = None) -> dict[Key, dict[str, float]]:
        """(profile, queue) -> counter -> sum over the buckets starting in [since, until)."""
        out: dict[Key, dict[str, float]] = defaultdict(dict)
        lo = self._bucket(since)
        for start, cells in self.buckets.items():
            if start < lo or (until is not None and start >= until):
                continue
            for key, counters in cells.items():
                acc = out[key]
                for name, v in counters.items():
                    acc[name] = acc.get(name, 0.0) + v
        return dict(out)

    def series(self, since: float, until: float, step: float, by: str = "queue") -> list[dict[str, Any]]:
        """Points every `step` seconds from `since` to `until`: counters summed per group.

        `by`: "queue", "profile" or "all" (one group named "all").
        """
        if by not in ("queue", "profile", "all"):
            raise ValueError(f"by must be queue, profile or all, not {by!r}")
        if step <= 0:
            raise ValueError("step must be positive")
        n = max(0, math.ceil((until - since) / step))
        points: list[dict[str, Any]] = [{"t": since + i * step, "values": {}} for i in range(n)]
        for start, cells in self.buckets.items():
            if start < since - self.bucket_seconds or start >= until:
                continue
            i = int((max(start, since) - since) // step)
            if not 0 <= i < n:
                continue
            values = points[i]["values"]
            for (profile, queue), counters in cells.items():
                group = queue if by == "queue" else profile if by == "profile" else "all"
                acc = values.setdefault(group, {})
                for name, v in counters.items():
                    acc[name] = acc.get(name, 0.0) + v
        return points

    @staticmethod
    def day_start(now: float) -> float:
        """Midnight UTC of the day of `now` (what "today" means on the admin page and metrics)."""
        return math.floor(now / 86400.0) * 86400.0

    # --- persistence -------------------------------------------------------------
    def prune(self, now: float) -> None:
        cutoff = now - self.keep_seconds
        for start in [b for b in self.buckets if b + self.bucket_seconds <= cutoff]:
            del self.buckets[start]

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "bucket_seconds": self.bucket_seconds,
            "buckets": [
                {
                    "t": start,
                    "cells": [{"profile": p, "queue": q, **c} for (p, q), c in sorted(cells.items())],
                }
                for start, cells in sorted(self.buckets.items())
            ],
        }

    def save(self, now: float, force: bool = False) -> None:
        """Write the record (tmp file + rename), at most once per `save_every` unless forced."""
        if not self.path:
            return
        if not force and self._last_save is not None and now - self._last_save < self.save_every:
            return
        self.prune(now)
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".history-", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(self.to_json(), f, separators=(",", ":"))
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
        self._last_save = now

    def _load(self, path: str) -> None:
        """Read a saved record; a file we cannot read is set aside (renamed), never fatal."""
        try:
            with open(path) as f:
                data = json.load(f)
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            for b in data.get("buckets", []):
                start = float(b["t"])
                for c in b.get("cells", []):
                    counters = {k: float(v) for k, v in c.items() if k not in ("profile", "queue")}
                    # add() re-buckets by start time (a record saved with another bucket size).
                    self.add(start, c["profile"], c["queue"], **counters)
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.buckets.clear()
            aside = f"{path}.unreadable"
            self.load_error = f"the culler's record {path} could not be read ({e}); set aside as {aside}"
            log.warning("%s", self.load_error)
            with contextlib.suppress(OSError):
                os.replace(path, aside)
