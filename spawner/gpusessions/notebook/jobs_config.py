"""Makes jupyter-scheduler use the GPU jobs backend (notebook/jobs.py) under JupyterHub.

Linked before jupyter-scheduler (server extensions link in name order, and jupyter-scheduler
reads its settings from the server's config when it links), this sets
`SchedulerApp.scheduler_class`, `environment_manager_class` and `job_files_manager_class`
unless they are configured already. Outside JupyterHub (no hub URL and token)
jupyter-scheduler keeps its own local backend. (A `SchedulerApp` key in
`jupyter_server_config.d/*.json` is not read: that folder only enables extensions.)
"""

from __future__ import annotations

from typing import Any

from gpusessions.notebook.hubrelay import HubRelay

SCHEDULER = "gpusessions.notebook.jobs.GPUJobsScheduler"
ENVIRONMENTS = "gpusessions.notebook.jobs.GPUSizesEnvironmentManager"
FILES = "gpusessions.notebook.jobs.GPUJobFilesManager"


def use_gpu_jobs(serverapp: Any, relay: HubRelay | None = None) -> bool:
    """Point jupyter-scheduler at the GPU jobs backend; False when not under JupyterHub."""
    if not (relay or HubRelay()).enabled:
        return False
    cfg = serverapp.config.SchedulerApp
    if "scheduler_class" not in cfg:
        cfg.scheduler_class = SCHEDULER
    if "environment_manager_class" not in cfg:
        cfg.environment_manager_class = ENVIRONMENTS
    if "job_files_manager_class" not in cfg:
        cfg.job_files_manager_class = FILES
    serverapp.log.info("gpusessions: notebook jobs run on the cluster through the hub")
    return True
