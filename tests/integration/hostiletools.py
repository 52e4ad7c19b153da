"""The hub of the hostile-input probe (test_hostile_inputs.py): the GPU hub with the culler
(warns after 5 s idle, culls after 120 s), one GPU session per user, two unfinished jobs per
user; and the requests the probe sends."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.parse
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


def declared_only(url: str, method: str, length: int, headers: dict[str, str]) -> bytes:
    """Send a request's headers declaring a `length`-byte body and none of the body: what comes
    back (a server that buffered the body first would wait, and this would time out)."""
    u = urllib.parse.urlsplit(url)
    head = f"{method} {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Length: {length}\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    with socket.create_connection((u.hostname, u.port or 80), timeout=15) as s:
        s.sendall(head.encode())
        got = b""
        while b"\r\n\r\n" not in got or len(got) < got.find(b"\r\n\r\n") + 4 + _length(got):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    return got


def _length(response: bytes) -> int:
    for line in response.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip() or 0)
    return 0


def message(body: Any) -> str:
    return str(body.get("message", "")) if isinstance(body, dict) else str(body)


def objects(api: KubeAPI, namespace: str) -> dict[str, list[tuple[str, str]]]:
    """What a request could have created or changed in the namespace: claims (with their
    annotations), Jobs, CronJobs, claim templates, ConfigMaps, Pods, Secrets, NetworkPolicies."""
    out: dict[str, list[tuple[str, str]]] = {}
    kinds = (
        "ResourceClaim",
        "Job",
        "CronJob",
        "ResourceClaimTemplate",
        "ConfigMap",
        "Pod",
        "Secret",
        "NetworkPolicy",
    )
    for kind in kinds:
        items = api.list(kind, namespace)["items"]
        out[kind] = sorted(
            (i["metadata"]["name"], json.dumps(i["metadata"].get("annotations") or {}, sort_keys=True))
            for i in items
        )
    return out
