"""Sample notebook-job settings and requests shared by the jobs tests (unit and browser)."""

from __future__ import annotations

from gpusessions.core import jobs as J
from gpusessions.core.claims import GPURequest

MIG = GPURequest("mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile == '3g.40gb'",))


SETTINGS = J.JobSettings(
    image="quay.io/jupyter/scipy-notebook:2025-01-01",
    volumes=({"name": "home", "persistentVolumeClaim": {"claimName": "claim-alice"}},),
    volume_mounts=({"name": "home", "mountPath": "/home/jovyan"},),
    env={"TEAM": "a"},
    resources={"requests": {"cpu": "1", "memory": "2Gi"}},
    scheduler_name="kai-scheduler",
    priority_class="train",
    queue_labels={"kai.scheduler/queue": "team-a"},
    requeue_limit=2,
)


def _req(**kw: object) -> J.JobRequest:
    body = {"name": "train", "input": "work/train.ipynb", "size": "mig-3g-40gb", **kw}
    return J.check_request(body)
