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
websocket channels (all at once, `parking.park_kernels`), waits for each report, and writes the
record (`parkrecord`: per kernel its old id, kernelspec, the notebook paths that used it, from the
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

from gpusessions.notebook import parking
from gpusessions.notebook.kernelexec import run_for_report

Obj = dict[str, Any]
PARK_TIMEOUT = parking.PARK_TIMEOUT
PARK_MAX_BYTES = parking.PARK_MAX_BYTES
GATEWAY_STOP = 10.0  # seconds the gateway has to stop after the park, then it is killed
say = parking.say


def gateway_base(env: dict[str, str]) -> str:
    ip = env.get("KG_IP", "") or "127.0.0.1"
    if ip in ("0.0.0.0", "::"):
        ip = "127.0.0.1"
    host = f"[{ip}]" if ":" in ip else ip
    return f"http://{host}:{env.get('KG_PORT', '8888')}"


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
    """Park every kernel of the gateway (`parking.park_kernels`); the record written (None: no
    kernels, nothing to do)."""
    started = time.monotonic() if started is None else started
    budget = parking.budget_seconds(env)
    base, token = gateway_base(env), env.get("KG_AUTH_TOKEN", "")
    try:
        models = await _call(base, token, "GET", "/api/kernels", min(10.0, budget))
    except (HTTPClientError, OSError, ValueError) as e:
        say(f"the gateway did not list its kernels ({e}): nothing parked")
        return None

    async def run(kid: str, source: str, mime: str, timeout: float) -> Obj:
        return await run_for_report(base, token, kid, source, mime, timeout)

    async def interrupt(kid: str) -> None:
        await _call(base, token, "POST", f"/api/kernels/{kid}/interrupt", 5.0)

    return await parking.park_kernels(
        list(models or []), run, interrupt, env, trigger="holder-terminating", started=started
    )


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
