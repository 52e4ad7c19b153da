"""What to do with a session now: the culling policy (pure).

- A stopped server's kept GPU is released `stopped_keep` seconds after the
  culler first saw it stopped; only `stopped_keep_contended` seconds (0: off)
  while another user waits for the same device request (see contention.py); that
  warning stands at least min(warn_before, stopped_keep_contended).
- A running session is culled (server stopped, GPU released) when it has been
  idle for `idle_limit`: idle means BOTH no notebook activity (the hub's
  last_activity) AND no GPU activity (the agent's last busy time). A training
  job that keeps the GPU busy with the browser closed is never idle.
- `gpu_idle_limit` (0: off): a running session whose GPU alone has been idle
  that long is culled even though the notebook shows activity (a tab left
  open keeps reporting activity to the hub). A busy GPU, or one whose agent
  does not answer, is never culled by it.
- `gpu_idle_limit_contended` (0: off): the same, only this long, while another
  user waits for a GPU of the same request and no kept GPU of a stopped server
  serves that waiter (see contention.py: one idle session per waiter, the one
  idle longest); its warning stands at least min(warn_before, the limit).
- A session whose GPU could not be read this cycle (its agent did not answer, even when asked
  again within the cycle; NVML failed; a device had no reading) is never culled by a rule that
  needs the GPU idle: not by `idle_limit` (the GPU half of "both idle" is unknown), nor by
  `gpu_idle_limit` or `gpu_idle_limit_contended`. Only with `cull_unread_on_hub_idle` (off by
  default) does `idle_limit` apply to it on the notebook's (the hub's) activity alone. A
  warning such a rule gave is withdrawn; the next reading that finds the GPU idle warns again.
- `max_age` (0: off) ends any session that old.
- Every cull is announced first: a warning at least `warn_before` seconds
  before it; activity after the warning clears it.
- `keep_until` (an admin's or the user's exemption) holds everything; but a user's "Keep my
  GPU" (the claim says when: `kept_at`, and the warning it answered: `keep_from`) holds only
  `keep_contended` seconds from that warning (0: its full length) while another user waits
  for a GPU of the same request (see contention.py). When such a keep no longer holds, the
  warning it answered counts as given: the cull follows without a second warning, so a keep
  gains a session at most `keep_contended` after its warning, however often it is pressed.
- Orphans (no hub user or server for the claim) are released after `orphan_grace`.
- A session whose node is gone is stopped and released at once (exemptions do not hold it).
- `keep_limit` (0: off): a user's Keep my GPU holds at most this long after the warning it
  answered, whoever waits; then the session is warned again (a new Keep, a new stretch).
- A session that parks (its claim says so: the holder saves the kernels' variables when it
  goes, and the next start restores them) loses no state when it is culled, so its rules are
  the shorter of the plain ones and `parking`'s (PARKING: GPU idle 15 min, both idle 30 min, a
  stopped server's GPU kept 15 min, warnings 2 min ahead, a Keep holds 30 min, 2 min while
  someone waits; a 0 that means "off" counts as no limit): it gives its GPU back much sooner,
  and never later than a plain one. A session that does not park keeps the plain rules.
- Per-profile overrides change any of these (for parking sessions too: they apply last);
  `dry_run` decides but never acts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from gpusessions.culler.model import Session

# A released claim whose holder was not deleted (the delete was lost: an apiserver restart):
# the holder is deleted again, with its grace period; not a second cull.
FINISH_RELEASE = "finish-release"
NONE, WARN, UNWARN, CULL, RELEASE, ORPHAN, MARK_STOPPED, CLEAR_STOPPED, NODE_GONE = (
    "none",
    "warn",
    "unwarn",
    "cull",
    "release",
    "orphan",
    "mark-stopped",
    "clear-stopped",
    "node-gone",
)

# The rules that need the GPU idle: none of them culls a session whose GPU was not read.
GPU_RULES = frozenset({"idle", "gpu-idle", "gpu-idle-contended"})


@dataclass(frozen=True)
class Rules:
    stopped_keep: float = 3600.0
    idle_limit: float = 7200.0
    max_age: float = 0.0
    warn_before: float = 900.0
    orphan_grace: float = 300.0
    stopped_keep_contended: float = 300.0
    gpu_idle_limit: float = 3600.0
    gpu_idle_limit_contended: float = 120.0
    keep_contended: float = 300.0
    keep_limit: float = 0.0
    # A session whose GPU could not be read may be culled by idle_limit on hub activity alone.
    cull_unread_on_hub_idle: bool = False

    def merged(self, override: dict[str, Any]) -> Rules:
        fields = {f.name: f for f in dataclasses.fields(self)}
        unknown = set(override) - set(fields)
        if unknown:
            raise ValueError(f"unknown culler settings {sorted(unknown)}; known: {sorted(fields)}")
        values: dict[str, Any] = {}
        for k, v in override.items():
            if isinstance(getattr(self, k), bool):
                if not isinstance(v, bool):
                    raise ValueError(f"culler setting {k} is true or false, not {v!r}")
                values[k] = v
            else:
                values[k] = float(v)
        return dataclasses.replace(self, **values)


# The rules for a session that parks, over the plain ones (chosen by the idle-reclaim replay,
# docs/culler.md "Parking"): a cull saves the kernels' variables and the next start restores
# them, so an idle GPU goes after minutes, not an hour, and a Keep buys half an hour, not 4 h.
PARKING: dict[str, float] = {
    "gpu_idle_limit": 900.0,
    "idle_limit": 1800.0,
    "stopped_keep": 900.0,
    "warn_before": 120.0,
    "keep_limit": 1800.0,
    "keep_contended": 120.0,
}


# Rules whose 0 means "off" (no limit), not "at once".
OFF_AT_ZERO = frozenset(
    {
        "gpu_idle_limit",
        "gpu_idle_limit_contended",
        "keep_limit",
        "keep_contended",
        "max_age",
        "stopped_keep_contended",
    }
)


def sooner(plain: Rules, parking: dict[str, Any]) -> dict[str, Any]:
    """The parking rules as overrides of the plain ones: each the shorter of the two (a 0 that
    means "off" counts as no limit), so a session that parks is never held longer than one that
    does not, and a plain limit an admin shortened is short for both."""
    out: dict[str, Any] = {}
    for name, value in parking.items():
        plain_value = getattr(plain, name, None)
        if (
            isinstance(plain_value, bool)
            or not isinstance(plain_value, int | float)
            or isinstance(value, bool)
        ):
            out[name] = value  # unknown (merged() names it) or not a duration
            continue
        v = float(value)
        if name in OFF_AT_ZERO and min(v, plain_value) <= 0:
            out[name] = max(v, plain_value)  # one of them off: the other (both off: off)
        else:
            out[name] = min(v, plain_value)
    return out


@dataclass(frozen=True)
class Policy:
    rules: Rules = field(default_factory=Rules)
    per_profile: dict[str, dict[str, Any]] = field(default_factory=dict)
    dry_run: bool = False
    # Overrides of `rules` for sessions that park (their culls lose nothing).
    parking: dict[str, Any] = field(default_factory=lambda: dict(PARKING))

    def for_profile(self, profile: str, parks: bool = False) -> Rules:
        base = self.rules.merged(sooner(self.rules, self.parking)) if parks else self.rules
        return base.merged(self.per_profile.get(profile, {}))

    def for_session(self, s: Session) -> Rules:
        return self.for_profile(s.profile, s.parks)


@dataclass(frozen=True)
class Decision:
    action: str
    reason: str
    at: float | None = None  # when the cull will happen (for warnings and the page)
    rule: str = ""  # what decided it: idle, gpu-idle, max-age, stopped, stopped-contended


def _dur(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _idle_since(s: Session) -> float | None:
    """Since when both the notebook and the GPU have been idle (None: busy now, or the GPU was
    not read: an unread GPU is not an idle one)."""
    if s.gpu_busy_now or not s.gpu_read:
        return None
    marks = [t for t in (s.notebook_last_activity, s.gpu_last_busy, s.created) if t is not None]
    return max(marks) if marks else None


def hub_idle_since(s: Session) -> float | None:
    """Since when the notebook has been idle by the hub's activity alone (no GPU reading needed)."""
    marks = [t for t in (s.notebook_last_activity, s.created) if t is not None]
    return max(marks) if marks else None


