"""Job definitions through the hub: a notebook job on a schedule, as a Kubernetes CronJob.

    GET    /hub/api/gpusessions/users/{user}/jobdefinitions[?server=<name>]            the user's
    POST   /hub/api/gpusessions/users/{user}/jobdefinitions[?server=<name>]            create one
    GET    /hub/api/gpusessions/users/{user}/jobdefinitions/{id}[?server=<name>]       one
    PATCH  /hub/api/gpusessions/users/{user}/jobdefinitions/{id}[?server=<name>]       change it;
           {"active": false} pauses it (no new runs), {"active": true} resumes it
    DELETE /hub/api/gpusessions/users/{user}/jobdefinitions/{id}[?server=<name>]       delete it, its
           runs (Jobs, pods, claims) and its claim template
    POST   /hub/api/gpusessions/users/{user}/jobdefinitions/{id}/jobs[?server=<name>]  run it now
           ({"parameters"?: overrides}); 201 with the job

Who may call, and the answer to anyone else (404), are as for jobs (`hub/jobs.py`). A
definition is checked as a job is (`core.jobs.check_request`: paths, size, parameters,
counts), plus its schedule (`core.schedule`: five cron fields, runs at least
`min_interval_minutes` apart, an IANA time zone) and one worker; a refusal is a 400 that names
the field and creates nothing. Its runs are Jobs like one-off jobs (`core.jobdefs`): the job
endpoints list, read and delete them, the culler sees them.

Settings: `c.NotebookJobDefinitions.<trait>` (`jobsettings.py`); `c.NotebookJobs.enabled` off turns these
endpoints off too.
"""

from __future__ import annotations

import uuid
from typing import Any

from tornado import web

from gpusessions.core import jobdefs as D
from gpusessions.core import jobs as J
from gpusessions.core import labels as L
from gpusessions.hub.jobs import JobsBase, create_with_template, describe, user_lock
from gpusessions.hub.jobsettings import NotebookJobDefinitions, NotebookJobs
from gpusessions.kube.api import Conflict, KubeError
from gpusessions.kube.jobdefs import DefinitionsAPI

Obj = dict[str, Any]


def definition_settings(handler: Any) -> NotebookJobDefinitions:
    return NotebookJobDefinitions(config=handler.settings.get("config"))


def _request_hash(template: Obj | None) -> str | None:
    """The GPU request a claim template was made for (None: no template, a CPU-only size)."""
    return ((template or {}).get("metadata", {}).get("annotations") or {}).get(L.REQUEST_HASH)


async def _listed(api: Any, namespace: str, user_name: str) -> list[Obj]:
    """The user's CronJobs; a refusal by the cluster is a clear 502, not a server error."""
    try:
        return list(await api.list_cronjobs(namespace, D.selector(user_name)))
    except KubeError as e:
        raise web.HTTPError(502, f"The cluster refused to list your job definitions: {e.message}") from None


class DefinitionsBase(JobsBase):
    def _begin_definitions(self, user_name: str, write: bool) -> tuple[Any, Any, NotebookJobs]:
        user, spawner, cfg = self._begin(user_name, write)
        if not definition_settings(self).enabled:
            raise web.HTTPError(404, "Schedules (job definitions) are not enabled on this hub.")
        return user, spawner, cfg

    def _body(self) -> Any:
        return self.json_body()

    def _check(self, body: Any, cfg: NotebookJobs) -> D.Definition:
        try:
            return D.check_definition(
                body,
                J.Limits(cfg.max_parameters, cfg.max_workers),
                definition_settings(self).min_interval_minutes,
            )
        except D.InvalidDefinition as e:
            raise web.HTTPError(400, f"Invalid job definition: {e}.") from None

    async def _find_definition(self, api: Any, spawner: Any, user_name: str, def_id: str) -> Obj:
        if not D.valid_definition_id(def_id):
            raise web.HTTPError(404, "No such job definition.")
        cj = await api.get_cronjob(spawner.namespace, D.definition_name(def_id))
        if cj is None or not D.owned_definition(cj, user_name):
            raise web.HTTPError(404, "No such job definition.")
        return cj

    async def _build(
        self, user: Any, spawner: Any, cfg: NotebookJobs, def_id: str, d: D.Definition
    ) -> tuple[Obj, Obj | None]:
        """The CronJob and the claim template (None for CPU only) of a checked definition."""
        prepared = await self._prepare(user, spawner, cfg, d.job)
        ns = spawner.namespace
        cron = D.build_cronjob(
            def_id,
            ns,
            user.name,
            d,
            prepared.settings,
            prepared.gpu,
            prepared.size_text,
            definition_settings(self).history_limit,
        )
        template = None
        if prepared.gpu is not None:
            template = D.build_claim_template(
                def_id, ns, user.name, prepared.gpu, prepared.settings.queue_labels
            )
        return cron, template


