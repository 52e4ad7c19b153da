"""The run time of notebook jobs' pods, kept past the pods (with `--jobs`).

A preempted job's pod is evicted and deleted; the Job then runs a new pod, and the GPU time of
the first would be lost with it. The culler watches the jobs' pods (its pod rights in the
namespace), follows each pod's run time by its uid, and notes it on the pod's Job (annotation
`core.jobs.RUN_SECONDS`, {pod uid: seconds}): when a pod ends or goes, and every `NOTE_EVERY`
seconds while it runs. The note lives on the Job, so it outlasts a restart of the culler and
the hub reads it too (the Notebook Jobs panel's GPU time); a pod that ends while the culler is
down keeps the time of the last note. The admin page and the metrics read the same sum
(`watched` in culler/jobs.py merges what the culler has seen since its last note).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpusessions.core import jobs as J
from gpusessions.core import labels as L
from gpusessions.core.owners import owner_name

log = logging.getLogger("gpusessions.culler")
Obj = dict[str, Any]
# The culler's watch of the jobs' pods.
POD_SELECTOR = f"{L.MANAGED_BY}={L.MANAGER},{L.NOTEBOOK_COMPONENT}={J.JOB}"
NOTE_EVERY = 300.0  # seconds of run time between two notes of a running pod
ENDED_SLACK = 2.0  # seconds an ended pod's time may grow (its grace period) before a new note

Key = tuple[str, str]  # (namespace, Job name)


@dataclass
class PodTime:
    job: Key
    seconds: float
    ended: bool


def job_of(pod: Obj) -> str | None:
    """The name of the Job a pod belongs to."""
    md = pod.get("metadata") or {}
    owner = owner_name(md, "Job")
    if owner is not None:
        return owner
    job_id = (md.get("labels") or {}).get(J.JOB_ID_LABEL)
    return J.job_name(job_id) if job_id else None


class JobTimes:
    """Each job pod's run time as last seen, by pod uid (pure: `observe` is fed the pods)."""

    def __init__(self) -> None:
        self.pods: dict[str, PodTime] = {}

    def observe(self, pods: Iterable[Obj], now: float) -> None:
        """The pods there now; a pod seen before and not among them has gone (ended)."""
        seen = set()
        for p in pods:
            md = p.get("metadata") or {}
            uid, job = md.get("uid"), job_of(p)
            if not uid or not job:
                continue
            seen.add(uid)
            prev = self.pods.get(uid)
            seconds = max(prev.seconds if prev else 0.0, J.pod_run_seconds(p, now))
            self.pods[uid] = PodTime((str(md.get("namespace", "")), job), seconds, J.pod_ended(p))
        for uid, t in self.pods.items():
            if uid not in seen:
                t.ended = True

    def of(self, key: Key) -> dict[str, PodTime]:
        return {uid: t for uid, t in self.pods.items() if t.job == key}

    def merged(self, job: Obj) -> dict[str, float]:
        """{pod uid: seconds}: the Job's note, and what the culler saw since (the larger)."""
        md = job.get("metadata") or {}
        out = J.recorded_run_seconds(job)
        for uid, t in self.of((str(md.get("namespace", "")), str(md.get("name", "")))).items():
            out[uid] = max(out.get(uid, 0.0), t.seconds)
        return out

    def notes(self, jobs: Iterable[Obj]) -> list[tuple[str, str, dict[str, float]]]:
        """(namespace, Job, {pod uid: seconds}) of each Job whose note is behind: a pod ended
        (or gone) since, or a running pod `NOTE_EVERY` seconds past its last note."""
        out = []
        for job in jobs:
            md = job.get("metadata") or {}
            key = (str(md.get("namespace", "")), str(md.get("name", "")))
            mine = self.of(key)
            if not mine:
                continue
            noted = J.recorded_run_seconds(job)
            behind = any(
                (t.ended and (uid not in noted or t.seconds - noted[uid] > ENDED_SLACK))
                or (not t.ended and t.seconds - noted.get(uid, 0.0) >= NOTE_EVERY)
                for uid, t in mine.items()
            )
            if behind:
                out.append((*key, {k: round(v, 1) for k, v in sorted(self.merged(job).items())}))
        return out

    def prune(self, jobs: Iterable[Obj]) -> None:
        """Forget the pods of Jobs that are gone."""
        keys = {
            (str((j.get("metadata") or {}).get("namespace", "")), str((j.get("metadata") or {}).get("name")))
            for j in jobs
        }
        for uid in [u for u, t in self.pods.items() if t.job not in keys]:
            del self.pods[uid]


def _ready(cache: Any) -> bool:
    return cache is not None and cache.ready.is_set() and not cache.error


async def note(cluster: Any, now: float | None = None, dry_run: bool = False) -> int:
    """Note on each Job whose note is behind its pods' run time; how many Jobs were noted."""
    times: JobTimes | None = getattr(cluster, "job_times", None)
    if times is None or not (_ready(cluster.jobs) and _ready(cluster.job_pods)):
        return 0
    times.observe(cluster.job_pods.objects.values(), time.time() if now is None else now)
    jobs = list(cluster.jobs.objects.values())
    n = 0
    for namespace, name, value in times.notes(jobs):
        if dry_run:
            log.info("dry run: would note the run time of job %s/%s's pods: %s", namespace, name, value)
            continue
        await cluster.annotate_job(namespace, name, {J.RUN_SECONDS: json.dumps(value, sort_keys=True)})
        n += 1
    times.prune(jobs)
    return n


async def note_forever(cluster: Any, interval: float, dry_run: bool = False) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await note(cluster, dry_run=dry_run)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the next round tries again
            log.warning("noting the run time of notebook jobs' pods: %s", e)
