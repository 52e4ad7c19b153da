"""One park of a server's kernels, wherever they run (the holder's gateway or the notebook server).

    record = await park_kernels(kernels, run, interrupt, env, trigger="...")

`kernels` are the kernel models (`id`, `name`, `execution_state`), `run(kernel id, source, mime,
timeout)` executes the park package's `park_source` in one kernel and gives back its report,
`interrupt(kernel id)` interrupts a busy one. The holder's supervisor (`parkhost`) reaches its
gateway's kernels over their websocket channels; the notebook server (`localkernels`) reaches its
own kernels through their kernel clients. Both write one record (`parkrecord`).

The budget: `GPUSESSIONS_PARK_TIMEOUT` seconds for all kernels together, from `started` (the
SIGTERM). The limit: `GPUSESSIONS_PARK_MAX_BYTES` is the user's, across all their parked servers
and kernels: each kernel is given what the user's other parks leave (`parkrecord.held_bytes`);
kernels parked at once that together pass it lose their parks, the largest first, until the rest
fit. A kernel refused for its size is named with the reason in words ("the session's state is
12.3 GiB, over what is left of your parking limit (...)"); its variables are lost, as in a cull,
and the next start says so (`restore`).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from gpusessions.notebook import parkrecord as R
from gpusessions.notebook.kernelexec import KernelRunError, Run

Obj = dict[str, Any]
Interrupt = Callable[[str], Awaitable[None]]
PARK_TIMEOUT = 120.0
PARK_MAX_BYTES = 16 << 30


def say(text: str) -> None:
    print(f"gpusessions-park: {text}", file=sys.stderr, flush=True)


def number(env: dict[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        return default


def budget_seconds(env: dict[str, str]) -> float:
    return number(env, "GPUSESSIONS_PARK_TIMEOUT", PARK_TIMEOUT)


def enforce_limit(folder: Path, kernels: list[Obj], limit: int, held: int) -> None:
    """The user's limit over this park's kernels together: the largest parks go until the rest
    fit in what the other parks leave; each refused kernel gets the reason in words."""
    left = max(limit - held, 0)
    for k in kernels:
        report = k.get("report") or {}
        if R.over_limit(report):
            k["error"] = R.limit_message(int(report.get("bytes") or 0), limit, held)
            k["refused"] = "limit"
    parked = [k for k in kernels if k.get("status") == "parked"]
    total = sum(int((k.get("report") or {}).get("bytes") or 0) for k in parked)
    for k in sorted(parked, key=lambda k: -int((k.get("report") or {}).get("bytes") or 0)):
        if total <= left:
            break
        size = int((k.get("report") or {}).get("bytes") or 0)
        R.drop_kernel_park(folder, str(k["id"]))
        k.update(status="failed", refused="limit", error=R.limit_message(total, limit, held))
        total -= size


async def park_kernels(
    models: list[Obj],
    run: Run,
    interrupt: Interrupt,
    env: dict[str, str],
    trigger: str,
    started: float | None = None,
    paths: dict[str, list[str]] | None = None,
) -> Obj | None:
    """Park every kernel of `models`; the record written (None: no kernels, nothing to do)."""
    started = time.monotonic() if started is None else started
    budget = budget_seconds(env)
    deadline = started + budget
    models = [m for m in models if isinstance(m, dict) and R.KERNEL_ID.match(str(m.get("id", "")))]
    if not models:
        say("no kernels to park")
        return None
    server = R.server_key(env)
    folder = R.park_dir(server)
    aside = R.set_aside(folder)
    if aside is not None:
        say(f"an earlier park was set aside, not deleted: {aside}")
    R.private_dir(folder)
    if paths is None:
        paths = R.paths_by_kernel(R.state_dir(env) / "sessions.db")
    limit = int(number(env, "GPUSESSIONS_PARK_MAX_BYTES", PARK_MAX_BYTES))
    held = R.held_bytes(server)
    left = max(limit - held, 0)
    record: Obj = {
        "version": R.VERSION,
        "server": server,
        "parked_at": time.time(),
        "trigger": trigger,
        "budget_seconds": budget,
        "limit_bytes": limit,
        "held_bytes": held,
        "kernels": [
            {"id": m["id"], "name": m.get("name", ""), "paths": paths.get(m["id"], []), "status": "parking"}
            for m in models
        ],
        "complete": False,
    }
    # Written first: a park cut off by SIGKILL still leaves its record (status "parking").
    R.write_record(folder, record)
    try:
        code = R.park_code(env)
    except Exception as e:  # the park package is missing or broken: say so in the record
        for k in record["kernels"]:
            k.update(status="failed", error=f"the park code could not be loaded: {e}")
        R.finish_record(folder, {**record, "seconds": time.monotonic() - started})
        say(f"could not load the park code: {e}")
        return record

    async def one(k: Obj, model: Obj) -> None:
        kdir = R.private_dir(folder / k["id"])
        t0 = time.monotonic()
        try:
            if model.get("execution_state") == "busy":
                # A running cell would hold the park's request behind it until the budget ends.
                with contextlib.suppress(Exception):
                    await interrupt(k["id"])
                k["interrupted"] = True
            source = code.park_source(str(kdir), left)
            report = await run(k["id"], source, code.MIME, deadline - time.monotonic())
            k["report"] = report
            k["status"] = "parked" if report.get("ok") else "failed"
            if report.get("error"):
                k["error"] = str(report["error"])
        except KernelRunError as e:
            k["status"] = "timeout" if "within" in str(e) else "failed"
            k["error"] = str(e)
        except Exception as e:  # whatever happens, the record says it
            k["status"] = "failed"
            k["error"] = f"{type(e).__name__}: {e}"
        k["seconds"] = round(time.monotonic() - t0, 3)
        R.make_private(kdir)

    await asyncio.gather(*(one(k, m) for k, m in zip(record["kernels"], models, strict=True)))
    enforce_limit(folder, record["kernels"], limit, held)
    record["seconds"] = round(time.monotonic() - started, 3)
    record["complete"] = all(k["status"] == "parked" for k in record["kernels"])
    R.finish_record(folder, record)
    for k in record["kernels"]:
        lost = [n.get("name") for n in (k.get("report") or {}).get("not_saved") or [] if isinstance(n, dict)]
        say(
            f"kernel {k['id']} ({k['name']}): {k['status']} in {k['seconds']:.1f} s"
            + (f"; not saved: {', '.join(map(str, lost))}" if lost else "")
            + (f"; {k['error']}" if k.get("error") else "")
        )
    done = sum(k["status"] == "parked" for k in record["kernels"])
    say(f"parked {done} of {len(record['kernels'])} kernel(s) in {record['seconds']:.1f} s into {folder}")
    return record
