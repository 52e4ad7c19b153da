"""The scheduler's queues behind one seam: `QueuePolicy` (pure).

Everything gpusessions knows about the batch scheduler is here: which queue a user's
sessions go to, the labels that put a claim and its pods in that queue, the pods'
scheduling fields (schedulerName, priorityClassName), the per-team GPU quota and the
team figures the picker shows. The spawner, the picker, the session (through the
spawner's `hub.admission.Admission`, the thin part that reads the hub's watch) and
notebook jobs ask a `QueuePolicy`; none of them names a label or a scheduler.

The scheduler is KAI Scheduler: label `kai.scheduler/queue` on pods and claims (KAI
blocks a pod whose standalone claim lacks its queue label), `schedulerName:
kai-scheduler`, priority classes `build` (non-preemptible) and `build-preemptible`.
**Adding another scheduler** (Volcano, Kueue, YuniKorn, ...) touches this module only:
give `QueuePolicy` its label (`labels`), its pod fields (`scheduling`) and, if its queues
are named differently, its resolution (`queue_of`); the quota in GPU-equivalents below does
not depend on the scheduler. (The chart's settings document names KAI's priority classes in
its schema, hub/settings.schema.json: a deployment through it needs that list too.)

- `resolve`: which queue a user's sessions go to: a fixed name, the first of the user's
  hub groups found in a mapping (group -> queue, `"*"` for everyone else), or a callable.
- GPU-equivalents: a MIG slice `Ng.XXgb` is N/7 of its GPU (the 7 compute slices of an
  A100 or H100), a whole GPU is 1. KAI charges a claim as one whole GPU whatever its size
  (and only for device classes named "...gpu..."), so a team quota in KAI cannot tell a
  1g.10gb slice from a GPU; the spawner enforces a per-team quota in GPU-equivalents
  before it creates a claim, from the claims it sees in its shared watch.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubespawner.slugs import is_valid_label

from gpusessions.core import labels as L
from gpusessions.core import reclaim
from gpusessions.core.availability import Inventory, size_match
from gpusessions.core.claims import Alternative, GPURequest
from gpusessions.core.progress import Refused
from gpusessions.core.sizes import mig_slices, quantity

Obj = dict[str, Any]
EQUIVALENTS_ANNOTATION = "gpusessions.io/gpu-equivalents"
SCHEDULER_NAME = "kai-scheduler"
# KAI's `build` (100) is non-preemptible: runs only within the queue's quota, never evicted. An
# interactive session waits rather than vanishes. (The chart's settings schema lists KAI's
# priority classes for `priorityClass`: hub/settings.schema.json.)
PRIORITY_CLASS = "build"


async def resolve(setting: Any, spawner: Any, groups: Iterable[str], default: str = "") -> str | None:
    """The queue of this user's sessions, or None when the user has none."""
    if callable(setting):
        value = setting(spawner)
        if inspect.isawaitable(value):
            value = await value
        return str(value) if value else (default or None)
    if isinstance(setting, dict):
        mine = set(groups)
        for group, queue in setting.items():
            if group != "*" and group in mine:
                return str(queue)
        return str(setting["*"]) if setting.get("*") else (default or None)
    return str(setting) if setting else (default or None)


def device_equivalent(device: Obj | None) -> Fraction:
    """GPU-equivalents of one device: N/7 for a MIG slice Ng.*, 1 for a whole GPU."""
    slices = mig_slices(device)
    return Fraction(slices, 7) if slices is not None else Fraction(1)


def request_equivalent(request: GPURequest, inv: Inventory, classes: dict[str, Obj]) -> Fraction:
    """The most a request can take: over its alternatives, count x the largest matching device
    (1 per device when the size cannot be read: never less than it may take)."""
    alts = request.first_available or (Alternative(request.device_class, request.count, request.selectors),)
    most = Fraction(0)
    for a in alts:
        match = size_match([a.device_class], list(a.selectors), classes)
        per = Fraction(1)
        if match is not None:
            eqs = [device_equivalent(inv.by_key[k]) for k in inv.candidates(match)]
            per = max(eqs) if eqs else Fraction(1)
        most = max(most, per * a.count)
    return most


def claim_equivalent(claim: Obj, inv: Inventory) -> Fraction:
    """What a claim holds: its allocated devices; before allocation, what it was charged."""
    alloc = (claim.get("status") or {}).get("allocation") or {}
    results = (alloc.get("devices") or {}).get("results") or []
    if results:
        return sum(
            (device_equivalent(inv.by_key.get((r["driver"], r["pool"], r["device"]))) for r in results),
            Fraction(0),
        )
    charged = (claim["metadata"].get("annotations") or {}).get(EQUIVALENTS_ANNOTATION)
    try:
        return Fraction(charged) if charged else Fraction(1)
    except (ValueError, ZeroDivisionError):
        return Fraction(1)


