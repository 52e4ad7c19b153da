"""gpusessions: persistent GPU sessions for JupyterHub on Kubernetes."""

from .spawner import GPUSessionSpawner

__all__ = ["GPUSessionSpawner"]
__version__ = "0.1.0"
