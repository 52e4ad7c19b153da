"""Session rows are answered after the kernel manager's restore (`adopt`) has run.

Both kernel managers that restore a parked session (`kernels.PersistentGatewayKernelManager`,
kernels in the holder; `localkernels.ParkingKernelManager`, kernels in the notebook server) have
an `adopt()` that runs the restore once and a `restore` whose `remapped` maps parked kernel ids to
restored ones. A session row read before the restore moved it to its new kernel is read again,
so an open notebook's session points at its restored kernel and is not culled as a dead one;
sessions are looked up (a path, the list) only after the restore, which may have given a
notebook its session row again.
"""

from __future__ import annotations

from typing import Any


class RestoreFirst:
    """Mixed into a jupyter_server SessionManager (before it in the bases)."""

    kernel_manager: Any
    cursor: Any

    async def _restored_first(self) -> Any:
        km = self.kernel_manager
        adopt = getattr(km, "adopt", None)
        if adopt is not None:
            await adopt()
        return km

    # Read after the restore, which may give a notebook whose session a cut-off start lost its
    # row again (parkrecord.remap): read before it, that notebook would get a second, empty kernel.
    async def session_exists(self, path: Any) -> bool:
        await self._restored_first()
        return bool(await super().session_exists(path))  # type: ignore[misc]

    async def get_session(self, **kwargs: Any) -> Any:
        await self._restored_first()
        return await super().get_session(**kwargs)  # type: ignore[misc]

    async def list_sessions(self) -> Any:
        await self._restored_first()
        return await super().list_sessions()  # type: ignore[misc]

    async def row_to_model(self, row: Any, tolerate_culled: bool = False) -> Any:
        km = await self._restored_first()
        restore = getattr(km, "restore", None)
        if restore is not None and row["kernel_id"] in restore.remapped:
            again = self.cursor.execute(
                "SELECT * FROM session WHERE session_id=?", (row["session_id"],)
            ).fetchone()
            row = again if again is not None else row
        return await super().row_to_model(row, tolerate_culled=tolerate_culled)  # type: ignore[misc]

    async def kernel_culled(self, kernel_id: str) -> bool:
        await self._restored_first()
        return bool(await super().kernel_culled(kernel_id))  # type: ignore[misc]