@dataclass(frozen=True)
class TeamUse:
    queue: str
    used: Fraction
    sessions: int


def team_use(
    claims: Iterable[Obj], queue: str, inv: Inventory, exclude: tuple[str, str] | None = None
) -> TeamUse:
    used, n = Fraction(0), 0
    for c in claims:
        md = c["metadata"]
        if (md.get("labels") or {}).get(L.QUEUE_LABEL) != queue or md.get("deletionTimestamp"):
            continue
        if exclude is not None and (md.get("namespace"), md.get("name")) == exclude:
            continue
        used += claim_equivalent(c, inv)
        n += 1
    return TeamUse(queue, used, n)


def fmt(x: Fraction | float) -> str:
    x = Fraction(x).limit_denominator(1000)
    if x.denominator == 1:
        return f"{x.numerator} GPU" if x.numerator == 1 else f"{x.numerator} GPUs"
    return f"{float(x):.2f} GPU"


def over_quota(use: TeamUse, limit: float, want: Fraction, what: str) -> str | None:
    """The refusal when `want` more would pass the team's quota, else None."""
    if use.used + want <= Fraction(limit).limit_denominator(1000):
        return None
    return (
        f"Your team's queue {use.queue} may hold {fmt(limit)} (a 1g.10gb slice counts 1/7); "
        f"its {use.sessions} session(s) hold {fmt(use.used)} now, and {what} ({fmt(want)}) would pass "
        "that. Wait until a colleague releases a GPU, or pick a smaller size."
    )


def _num(x: Fraction | float) -> str:
    x = Fraction(x).limit_denominator(1000)
    return str(x.numerator) if x.denominator == 1 else f"{float(x):.2f}"


def team_text(use: TeamUse, limit: float | None) -> str:
    """The team's line in the picker: "Team team-a: 3 of 8 GPUs in use." (GPU-equivalents)."""
    if limit is None:
        return f"Team {use.queue}: {_num(use.used)} GPUs in use (no team limit)."
    return f"Team {use.queue}: {_num(use.used)} of {_num(limit)} GPUs in use."


def team_figure(use: TeamUse, limit: float | None, want: Fraction, own: Fraction = Fraction(0)) -> Obj:
    """The picker's team figures for one size: the team's use and limit (GPU-equivalents) and
    whether starting this size would pass the limit, as the spawner's check decides it (`own`:
    what the user's own kept claim holds, which a restart reuses rather than adds)."""
    exceeds = (
        limit is not None and over_quota(TeamUse(use.queue, use.used - own, 0), limit, want, "") is not None
    )
    note = ""
    if exceeds:
        note = (
            f"This size counts {fmt(want)}: with it your team would pass its limit of {fmt(limit or 0)}, "
            "so starting it is refused until a colleague releases a GPU."
        )
    return {
        "name": use.queue,
        "used": float(use.used),
        "sessions": use.sessions,
        "limit": None if limit is None else float(limit),
        "size": float(want),
        "exceeds": exceeds,
        "text": team_text(use, limit),
        "note": note,
    }


# -- KAI's own figures of a queue (its Queue object, scheduling.run.ai/v2) ---------------------
KAI_GPU_RESOURCE = "nvidia.com/gpu"  # GPUs of device-plugin pods (and fractions of them)


def kai_gpus(resources: Mapping[str, Any] | None) -> Fraction:
    """The GPUs in a Queue status' resource list as KAI counts them: `nvidia.com/gpu`, plus each
    DRA device class whose name contains "gpu" (KAI's rule: pkg/common/resources/dra.go), which
    it lists under the class's name. Unreadable quantities count nothing."""
    total = Fraction(0)
    for name, value in (resources or {}).items():
        if name == KAI_GPU_RESOURCE or ("/" not in name and "gpu" in name.lower()):
            try:
                total += quantity(value)
            except ValueError:
                continue
    return total


