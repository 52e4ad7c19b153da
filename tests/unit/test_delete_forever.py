"""Deleting a user (or a named server) releases its GPU even when KubeSpawner's own part fails."""

from __future__ import annotations

import asyncio

import pytest
from kubespawner import KubeSpawner

from gpusessions.hub.spawner import GPUSessionSpawner


def test_delete_forever_releases_the_gpu_even_if_the_pvc_delete_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def forbidden(self: KubeSpawner) -> None:
        raise RuntimeError('persistentvolumeclaims "claim-bob" is forbidden')

    monkeypatch.setattr(KubeSpawner, "delete_forever", forbidden)
    spawner = GPUSessionSpawner.__new__(GPUSessionSpawner)
    released: list[bool] = []

    async def release_gpu() -> bool:
        released.append(True)
        return True

    spawner.release_gpu = release_gpu  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="forbidden"):
        asyncio.run(spawner.delete_forever())
    assert released == [True]
