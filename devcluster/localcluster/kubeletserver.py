"""The kubelet's HTTPS server of the simulated nodes: container logs, as a kubelet serves them.

The kube-apiserver answers `pods/<name>/log` (`kubectl logs`) by asking the pod's node's
kubelet: `GET https://<node InternalIP>:<status.daemonEndpoints.kubeletEndpoint.Port>/
containerLogs/<namespace>/<pod>/<container>` with its kubelet client certificate
(`--kubelet-client-certificate`), checking the kubelet's serving certificate against
`--kubelet-certificate-authority`. Here every simulated node listens on its own 127.x
address (`NodeSpec.ip`) and the cluster's kubelet port; one thread accepts for all of them.

As a kubelet does, a request needs a client certificate of the cluster's CA, and its user
(the certificate's CN, groups its O) must be allowed `get nodes/proxy` on that node (a
SubjectAccessReview, cached for a minute; the apiserver's client is in `system:masters`).

Query parameters: `tailLines`, `limitBytes`, `previous`, `follow` (until the container
exits). `timestamps`, `sinceSeconds` and `sinceTime` are not supported (the runtime records
a container's output without times): they are ignored.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

log = logging.getLogger("runtime.kubelet-server")

# The runtime's own line before each start of a container (kubelet.Runtime._start_container).
START_MARKER = b"==== "
FOLLOW_POLL = 0.2
AUTHZ_CACHE_SECONDS = 60.0


@dataclass
class LogRef:
    """Where a container's output is in its log file: the current instance from `start`, the
    previous one (before a restart) in `previous`; `running` while the process lives."""

    uid: str
    path: Path
    start: int
    previous: tuple[int, int] | None = None
    running: bool = True


class LogError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def segments(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of each container instance's output in a log file: after each line the
    runtime wrote at a start (`==== <time> start ...`), up to the next such line."""
    starts: list[int] = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        if data.startswith(START_MARKER, pos) and b" start (restart " in data[pos:end]:
            starts.append(end)
        pos = end
    out = []
    for i, s in enumerate(starts):
        nxt = starts[i + 1] if i + 1 < len(starts) else None
        if nxt is None:
            out.append((s, len(data)))
        else:
            # The next marker line begins after this segment.
            marker = data.rfind(b"\n", s, nxt - 1)
            out.append((s, marker + 1 if marker >= s else s))
    return out


def tail_lines(data: bytes, n: int) -> bytes:
    """The last n lines (a last line without its newline counts)."""
    if n <= 0:
        return b""
    lines = data.splitlines(keepends=True)
    return b"".join(lines[-n:])


def select(data: bytes, query: Mapping[str, str]) -> bytes:
    """Apply tailLines, then limitBytes, as the kubelet does."""
    if "tailLines" in query:
        data = tail_lines(data, _int(query, "tailLines"))
    if "limitBytes" in query:
        data = data[: _int(query, "limitBytes")]
    return data


def _int(query: Mapping[str, str], name: str) -> int:
    try:
        value = int(query[name])
    except ValueError:
        raise LogError(400, f"{name} must be an integer, not {query[name]!r}") from None
    if value < 0:
        raise LogError(400, f"{name} must not be negative")
    return value


def _true(query: Mapping[str, str], name: str) -> bool:
    return query.get(name, "").lower() in ("true", "1")


