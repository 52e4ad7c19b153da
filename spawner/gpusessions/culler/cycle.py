"""The culler's cycle: inventory (watches, the hub, the agents) -> decisions (policy.py) -> actions.

`Culler` holds what the last cycle saw and decided, and the counters the
metrics report; the web side (web.py) and the exporter (metrics.py) only read it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpusessions.core.timestamps import rfc3339
from gpusessions.culler.agents import AgentReader
from gpusessions.culler.contention import mark_contention
from gpusessions.culler.history import History, session_equivalent
from gpusessions.culler.hub import HubAPI
from gpusessions.culler.kube import ClusterSide
from gpusessions.culler.metrics import exposition
from gpusessions.culler.model import (
    CULL_AT,
    CULL_REASON,
    KEEP_CONTENDED,
    KEEP_FROM,
    KEEP_UNTIL,
    KEPT_AT,
    STOPPED_SINCE,
    WARNED_AT,
    Session,
    annotation_time,
    join,
)
from gpusessions.culler.policy import (
    CLEAR_STOPPED,
    CULL,
    FINISH_RELEASE,
    GPU_RULES,
    MARK_STOPPED,
    NODE_GONE,
    NONE,
    ORPHAN,
    RELEASE,
    UNWARN,
    WARN,
    Decision,
    Policy,
    decide,
)
from gpusessions.culler.summary import reclaimed_seconds

log = logging.getLogger("gpusessions.culler")
Obj = dict[str, Any]


@dataclass
class Culler:
    cluster: ClusterSide
    hub: HubAPI
    policy: Policy
    agents: AgentReader = field(default_factory=AgentReader)  # reads the holders' agents
    unread: int = 0  # sessions of the last cycle whose GPU could not be read
    max_actions: int = 16  # actions (warnings, culls, releases) of one cycle running at once
    sessions: list[Session] = field(default_factory=list)
    decisions: dict[str, Decision] = field(default_factory=dict)
    actions: Counter[str] = field(default_factory=Counter)
    # by reason: idle, gpu-idle, max-age, stopped, stopped-contended, orphan, node-gone, admin
    culls: Counter[str] = field(default_factory=Counter)
    idle_gpu_seconds: dict[str, float] = field(default_factory=dict)  # by profile
    history: History = field(default_factory=History)  # the record the admin page and metrics read
    cycles: int = 0
    last_cycle: float | None = None
    last_cycle_seconds: float | None = None  # wall time of the last cycle
    last_error: str | None = None
    # (claim, the hub's start of its server) seen spawning, and when then first seen ready
    spawning_seen: set[tuple[str, float | None]] = field(default_factory=set)
    ready_seen: dict[tuple[str, float | None], float] = field(default_factory=dict)

    async def _agent(self, s: Session, fresh: bool = False) -> None:
        """Read the session's agent (agents.py: bounded, retried within the cycle)."""
        await self.agents.read(s, fresh)

    async def _read_agents(self, sessions: list[Session]) -> None:
        """Every agent, every cycle: at most `agents.concurrency` reads at once."""
        await asyncio.gather(*(self._agent(s) for s in sessions))
        self.unread = sum(1 for s in sessions if not s.gpu_read)
        if self.unread:
            log.info("%d of %d GPUs could not be read this cycle", self.unread, len(sessions))

    def _note_ready(self, sessions: list[Session], now: float) -> None:
        """When each server this culler saw spawning was first seen ready. The hub says when a
        spawn began, not when the notebook became ready, and a spawn that waited for a GPU began
        long before the user could use it. A server already running when the culler started
        counts from its spawn's start, as the hub says (a restart of the culler loses nothing
        it would have culled)."""
        spawning: set[tuple[str, float | None]] = set()
        ready: dict[tuple[str, float | None], float] = {}
        for s in sessions:
            key = (s.key, s.server_started)
            if s.pending == "spawn":
                spawning.add(key)
            elif s.running and not s.pending and (key in self.spawning_seen or key in self.ready_seen):
                ready[key] = s.server_ready = self.ready_seen.get(key, now)
        self.spawning_seen, self.ready_seen = spawning, ready

    def _kept_meanwhile(self, s: Session, now: float) -> bool:
        """Whether the user clicked Keep my GPU after the cycle's snapshot (the claim as the watch
        holds it now carries a newer keep): the warning was answered, the cull is off."""
        claims = getattr(self.cluster, "claims", None)
        claim = claims.objects.get(f"{s.namespace}/{s.claim}") if claims is not None else None
        if claim is None:
            return False
        ann = claim["metadata"].get("annotations") or {}
        until, kept = annotation_time(ann.get(KEEP_UNTIL)), annotation_time(ann.get(KEPT_AT))
        return until is not None and until > now and (kept, until) != (s.kept_at, s.keep_until)

    async def _busy_again(self, s: Session) -> bool:
        """Read the session's agent again just before a cull: is its GPU busy now? The agent reads
        NVML for this answer (`fresh`), not its last periodic sample: work the user started after
        that sample (up to one agent interval ago) is seen."""
        await self._agent(s, fresh=True)
        return s.gpu_busy_now

    async def cycle(self, now: float | None = None) -> list[tuple[Session, Decision]]:
        """One pass: inventory, decisions, actions. Returns what was decided."""
        started = time.monotonic()
        users = await self.hub.users()
        sessions, orphan_holders = join(
            list(self.cluster.claims.objects.values()), list(self.cluster.holders.objects.values()), users
        )
        nodes = self.cluster.node_names()
        if nodes is not None:
            for s in sessions:
                s.node_gone = s.node is not None and s.node not in nodes
        await self._read_agents([s for s in sessions if not s.node_gone])
        now = time.time() if now is None else now
        if self.last_cycle is not None:
            # GPU-seconds held while idle since the last cycle (bounded, in case cycles stalled).
            dt = min(max(0.0, now - self.last_cycle), 600.0)
            for s in sessions:
                if s.allocated and not s.gpu_busy_now:
                    held = dt * max(1, len(s.devices))
                    self.idle_gpu_seconds[s.profile] = self.idle_gpu_seconds.get(s.profile, 0.0) + held
            self.history.observe(now, sessions, dt)
        self._note_ready(sessions, now)
        mark_contention(sessions, now, self.policy)
        out = [(s, decide(s, now, self.policy)) for s in sessions]
        # Actions run side by side (at most `max_actions` at once): a server that is slow to stop
        # (the hub answers a stop after up to 10 s) does not hold up the other warnings and culls.
        gate = asyncio.Semaphore(self.max_actions)

        async def act(s: Session, d: Decision) -> None:
            async with gate:
                try:
                    await self._act(s, d, now)
                except Exception as e:  # one failed action must not end the cycle for the others
                    log.warning("%s of %s failed (tried again next cycle): %s", d.action, s.key, e)

        await asyncio.gather(*(act(s, d) for s, d in out if d.action != NONE))
        for h in orphan_holders:
            md = h["metadata"]
            self._log("orphan-holder", f"{md['namespace']}/{md['name']}", "holder pod without its claim")
            if not self.policy.dry_run:
                await self.cluster.delete_holder(md["namespace"], md["name"])
        self.sessions = sessions
        self.decisions = {s.key: d for s, d in out}
        self.cycles += 1
        self.last_cycle = now
        try:
            self.history.save(now)
        except OSError as e:  # a full or read-only volume: report, go on culling
            log.warning("could not save the culler's record: %s", e)
        self.last_cycle_seconds = time.monotonic() - started
        log.info("cycle %d: %d sessions in %.3fs", self.cycles, len(sessions), self.last_cycle_seconds)
        return out

    def _log(self, action: str, what: str, reason: str) -> None:
        self.actions[action] += 1
        prefix = "DRY RUN: would " if self.policy.dry_run else ""
        log.info("%s%s %s: %s", prefix, action, what, reason)

    async def _act(self, s: Session, d: Decision, now: float) -> None:
        who = f"{s.key} ({s.user}/{s.server or ''})"
        if d.action == FINISH_RELEASE:
            # Not a cull (counted when it was made): the release's lost holder delete, again.
            log.info("%s: %s", who, d.reason)
            if not self.policy.dry_run and s.holder:
                await self.cluster.delete_holder(s.namespace, s.holder)
            return
        if d.action in (MARK_STOPPED, CLEAR_STOPPED, UNWARN):
            # Bookkeeping, not a cull: kept in the claim's annotations so a restart loses nothing.
            if not self.policy.dry_run:
                values: dict[str, str | None] = (
                    {STOPPED_SINCE: str(now)}
                    if d.action == MARK_STOPPED
                    else {STOPPED_SINCE: None, WARNED_AT: None}
                    if d.action == CLEAR_STOPPED
                    else {WARNED_AT: None, CULL_AT: None, CULL_REASON: None}
                )
                await self.cluster.annotate(s.namespace, s.claim, values)
            return
        if d.action == CULL and not self.policy.dry_run:
            # The last look: the GPU's reading, and the user's answer to the warning, may have
            # changed since the cycle read them.
            if self._kept_meanwhile(s, now):
                self._log("cull-called-off", who, "its user clicked Keep my GPU")
                return
            if await self._busy_again(s):
                self._log("cull-called-off", who, "its GPU is busy again")
                return
            if d.rule in GPU_RULES and not s.gpu_read:
                # The rule needs the GPU idle, and the last look could not read it: no guess.
                self._log("cull-called-off", who, f"its GPU could not be read ({s.gpu_unread_why})")
                return
        if d.action == CULL and not self.policy.dry_run:
            # The hub stops the server unless the user's Keep reached it first (hub/cull.py): a
            # keep crossing the cull is answered there, in one place, by one event loop.
            outcome = await self.hub.cull_server(s.user or "", s.server or "", s.warned_at or now, d.reason)
            if outcome == "kept":
                self._log("cull-called-off", who, "its user kept the GPU (the hub had the keep first)")
                return
            if outcome == "busy":
                log.info("cull of %s put off: its server is starting or stopping", who)
                return
        self._log(d.action, who, d.reason)
        if self.policy.dry_run:
            return
        self._record(s, d, now)
        if d.action == WARN:
            # What the user reads on the hub home page (and can answer with "keep"). A keep that
            # ran out goes: the hub hides the warnings of a kept session.
            warning: dict[str, str | None] = {
                WARNED_AT: str(now),
                CULL_AT: str(d.at or now),
                CULL_REASON: d.reason[:200],
                # How long a keep of this warning holds while someone waits (the hub says so).
                KEEP_CONTENDED: str(self.policy.for_session(s).keep_contended),
            }
            if s.keep_until is not None:
                warning[KEEP_UNTIL] = None
                warning[KEPT_AT] = None
                warning[KEEP_FROM] = None
            await self.cluster.annotate(s.namespace, s.claim, warning)
        elif d.action == CULL:
            self.culls[d.rule or "idle"] += 1
            # The hub answered as soon as the stop began (it may take 10 s): the holder and the
            # claim go while it runs, so the GPU is free as soon as the notebook pod is gone.
            await self.cluster.release(s.namespace, s.claim, s.holder)
        elif d.action == NODE_GONE:
            self.culls["node-gone"] += 1
            if s.running or s.pending:
                await self.hub.stop_server(s.user or "", s.server or "")
            await self.cluster.release(s.namespace, s.claim, s.holder)
        elif d.action in (RELEASE, ORPHAN):
            self.culls[(d.rule or "stopped") if d.action == RELEASE else "orphan"] += 1
            await self.cluster.release(s.namespace, s.claim, s.holder)

    def _record(self, s: Session, d: Decision, now: float) -> None:
        """Warnings, culls and reclaimed time into the record (the admin page and metrics read it)."""
        if d.action == WARN:
            self.history.add(now, s.profile, s.queue, warnings=1)
            return
        amounts = {"culls": 1.0}
        ahead = reclaimed_seconds(s, d, now, self.policy.for_session(s))
        if d.rule in ("gpu-idle-contended", "stopped-contended"):
            amounts["reclaims"] = 1.0
            amounts["reclaimed"] = ahead * session_equivalent(s)
        self.history.add(now, s.profile, s.queue, **amounts)

    def describe(self, now: float | None = None) -> list[Obj]:
        now = time.time() if now is None else now
        out = []
        for s in self.sessions:
            d = self.decisions.get(s.key, Decision(NONE, ""))
            last_busy = s.gpu_last_busy
            out.append(
                {
                    "namespace": s.namespace,
                    "claim": s.claim,
                    "holder": s.holder,
                    "user": s.user,
                    "server": s.server,
                    "profile": s.profile,
                    "node": s.node,
                    "devices": s.devices,
                    "state": s.state,
                    "gpu": s.gpu,
                    "gpu_error": s.gpu_error,
                    "kernels": s.kernels,
                    "kernels_error": s.kernels_error,
                    "holder_restarts": s.holder_restarts,
                    "notebook_idle_seconds": None
                    if s.notebook_last_activity is None
                    else max(0.0, now - s.notebook_last_activity),
                    "gpu_idle_seconds": 0.0
                    if s.gpu_busy_now
                    else (
                        None
                        if not s.gpu_read or (last_busy or s.created) is None
                        else now - (last_busy or s.created or now)
                    ),
                    "queue": s.queue or None,
                    "keep_until": rfc3339(s.keep_until),
                    "warned_at": rfc3339(s.warned_at),
                    "waiters": s.waiters,
                    "decision": d.action,
                    "reason": d.reason,
                    "cull_at": rfc3339(d.at),
                    "seconds_left": None if d.at is None else max(0.0, d.at - now),
                }
            )
        return out

    def metrics(self) -> str:
        """The Prometheus exposition of this state (what /metrics serves)."""
        return exposition(self)

    async def keep(self, namespace: str, claim: str, until: float) -> bool:
        """An admin's keep of a session (a claim of ours the watch holds); False when there is none."""
        claims = getattr(self.cluster, "claims", None)
        known = claims.objects.get(f"{namespace}/{claim}") if claims is not None else None
        if known is None and not any(x.namespace == namespace and x.claim == claim for x in self.sessions):
            return False
        # An admin's keep is an exemption: no kept-at, so no contended limit on it.
        exempt = {KEEP_UNTIL: str(until), KEPT_AT: None, KEEP_FROM: None}
        await self.cluster.annotate(
            namespace, claim, {**exempt, WARNED_AT: None, CULL_AT: None, CULL_REASON: None}
        )
        return True

    async def release(self, namespace: str, claim: str) -> bool:
        s = next((x for x in self.sessions if x.namespace == namespace and x.claim == claim), None)
        if s is None:
            return False
        self._log("release-by-admin", s.key, "released from the admin page")
        self.culls["admin"] += 1
        self.history.add(time.time(), s.profile, s.queue, culls=1)
        if s.running:
            await self.hub.stop_server(s.user or "", s.server or "")
        await self.cluster.release(namespace, claim, s.holder)
        return True


async def run_forever(culler: Culler, interval: float) -> None:
    while True:
        started = time.monotonic()
        try:
            await culler.cycle()
            culler.last_error = None
        except Exception as e:  # the hub or the apiserver may be restarting: report, go on
            culler.last_error = f"{type(e).__name__}: {e}"
            log.warning("culler cycle failed: %s", culler.last_error)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
