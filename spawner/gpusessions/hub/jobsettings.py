"""The settings of notebook jobs and their schedules: `c.NotebookJobs` and
`c.NotebookJobDefinitions` (the endpoints are `jobs.py` and `jobdefs.py`; the spawner reads
them when a user is deleted)."""

from __future__ import annotations

from traitlets import Bool, Dict, Int, Unicode
from traitlets.config import Configurable

from gpusessions.core import jobs as J


class NotebookJobs(Configurable):
    """Settings of notebook jobs (`c.NotebookJobs`)."""

    enabled = Bool(True, help="Offer notebook jobs (the endpoints answer 404 when off).").tag(config=True)
    priority_class = Unicode(
        J.PRIORITY_CLASS,
        help="KAI priority class of a job's pods (default `train`: preemptible, may run over the "
        "queue's quota, reclaimed when the owning team needs its GPUs). A size's profile may set "
        "its own with `kubespawner_override: {job_priority_class: ...}`.",
    ).tag(config=True)
    queue_priority_class = Dict(
        value_trait=Unicode(),
        help="Priority class per team queue ({queue: class}), over `priority_class`, under a size's own.",
    ).tag(config=True)
    requeue_limit = Int(
        3,
        min=0,
        help="How many times a job may be preempted (evicted by the scheduler) and requeued before "
        "it is stopped as failed (the Job's backoffLimit; any other failure fails it at once).",
    ).tag(config=True)
    max_active_jobs = Int(5, min=1, help="Unfinished (queued or running) jobs one user may have.").tag(
        config=True
    )
    max_workers = Int(
        4, min=1, max=J.MAX_WORKERS, help="Workers one job may ask for (started all or none)."
    ).tag(config=True)
    max_parameters = Int(J.MAX_PARAMETERS, min=0, max=J.MAX_PARAMETERS, help="Parameters per job.").tag(
        config=True
    )
    allow_cpu = Bool(True, help="Offer 'CPU only' jobs even without a CPU profile.").tag(config=True)
    image = Unicode(
        "",
        help="The jobs' image; empty: the user's notebook image (the size's profile's, else the spawner's).",
    ).tag(config=True)
    papermill = Unicode("papermill", help="The papermill command in the image.").tag(config=True)
    ttl_seconds_after_finished = Int(
        None,
        allow_none=True,
        help="Delete finished jobs (and their log) this long after they end; None: keep them "
        "until the user deletes them.",
    ).tag(config=True)
    active_deadline_seconds = Int(
        None, allow_none=True, help="Stop a job that runs longer than this; None: no limit."
    ).tag(config=True)
    log_tail_lines = Int(500, min=1, help="Lines of a job's log the log endpoint returns.").tag(config=True)
    log_max_bytes = Int(
        256 * 1024,
        min=1024,
        help="Bytes of a job's log the log endpoint reads at most (default 256 KiB): the end of the "
        "log, in whole lines where it can; the answer says when the log was cut.",
    ).tag(config=True)


class NotebookJobDefinitions(Configurable):
    """Settings of job definitions (schedules) (`c.NotebookJobDefinitions`)."""

    enabled = Bool(True, help="Offer schedules (job definitions); needs `c.NotebookJobs.enabled` too.").tag(
        config=True
    )
    min_interval_minutes = Int(
        15,
        min=1,
        help="The shortest time between two runs of a schedule, in minutes (a schedule running "
        "more often is refused). Each run waits in the team's queue like any job.",
    ).tag(config=True)
    max_definitions = Int(5, min=1, help="Job definitions one user may have.").tag(config=True)
    history_limit = Int(
        3,
        min=0,
        help="Finished runs of a definition kept (each of succeeded and failed; the CronJob's "
        "history limits); older runs are deleted, their output notebooks stay in the home.",
    ).tag(config=True)