class DefinitionsHandler(DefinitionsBase):
    async def get(self, user_name: str) -> None:
        _, spawner, _ = self._begin_definitions(user_name, write=False)
        found = await _listed(DefinitionsAPI(), spawner.namespace, user_name)
        out = [D.describe(cj) for cj in found if D.owned_definition(cj, user_name)]
        out.sort(key=lambda d: str(d.get("created") or ""), reverse=True)
        self._json({"job_definitions": out})

    async def post(self, user_name: str) -> None:
        user, spawner, cfg = self._begin_definitions(user_name, write=True)
        d = self._check(self._body(), cfg)
        def_id = uuid.uuid4().hex[:12]
        cron, template = await self._build(user, spawner, cfg, def_id, d)
        api = DefinitionsAPI()
        ns = spawner.namespace
        async with user_lock(user_name):  # the count and the create, one request at a time
            mine = [c for c in await _listed(api, ns, user_name) if D.owned_definition(c, user_name)]
            limit = definition_settings(self).max_definitions
            if len(mine) >= limit:
                raise web.HTTPError(
                    429,
                    f"You have {len(mine)} job definition(s), the most one user may have: delete one first.",
                )
            try:  # the template is the CronJob's: it lives as long as the definition
                created = await create_with_template(
                    api, template, api.create_cronjob, cron, D.owner_reference
                )
            except KubeError as e:
                self.log.warning("Job definition of %s not created: %s", user_name, e)
                raise web.HTTPError(502, f"The cluster refused the job definition: {e.message}") from None
        self.log.info(
            "Job definition %s of %s: %s on %s, schedule %r (%s)",
            def_id,
            user_name,
            d.job.input,
            d.job.size,
            d.schedule,
            d.timezone or "UTC",
        )
        self._json(D.describe(created), status=201)


