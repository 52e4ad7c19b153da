"""Stand-in servers for benchmark pods: one asyncio thread answers HTTP for thousands of pods.

Images `localcluster/fake-singleuser` and `localcluster/fake-holder` (see podspec) start no
process: the runtime listens on the pod's IP and its container's first port here instead.

- fake-singleuser answers every request with 200 and a small JSON body: JupyterHub counts
  a server up once its URL answers with anything below 500 (`wait_for_http_server`). It
  reports no activity to the hub (a real jupyterhub-singleuser does).
- fake-holder answers the GPU agent's `/api/status` with its devices idle and NVML fine,
  so the culler's inventory makes the same HTTP round trip per holder as with the agent.

The socket is bound at once by the caller (so the container is ready when reported
Running); the event loop only accepts on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

SINGLEUSER = "fake-singleuser"
HOLDER = "fake-holder"


def _response(status: str, body: bytes) -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


def agent_status(devices: list[str]) -> bytes:
    """What the GPU agent's /api/status says for idle devices (the fields the culler reads)."""
    now = time.time()
    return json.dumps(
        {
            "nvml": {"ok": True},
            "devices": [
                {"uuid": u, "memory_used_mib": 0, "processes": 0, "busy": False, "last_busy": None, "at": now}
                for u in devices
            ],
            "kernels": None,
        }
    ).encode()


class FakeServers:
    """Listening sockets per pod, served by one event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.servers: dict[str, asyncio.base_events.Server] = {}
        self.requests = 0
        threading.Thread(target=self.loop.run_forever, daemon=True, name="fakeserve").start()

    def open(self, key: str, ip: str, port: int, kind: str, devices: list[str] | None = None) -> None:
        """Listen on ip:port for `key` (pod uid/container); raises OSError if the address is busy."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((ip, port))
            sock.listen(64)
        except OSError:
            sock.close()
            raise
        sock.setblocking(False)
        devs = list(devices or [])

        async def start() -> None:
            server = await asyncio.start_server(lambda r, w: self._serve(r, w, kind, devs), sock=sock)
            self.servers[key] = server

        asyncio.run_coroutine_threadsafe(start(), self.loop).result(10)

    def close(self, key: str) -> None:
        async def stop() -> None:
            server = self.servers.pop(key, None)
            if server is not None:
                server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self.loop).result(10)

    async def _serve(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kind: str, devices: list[str]
    ) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip() or 0)
                if length:
                    await reader.readexactly(length)
                self.requests += 1
                path = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"/"
                if kind == HOLDER and path.split(b"?")[0].endswith(b"/api/status"):
                    writer.write(_response("200 OK", agent_status(devices)))
                elif kind == HOLDER:
                    writer.write(_response("404 Not Found", b'{"error": "not found"}'))
                else:
                    writer.write(_response("200 OK", b'{"fake": "jupyterhub-singleuser"}'))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()