def read_log(
    ref: LogRef | None, fallback: Path, pod: str, container: str, previous: bool
) -> tuple[bytes, int | None]:
    """The bytes of the current (or previous) instance's output, and for the current instance
    of a container the runtime knows, the file offset where a follow goes on."""
    if ref is None:
        # A pod the runtime does not run now (it restarted since): its file's last instance.
        try:
            data = fallback.read_bytes()
        except OSError:
            raise LogError(400, f'container "{container}" in pod "{pod}" is waiting to start') from None
        segs = segments(data)
        if previous:
            if len(segs) < 2:
                raise LogError(400, f'previous terminated container "{container}" in pod "{pod}" not found')
            s, e = segs[-2]
        elif segs:
            s, e = segs[-1]
        else:
            raise LogError(400, f'container "{container}" in pod "{pod}" is waiting to start')
        return data[s:e], None
    try:
        with open(ref.path, "rb") as f:
            if previous:
                if ref.previous is None:
                    raise LogError(
                        400, f'previous terminated container "{container}" in pod "{pod}" not found'
                    )
                s, e = ref.previous
                f.seek(s)
                return f.read(e - s), None
            f.seek(ref.start)
            data = f.read()
            return data, ref.start + len(data)
    except OSError:
        raise LogError(400, f'container "{container}" in pod "{pod}" is waiting to start') from None


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.client_address[0], format % args)

    def _send(self, status: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send(status, message.encode())

    def do_GET(self) -> None:
        kube = self.server.kubelet
        url = urlsplit(self.path)
        if url.path == "/healthz":
            self._send(200, b"ok")
            return
        parts = [unquote(p) for p in url.path.split("/")[1:]]
        if len(parts) != 4 or parts[0] != "containerLogs":
            self._error(404, "404 page not found")
            return
        node = kube.node_of(self.connection.getsockname()[0])
        user, groups = _identity(self.connection)
        if node is None or not kube.allowed(user, groups, node):
            self._error(403, f"Forbidden (user={user}, verb=get, resource=nodes, subresource=proxy)")
            return
        _, namespace, pod, container = parts
        if not all(re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", p) for p in parts[1:]):
            self._error(400, "namespace, pod and container must be Kubernetes names")
            return
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            ref = kube.refs.get((namespace, pod, container))
            data, offset = read_log(
                ref, kube.fallback(namespace, pod, container), pod, container, _true(query, "previous")
            )
            data = select(data, query)
        except LogError as e:
            self._error(e.status, e.message)
            return
        if not (_true(query, "follow") and ref is not None and offset is not None and ref.running):
            self._send(200, data)
            return
        self._stream(data, ref, offset, query)

    def _stream(self, first: bytes, ref: LogRef, offset: int, query: Mapping[str, str]) -> None:
        """follow=true: what is there, then what the container writes until it exits."""
        limit = _int(query, "limitBytes") if "limitBytes" in query else None
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        with contextlib.suppress(OSError):
            for chunk in _follow(first, ref, offset):
                if limit is not None:
                    chunk = chunk[: limit - sent]
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                    sent += len(chunk)
                if limit is not None and sent >= limit:
                    break
            self.wfile.write(b"0\r\n\r\n")


def _follow(first: bytes, ref: LogRef, offset: int) -> Iterator[bytes]:
    """`first`, then what the container writes after `offset` in its file until it exits."""
    yield first
    with open(ref.path, "rb") as f:
        f.seek(offset)
        while True:
            chunk = f.read()
            if chunk:
                yield chunk
            elif not ref.running:
                return
            else:
                time.sleep(FOLLOW_POLL)


def _identity(conn: Any) -> tuple[str, list[str]]:
    cert = conn.getpeercert() or {}
    user, groups = "", []
    for rdn in cert.get("subject") or ():
        for key, value in rdn:
            if key == "commonName":
                user = value
            elif key == "organizationName":
                groups.append(value)
    return user, groups


class _Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True
    kubelet: KubeletServer

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            tls = self.kubelet.context.wrap_socket(request, server_side=True)
        except (OSError, ssl.SSLError) as e:
            log.debug("TLS handshake with %s failed: %s", client_address, e)
            return
        try:
            super().finish_request(tls, client_address)
        finally:
            with contextlib.suppress(OSError):
                tls.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("request from %s failed", client_address, exc_info=True)


class KubeletServer:
    """Listens on every node's address; `refs` is read here and written by the runtime."""

    def __init__(
        self,
        nodes: Mapping[str, str],  # node IP -> node name
        port: int,
        cert: Path,
        key: Path,
        ca: Path,
        refs: Mapping[tuple[str, str, str], LogRef],
        fallback: Callable[[str, str, str], Path],
        authorize: Callable[[str, list[str], str], bool],
    ):
        self.nodes = dict(nodes)
        self.port = port
        self.refs = refs
        self.fallback = fallback
        self._authorize = authorize
        self._authz: dict[tuple[str, tuple[str, ...], str], tuple[float, bool]] = {}
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        self.context.load_verify_locations(cafile=str(ca))
        self.context.verify_mode = ssl.CERT_REQUIRED
        self._http = _Server(("127.0.0.1", 0), _Handler, bind_and_activate=False)
        self._http.kubelet = self
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()

    def node_of(self, ip: str) -> str | None:
        return self.nodes.get(ip)

    def allowed(self, user: str, groups: list[str], node: str) -> bool:
        if not user:
            return False
        key = (user, tuple(sorted(groups)), node)
        now = time.monotonic()
        hit = self._authz.get(key)
        if hit and now - hit[0] < AUTHZ_CACHE_SECONDS:
            return hit[1]
        try:
            ok = self._authorize(user, groups, node)
        except Exception as e:
            log.warning("authorizing %s on node %s failed: %s", user, node, e)
            return False
        self._authz[key] = (now, ok)
        return ok

    def start(self) -> None:
        """Bind every node's address (raises OSError if one is taken) and serve in a thread."""
        try:
            for ip in self.nodes:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                self._socks.append(s)
                s.bind((ip, self.port))
                s.listen(64)
                s.setblocking(False)
        except OSError:
            self.close()
            raise
        threading.Thread(target=self._accept, daemon=True, name="kubelet-server").start()

    def _accept(self) -> None:
        sel = selectors.DefaultSelector()
        for s in self._socks:
            sel.register(s, selectors.EVENT_READ)
        while not self._stop.is_set():
            for key, _ in sel.select(timeout=0.5):
                sock: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    conn, addr = sock.accept()
                except OSError:
                    continue
                conn.setblocking(True)
                conn.settimeout(60)
                self._http.process_request(conn, addr)
        sel.close()

    def close(self) -> None:
        self._stop.set()
        for s in self._socks:
            with contextlib.suppress(OSError):
                s.close()
        self._socks = []


def subject_access_review(api: Any) -> Callable[[str, list[str], str], bool]:
    """A kubelet's authorization of its API: may `user` in `groups` get nodes/proxy on `node`?"""

    def check(user: str, groups: list[str], node: str) -> bool:
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": user,
                "groups": groups,
                "resourceAttributes": {
                    "verb": "get",
                    "resource": "nodes",
                    "subresource": "proxy",
                    "name": node,
                },
            },
        }
        out = api.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)
        allowed = bool((out.get("status") or {}).get("allowed"))
        if not allowed:
            log.info("kubelet API refused to %s %s: %s", user, groups, json.dumps(out.get("status")))
        return allowed

    return check
