"""Run code in a Jupyter kernel through the hub's proxy and the notebook server (websocket)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
import uuid
from typing import Any

from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect


async def _execute(ws_url: str, token: str, code: str, timeout: float) -> dict[str, Any]:
    req = HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}, request_timeout=timeout)
    conn = await websocket_connect(req)
    session = uuid.uuid4().hex
    msg_id = uuid.uuid4().hex
    conn.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": msg_id,
                    "msg_type": "execute_request",
                    "username": "test",
                    "session": session,
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "channel": "shell",
                "content": {
                    "code": code,
                    "silent": False,
                    "store_history": True,
                    "user_expressions": {},
                    "allow_stdin": False,
                },
            }
        )
    )
    out: dict[str, Any] = {"stdout": "", "error": None, "status": None}
    reply = idle = False
    try:
        while not (reply and idle):
            raw = await asyncio.wait_for(conn.read_message(), timeout)
            if raw is None:
                raise ConnectionError("the kernel's websocket closed")
            msg = json.loads(raw)
            if (msg.get("parent_header") or {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            content = msg.get("content") or {}
            if kind == "stream":
                out["stdout"] += content.get("text", "")
            elif kind == "error":
                out["error"] = f"{content.get('ename')}: {content.get('evalue')}"
            elif kind == "execute_reply":
                out["status"] = content.get("status")
                reply = True
            elif kind == "status" and content.get("execution_state") == "idle":
                idle = True
    finally:
        conn.close()
    return out


def execute(base_url: str, user: str, kernel_id: str, token: str, code: str, timeout: float = 60) -> str:
    """Run `code` in the kernel; return its stdout (raise on an error in the code)."""
    ws = base_url.replace("http://", "ws://", 1) + f"/user/{user}/api/kernels/{kernel_id}/channels"
    # In a thread of its own: callers may run inside an event loop (Playwright's sync API).
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        out = pool.submit(lambda: asyncio.run(_execute(ws, token, code, timeout))).result()
    if out["error"] or out["status"] != "ok":
        raise AssertionError(f"kernel error: {out}")
    return str(out["stdout"])


async def _watch_status(
    ws_url: str, token: str, until: set[str], timeout: float, connected: threading.Event
) -> list[str]:
    """The kernel's execution states broadcast on iopub, until one of `until` arrives."""
    req = HTTPRequest(ws_url, headers={"Authorization": f"token {token}"}, request_timeout=timeout)
    conn = await websocket_connect(req)
    # Connected is not yet subscribed: the witness that the kernel's broadcasts reach this
    # socket is the busy/idle status the kernel broadcasts for a request of ours.
    probe = uuid.uuid4().hex
    conn.write_message(
        json.dumps(
            {
                "header": {
                    "msg_id": probe,
                    "msg_type": "kernel_info_request",
                    "username": "test",
                    "session": uuid.uuid4().hex,
                    "version": "5.3",
                },
                "parent_header": {},
                "metadata": {},
                "content": {},
                "channel": "shell",
            }
        )
    )
    while True:
        raw = await asyncio.wait_for(conn.read_message(), timeout)
        if raw is None:
            raise AssertionError("the kernel's channels closed before its first broadcast")
        msg = json.loads(raw)
        if msg.get("channel") == "iopub" and (msg.get("parent_header") or {}).get("msg_id") == probe:
            break
    connected.set()
    seen: list[str] = []
    try:
        while not until.intersection(seen):
            raw = await asyncio.wait_for(conn.read_message(), timeout)
            if raw is None:
                break
            msg = json.loads(raw)
            if msg.get("header", {}).get("msg_type") == "status":
                seen.append((msg.get("content") or {}).get("execution_state", ""))
    finally:
        conn.close()
    return seen


def watch_status(
    base_url: str, user: str, kernel_id: str, token: str, until: set[str], timeout: float = 60
) -> Any:
    """Start watching in a thread, connected when this returns; `.result()` gives the states seen."""
    ws = base_url.replace("http://", "ws://", 1) + f"/user/{user}/api/kernels/{kernel_id}/channels"
    connected = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    fut = pool.submit(lambda: asyncio.run(_watch_status(ws, token, until, timeout, connected)))
    pool.shutdown(wait=False)
    if not connected.wait(timeout):
        fut.result(timeout=1)  # its error, if it failed
        raise AssertionError(f"the kernel's channels did not connect within {timeout:.0f}s")
    return fut
