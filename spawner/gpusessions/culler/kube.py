"""The culler's Kubernetes side: watches of our claims and holders (and of the nodes and
ResourceSlices the admin page's fleet map reads; kube/watch.py's caches, as the hub's), and
deletes and patches (kube/api.py's calls, as the hub's)."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any

from kubespawner.clients import load_config, shared_client

from gpusessions.core import labels as L
from gpusessions.culler.jobs import SELECTOR as JOBS
from gpusessions.culler.jobtime import POD_SELECTOR, JobTimes
from gpusessions.kube.api import KubeError
from gpusessions.kube.jobs import JobsAPI
from gpusessions.kube.watch import Cache

Obj = dict[str, Any]
CLAIMS = f"{L.MANAGED_BY}={L.MANAGER}"


class ClusterSide:
    """Watches our claims and holders in the hub's namespace (or in all, with `namespace=None`).

    Scoped to one namespace by default: sessions of another hub on the same cluster are not
    this culler's, and would otherwise look like orphans (no such user in this hub)."""

    def __init__(
        self,
        timeout: float = 10.0,
        namespace: str | None = None,
        jobs: bool = False,
        retry_timeout: float = 30.0,
    ):
        load_config()
        self.core = shared_client("CoreV1Api")
        self.resource = shared_client("ResourceV1Api")
        # Deletes and patches go through the hub's one client module (kube/api.py): its retries
        # (exponential_backoff while the API is away), "not found" as done, errors in words.
        self.api = JobsAPI(timeout=timeout, retry_timeout=retry_timeout)
        self.namespace = namespace
        self.version = 0
        if namespace:
            list_claims = partial(
                self.resource.list_namespaced_resource_claim, namespace, label_selector=CLAIMS
            )
            list_holders = partial(self.core.list_namespaced_pod, namespace, label_selector=L.HOLDERS)
        else:
            list_claims = partial(self.resource.list_resource_claim_for_all_namespaces, label_selector=CLAIMS)
            list_holders = partial(self.core.list_pod_for_all_namespaces, label_selector=L.HOLDERS)
        # Notebook jobs (read-only, for the admin JSON and metrics: culler/jobs.py).
        self.batch = batch = shared_client("BatchV1Api")
        if namespace:
            list_jobs = partial(batch.list_namespaced_job, namespace, label_selector=JOBS)
        else:
            list_jobs = partial(batch.list_job_for_all_namespaces, label_selector=JOBS)
        self.jobs: Cache | None = Cache("jobs", list_jobs, lambda: None) if jobs else None
        # ... and their pods, whose run time the culler notes on their Job (culler/jobtime.py).
        if namespace:
            list_job_pods = partial(self.core.list_namespaced_pod, namespace, label_selector=POD_SELECTOR)
        else:
            list_job_pods = partial(self.core.list_pod_for_all_namespaces, label_selector=POD_SELECTOR)
        self.job_times: JobTimes | None = JobTimes() if jobs else None
        self.job_pods: Cache | None = Cache("pods", list_job_pods, self._job_pods_changed) if jobs else None
        self.claims = Cache("resourceclaims", list_claims, self._changed)
        self.holders = Cache("pods", list_holders, self._changed)
        # Nodes: a session whose GPU's node is gone is cleaned up (needs list/watch on nodes;
        # without it the culler only logs the watch's error and skips that check).
        self.nodes = Cache("nodes", self.core.list_node, self._changed)
        # ResourceSlices: every GPU of the cluster, for the admin page's fleet map (needs list/watch
        # on resourceslices; without it the page says why the map is missing, culling goes on).
        self.slices = Cache("resourceslices", self.resource.list_resource_slice, self._changed)
        self._tasks = [
            asyncio.ensure_future(c.run())
            for c in (self.claims, self.holders, self.nodes, self.slices, self.jobs, self.job_pods)
            if c
        ]

    def node_names(self) -> set[str] | None:
        """The nodes that exist, or None while the node watch has no reliable picture."""
        if not self.nodes.ready.is_set() or self.nodes.error:
            return None
        return {n["metadata"]["name"] for n in self.nodes.objects.values()}

    def _changed(self) -> None:
        self.version += 1

    def _job_pods_changed(self) -> None:
        # Every change of a job's pod (its end, its eviction) is seen, not only each cycle's.
        if self.job_times is not None and self.job_pods is not None:
            self.job_times.observe(self.job_pods.objects.values(), time.time())

    async def ready(self, timeout: float = 30) -> bool:
        try:
            await asyncio.wait_for(
                asyncio.gather(self.claims.ready.wait(), self.holders.ready.wait()), timeout
            )
            return True
        except TimeoutError:
            return False

    async def release(self, namespace: str, claim: str, holder: str | None) -> None:
        # The holder's own grace period: with kept kernels, its kernels park in it (the claim
        # stays until the holder is gone, by its delete-protection finalizer).
        if holder:
            await self.api.delete_pod(namespace, holder)
        await self.api.delete_claim(namespace, claim)

    async def delete_holder(self, namespace: str, name: str) -> None:
        await self.api.delete_pod(namespace, name)

    async def annotate(self, namespace: str, claim: str, values: dict[str, str | None]) -> None:
        await self.api.annotate_claim(namespace, claim, values)

    async def annotate_job(self, namespace: str, name: str, values: dict[str, str | None]) -> None:
        """Annotate a notebook job's Job (the run time of its pods: culler/jobtime.py)."""
        await self.api.annotate_job(namespace, name, values)

    async def secret_token(self, namespace: str, name: str) -> str | None:
        """Key `token` of a Secret (the GPU agents' token: culler/agentauth.py); None when the
        Secret is missing, unreadable or has no such key."""
        try:
            return await self.api.secret_value(namespace, name, "token")
        except KubeError:
            return None

    def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