class DefinitionHandler(DefinitionsBase):
    async def get(self, user_name: str, def_id: str) -> None:
        _, spawner, _ = self._begin_definitions(user_name, write=False)
        self._json(D.describe(await self._find_definition(DefinitionsAPI(), spawner, user_name, def_id)))

    async def patch(self, user_name: str, def_id: str) -> None:
        """Change fields (all checked again, as on creation); `active` pauses or resumes."""
        user, spawner, cfg = self._begin_definitions(user_name, write=True)
        api = DefinitionsAPI()
        change = self._body()
        ns, name = spawner.namespace, D.definition_name(def_id)
        for attempt in range(3):
            # The CronJob controller updates the object as runs start and end: a replace made
            # from a read it has changed since is a Conflict; read it again and redo the change.
            current = await self._find_definition(api, spawner, user_name, def_id)
            try:
                body = D.merged(D.read_definition(current), change)
            except D.InvalidDefinition as e:
                raise web.HTTPError(400, f"Invalid job definition: {e}.") from None
            d = self._check(body, cfg)
            cron, template = await self._build(user, spawner, cfg, def_id, d)
            cron["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                old = await api.get_claim_template(ns, name)
                replaced = await api.replace_cronjob(cron)
                break
            except Conflict:
                if attempt == 2:
                    raise web.HTTPError(
                        409, "The job definition kept changing meanwhile (runs starting); try again."
                    ) from None
            except KubeError as e:
                raise web.HTTPError(502, f"The cluster refused the change: {e.message}") from None
        try:
            old_hash, new_hash = _request_hash(old), _request_hash(template)
            if replaced is None:
                raise web.HTTPError(404, "No such job definition.")
            if old_hash != new_hash:  # another size: a template is immutable, make it anew
                if old is not None:
                    await api.delete_claim_template(ns, name)
                if template is not None:
                    template["metadata"]["ownerReferences"] = [D.owner_reference(replaced)]
                    await api.create_claim_template(template)
        except KubeError as e:
            raise web.HTTPError(502, f"The cluster refused the change: {e.message}") from None
        self.log.info("Job definition %s of %s changed (active: %s)", def_id, user_name, d.active)
        self._json(D.describe(replaced))

    async def delete(self, user_name: str, def_id: str) -> None:
        _, spawner, _ = self._begin_definitions(user_name, write=True)
        api = DefinitionsAPI()
        await self._find_definition(api, spawner, user_name, def_id)
        ns, name = spawner.namespace, D.definition_name(def_id)
        deleted = await api.delete_cronjob(ns, name)
        # Its runs go with it (owned); deleted here too, so that none is left running meanwhile.
        for j in await api.list_jobs(ns, f"{D.DEFINITION_LABEL}={def_id}"):
            if J.owned_by_user(j, user_name):
                await api.delete_job(ns, j["metadata"]["name"])
        await api.delete_claim_template(ns, name)
        self.log.info("Job definition %s of %s deleted", def_id, user_name)
        self._json({"id": def_id, "deleted": deleted})


class DefinitionRunHandler(DefinitionsBase):
    async def post(self, user_name: str, def_id: str) -> None:
        """Run the definition now (its parameters, or some overridden), whatever its schedule."""
        user, spawner, cfg = self._begin_definitions(user_name, write=True)
        api = DefinitionsAPI()
        current = await self._find_definition(api, spawner, user_name, def_id)
        body = self._body()
        if not isinstance(body, dict) or set(body) - {"parameters"}:
            raise web.HTTPError(400, "Invalid run: only {'parameters': {...}} may be given.")
        stored = D.read_definition(current)
        overrides = body.get("parameters") or {}
        if not isinstance(overrides, dict):
            raise web.HTTPError(400, "Invalid run: parameters must be an object of name: value.")
        d = self._check(
            D.merged(stored, {"parameters": {**(stored.get("parameters") or {}), **overrides}}), cfg
        )
        await self._check_active(api, spawner, user_name, cfg)
        cron, template = await self._build(user, spawner, cfg, def_id, d)
        cron["metadata"]["uid"] = current["metadata"]["uid"]
        job = D.build_run(cron, "m" + uuid.uuid4().hex[:8])
        try:
            # The run's pods use the definition's claim template, made when it was saved: a
            # size whose GPU request changed since would run with a template that does not
            # match (or is not there).
            saved = await api.get_claim_template(spawner.namespace, D.definition_name(def_id))
            if _request_hash(saved) != _request_hash(template):
                raise web.HTTPError(
                    409,
                    f"The size '{d.job.size}' has changed since this definition was saved: "
                    "save the definition again (edit it), then run it.",
                )
            created = await api.create_job(job)
        except KubeError as e:
            raise web.HTTPError(502, f"The cluster refused the job: {e.message}") from None
        self.log.info("Job definition %s of %s run now: %s", def_id, user_name, created["metadata"]["name"])
        self._json(describe(created, []), status=201)


# Routes under the hub prefix (/hub/).
default_handlers: list[tuple[str, Any]] = [
    (r"/api/gpusessions/users/([^/]+)/jobdefinitions", DefinitionsHandler),
    (r"/api/gpusessions/users/([^/]+)/jobdefinitions/([^/]+)", DefinitionHandler),
    (r"/api/gpusessions/users/([^/]+)/jobdefinitions/([^/]+)/jobs", DefinitionRunHandler),
]
