"""The hub of the hostile-input probe (test_hostile_inputs.py): the GPU hub with the culler
(warns after 5 s idle, culls after 120 s), one GPU session per user, two unfinished jobs per
user; and the requests the probe sends."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

from .cullertools import SLOW_CULL, culler_hub

LIMITS = """
c.GPUSessionSpawner.max_gpu_sessions_per_user = 1
c.NotebookJobs.max_active_jobs = 2
c.NotebookJobDefinitions.max_definitions = 2
"""


@contextmanager
def hostile_hub(namespace: str, workdir: Path) -> Iterator[Hub]:
    h = culler_hub(namespace, workdir, args=SLOW_CULL, config=LIMITS)
    try:
        yield h
    finally:
        h.stop()


def raw(
    url: str,
    method: str,
    body: bytes | None,
    headers: dict[str, str] | None = None,
    opener: urllib.request.OpenerDirector | None = None,
) -> tuple[int, Any]:
    """One request with a raw body: the status and the JSON answer (or its text)."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with (opener.open if opener else urllib.request.urlopen)(req, timeout=30) as r:
            data = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        data, status = e.read(), e.code
    try:
        return status, json.loads(data) if data else None
    except ValueError:
        return status, data.decode(errors="replace")


def message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body)


def objects(api: KubeAPI, namespace: str) -> dict[str, list[tuple[str, str]]]:
    """What a request could have created or changed in the namespace: claims (with their
    annotations), Jobs, CronJobs, claim templates, ConfigMaps."""
    out: dict[str, list[tuple[str, str]]] = {}
    for kind in ("ResourceClaim", "Job", "CronJob", "ResourceClaimTemplate", "ConfigMap"):
        items = api.list(kind, namespace)["items"]
        out[kind] = sorted(
            (i["metadata"]["name"], json.dumps(i["metadata"].get("annotations") or {}, sort_keys=True))
            for i in items
        )
    return out
