"""The API calls of notebook jobs (Jobs, their ResourceClaimTemplates, pods and logs).

As `kube.api.SessionAPI` (its retries and error handling): plain dicts in and out, "not
found" is None, "already exists" is `Conflict`.
"""

from __future__ import annotations

from typing import Any

from kubespawner.clients import shared_client

from gpusessions.kube.api import Obj, SessionAPI


class JobsAPI(SessionAPI):
    def __init__(self, timeout: float = 10.0, retry_timeout: float = 30.0):
        super().__init__(timeout, retry_timeout)
        self.batch = shared_client("BatchV1Api")

    async def create_job(self, body: Obj) -> Obj:
        ns = body["metadata"]["namespace"]
        return self._dict(await self._call(self.batch.create_namespaced_job, ns, body))

    async def get_job(self, namespace: str, name: str) -> Obj | None:
        r = await self._call(self.batch.read_namespaced_job, name, namespace)
        return self._dict(r) if r is not None else None

    async def list_jobs(self, namespace: str, label_selector: str) -> list[Obj]:
        r = await self._call(self.batch.list_namespaced_job, namespace, label_selector=label_selector)
        return [self._dict(i) for i in (r.items if r is not None else [])]

    async def delete_job(self, namespace: str, name: str) -> bool:
        """Delete the Job and, in the background, what it owns (pods, claim template)."""
        r = await self._call(
            self.batch.delete_namespaced_job, name, namespace, propagation_policy="Background"
        )
        return r is not None

    async def annotate_job(self, namespace: str, name: str, values: dict[str, str | None]) -> bool:
        """Merge-patch the Job's annotations (None removes one); False if the Job is gone."""
        r = await self._call(
            self.batch.patch_namespaced_job,
            name,
            namespace,
            {"metadata": {"annotations": values}},
            _content_type="application/merge-patch+json",
        )
        return r is not None

    async def create_claim_template(self, body: Obj) -> Obj:
        ns = body["metadata"]["namespace"]
        return self._dict(await self._call(self.resource.create_namespaced_resource_claim_template, ns, body))

    async def own_claim_template(self, namespace: str, name: str, owner: Obj) -> bool:
        """Make the template the Job's (deleted with it); False if the template is gone."""
        r = await self._call(
            self.resource.patch_namespaced_resource_claim_template,
            name,
            namespace,
            {"metadata": {"ownerReferences": [owner]}},
            _content_type="application/merge-patch+json",
        )
        return r is not None

    async def delete_claim_template(self, namespace: str, name: str) -> bool:
        r = await self._call(self.resource.delete_namespaced_resource_claim_template, name, namespace)
        return r is not None

    async def list_pods(self, namespace: str, label_selector: str) -> list[Obj]:
        r = await self._call(self.core.list_namespaced_pod, namespace, label_selector=label_selector)
        return [self._dict(i) for i in (r.items if r is not None else [])]

    async def pod_log(
        self, namespace: str, name: str, container: str, tail_lines: int, limit_bytes: int | None = None
    ) -> str | None:
        """The last `tail_lines` lines of a container's log, of which at most `limit_bytes`
        bytes are read (the kubelet cuts after `limitBytes`: the start of those lines); None:
        the pod is gone. Read as bytes and decoded with replacement (a cut may split a
        character)."""
        kwargs: dict[str, Any] = {"container": container, "tail_lines": tail_lines, "_preload_content": False}
        if limit_bytes is not None:
            kwargs["limit_bytes"] = limit_bytes
        r = await self._call(self.core.read_namespaced_pod_log, name, namespace, **kwargs)
        if r is None:
            return None
        try:
            data = await r.read()
        finally:
            r.release()
        return bytes(data).decode("utf-8", errors="replace")