def gpu_idle_since(s: Session) -> float | None:
    """Since when the GPU alone has been idle (None: busy now, or no reliable reading)."""
    if s.gpu_busy_now or not s.gpu_read:
        return None
    # The agent forgets its last busy time when it restarts: count from that start at the earliest.
    # A server (re)started, on a kept GPU or a new one, counts from when it was ready: before that
    # (the wait for a GPU, the notebook's start) the user had no chance to use the GPU.
    started = (s.server_ready or s.server_started) if s.running else None
    marks = [t for t in (s.gpu_last_busy, s.created, s.holder_started, started) if t is not None]
    return max(marks) if marks else None


def keep_holds(s: Session, now: float, r: Rules) -> bool:
    """Whether the session's exemption ("keep until") holds now.

    An admin's keep (no `kept_at`) holds to its end. A user's Keep my GPU holds to its end too
    (at most `keep_limit` after the warning it answered, when that is set), except while
    someone waits for a GPU of its request (`waiters`, from contention.py): then only
    `keep_contended` seconds after the warning it answered (0: to its end)."""
    if s.keep_until is None or s.keep_until <= now:
        return False
    if s.kept_at is not None and r.keep_limit > 0 and now >= keep_counts_from(s) + r.keep_limit:
        return False
    if s.kept_at is not None and s.waiters and r.keep_contended > 0:
        return now < keep_counts_from(s) + r.keep_contended
    return True