@dataclass(frozen=True)
class KaiQueue:
    """A team's KAI Queue as KAI keeps it: the GPU `quota` it deserves and its `limit` (from its
    spec; -1: unlimited) and what its status says is `allocated` (filled by KAI's
    queuecontroller from the queue's PodGroups; a queue that never held anything has no status,
    which is 0)."""

    name: str
    quota: float
    limit: float
    allocated: Fraction

    @classmethod
    def of(cls, obj: Obj) -> KaiQueue:
        gpu = (((obj.get("spec") or {}).get("resources") or {}).get("gpu")) or {}
        return cls(
            obj["metadata"]["name"],
            float(gpu.get("quota", 0) or 0),
            float(gpu.get("limit", 0) or 0),
            kai_gpus((obj.get("status") or {}).get("allocated")),
        )

    def text(self) -> str:
        """The picker's team line from KAI's figures: "Team team-a: 1 of 4 GPUs in use (KAI
        queue: 2 deserved)." KAI counts whole GPUs (a MIG slice of a class named gpu counts 1)."""
        deserved = "no fixed share" if self.quota < 0 else f"{_num(self.quota)} deserved"
        if self.limit < 0:
            return f"Team {self.name}: {_num(self.allocated)} GPUs in use (KAI queue: {deserved}, no limit)."
        used = f"{_num(self.allocated)} of {_num(self.limit)}"
        return f"Team {self.name}: {used} GPUs in use (KAI queue: {deserved})."

    def json(self) -> Obj:
        return {
            "queue": self.name,
            "quota": self.quota,
            "limit": self.limit,
            "allocated": float(self.allocated),
        }


def with_kai(figure: Obj, kai: KaiQueue | None) -> Obj:
    """A team figure with KAI's own figures of the queue (`kai`) and its line from them; the
    hub's GPU-equivalent quota (`kai_gpu_quota`) stays in `used`/`limit`/`note`, said after."""
    if kai is None:
        return {**figure, "kai": None}
    text = kai.text()
    if figure.get("limit") is not None and figure.get("used") is not None:
        used, limit = Fraction(figure["used"]), Fraction(figure["limit"])
        text += f" MIG quota: {_num(used)} of {_num(limit)} GPU-equivalents (1g.10gb counts 1/7)."
    return {**figure, "text": text, "kai": kai.json()}


NO_TEAM: Obj = {
    "name": None,
    "used": None,
    "sessions": None,
    "limit": None,
    "size": None,
    "exceeds": False,
    "text": (
        "You are in no team with a GPU queue, so your server cannot start. "
        "Ask your admin to add you to a team."
    ),
    "note": "",
    "kai": None,
}


@dataclass(frozen=True)
class Team:
    """A user's team queue as the picker shows it; `use` is None while not counted."""

    queue: str | None  # None: the user is in no team
    use: TeamUse | None = None
    limit: float | None = None
    own: Fraction = Fraction(0)  # what the user's own kept claim holds (a restart reuses it)
    kai: KaiQueue | None = None  # KAI's Queue of this team, where the cluster has one

    def figure(self, want: Fraction) -> Obj:
        """The team's figures for one size (the availability JSON's `queue`): the line from
        KAI's Queue where there is one, else from the hub's own count."""
        if self.queue is None:
            return dict(NO_TEAM)
        if self.use is None:
            return with_kai(
                {
                    **NO_TEAM,
                    "name": self.queue,
                    "limit": self.limit,
                    "text": f"Team {self.queue}: GPU use unknown right now.",
                },
                self.kai,
            )
        return with_kai(team_figure(self.use, self.limit, want, self.own), self.kai)


