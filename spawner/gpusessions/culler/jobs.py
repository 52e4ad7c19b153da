"""Notebook jobs as the culler service shows them: a `jobs` field in the sessions JSON and
Prometheus metrics. Jobs are never sessions to cull (their claims are not the culler's); this is
a read-only view of the Jobs the hub created (`core/jobs.py`), from the culler's Job watch."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpusessions.core import jobdefs as D
from gpusessions.core import jobs as J
from gpusessions.core import labels as L
from gpusessions.core.timestamps import epoch

Obj = dict[str, Any]
# The culler's watch of Jobs: the hub's notebook jobs only.
SELECTOR = f"{L.MANAGED_BY}={L.MANAGER},{L.NOTEBOOK_COMPONENT}={J.JOB}"


def rows(jobs: Iterable[Obj], now: float | None = None) -> list[Obj]:
    """One row per Job: who, where, what, its state and the GPU time it has held: the run time
    of its pods (`core.jobs.RUN_SECONDS`, as `watched` gives it; a preempted pod's included),
    else its run time since it first started x its GPU workers."""
    now = time.time() if now is None else now
    out = []
    for job in jobs:
        md = job.get("metadata") or {}
        req = J.read_request(job)
        st = job.get("status") or {}
        state = J.job_state(job)
        pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        if J.RUN_SECONDS in (md.get("annotations") or {}):
            # Its pods' run time (culler/jobtime.py), preempted ones included, x 1 GPU claim each.
            held = sum(J.recorded_run_seconds(job).values()) * (1 if pod.get("resourceClaims") else 0)
        else:  # no pod seen: its run time since it first started x its GPU workers
            gpus = int(req.get("workers") or 1) if pod.get("resourceClaims") else 0
            start, end = epoch(st.get("startTime")), epoch(st.get("completionTime"))
            held = max(0.0, (end or now) - start) * gpus if start else 0.0
        out.append(
            {
                "namespace": md.get("namespace", ""),
                "job": md.get("name", ""),
                "id": D.job_id_of(job),
                "user": (md.get("annotations") or {}).get(L.USER_ANNOTATION, ""),
                "name": req.get("name", ""),
                "input": req.get("input", ""),
                "size": req.get("size", ""),
                "size_text": req.get("size_text", ""),
                "workers": req.get("workers", 1),
                "queue": (md.get("labels") or {}).get(L.QUEUE_LABEL) or "",
                "priority": pod.get("priorityClassName") or "",
                "state": state["state"],
                "message": state["message"],
                "requeues": state["requeues"],
                "created": md.get("creationTimestamp"),
                "gpu_seconds": round(held, 1),
            }
        )
    out.sort(key=lambda r: str(r["created"] or ""), reverse=True)
    return out


def watched(culler: Any) -> list[Obj] | None:
    """The Jobs the culler's watch holds, each with the run time of its pods as the culler knows
    it now (its note, and what the pod watch saw since: culler/jobtime.py); None when it has no
    Job watch."""
    cluster = getattr(culler, "cluster", None)
    cache = getattr(cluster, "jobs", None)
    if cache is None:
        return None
    times = getattr(cluster, "job_times", None)
    if times is None:
        return list(cache.objects.values())
    pods = getattr(cluster, "job_pods", None)
    if pods is not None and pods.ready.is_set():
        times.observe(pods.objects.values(), time.time())  # a running pod's time up to now
    out = []
    for job in cache.objects.values():
        md = job.get("metadata") or {}
        merged = times.merged(job)
        if not merged:  # no pod seen and none noted: `rows` estimates from the Job's times
            out.append(job)
            continue
        seconds = json.dumps(merged, sort_keys=True)
        out.append(
            {
                **job,
                "metadata": {**md, "annotations": {**(md.get("annotations") or {}), J.RUN_SECONDS: seconds}},
            }
        )
    return out


class JobsCollector(Collector):
    """`gpusessions_jobs{state,queue,size}` and `gpusessions_job_gpu_seconds{queue,size}`."""

    def __init__(self, culler: Any) -> None:
        self.culler = culler

    def collect(self) -> Iterator[Metric]:
        jobs = watched(self.culler)
        if jobs is None:
            return
        table = rows(jobs)
        count = GaugeMetricFamily(
            "gpusessions_jobs", "Notebook jobs, by state, queue and size.", labels=["state", "queue", "size"]
        )
        for (state, queue, size), n in sorted(
            Counter((r["state"], r["queue"], r["size"]) for r in table).items()
        ):
            count.add_metric([state, queue, size], n)
        yield count
        held: Counter[tuple[str, str]] = Counter()
        for r in table:
            held[(r["queue"], r["size"])] += r["gpu_seconds"]
        seconds = GaugeMetricFamily(
            "gpusessions_job_gpu_seconds",
            "GPU-seconds held by the notebook jobs that exist now, by queue and size.",
            labels=["queue", "size"],
        )
        for (queue, size), v in sorted(held.items()):
            seconds.add_metric([queue, size], round(v, 1))
        yield seconds
