"""A deleted user's notebook jobs and job definitions go with them (the spawner's
`delete_forever` of the default server calls `delete_user_jobs`)."""

from __future__ import annotations

from typing import Any

from gpusessions.core import jobdefs as D
from gpusessions.core import jobs as J
from gpusessions.kube.api import KubeError
from gpusessions.kube.jobdefs import DefinitionsAPI
from gpusessions.kube.jobs import JobsAPI


async def delete_user_definitions(namespace: str, user_name: str, log: Any) -> int:
    """Delete every job definition of a user (the user is being deleted): CronJobs and their
    claim templates; their runs go with them (and with the user's jobs). Returns how many."""
    api = DefinitionsAPI()
    n = 0
    try:
        for cj in await api.list_cronjobs(namespace, D.selector(user_name)):
            if D.owned_definition(cj, user_name):
                n += await api.delete_cronjob(namespace, cj["metadata"]["name"])
                await api.delete_claim_template(namespace, cj["metadata"]["name"])
    except KubeError as e:  # the user still goes; say what is left
        log.warning("The job definitions of %s could not all be deleted: %s", user_name, e)
    if n:
        log.info("Deleted %d job definition(s) of %s with the user", n, user_name)
    return n


async def delete_user_jobs(namespace: str, user_name: str, log: Any, definitions: bool = True) -> int:
    """Delete every notebook job of a user (the user is being deleted): Jobs, and with them
    their pods, claims and claim templates; first their job definitions (`definitions`: where
    schedules are on; with them off the hub may have no rights on CronJobs). Returns how many
    Jobs were deleted."""
    if definitions:
        await delete_user_definitions(namespace, user_name, log)  # first: no new runs start
    api = JobsAPI()
    n = 0
    try:
        for j in await api.list_jobs(namespace, J.selector(user_name)):
            if J.owned_by_user(j, user_name):
                n += await api.delete_job(namespace, j["metadata"]["name"])
                if not D.definition_of(j):  # a run's template is its definition's, gone above
                    await api.delete_claim_template(namespace, j["metadata"]["name"])
    except KubeError as e:  # the user still goes; say what is left
        log.warning("The notebook jobs of %s could not all be deleted: %s", user_name, e)
    if n:
        log.info("Deleted %d notebook job(s) of %s with the user", n, user_name)
    return n
