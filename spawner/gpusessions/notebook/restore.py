"""A parked session restored into new kernels at the notebook server's first kernel request.

When the holder was deleted (Release, the culler, KAI's reclaim, a drain) its park supervisor
(`parkhost`) saved each kernel's namespace in the user's home and wrote a record
(`parkrecord`). At the next start the gateway is a new one, without those kernels. Before the
notebook server answers its first kernel or session request (`PersistentGatewayKernelManager.
adopt`), `restore` starts one kernel of the same kernelspec per parked kernel, runs the park
package's `restore_source` in it before anything else, and points the notebook paths that used
the old kernel at the new one in the sessions file, so JupyterLab re-attaches open notebooks
to their restored kernels.

The outcome goes into the record (per kernel: ok, kept, the new id, seconds, the report). A
damaged park's kernel keeps what came back (`kept`), the damage named in what was not kept. A
park restored (in full, or all it could) is moved to `<server>.restored-<time>` (the last one
kept, older ones deleted); a kernel whose restore brought nothing back leaves the park where it
is, and says so (its new kernel is shut down: the notebook gets a fresh one, the saved files
stay). The status is
`status()`, served at `<base>/gpusessions/restore` for the lab panel.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any

from gpusessions.notebook import parkrecord as R
from gpusessions.notebook.kernelexec import KernelRunError, Run, run_for_report

Obj = dict[str, Any]
TIMEOUT_ENV = "GPUSESSIONS_RESTORE_TIMEOUT"
RESTORE_TIMEOUT = 300.0  # seconds all kernels together have to restore
# GPUSessionSpawner.park_expiry_days, in the notebook container (core.kernels.PARK_EXPIRY_ENV;
# core is not imported here: its labels need kubespawner, which a notebook image lacks).
EXPIRY_ENV = "GPUSESSIONS_PARK_EXPIRY_DAYS"
EXPIRY_DAYS = 30.0


def expiry_seconds(env: dict[str, str]) -> float | None:
    """How old a park may be and still be restored (None: no expiry, the setting's 0)."""
    try:
        days = float(env.get(EXPIRY_ENV, EXPIRY_DAYS))
    except ValueError:
        days = EXPIRY_DAYS
    return days * 86400 if days > 0 else None


def _when(at: float, now: float | None = None) -> str:
    """A park's time as the user reads it: the clock today, the date before."""
    t = datetime.datetime.fromtimestamp(at, datetime.UTC)
    today = datetime.datetime.fromtimestamp(time.time() if now is None else now, datetime.UTC).date()
    return t.strftime("%H:%M UTC") if t.date() == today else t.strftime("%Y-%m-%d %H:%M UTC")


def _timeout(env: dict[str, str]) -> float:
    try:
        return float(env.get(TIMEOUT_ENV, RESTORE_TIMEOUT))
    except ValueError:
        return RESTORE_TIMEOUT


def _not_kept(k: Obj) -> list[str]:
    """What of a kernel was not kept: not saved at the park, or not restored, in words."""
    out: list[str] = []
    named: set[str] = set()
    for e in (k.get("report") or {}).get("not_saved") or []:
        if isinstance(e, dict):
            why = e.get("reason") or e.get("type") or "not saved"
            out.append(f"{e.get('name')}: {why}")
            named.add(str(e.get("name")))
    for e in ((k.get("restore") or {}).get("report") or {}).get("not_restored") or []:
        if isinstance(e, dict) and str(e.get("name")) not in named:  # not saved: said once
            out.append(f"{e.get('name')}: {e.get('reason') or 'not restored'}")
    return out


def _kept(k: Obj) -> bool:
    """The kernel's restore is done: in full, or what a damaged park still held."""
    restore = k.get("restore") or {}
    return bool(restore.get("ok") or restore.get("kept"))


UNPARKED = ("failed", "timeout", "parking")  # a park that did not finish: its variables are lost


def untold(record: Obj | None) -> list[Obj]:
    """The record's kernels whose park failed and whose user was not told yet."""
    return [
        k
        for k in (record or {}).get("kernels") or []
        if isinstance(k, dict) and k.get("status") in UNPARKED and not k.get("told_at")
    ]


def why_unparked(k: Obj, budget: object = None) -> str:
    """Why a kernel's park did not finish, in words."""
    status = k.get("status")
    if status == "timeout":
        limit = f"{budget:g} s " if isinstance(budget, (int, float)) else ""
        return f"its park did not finish within its {limit}budget"
    if status == "parking":
        return "its park was cut off before it finished"
    return str(k.get("error") or "its park failed")


def summary(record: Obj | None, state: str, now: float | None = None) -> Obj:
    """The restore status the lab panel shows, from a record (`now`: for the date in words)."""
    if not record:
        return {"state": "none"}
    kernels = []
    variables = 0
    lost: list[str] = []
    for k in record.get("kernels") or []:
        if not isinstance(k, dict):
            continue
        restore = k.get("restore") or {}
        restored = list((restore.get("report") or {}).get("restored") or [])
        variables += len(restored)
        not_kept = _not_kept(k)
        lost += not_kept
        unparked = k.get("status") in UNPARKED
        if unparked:
            lost.append(f"{k.get('name') or 'kernel'}: {why_unparked(k, record.get('budget_seconds'))}")
        kernels.append(
            {
                "id": k.get("id"),
                "name": k.get("name"),
                "paths": k.get("paths") or [],
                "parked": k.get("status"),
                "restored": bool(restore.get("ok") or restore.get("kept")),
                "kernel": restore.get("kernel"),
                "variables": restored,
                "not_kept": not_kept,
                "seconds": restore.get("seconds"),
                "error": restore.get("error") or k.get("error"),
                "lost": why_unparked(k, record.get("budget_seconds")) if unparked else None,
            }
        )
    gone = [k for k in kernels if k["lost"]]
    at = float(record.get("parked_at") or 0)
    when = _when(at, now) if at else "?"
    if state == "expired":
        message = (
            f"Your parked session from {when} was older than the hub keeps parked sessions "
            f"({record.get('expiry_days', '?'):g} days) and was deleted; new kernels start empty."
            if isinstance(record.get("expiry_days"), (int, float))
            else f"Your parked session from {when} had expired and was deleted."
        )
    elif state == "restored":
        message = f"Restored your session from {when}: {variables} variable{'s' * (variables != 1)}"
        if lost:
            message += f", {len(lost)} not kept ({'; '.join(lost[:3])}{'; ...' if len(lost) > 3 else ''})"
    elif state == "restoring":
        message = f"Restoring your session from {when} ..."
    elif state == "pending":
        message = f"Your session from {when} is parked; it is restored at the first kernel request."
    elif gone and len(gone) == len(kernels):
        reasons = "; ".join(f"{k['name'] or 'kernel'}: {k['lost']}" for k in gone)
        message = (
            f"Your session from {when} could not be parked ({reasons}): its variables were lost; "
            f"new kernels start empty."
        )
    else:
        failed = [k for k in kernels if not k["restored"]]
        message = (
            f"Your session from {when} could not be restored in full ({len(failed)} kernel(s)); "
            f"its saved files are kept in ~/.gpusessions/parked/."
        )
    return {"state": state, "parked_at": at, "message": message, "kernels": kernels}


class Restore:
    """The restore of this server's park (once per notebook server process)."""

    def __init__(self, env: dict[str, str] | None = None, log: logging.Logger | None = None):
        self.env = dict(os.environ) if env is None else env
        self.log = log or logging.getLogger("ServerApp")
        self.folder = R.park_dir(R.server_key(self.env))
        self.db = R.state_dir(self.env) / "sessions.db"
        self.remapped: dict[str, str] = {}  # old kernel id -> restored kernel id
        self.state: Obj = {"state": "none"}

    def pending(self, present: set[str]) -> list[Obj]:
        """Parked kernels to restore: none while the gateway still has any of them."""
        todo = R.unrestored(R.read_record(self.folder))
        return [] if any(k["id"] in present for k in todo) else todo

    async def run(
        self,
        present: set[str],
        start: Callable[[str], Awaitable[str]],
        shutdown: Callable[[str], Awaitable[None]],
        run: Run | None = None,
    ) -> None:
        """Restore what is pending: `start(kernelspec)` gives a new kernel's id, `shutdown(id)`
        ends one whose restore failed; `run(kernel id, source, mime, timeout)` runs the restore
        in it (default: over the gateway's websocket channels, `JUPYTER_GATEWAY_URL`). Kernels
        whose park failed (over the limit or the budget) are told once, here."""
        record = R.read_record(self.folder)
        todo = self.pending(present)
        if record is None or (not todo and not untold(record)):
            return
        if self._expired(record):
            return
        if not todo:  # nothing came back: the loss is what there is to tell
            self._tell_lost(record)
            R.write_record(self.folder, record)
            self.state = summary(record, "failed")
            self.log.warning("gpusessions: %s", self.state["message"])
            return
        self.state = summary(record, "restoring")
        try:
            code = R.park_code(self.env)
        except Exception as e:
            for k in todo:
                k_rec = self._kernel(record, k["id"])
                k_rec["restore"] = {"ok": False, "at": time.time(), "error": f"the park code: {e}"}
            self._finish(record)
            return
        deadline = time.monotonic() + _timeout(self.env)
        url = self.env.get("JUPYTER_GATEWAY_URL", "")
        token = self.env.get("JUPYTER_GATEWAY_AUTH_TOKEN", "")

        async def over_gateway(kid: str, source: str, mime: str, timeout: float) -> Obj:
            return await run_for_report(url, token, kid, source, mime, timeout)

        runner = run or over_gateway

        async def one(k: Obj) -> None:
            k_rec = self._kernel(record, k["id"])
            t0 = time.monotonic()
            out: Obj = {"ok": False, "at": time.time()}
            kid: str | None = None
            try:
                kid = await start(str(k.get("name") or "python3"))
                out["kernel"] = kid
                source = code.restore_source(str(self.folder / k["id"]))
                report = await runner(kid, source, code.MIME, deadline - time.monotonic())
                out["report"] = report
                out["ok"] = bool(report.get("ok"))
                # A damaged park restored what it could: that kernel is the user's, with the
                # damage named (not_restored); only a restore that brought nothing back is undone.
                out["kept"] = out["ok"] or bool(report.get("restored"))
            except (KernelRunError, Exception) as e:
                out["error"] = f"{type(e).__name__}: {e}" if not isinstance(e, KernelRunError) else str(e)
            out["seconds"] = round(time.monotonic() - t0, 3)
            if out.get("kept") and kid:
                moved = R.remap(self.db, k["id"], kid)
                out["sessions"] = moved
                self.remapped[k["id"]] = kid
            elif kid:
                try:
                    await shutdown(kid)
                except Exception as e:
                    self.log.warning("gpusessions: could not end the kernel of a failed restore: %s", e)
            k_rec["restore"] = out

        await asyncio.gather(*(one(k) for k in todo))
        self._finish(record)

    def _expired(self, record: Obj) -> bool:
        """A park older than the expiry (`park_expiry_days`) is deleted, not restored, with
        the earlier ones set aside beside it; the status says so (the user is told at the
        first start after it expired: nothing goes without a word)."""
        limit = expiry_seconds(self.env)
        at = float(record.get("parked_at") or 0)
        if limit is None or not at or time.time() - at <= limit:
            return False
        record["expiry_days"] = limit / 86400
        self.state = summary(record, "expired")
        shutil.rmtree(self.folder, ignore_errors=True)
        for old in self.folder.parent.glob(f"{self.folder.name}.unrestored-*"):
            with contextlib.suppress(OSError):
                if time.time() - old.stat().st_mtime > limit:
                    shutil.rmtree(old, ignore_errors=True)
        self.log.info("gpusessions: %s", self.state["message"])
        return True

    @staticmethod
    def _kernel(record: Obj, kid: str) -> Obj:
        return next(k for k in record["kernels"] if isinstance(k, dict) and k.get("id") == kid)

    def _tell_lost(self, record: Obj) -> None:
        """Kernels whose park failed: told (once), and what they left on disk removed (nothing
        restores it: their fallback is a plain cull)."""
        for k in untold(record):
            k["told_at"] = time.time()
            R.drop_kernel_park(self.folder, str(k.get("id", "")))
            for tmp in self.folder.glob(f".{k.get('id')}.parking-*"):
                shutil.rmtree(tmp, ignore_errors=True)

    def _finish(self, record: Obj) -> None:
        self._tell_lost(record)
        parked = [k for k in record.get("kernels") or [] if isinstance(k, dict)]
        done = all(_kept(k) for k in parked if k.get("status") not in UNPARKED)
        state = "restored" if done and any(_kept(k) for k in parked) else "failed"
        record["restored_at"] = time.time() if state == "restored" else None
        R.write_record(self.folder, record)
        self.state = summary(record, state)
        for k in self.state["kernels"]:
            self.log.info(
                "gpusessions: parked kernel %s (%s): %s in %ss%s",
                k["id"],
                k["name"],
                "restored as " + str(k["kernel"]) if k["restored"] else "NOT restored",
                k["seconds"],
                f"; not kept: {', '.join(k['not_kept'])}" if k["not_kept"] else "",
            )
        if state == "restored":
            self._keep_last(record)
        self.log.info("gpusessions: %s", self.state["message"])

    def _keep_last(self, record: Obj) -> None:
        """The park restored in full: moved aside (the last one kept, older restored ones go)."""
        target = self.folder.with_name(f"{self.folder.name}.restored-{R.stamp()}")
        try:
            for old in self.folder.parent.glob(f"{self.folder.name}.restored-*"):
                shutil.rmtree(old, ignore_errors=True)
            self.folder.rename(target)
            self.state["folder"] = str(target)
        except OSError as e:
            self.log.warning("gpusessions: could not move the restored park %s: %s", self.folder, e)

    def status(self) -> Obj:
        """The in-memory state of this process's restore, else what the record says."""
        if self.state.get("state") != "none":
            return self.state
        record = R.read_record(self.folder)
        if R.unrestored(record):
            return summary(record, "pending")
        return {"state": "none"}
