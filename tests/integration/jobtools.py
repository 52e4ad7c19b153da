"""Notebook jobs through a real JupyterHub: the hub with team queues, calls and the objects of a job."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from localcluster.hubproc import Hub, start_hub
from localcluster.kubeapi import KubeAPI

from .cullertools import culler_hub
from .hubtools import GPU_HUB_CONFIG
from .kaitools import make_queues, queue


def teams(namespace: str) -> tuple[str, str]:
    s = namespace.rsplit("-", 1)[-1]
    return f"jdept-{s}", f"jteam-{s}"


def jobs_hub(api: KubeAPI, namespace: str, workdir: Path, culler: bool) -> Iterator[Hub]:
    dept, team = teams(namespace)
    extra = f"""
c.GPUSessionSpawner.kai_queue = {{"physics": {team!r}}}
c.JupyterHub.load_groups = {{"physics": {{"users": ["ann", "bo"]}}}}
c.NotebookJobs.requeue_limit = 2
"""
    for _ in make_queues(api, [queue(dept, -1, -1), queue(team, -1, -1, parent=dept)]):
        if culler:  # the culler lists jobs too
            h = culler_hub(namespace, workdir, args=("--jobs",), config=extra)
        else:
            h = start_hub(GPU_HUB_CONFIG.format(namespace=namespace) + extra, workdir)
        yield h
        h.stop()


def call(hub: Hub, token: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    """A gpusessions hub endpoint as the user of `token`."""
    return hub.api(method, "/gpusessions" + path, body, token=token)


NOTEBOOK = {
    "cells": [
        {
            "cell_type": "code",
            "metadata": {"tags": ["parameters"]},
            "source": "epochs = 1\nmessage = 'default'",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "metadata": {},
            "source": (
                "import os, time\ntime.sleep(6)\n"
                "job = os.environ.get('GPUSESSIONS_JOB_ID')\n"
                "open('done.txt', 'w').write(f'{message} {epochs} {job}')\n"
                "print('trained', epochs)"
            ),
            "outputs": [],
            "execution_count": None,
        },
    ],
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    "nbformat": 4,
    "nbformat_minor": 5,
}


def job_objects(api: KubeAPI, namespace: str) -> dict[str, list[str]]:
    sel = "gpusessions.io/component=job"
    return {
        "jobs": [j["metadata"]["name"] for j in api.list("Job", namespace, label_selector=sel)["items"]],
        "templates": [
            t["metadata"]["name"]
            for t in api.list("ResourceClaimTemplate", namespace, label_selector=sel)["items"]
        ],
        "pods": [p["metadata"]["name"] for p in api.list("Pod", namespace, label_selector=sel)["items"]],
        "claims": [
            c["metadata"]["name"] for c in api.list("ResourceClaim", namespace, label_selector=sel)["items"]
        ],
    }


NOTHING: dict[str, list[str]] = {"jobs": [], "templates": [], "pods": [], "claims": []}
