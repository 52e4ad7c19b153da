"""A notebook job's schedule: a five-field cron expression and a time zone, checked (pure).

Kubernetes' CronJob reads `spec.schedule` with robfig/cron's standard parser; the subset
accepted here is what that parser accepts (so the apiserver never refuses what the hub let
through): five fields (minute, hour, day of month, month, day of week), each a list of `*`,
`N`, `N-M`, with an optional `/step`, month and weekday names (`jan`, `mon`), `?` for `*` in the
day fields. Not accepted: macros (`@daily`), a sixth field, `TZ=` (the time zone is its own field,
`spec.timeZone`), weekday 7.

`shortest_gap` is the shortest time between two runs within a day and across midnight (days
are taken as consecutive: a schedule on Mondays only at 00:00 and 23:00 counts as 60 minutes
apart), which the hub compares with its minimum interval.
"""

from __future__ import annotations

import functools
import itertools
import re
import zoneinfo
from dataclasses import dataclass

MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")
MAX_SCHEDULE = 100
MAX_TIMEZONE = 64
_PART = re.compile(r"^(?P<range>\*|\?|[a-z0-9]+(?:-[a-z0-9]+)?)(?:/(?P<step>[0-9]+))?$")


class InvalidSchedule(ValueError):
    """A schedule or time zone that makes no valid CronJob; the message says why."""


@dataclass(frozen=True)
class Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    first_name: int = 0  # the number of names[0]


FIELDS = (
    Field("minute", 0, 59),
    Field("hour", 0, 23),
    Field("day of month", 1, 31),
    Field("month", 1, 12, MONTHS, 1),
    Field("day of week", 0, 6, DAYS, 0),
)


def _number(text: str, f: Field) -> int:
    if text.isdigit():
        n = int(text)
    elif text in f.names:
        n = f.names.index(text) + f.first_name
    else:
        raise InvalidSchedule(f"{f.name} {text!r} is not a number or a name")
    if not f.low <= n <= f.high:
        raise InvalidSchedule(f"{f.name} {n} is outside {f.low}-{f.high}")
    return n


def parse_field(text: str, f: Field) -> set[int]:
    """The values one field matches, or `InvalidSchedule`."""
    out: set[int] = set()
    for part in text.lower().split(","):
        m = _PART.match(part)
        if not m:
            raise InvalidSchedule(f"{f.name} {part!r} is not '*', N, N-M or a list of them, with /step")
        rng, step = m.group("range"), m.group("step")
        if rng == "?" and f.name not in ("day of month", "day of week"):
            raise InvalidSchedule(f"'?' is for the day fields only, not the {f.name}")
        if rng in ("*", "?"):
            low, high = f.low, f.high
        elif "-" in rng:
            a, b = rng.split("-", 1)
            low, high = _number(a, f), _number(b, f)
            if low > high:
                raise InvalidSchedule(f"{f.name} range {rng!r} runs backwards")
        else:
            low = _number(rng, f)
            high = f.high if step else low  # robfig: "N/step" is N to the end, every step
        n = int(step) if step else 1
        if not 1 <= n <= f.high - f.low + 1:
            raise InvalidSchedule(f"{f.name} step {step!r} must be 1 to {f.high - f.low + 1}")
        out.update(range(low, high + 1, n))
    return out


@dataclass(frozen=True)
class Schedule:
    expression: str  # normalized: lowercase, single spaces
    minutes: frozenset[int]
    hours: frozenset[int]

    def shortest_gap(self) -> int:
        """Minutes between the two closest runs (within a day, and from a day's last to the
        next day's first)."""
        times = sorted(h * 60 + m for h in self.hours for m in self.minutes)
        gaps = [b - a for a, b in itertools.pairwise(times)]
        gaps.append(24 * 60 - times[-1] + times[0])
        return min(gaps)


def parse(expression: object) -> Schedule:
    """A five-field cron expression, checked, or `InvalidSchedule`."""
    if not isinstance(expression, str) or not expression.strip():
        raise InvalidSchedule("schedule must be a cron expression of five fields, e.g. '0 2 * * *'")
    if len(expression) > MAX_SCHEDULE or any(ord(ch) < 32 for ch in expression.replace("\t", " ")):
        raise InvalidSchedule(f"schedule must be at most {MAX_SCHEDULE} printable characters")
    fields = expression.lower().split()
    if fields and (fields[0].startswith(("@", "tz=", "cron_tz="))):
        raise InvalidSchedule(
            "schedule must be five fields (minute hour day-of-month month day-of-week), "
            "not a macro or a TZ= prefix (the time zone is its own field)"
        )
    if len(fields) != 5:
        raise InvalidSchedule(
            f"schedule must have five fields (minute hour day-of-month month day-of-week), not {len(fields)}"
        )
    parsed = [parse_field(text, f) for text, f in zip(fields, FIELDS, strict=True)]
    return Schedule(" ".join(fields), frozenset(parsed[0]), frozenset(parsed[1]))


def check_schedule(expression: object, min_interval_minutes: int) -> str:
    """The normalized expression, if its runs are at least `min_interval_minutes` apart."""
    s = parse(expression)
    gap = s.shortest_gap()
    if gap < min_interval_minutes:
        raise InvalidSchedule(
            f"schedule {s.expression!r} runs every {gap} minute(s); the shortest interval allowed "
            f"is {min_interval_minutes} minutes"
        )
    return s.expression


def check_timezone(value: object) -> str | None:
    """An IANA time zone name (`Europe/Paris`), None for the cluster's (UTC), or `InvalidSchedule`."""
    if value is None or value == "":
        return None
    if (
        not isinstance(value, str)
        or len(value) > MAX_TIMEZONE
        or not re.fullmatch(r"[A-Za-z0-9_+/-]+", value)
    ):
        raise InvalidSchedule("timezone must be a time zone name such as 'Europe/Paris' or 'UTC'")
    if value.startswith("/") or ".." in value or value.lower() == "local":
        raise InvalidSchedule(f"timezone {value!r} is not a time zone name")
    known = _known_zones()
    if value != "UTC" and known is not None and value not in known:
        raise InvalidSchedule(f"timezone {value!r} is not a known time zone (e.g. 'Europe/Paris', 'UTC')")
    return value


@functools.cache
def _known_zones() -> frozenset[str] | None:
    """The tz database's zone names, read once (reading them opens hundreds of files); None
    where the machine has no tz database (any well-formed name is then let through)."""
    return frozenset(zoneinfo.available_timezones()) or None
