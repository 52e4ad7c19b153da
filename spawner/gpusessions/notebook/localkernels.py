"""Kernels that run in the notebook server itself, parked when it stops and restored at its next start.

Where a GPU session's kernels are not kept in the holder (`persist_kernels` off, or a holder
without a kernel host), the GPU goes with the notebook pod's kernels: the culler stopping the
server, the user's Stop, KAI evicting the pod. With `GPUSESSIONS_PARK_KERNELS=1` and no gateway
(set by GPUSessionSpawner from `park_kernels`):

- when the server stops (SIGTERM: jupyter_server's cleanup shuts its kernels down,
  `shutdown_all`), each kernel is parked first (`parking.park_kernels`, the same record as the
  holder's), through its own kernel client, within `GPUSESSIONS_PARK_TIMEOUT` seconds (the pod's
  grace period is that plus a margin, and the spawner deletes the pod with it);
- the sessions (notebook path -> kernel) are kept in a SQLite file in the home directory, as
  with kernels in the holder;
- the next server restores the park into new kernels before it answers its first kernel or
  session request (`restore.Restore`, as `kernels.PersistentGatewayKernelManager.adopt` does),
  and points each open notebook's session at its restored kernel, so JupyterLab re-attaches it.

Why inside the server and not a supervisor process as in the holder (`parkhost`): the server
has its kernels' clients, sessions and shutdown in its own process, so it needs no token for
its own API (the hub's token check would put the hub in the path of a stop the hub may be making),
the pod's command stays KubeSpawner's own `jupyterhub-singleuser` (which deployments customize),
and the park runs exactly when the kernels would otherwise be shut down, however the server stops.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from jupyter_server.services.kernels.kernelmanager import AsyncMappingKernelManager
from jupyter_server.services.sessions.sessionmanager import SessionManager
from jupyter_server.utils import ensure_async

from gpusessions.notebook import parking
from gpusessions.notebook.kernelexec import run_local_for_report
from gpusessions.notebook.parkrecord import state_dir
from gpusessions.notebook.restore import Restore
from gpusessions.notebook.sessionrestore import RestoreFirst

Obj = dict[str, Any]
PARKS_ENV = "GPUSESSIONS_PARK_KERNELS"  # core.kernels.PARKS_ENV (core is not imported here)


def enabled(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ) if env is None else env
    return env.get(PARKS_ENV) == "1" and not env.get("JUPYTER_GATEWAY_URL")


class ParkingKernelManager(AsyncMappingKernelManager):
    """The server's own kernels, parked before they are shut down at the server's stop, and
    a parked session restored before the first kernel request."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._adopted = False
        self._adopt_lock = asyncio.Lock()
        self.restore = Restore(log=self.log)
        self.parked: Obj | None = None

    async def _run(self, kernel_id: str, source: str, mime: str, timeout: float) -> Obj:
        return await run_local_for_report(self.get_kernel(kernel_id).client(), source, mime, timeout)

    async def _interrupt(self, kernel_id: str) -> None:
        await ensure_async(self.get_kernel(kernel_id).interrupt_kernel())

    async def _start_restored(self, kernel_name: str) -> str:
        return str(await super().start_kernel(kernel_name=kernel_name))

    async def _end_restored(self, kernel_id: str) -> None:
        await super().shutdown_kernel(kernel_id, now=True)

    async def adopt(self) -> None:
        """Restore a parked session (once, before kernels and sessions are answered)."""
        async with self._adopt_lock:
            if self._adopted:
                return
            self._adopted = True
            try:
                await self.restore.run(
                    set(self.list_kernel_ids()), self._start_restored, self._end_restored, self._run
                )
            except Exception as e:  # a restore never keeps the server from its kernels
                self.log.error("gpusessions: the restore of the parked session failed: %s", e)

    async def start_kernel(self, **kwargs: Any) -> str:  # type: ignore[override]
        await self.adopt()
        return str(await super().start_kernel(**kwargs))

    async def list_kernels(self) -> list[Obj]:
        await self.adopt()
        return list(super().list_kernels())

    async def park(self) -> Obj | None:
        """Park every kernel of this server (the record, or None: no kernels)."""
        models = [self.kernel_model(kid) for kid in self.list_kernel_ids()]
        self.log.info("gpusessions: the server is stopping: parking %d kernel(s)", len(models))
        self.parked = await parking.park_kernels(
            models, self._run, self._interrupt, dict(os.environ), trigger="notebook-stopping"
        )
        return self.parked

    async def shutdown_all(self, now: bool = False) -> None:  # type: ignore[override]
        """The server stops: its kernels are parked, then shut down."""
        if self.list_kernel_ids() and self.parked is None:
            try:
                await self.park()
            except Exception as e:  # the kernels must still be shut down
                self.log.error("gpusessions: the park failed: %s: %s", type(e).__name__, e)
        await super().shutdown_all(now=now)


class ParkingSessionManager(RestoreFirst, SessionManager):
    """Sessions answered after the restore (`sessionrestore.RestoreFirst`)."""


def link(serverapp: Any) -> None:
    """Point the server at the parking managers and a session file in the home directory."""
    if not enabled():
        return
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    serverapp.kernel_manager_class = ParkingKernelManager
    serverapp.session_manager_class = ParkingSessionManager
    serverapp.config.SessionManager.database_filepath = str(d / "sessions.db")
    serverapp.log.info("gpusessions: this server's kernels are parked when it stops")