@dataclass(frozen=True)
class Scheduling:
    """The scheduling fields of a session's pods: scheduler, priority class, queue labels."""

    scheduler_name: str | None = None
    priority_class: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class QueuePolicy:
    """How sessions are queued (KAI Scheduler): the spawner's `kai_*` settings and every
    decision made from them. Pure: what needs the cluster (the claims a team holds, the
    devices a size may get) is passed in."""

    queues: Any = ""  # kai_queue: a name, {group: queue}, or a callable (spawner) -> name
    default_queue: str = ""
    scheduler_name: str = SCHEDULER_NAME
    priority_class: str = PRIORITY_CLASS
    gpu_quota: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def of(cls, spawner: Any) -> QueuePolicy:
        """The policy of a spawner's settings as they are now (a profile may override them)."""
        return cls(
            queues=getattr(spawner, "kai_queue", "") or "",
            default_queue=getattr(spawner, "kai_default_queue", "") or "",
            scheduler_name=getattr(spawner, "kai_scheduler_name", SCHEDULER_NAME),
            priority_class=getattr(spawner, "kai_priority_class", PRIORITY_CLASS),
            gpu_quota=dict(getattr(spawner, "kai_gpu_quota", None) or {}),
        )

    @property
    def enabled(self) -> bool:
        return bool(self.queues)

    # -- the scheduler taking a session's GPU back (core/reclaim.py: KAI's Evict events) ----
    evict_events_selector = reclaim.EVICT_SELECTOR

    def evicted_by(
        self, events: Iterable[Obj], namespace: str, pods: Iterable[str], since: float
    ) -> str | None:
        """The workload the scheduler evicted one of `pods` for (after `since`), or None."""
        return reclaim.evicted_by(events, namespace, pods, since)

    def reclaim_notice(self, queue: str, by: str, parked: bool = False) -> str:
        """What the user is told when the scheduler took their session's GPU back (`parked`:
        its kernels were parked as the holder went)."""
        return reclaim.notice(queue, by, parked)

    async def queue_of(self, spawner: Any, groups: Iterable[str]) -> str | None:
        """The queue of this user's sessions, None when queues are not used; `Refused` for a
        user without one (never the scheduler's silent default queue) or a name that is no
        valid label value."""
        if not self.enabled:
            return None
        groups = list(groups)
        queue = await resolve(self.queues, spawner, groups, self.default_queue)
        if not queue:
            raise Refused(
                "You are in no team with a GPU queue"
                + (f" (your groups: {', '.join(sorted(groups))})" if groups else " (you are in no group)")
                + ", so your server cannot be scheduled. Ask your admin to add you to a team.",
                reason="no-queue",
            )
        if not is_valid_label(queue):
            raise Refused(
                f"This hub's queue setting gives the queue name {queue[:80]!r}, which is not a valid "
                "Kubernetes label value. Ask your admin to fix kai_queue.",
                reason="invalid-queue",
            )
        return queue

    async def team_of(
        self, spawner: Any, groups: Iterable[str], log: Any = None, user: str = ""
    ) -> Team | None:
        """The picker's view of the user's team (use not counted yet); None when queues are not
        used or the setting fails (the sizes still show, the team not)."""
        if not self.enabled:
            return None
        try:
            queue = await resolve(self.queues, spawner, list(groups), self.default_queue)
        except Exception as e:
            log = log or logging.getLogger("gpusessions")
            log.warning("kai_queue failed for %s in the picker: %s", user, e)
            return None
        if not queue:
            return Team(None)
        return Team(queue, None, self.limit(queue))

    def labels(self, queue: str | None) -> dict[str, str]:
        """The labels that put a claim or a pod in `queue`."""
        return {L.QUEUE_LABEL: queue} if queue else {}

    def scheduling(self, queue: str | None) -> Scheduling | None:
        """The scheduling fields of a session's pods in `queue`; None without a queue (the pods
        keep KubeSpawner's `scheduler_name` and `priority_class_name`)."""
        if not queue:
            return None
        return Scheduling(self.scheduler_name, self.priority_class or None, self.labels(queue))

    def limit(self, queue: str | None) -> float | None:
        """The team's quota in GPU-equivalents; None: no limit."""
        value = self.gpu_quota.get(queue) if queue else None
        return None if value is None else float(value)

    def charge(self, request: GPURequest, inv: Inventory, classes: dict[str, Obj]) -> Fraction:
        """What a new claim of `request` counts against its team's quota."""
        return request_equivalent(request, inv, classes)

    def claim_annotations(self, charged: Fraction) -> dict[str, str]:
        """A new claim remembers what it was charged (its use until it is allocated)."""
        return {EQUIVALENTS_ANNOTATION: str(charged)}

    def admit(
        self,
        queue: str,
        request: GPURequest,
        charged: Fraction,
        claims: Iterable[Obj],
        inv: Inventory,
        exclude: tuple[str, str] | None = None,
    ) -> None:
        """`Refused` when a new claim of `request` would take the team past its quota (best
        effort: two spawns in the same instant may both pass; the scheduler's quota is the
        hard limit). `exclude`: the (namespace, name) of the claim being replaced."""
        limit = self.limit(queue)
        if limit is None:
            return
        use = team_use(claims, queue, inv, exclude=exclude)
        message = over_quota(use, limit, charged, request.describe())
        if message:
            raise Refused(message, reason="team-quota")

    def counted(
        self, team: Team, claims: Iterable[Obj], inv: Inventory, mine: Obj | None, use: TeamUse | None = None
    ) -> Team:
        """The team with its use counted (`use`, if already counted for these claims) and the
        user's own kept claim `mine` (a restart reuses it rather than adds to the use)."""
        if team.queue is None:
            return team
        if use is None:
            use = team_use(claims, team.queue, inv)
        own = Fraction(0)
        md = (mine or {}).get("metadata") or {}
        if self.labels(team.queue).items() <= (md.get("labels") or {}).items() and not md.get(
            "deletionTimestamp"
        ):
            own = claim_equivalent(mine or {}, inv)
        return Team(team.queue, use, team.limit, own, team.kai)
