"""The holder's kernel host: runs the kernel gateway, and parks its kernels when the pod goes.

    python -m gpusessions.notebook.parkhost -- jupyter kernelgateway

The `kernels` container of a holder with parking on (`park_kernels`) runs this instead of the
gateway itself. It starts the gateway as its child (in a process group of its own: a signal to
the container's group reaches this process only) and waits. When the gateway ends by itself,
this ends with its code (the container restarts, as before).

On SIGTERM (the holder pod is being deleted: the Release button, the culler, KAI's reclaim, a
drain) it parks, within `GPUSESSIONS_PARK_TIMEOUT` seconds (the pod's grace period is that plus
a margin): it lists the gateway's kernels (REST on the pod's own address, `KG_AUTH_TOKEN`),
interrupts a busy one, executes the park package's `park_source` in each over the gateway's
websocket channels (all at once), waits for each report, and writes the record
(`parkrecord`: per kernel its old id, kernelspec, the notebook paths that used it, from the
notebook server's sessions file in the home, the report, and "parked", "failed" or "timeout").
Then it stops the gateway and exits 0.

It lives on the notebook side: it runs in the notebook image, beside the notebook's own
sessions file, and shares the record with the restore (`restore`); it needs nothing of the
hub or Kubernetes (import-linter: notebook uses core only).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from gpusessions.notebook import parkrecord as R
from gpusessions.notebook.kernelexec import KernelRunError, run_for_report

Obj = dict[str, Any]
PARK_TIMEOUT = 120.0
PARK_MAX_BYTES = 16 << 30
GATEWAY_STOP = 10.0  # seconds the gateway has to stop after the park, then it is killed


def say(text: str) -> None:
    print(f"gpusessions-park: {text}", file=sys.stderr, flush=True)


def gateway_base(env: dict[str, str]) -> str:
    ip = env.get("KG_IP", "") or "127.0.0.1"
    if ip in ("0.0.0.0", "::"):
        ip = "127.0.0.1"
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{env.get('KG_PORT', '8888')}"


def _number(env: dict[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        return default


async def _call(base: str, token: str, method: str, path: str, timeout: float) -> Any:
    req = HTTPRequest(
        base + path,
        method=method,
        headers={"Authorization": f"token {token}"},
        body=b"" if method == "POST" else None,
        request_timeout=max(timeout, 0.5),
        connect_timeout=max(min(timeout, 5.0), 0.5),
    )
    r = await AsyncHTTPClient().fetch(req)
    return json.loads(r.body) if r.body else None


async def park_all(env: dict[str, str], started: float | None = None) -> Obj | None:
    """Park every kernel of the gateway; the record written (None: no kernels, nothing to do)."""
    started = time.monotonic() if started is None else started
    budget = _number(env, "GPUSESSIONS_PARK_TIMEOUT", PARK_TIMEOUT)
    deadline = started + budget
    base, token = gateway_base(env), env.get("KG_AUTH_TOKEN", "")
    try:
        models = await _call(base, token, "GET", "/api/kernels", min(10.0, budget))
    except (HTTPClientError, OSError, ValueError) as e:
        say(f"the gateway did not list its kernels ({e}): nothing parked")
        return None
    models = [m for m in models or [] if isinstance(m, dict) and R.KERNEL_ID.match(str(m.get("id", "")))]
    if not models:
        say("no kernels to park")
        return None
    server = R.server_key(env)
    folder = R.park_dir(server)
    aside = R.set_aside(folder)
    if aside is not None:
        say(f"an earlier park was set aside, not deleted: {aside}")
    R.private_dir(folder)
    paths = R.paths_by_kernel(R.state_dir(env) / "sessions.db")
    at = time.time()
    record: Obj = {
        "version": R.VERSION,
        "server": server,
        "parked_at": at,
        "trigger": "holder-terminating",
        "budget_seconds": budget,
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
        R.write_record(folder, {**record, "seconds": time.monotonic() - started})
        say(f"could not load the park code: {e}")
        return record
    limit = int(_number(env, "GPUSESSIONS_PARK_MAX_BYTES", PARK_MAX_BYTES))

    async def one(k: Obj, model: Obj) -> None:
        kdir = R.private_dir(folder / k["id"])
        t0 = time.monotonic()
        try:
            if model.get("execution_state") == "busy":
                # A running cell would hold the park's request behind it until the budget ends.
                with contextlib.suppress(HTTPClientError, OSError, ValueError):
                    await _call(base, token, "POST", f"/api/kernels/{k['id']}/interrupt", 5.0)
                k["interrupted"] = True
            source = code.park_source(str(kdir), limit)
            report = await run_for_report(
                base, token, k["id"], source, code.MIME, deadline - time.monotonic()
            )
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
    record["seconds"] = round(time.monotonic() - started, 3)
    record["complete"] = all(k["status"] == "parked" for k in record["kernels"])
    R.write_record(folder, record)
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


def _die_with_parent() -> None:
    """The gateway ends with this process, even when this one is killed (PR_SET_PDEATHSIG)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


def _stop(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGTERM)
        try:
            child.wait(GATEWAY_STOP)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1 :] if "--" in argv else argv
    if not command:
        say("usage: python -m gpusessions.notebook.parkhost -- <kernel gateway command>")
        return 2
    term = threading.Event()
    at: list[float] = []

    def on_term(*_: Any) -> None:
        if not term.is_set():
            at.append(time.monotonic())
            term.set()

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    # Its own process group: the runtime's signal to the container's group is this process's.
    child = subprocess.Popen(command, start_new_session=True, preexec_fn=_die_with_parent)
    while not term.is_set():
        code = child.poll()
        if code is not None:
            say(f"the kernel gateway exited with code {code}")
            return code if code >= 0 else 128 - code
        term.wait(0.5)
    say("the holder is stopping: parking the kernels")
    try:
        asyncio.run(park_all(dict(os.environ), at[0]))
    except Exception as e:  # the gateway must still stop
        say(f"the park failed: {type(e).__name__}: {e}")
    _stop(child)
    return 0


if __name__ == "__main__":
    sys.exit(main())
