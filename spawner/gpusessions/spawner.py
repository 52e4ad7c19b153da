"""The gpusessions spawner.

`GPUSessionSpawner` is registered as the JupyterHub spawner `gpusessions`.
A server without a GPU profile spawns exactly as with KubeSpawner; the
long-lived ResourceClaim and holder pod for GPU profiles build on this class.
"""

from __future__ import annotations

from kubespawner import KubeSpawner


class GPUSessionSpawner(KubeSpawner):
    """KubeSpawner whose GPU profiles keep their GPU across notebook restarts."""
