"""A GPU session as the culler sees it, joined from claims, holders, hub and agents (pure)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpusessions.core import labels as L
from gpusessions.core.claims import allocated_devices, allocated_node, allocation, describe_spec
from gpusessions.core.labels import CULL_AT as CULL_AT
from gpusessions.core.labels import CULL_REASON as CULL_REASON
from gpusessions.core.labels import KEEP_CONTENDED as KEEP_CONTENDED
from gpusessions.core.labels import KEEP_FROM as KEEP_FROM
from gpusessions.core.labels import KEEP_UNTIL as KEEP_UNTIL
from gpusessions.core.labels import KEPT_AT as KEPT_AT
from gpusessions.core.labels import STOPPED_SINCE as STOPPED_SINCE
from gpusessions.core.labels import WARNED_AT as WARNED_AT
from gpusessions.core.timestamps import epoch

Obj = dict[str, Any]


@dataclass
class Session:
    namespace: str
    claim: str
    user: str | None
    server: str | None
    profile: str = ""
    request: str = ""  # the device request's hash (same hash: the same devices can serve it)
    size: str = ""  # the request in words ("MIG 1g.10gb")
    queue: str = ""
    created: float | None = None
    allocated: bool = False
    node: str | None = None
    devices: list[str] = field(default_factory=list)
    holder: str | None = None
    holder_ip: str | None = None
    holder_restarts: int = 0
    holder_phase: str | None = None  # Pending while the scheduler finds no device for the claim
    holder_started: float | None = None  # latest container start (the agent forgets last_busy)
    deleting: bool = False  # the claim is being deleted (a finalizer holds it a moment)
    parks: bool = False  # its holder parks the kernels when it goes (the claim says so): a cull loses nothing
    # from the hub
    hub_user: bool = False
    hub_server: bool = False
    running: bool = False
    pending: str | None = None
    notebook_last_activity: float | None = None
    server_started: float | None = None  # when the hub started the running server
    # when the culler first saw that server ready (its spawn, GPU wait and notebook start are over)
    server_ready: float | None = None
    # from the agent
    gpu: list[Obj] = field(default_factory=list)
    gpu_error: str | None = None
    kernels: list[Obj] | None = None  # kernels hosted in the holder (persist_kernels)
    node_gone: bool = False  # the claim's node no longer exists
    kernels_error: str | None = None
    # from the claim's annotations (the culler's memory across restarts)
    keep_until: float | None = None
    kept_at: float | None = None  # when the user clicked Keep my GPU (None: an admin's exemption)
    keep_from: float | None = None  # the warning that keep answered (contended keeps count from it)
    warned_at: float | None = None
    stopped_since: float | None = None
    # from the other sessions (contention.py): users waiting for this stopped session's size
    waiters: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.claim}"

    @property
    def state(self) -> str:
        if self.node_gone:
            return "node gone"
        if self.running:
            return "running" if self.allocated else "waiting"
        if self.pending:
            return "starting" if self.pending == "spawn" else self.pending
        return "kept" if self.allocated else "waiting"

    @property
    def gpu_last_busy(self) -> float | None:
        busy = [d["last_busy"] for d in self.gpu if d.get("last_busy")]
        return max(busy) if busy else None

    @property
    def gpu_busy_now(self) -> bool:
        return any(d.get("busy") for d in self.gpu)

    @property
    def gpu_known(self) -> bool:
        """Whether the agent answered with device readings at all."""
        return bool(self.gpu) and not self.gpu_error

    @property
    def gpu_read(self) -> bool:
        """Whether this cycle read the GPU: the agent answered, NVML works, and every device has
        a reading (no device error). Only then may a rule count the GPU as idle."""
        return self.gpu_known and not any(d.get("error") for d in self.gpu)

    @property
    def gpu_unread_why(self) -> str:
        """Why the GPU was not read, in words ("" when it was)."""
        if self.gpu_read:
            return ""
        if self.gpu_error:
            return self.gpu_error
        errors = [str(d["error"]) for d in self.gpu if d.get("error")]
        return "; ".join(errors) if errors else "the agent reported no device"


def session_from_claim(claim: Obj) -> Session:
    md = claim["metadata"]
    ann = md.get("annotations") or {}
    return Session(
        namespace=md["namespace"],
        claim=md["name"],
        user=ann.get(L.USER_ANNOTATION),
        server=ann.get(L.SERVER_ANNOTATION),
        profile=ann.get(L.PROFILE_ANNOTATION, ""),
        request=ann.get(L.REQUEST_HASH, ""),
        size=describe_spec(claim.get("spec") or {}),
        queue=(md.get("labels") or {}).get(L.QUEUE_LABEL, ""),
        created=epoch(md.get("creationTimestamp")),
        allocated=bool(allocation(claim)),
        deleting=bool(md.get("deletionTimestamp")),
        parks=L.parks(md),
        node=allocated_node(claim),
        devices=[f"{p}/{d}" for _, p, d in allocated_devices(claim)],
        keep_until=annotation_time(ann.get(KEEP_UNTIL)),
        kept_at=annotation_time(ann.get(KEPT_AT)),
        keep_from=annotation_time(ann.get(KEEP_FROM)),
        warned_at=annotation_time(ann.get(WARNED_AT)),
        stopped_since=annotation_time(ann.get(STOPPED_SINCE)),
    )


def annotation_time(v: str | None) -> float | None:
    """A time the culler or the hub wrote into an annotation (unix seconds, or ISO 8601)."""
    if v is None:
        return None
    try:
        t = float(v)
    except ValueError:
        return epoch(v)
    return t if math.isfinite(t) else None  # "nan" or "inf" on a claim: no time (a NaN keep holds nothing)


def join(claims: list[Obj], holders: list[Obj], hub_users: list[Obj]) -> tuple[list[Session], list[Obj]]:
    """Sessions from our claims, with their holders and the hub's view; and holders without a claim."""
    by_claim: dict[tuple[str, str], Obj] = {}
    for pod in holders:
        claim_name = (pod["metadata"].get("annotations") or {}).get(L.CLAIM_ANNOTATION)
        if claim_name:
            by_claim[(pod["metadata"]["namespace"], claim_name)] = pod
    users = {u["name"]: u for u in hub_users}
    sessions = []
    seen: set[tuple[str, str]] = set()
    for c in claims:
        if (c["metadata"].get("labels") or {}).get(L.MANAGED_BY) != L.MANAGER:
            continue
        s = session_from_claim(c)
        seen.add((s.namespace, s.claim))
        h = by_claim.get((s.namespace, s.claim))
        if h is not None and not h["metadata"].get("deletionTimestamp"):
            st = h.get("status") or {}
            s.holder = h["metadata"]["name"]
            s.holder_ip = st.get("podIP")
            statuses = st.get("containerStatuses") or []
            s.holder_restarts = sum(int(cs.get("restartCount", 0)) for cs in statuses)
            s.holder_phase = st.get("phase")
            started = [
                epoch(((cs.get("state") or {}).get("running") or {}).get("startedAt")) for cs in statuses
            ]
            s.holder_started = max((t for t in started if t is not None), default=None)
        u = users.get(s.user or "")
        if u is not None:
            s.hub_user = True
            srv = (u.get("servers") or {}).get(s.server or "")
            if srv is not None:
                s.hub_server = True
                s.running = bool(srv.get("ready"))
                s.pending = srv.get("pending")
                s.notebook_last_activity = epoch(srv.get("last_activity"))
                s.server_started = epoch(srv.get("started"))
            elif not s.server:
                # The default server always exists for a user, stopped or not.
                s.hub_server = True
        sessions.append(s)
    orphan_holders = [h for (ns, claim_name), h in by_claim.items() if (ns, claim_name) not in seen]
    return sessions, orphan_holders
