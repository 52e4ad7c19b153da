"""Notebook-side part of gpusessions: the culler's warning inside JupyterLab.

A Jupyter server extension (enabled by `etc/jupyter/jupyter_server_config.d/gpusessions.json`,
installed with the package) serves two endpoints under the notebook server's base URL:

    GET  <base>/gpusessions/warnings   the culler's warnings for this server's GPU
    POST <base>/gpusessions/keep       "Keep my GPU": hold off the culler

Both forward to the hub (`/hub/api/gpusessions/...`) with the server's own
`$JUPYTERHUB_API_TOKEN`, whose scopes GPUSessionSpawner narrows to this one server.
A JupyterLab extension (TypeScript in the repository's labextension/, built into
notebook/labextension by the package build) polls the first and shows a notification with
a "Keep my GPU" button. The same extension shows the GPU in the status
bar and a side panel, from `<base>/gpusessions/gpu/events` (gpustatus.py, docs/jupyterlab.md).
Outside JupyterHub (no hub URL or token) both endpoints answer "not under gpusessions" and
the notice stays quiet.
"""

from __future__ import annotations

from typing import Any

from gpusessions.notebook.handlers import setup_handlers
from gpusessions.notebook.jobs_config import use_gpu_jobs
from gpusessions.notebook.kernels import link

LABEXTENSION = "@gpusessions/notices"


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "gpusessions.notebook"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": LABEXTENSION}]


def _link_jupyter_server_extension(serverapp: Any) -> None:
    link(serverapp)
    use_gpu_jobs(serverapp)


def _load_jupyter_server_extension(serverapp: Any) -> None:
    setup_handlers(serverapp.web_app)
    serverapp.log.info("gpusessions: GPU notices enabled")
