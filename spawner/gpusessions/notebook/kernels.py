"""Kernels hosted in the GPU holder's kernel gateway that outlive the notebook server.

jupyter_server's gateway client (a) shuts every kernel down when the server stops and
(b) lists only the kernels this server process started. Here, with
`GPUSESSIONS_PERSIST_KERNELS=1` (set by GPUSessionSpawner with the gateway URL):

- stopping the notebook server leaves the kernels running in the holder;
- a new notebook server adopts the gateway's kernels (they are this user's: the gateway
  is the session's own, behind its token) before it answers any session request, and
  keeps its sessions (notebook path -> kernel) in a SQLite file in the home directory,
  so open notebooks re-attach to their kernels with their state;
- kernels that vanish without the user shutting them down (the holder restarted, the
  GPU was released) are recorded as lost, for the notice in JupyterLab;
- the gateway may still be starting when this server starts (the spawner makes the notebook
  pod while the holder's gateway starts): the first request to it waits until it accepts
  connections, at most `GPUSESSIONS_GATEWAY_WAIT` seconds (`GatewayWait`);
- a session parked when its holder went (`parkhost`) is restored into new kernels during the
  adoption, before the first request is answered (`restore.Restore`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jupyter_server.gateway.gateway_client import gateway_request
from jupyter_server.gateway.managers import (
    GatewayKernelSpecManager,
    GatewayMappingKernelManager,
    GatewaySessionManager,
)
from tornado import web
from tornado.escape import json_decode

from gpusessions.notebook import localkernels
from gpusessions.notebook.parkrecord import state_dir as _state_dir
from gpusessions.notebook.restore import Restore
from gpusessions.notebook.sessionrestore import RestoreFirst

ENABLE_ENV = "GPUSESSIONS_PERSIST_KERNELS"
WAIT_ENV = "GPUSESSIONS_GATEWAY_WAIT"
GATEWAY_WAIT = 120.0  # seconds the first gateway request waits for a kernel host still starting
# Shown in a JupyterLab notification (cut at 140 characters): short.
LOST_REASON = "the kernel host beside your GPU restarted; variables and GPU memory are gone"


def enabled(env: dict[str, str] | None = None) -> bool:
    env = dict(os.environ) if env is None else env
    return env.get(ENABLE_ENV) == "1" and bool(env.get("JUPYTER_GATEWAY_URL"))


def state_dir(env: dict[str, str] | None = None) -> Path:
    """Per server, in the home directory (a volume that outlives the notebook pod)."""
    return _state_dir(env)


class GatewayWait:
    """The kernel host may still be starting when this server starts: the first request to
    the gateway waits until it accepts connections (at most `timeout` seconds, once per
    process), saying so in the log; later requests go straight through (jupyter_server's
    own errors then say what is wrong)."""

    def __init__(self, url: str, timeout: float, log: logging.Logger | None = None, interval: float = 0.25):
        parts = urlsplit(url)
        self.url = url
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.timeout = timeout
        self.interval = interval
        self.log = log or logging.getLogger("ServerApp")
        self.done = False
        self._lock = asyncio.Lock()

    async def _answers(self) -> bool:
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 2.0)
        except (OSError, TimeoutError):
            return False
        writer.close()
        return True

    async def __call__(self) -> bool:
        """True once the gateway accepts connections; False when it did not in time."""
        if self.done:
            return True
        async with self._lock:
            if self.done:
                return True
            started = time.monotonic()
            said = False
            while not await self._answers():
                waited = time.monotonic() - started
                if waited >= self.timeout:
                    self.log.warning(
                        "gpusessions: the kernel host beside your GPU (%s) did not answer within %.0f s: "
                        "kernels cannot start until it does (is the GPU's holder pod running?)",
                        self.url,
                        self.timeout,
                    )
                    self.done = True
                    return False
                if not said:
                    self.log.info(
                        "gpusessions: the kernel host beside your GPU (%s) is still starting; "
                        "waiting for it (at most %.0f s)",
                        self.url,
                        self.timeout,
                    )
                    said = True
                await asyncio.sleep(self.interval)
            if said:
                self.log.info(
                    "gpusessions: the kernel host answers (after %.1f s)", time.monotonic() - started
                )
            self.done = True
            return True


_gateway_wait: GatewayWait | None = None


async def gateway_started() -> None:
    """Wait (once, bounded) for the gateway of `JUPYTER_GATEWAY_URL` to accept connections."""
    global _gateway_wait
    url = os.environ.get("JUPYTER_GATEWAY_URL")
    if not url:
        return
    if _gateway_wait is None or _gateway_wait.url != url:
        try:
            timeout = float(os.environ.get(WAIT_ENV, GATEWAY_WAIT))
        except ValueError:
            timeout = GATEWAY_WAIT
        _gateway_wait = GatewayWait(url, timeout)
    await _gateway_wait()


class PersistentGatewayKernelSpecManager(GatewayKernelSpecManager):
    """The gateway's kernel specs, asked for once the gateway has started (`gateway_started`)."""

    async def list_kernel_specs(self) -> Any:
        await gateway_started()
        return await super().list_kernel_specs()

    async def get_kernel_spec(self, kernel_name: str, **kwargs: Any) -> Any:  # type: ignore[override]
        await gateway_started()
        return await super().get_kernel_spec(kernel_name, **kwargs)

    async def get_kernel_spec_resource(self, kernel_name: str, path: str) -> Any:
        await gateway_started()
        return await super().get_kernel_spec_resource(kernel_name, path)


