"""The API calls of job definitions (CronJobs), over those of jobs (`kube.jobs.JobsAPI`).

Plain dicts in and out, "not found" is None, "already exists" is `Conflict`.
"""

from __future__ import annotations

from gpusessions.kube.api import Obj
from gpusessions.kube.jobs import JobsAPI


class DefinitionsAPI(JobsAPI):
    async def create_cronjob(self, body: Obj) -> Obj:
        ns = body["metadata"]["namespace"]
        return self._dict(await self._call(self.batch.create_namespaced_cron_job, ns, body))

    async def get_cronjob(self, namespace: str, name: str) -> Obj | None:
        r = await self._call(self.batch.read_namespaced_cron_job, name, namespace)
        return self._dict(r) if r is not None else None

    async def list_cronjobs(self, namespace: str, label_selector: str) -> list[Obj]:
        r = await self._call(self.batch.list_namespaced_cron_job, namespace, label_selector=label_selector)
        return [self._dict(i) for i in (r.items if r is not None else [])]

    async def replace_cronjob(self, body: Obj) -> Obj | None:
        """Replace the CronJob (`metadata.resourceVersion` set: a concurrent change is a Conflict)."""
        md = body["metadata"]
        r = await self._call(self.batch.replace_namespaced_cron_job, md["name"], md["namespace"], body)
        return self._dict(r) if r is not None else None

    async def delete_cronjob(self, namespace: str, name: str) -> bool:
        """Delete the CronJob and, in the background, what it owns (its Jobs, their pods and
        claims, the claim template)."""
        r = await self._call(
            self.batch.delete_namespaced_cron_job, name, namespace, propagation_policy="Background"
        )
        return r is not None

    async def get_claim_template(self, namespace: str, name: str) -> Obj | None:
        r = await self._call(self.resource.read_namespaced_resource_claim_template, name, namespace)
        return self._dict(r) if r is not None else None
