"""Deleting a user (or a named server) releases its GPU and deletes its parks even when
KubeSpawner's own part fails."""

from __future__ import annotations

import asyncio

import pytest
from kubespawner import KubeSpawner

from gpusessions.hub import parkcleanup
from gpusessions.hub.spawner import GPUSessionSpawner


def test_delete_forever_releases_the_gpu_and_deletes_the_parks_even_if_the_pvc_delete_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    done: list[str] = []

    async def forbidden(self: KubeSpawner) -> None:
        done.append("pvc")
        raise RuntimeError('persistentvolumeclaims "claim-bob" is forbidden')

    async def delete_parks(spawner: GPUSessionSpawner) -> bool:
        done.append("parks")
        return True

    monkeypatch.setattr(KubeSpawner, "delete_forever", forbidden)
    monkeypatch.setattr(parkcleanup, "delete_parks", delete_parks)
    spawner = GPUSessionSpawner.__new__(GPUSessionSpawner)

    async def release_gpu(park: bool = True) -> bool:
        done.append(f"gpu park={park}")
        return True

    spawner.release_gpu = release_gpu  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="forbidden"):
        asyncio.run(spawner.delete_forever())
    # The holder goes at once (a deleted server's kernels are not parked), before its parks
    # are deleted: no park is written after the cleanup; the PVC (the home) last.
    assert done == ["gpu park=False", "parks", "pvc"]