def keep_counts_from(s: Session) -> float:
    """Where a user's keep counts from while someone waits: the warning it answered (older keeps
    recorded only the click)."""
    return s.keep_from if s.keep_from is not None else (s.kept_at or 0.0)


def _answered_warning(s: Session, r: Rules, since: float | None) -> float | None:
    """The warning a user's keep answered, when that keep no longer holds because someone waits
    and it answered a warning of this same stretch (after `since`, the idle or stopped time the
    cull counts from): that warning counts as given. None otherwise (a keep that ran out with
    nobody waiting is followed by a new warning)."""
    if s.kept_at is None or s.keep_until is None or not s.waiters or r.keep_contended <= 0:
        return None
    at = keep_counts_from(s)
    return at if since is None or at >= since else None


def _users(n: int) -> str:
    return "1 user waits" if n == 1 else f"{n} users wait"


def decide(s: Session, now: float, policy: Policy) -> Decision:
    r = policy.for_session(s)
    if s.node_gone:
        # The GPU went with its node: nothing to keep, no warning to give.
        return Decision(NODE_GONE, f"the node of this GPU ({s.node}) is gone")
    if s.deleting:
        # Released already (a cull, the user, an admin): the claim waits for its holder, whose
        # kernels park in its grace period. Acting again would count a second cull; a holder
        # not being deleted (that delete was lost) is deleted again.
        if s.holder:
            return Decision(FINISH_RELEASE, "released, but its holder is still running: deleting it")
        return Decision(NONE, "being released (its holder saves its kernels first)")
    if keep_holds(s, now, r):
        # The stop is still noted (bookkeeping, not a cull): a kept GPU of a stopped server must
        # count from its stop once the keep no longer holds (while someone waits, keep_contended).
        if s.hub_user and s.hub_server and not s.pending:
            if s.running and s.stopped_since is not None:
                return Decision(CLEAR_STOPPED, "server runs again")
            if not s.running and s.stopped_since is None:
                return Decision(MARK_STOPPED, "server stopped: the GPU is kept (exemption)")
        return Decision(NONE, f"kept until {s.keep_until:.0f} (exemption)")
    if not s.hub_user or not s.hub_server:
        age = now - (s.created or now)
        if age >= r.orphan_grace:
            who = "user" if not s.hub_user else "server"
            return Decision(ORPHAN, f"orphan: the hub has no such {who} ({s.user}/{s.server or ''})")
        return Decision(NONE, "possibly an orphan; within the grace time")
    if s.pending:
        return Decision(NONE, f"server is {s.pending}")

    deadline: float | None = None
    since: float | None = None  # what the deadline counts from
    why = rule = ""
    lead = r.warn_before  # how long a warning stands before the cull
    if s.running:
        if s.stopped_since is not None:
            return Decision(CLEAR_STOPPED, "server runs again")
        idle = _idle_since(s)
        if idle is not None:
            deadline, why, rule = idle + r.idle_limit, f"notebook and GPU idle for {_dur(now - idle)}", "idle"
            since = idle
        elif not s.gpu_read and r.cull_unread_on_hub_idle and (idle := hub_idle_since(s)) is not None:
            why = f"notebook idle for {_dur(now - idle)}; its GPU could not be read ({s.gpu_unread_why})"
            deadline, rule = idle + r.idle_limit, "idle-unread"
            since = idle
        gpu_idle = gpu_idle_since(s)
        if (
            gpu_idle is not None
            and r.gpu_idle_limit > 0
            and (deadline is None or gpu_idle + r.gpu_idle_limit < deadline)
        ):
            why = f"GPU idle for {_dur(now - gpu_idle)}"
            nb = s.notebook_last_activity
            if nb is not None and nb > gpu_idle:
                why += f" although the notebook was active {_dur(now - nb)} ago"
            deadline, rule, since = gpu_idle + r.gpu_idle_limit, "gpu-idle", gpu_idle
        limit = r.gpu_idle_limit_contended
        if (
            gpu_idle is not None
            and s.waiters
            and limit > 0
            and (deadline is None or gpu_idle + limit < deadline)
        ):
            size = s.size or s.profile or "this size"
            why = f"GPU idle for {_dur(now - gpu_idle)} while {_users(s.waiters)} for {size}"
            deadline, rule, lead = gpu_idle + limit, "gpu-idle-contended", min(r.warn_before, limit)
            since = gpu_idle
        if r.max_age > 0 and s.created is not None and (deadline is None or s.created + r.max_age < deadline):
            deadline, why = s.created + r.max_age, f"older than the maximum age ({_dur(r.max_age)})"
            rule, lead, since = "max-age", r.warn_before, s.created
        final = CULL
    else:
        if s.stopped_since is None:
            return Decision(MARK_STOPPED, "server stopped: the GPU is kept for a while")
        keep, rule = r.stopped_keep, "stopped"
        why = f"server stopped {_dur(now - s.stopped_since)} ago"
        if s.waiters and 0 < r.stopped_keep_contended < r.stopped_keep:
            keep, rule = r.stopped_keep_contended, "stopped-contended"
            lead = min(r.warn_before, keep)
            size = s.size or s.profile or "this size"
            why = f"stopped {_dur(now - s.stopped_since)} while {_users(s.waiters)} for {size}"
        deadline, since = s.stopped_since + keep, s.stopped_since
        final = RELEASE

    again = (
        "active again (or nobody waits for this size now)"
        if s.running
        else "no longer due (nobody waits for this size now)"
    )
    if s.running and not s.gpu_read:
        # Not culled on a guess: until the GPU is read again no rule that needs it idle applies;
        # a warning such a rule gave goes (the next reading warns again, a full lead ahead).
        again = f"its GPU could not be read ({s.gpu_unread_why}): no idle cull until it is"
    if deadline is None:
        if s.warned_at is not None:
            return Decision(UNWARN, again)
        return Decision(NONE, again if s.running and not s.gpu_read else "active")
    if now < deadline - lead:
        if s.warned_at is not None:
            return Decision(UNWARN, again)
        return Decision(NONE, why or "within limits", deadline, rule)
    warned = s.warned_at if s.warned_at is not None else _answered_warning(s, r, since)
    if warned is None:
        return Decision(WARN, why, max(deadline, now + lead), rule)
    if now >= deadline and now - warned >= lead:
        return Decision(final, why, deadline, rule)
    return Decision(NONE, f"warned; {why}", max(deadline, warned + lead), rule)
