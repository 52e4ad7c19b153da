"""gpusessions: persistent GPU sessions for JupyterHub on Kubernetes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpusessions.hub.spawner import GPUSessionSpawner

__all__ = ["GPUSessionSpawner"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Imported on first use, so the holder's agent (gpusessions.agent) runs with tornado and
    # NVML only, without JupyterHub and KubeSpawner in its image.
    if name == "GPUSessionSpawner":
        from gpusessions.hub.spawner import GPUSessionSpawner

        return GPUSessionSpawner
    raise AttributeError(f"module 'gpusessions' has no attribute {name!r}")
