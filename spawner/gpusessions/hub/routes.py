"""Every gpusessions route under the hub prefix (/hub/): each endpoint module's
`default_handlers`, in one list, as JupyterHub's `apihandlers` gathers its modules'.

Order matters where two patterns match one path (jobs' `sizes` before `{id}`: each module keeps
its own in order); the modules' lists are joined in the order the hub has always had them.
"""

from __future__ import annotations

from typing import Any

from gpusessions.hub import availabilityapi, cull, gpustate, jobdefs, jobs, keep, noticepage, release

default_handlers: list[tuple[str, Any]] = [
    *gpustate.default_handlers,  # the notebook's GPU panel (the server's own token)
    *noticepage.default_handlers,  # notices for a tab whose server is gone (a page: login cookie)
    *availabilityapi.default_handlers,  # the picker's figures as JSON
    *keep.default_handlers,  # the culler's warnings, "Keep my GPU"
    *release.default_handlers,  # "Release my GPU"
    *cull.default_handlers,  # the culler's stops, answered with the keeps
    *jobdefs.default_handlers,  # notebook job definitions (schedules)
    *jobs.default_handlers,  # notebook jobs
]
