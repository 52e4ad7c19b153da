"""Session rows are answered after the kernel manager's restore (`adopt`) has run.

Both kernel managers that restore a parked session (`kernels.PersistentGatewayKernelManager`,
kernels in the holder; `localkernels.ParkingKernelManager`, kernels in the notebook server) have
an `adopt()` that runs the restore once and a `restore` whose `remapped` maps parked kernel ids to
restored ones. A session row read before the restore moved it to its new kernel is read again,
so an open notebook's session points at its restored kernel and is not culled as a dead one.
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
