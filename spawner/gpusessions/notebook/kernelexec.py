"""Run code in one kernel of a kernel gateway and wait for the report it publishes.

The park supervisor (`parkhost`, in the holder) and the restore (`restore`, in the notebook
server) both send one `execute_request` over the gateway's websocket channels
(`/api/kernels/<id>/channels`, the session token in the header) and read back the one
`display_data` whose data holds the park package's MIME type (its report). Nothing else of the
kernel's output is kept. Kernels of the notebook server itself (`localkernels`: no gateway)
are reached through their own kernel client instead (`run_local_for_report`), the same way.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

Obj = dict[str, Any]
# Runs code in one kernel for its report: (kernel id, source, mime, timeout) -> report.
Run = Callable[[str, str, str, float], Awaitable[Obj]]


class KernelRunError(Exception):
    """The code did not publish its report (an error in the kernel, the deadline, a closed socket)."""


def _request(code: str) -> Obj:
    return {
        "header": {
            "msg_id": uuid.uuid4().hex,
            "msg_type": "execute_request",
            "username": "gpusessions",
            "session": uuid.uuid4().hex,
            "version": "5.3",
        },
        "parent_header": {},
        "metadata": {},
        "channel": "shell",
        "content": {
            "code": code,
            "silent": False,
            "store_history": False,
            "user_expressions": {},
            "allow_stdin": False,
        },
    }


async def run_for_report(
    base_url: str, token: str, kernel_id: str, code: str, mime: str, timeout: float
) -> Obj:
    """Execute `code` in the kernel; return the `mime` entry of its display_data (the report).

    Raises `KernelRunError` when the kernel answers with an error and no report, when the
    socket closes, or after `timeout` seconds."""
    deadline = time.monotonic() + max(timeout, 0.1)
    ws = base_url.replace("http://", "ws://", 1).replace("https://", "wss://", 1).rstrip("/")
    url = f"{ws}/api/kernels/{quote(kernel_id, safe='')}/channels"
    req = HTTPRequest(url, headers={"Authorization": f"token {token}"}, request_timeout=max(timeout, 0.1))
    try:
        conn = await asyncio.wait_for(websocket_connect(req), max(deadline - time.monotonic(), 0.1))
    except (OSError, TimeoutError) as e:
        raise KernelRunError(f"could not reach the kernel: {e}") from None
    try:
        for _ in range(ATTEMPTS):
            msg = _request(code)
            reader = _Reader(msg["header"]["msg_id"], mime)
            await conn.write_message(json.dumps(msg))
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KernelRunError(f"no report within {timeout:.1f} s (the park budget)")
                try:
                    raw = await asyncio.wait_for(conn.read_message(), left)
                except TimeoutError:
                    raise KernelRunError(f"no report within {timeout:.1f} s (the park budget)") from None
                if raw is None:
                    raise KernelRunError("the kernel's channels closed")
                if reader.done(json.loads(raw)):
                    break
            if not reader.aborted:
                break
    finally:
        conn.close()
    return reader.result()


# A request the kernel aborted (it came while an interrupted cell's error was being handled:
# ipykernel's stop_on_error drops what is queued then) never ran: it is sent again.
ATTEMPTS = 3


class _Reader:
    """Picks the report out of a kernel's iopub messages for one request."""

    def __init__(self, msg_id: str, mime: str):
        self.msg_id, self.mime = msg_id, mime
        self.report: Obj | None = None
        self.error: str | None = None

    @property
    def aborted(self) -> bool:
        """The request ended with neither a report nor an error: it did not run."""
        return self.report is None and self.error is None

    def result(self) -> Obj:
        if self.report is None:
            raise KernelRunError(self.error or "the kernel published no report")
        return dict(self.report)

    def done(self, m: Obj) -> bool:
        if (m.get("parent_header") or {}).get("msg_id") != self.msg_id:
            return False
        kind = (m.get("header") or {}).get("msg_type")
        content = m.get("content") or {}
        if kind in ("display_data", "execute_result") and self.mime in (content.get("data") or {}):
            data = content["data"][self.mime]
            self.report = json.loads(data) if isinstance(data, str) else data
        elif kind == "error":
            self.error = f"{content.get('ename')}: {content.get('evalue')}"
        return kind == "status" and content.get("execution_state") == "idle"


async def run_local_for_report(client: Any, code: str, mime: str, timeout: float) -> Obj:
    """`run_for_report` for a kernel of this server: `client` is its jupyter_client
    AsyncKernelClient (channels started here, stopped after)."""
    deadline = time.monotonic() + max(timeout, 0.1)
    client.start_channels()
    try:
        for _ in range(ATTEMPTS):
            msg_id = client.execute(code, silent=False, store_history=False, allow_stdin=False)
            reader = _Reader(msg_id, mime)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KernelRunError(f"no report within {timeout:.1f} s (the park budget)")
                try:
                    m = await client.get_iopub_msg(timeout=left)
                except Exception:  # queue.Empty: nothing within the time left
                    if time.monotonic() >= deadline:
                        raise KernelRunError(f"no report within {timeout:.1f} s (the park budget)") from None
                    continue
                if reader.done(m):
                    break
            if not reader.aborted:
                break
    finally:
        client.stop_channels()
    return reader.result()