class PersistentGatewayKernelManager(GatewayMappingKernelManager):
    """Gateway kernels that survive this server: adopted at start, never shut down at stop."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._adopted = False
        self._adopt_lock = asyncio.Lock()
        self.lost: list[dict[str, Any]] = []
        self._known_file = state_dir() / "kernels.json"
        self._known: dict[str, dict[str, Any]] = self._load_known()
        self.restore = Restore(log=self.log)

    # -- what this server knew ------------------------------------------------------
    def _load_known(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self._known_file.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_known(self) -> None:
        try:
            self._known_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = self._known_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(self._known))
            tmp.replace(self._known_file)
        except OSError as e:
            self.log.warning("gpusessions: could not record the kernels: %s", e)

    def _forget_lost(self, present: set[str]) -> None:
        gone = [k for k in self._known if k not in present]
        if not gone:
            return
        names = sorted({str(self._known[k].get("name", "kernel")) for k in gone})
        self.lost.append({"count": len(gone), "kernels": gone, "names": names, "at": time.time()})
        self.log.warning("gpusessions: %d kernel(s) lost: %s", len(gone), LOST_REASON)
        for k in gone:
            self._known.pop(k, None)
        self._save_known()

    # -- adoption -------------------------------------------------------------------
    async def _gateway_models(self) -> list[dict[str, Any]]:
        response = await gateway_request(self.kernels_url, method="GET")
        models = json_decode(response.body)
        return models if isinstance(models, list) else []

    async def adopt(self) -> None:
        """Take over every kernel of the gateway (once, before sessions are answered)."""
        async with self._adopt_lock:
            if self._adopted:
                return
            await gateway_started()
            try:
                models = await self._gateway_models()
            except (web.HTTPError, OSError) as e:
                self.log.warning("gpusessions: the kernel gateway did not answer: %s", e)
                return  # try again on the next request
            for m in models:
                await self._adopt_one(m)
            present = {m["id"] for m in models}
            try:
                await self.restore.run(present, self._start_restored, self._end_restored)
            except Exception as e:  # a restore never keeps the server from its kernels
                self.log.error("gpusessions: the restore of the parked session failed: %s", e)
            for old in self.restore.remapped:  # parked and restored: not lost
                self._known.pop(old, None)
            self._forget_lost(present | set(self.restore.remapped.values()))
            self._adopted = True
            if models:
                self.log.info("gpusessions: re-attached %d kernel(s) kept beside the GPU", len(models))

    async def _adopt_one(self, model: dict[str, Any]) -> None:
        kid = model["id"]
        if kid in self._kernels:
            return
        km = self.kernel_manager_factory(parent=self, log=self.log)
        await km.start_kernel(kernel_id=kid)
        self._kernels[kid] = km
        self._known.setdefault(kid, {"name": model.get("name", ""), "since": time.time()})
        self._save_known()

    async def _start_restored(self, kernel_name: str) -> str:
        """A new kernel for a parked one (the gateway's own start, without the adoption)."""
        kid = str(await super().start_kernel(kernel_name=kernel_name))
        self._known[kid] = {"name": kernel_name, "since": time.time(), "restored": True}
        self._save_known()
        return kid

    async def _end_restored(self, kernel_id: str) -> None:
        await super().shutdown_kernel(kernel_id, now=True)
        self._known.pop(kernel_id, None)
        self._save_known()

    # -- the MappingKernelManager API ------------------------------------------------
    async def start_kernel(self, **kwargs: Any) -> str:  # type: ignore[override]
        await self.adopt()
        kid = await super().start_kernel(**kwargs)
        self._known[kid] = {"name": kwargs.get("kernel_name", ""), "since": time.time()}
        self._save_known()
        return str(kid)

    async def list_kernels(self, **kwargs: Any) -> list[dict[str, Any]]:
        await self.adopt()
        models = await super().list_kernels(**kwargs)
        self._forget_lost({m["id"] for m in models} | set(self._kernels))
        return list(models)

    async def shutdown_kernel(  # type: ignore[override]
        self, kernel_id: str, now: bool = False, restart: bool = False
    ) -> None:
        await super().shutdown_kernel(kernel_id, now=now, restart=restart)
        if not restart:
            self._known.pop(kernel_id, None)
            self._save_known()

    async def shutdown_all(self, now: bool = False) -> None:  # type: ignore[override]
        """The server stops: the kernels stay in the GPU holder for the next server."""
        self.log.info(
            "gpusessions: leaving %d kernel(s) running beside the GPU for the next start", len(self._kernels)
        )


class PersistentGatewaySessionManager(RestoreFirst, GatewaySessionManager):
    """Sessions answered after the adoption and the restore (`sessionrestore.RestoreFirst`)."""


def link(serverapp: Any) -> None:
    """Point the server at the persistent managers and a session file in the home directory
    (kernels in the notebook server itself, parked when it stops: `localkernels.link`)."""
    if not enabled():
        localkernels.link(serverapp)
        return
    d = state_dir()
    d.mkdir(parents=True, exist_ok=True)
    serverapp.kernel_manager_class = PersistentGatewayKernelManager
    serverapp.session_manager_class = PersistentGatewaySessionManager
    serverapp.kernel_spec_manager_class = PersistentGatewayKernelSpecManager
    serverapp.config.SessionManager.database_filepath = str(d / "sessions.db")
    serverapp.log.info("gpusessions: kernels live in the GPU holder at %s", os.environ["JUPYTER_GATEWAY_URL"])
