"""Who may ask the agent, and how much (the agent answers only the culler and its own session).

- A caller is named by the token it shows (the culler's shared agent token, or the session's
  own gateway token that its notebook has); a missing or wrong token is answered 401 from the
  request's headers, before anything else is read.
- The agent takes no request body: the HTTP server refuses one past `MAX_BODY_BYTES` while
  reading the headers, and every handler refuses any body at all (413) without reading it.
- `?fresh=1` (an NVML read then and there) is granted to one caller at most once per
  `FRESH_INTERVAL_SECONDS`; a caller asking more often gets the last sample, marked so.
- One peer (an IP address) holds at most `MAX_CONNECTIONS_PER_PEER` connections: a flood
  from one pod cannot take the descriptors the culler's read needs; `MAX_CONNECTIONS` in all
  bounds the agent's memory. Code beside the agent (the user's cells in the holder's kernels)
  can connect from any loopback address and from the pod's own IP: all of those count as one
  peer, "self" (`peer_key`), so a session cannot flood its own agent until the culler cannot
  read it (an unread GPU is never culled: that would make the session immune). Where the pod
  IP is itself a loopback address (the local cluster, whose culler connects from loopback
  too) each address counts on its own.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from collections import OrderedDict
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.iostream import IOStream

log = logging.getLogger("gpusessions.agent")

MAX_BODY_BYTES = 1024  # the agent takes none; a body with a larger Content-Length is cut off at once
MAX_HEADER_BYTES = 8 * 1024  # tornado's default is 64 KiB
MAX_BUFFER_BYTES = 64 * 1024  # tornado's default is 100 MB
IDLE_SECONDS = 30.0  # a connection that sends nothing (no headers, or no next request) is closed
BODY_SECONDS = 5.0
MAX_CONNECTIONS_PER_PEER = 32
MAX_CONNECTIONS = 512  # in all: the agent's memory stays bounded whatever the callers do
FRESH_INTERVAL_SECONDS = 1.0
MAX_CALLERS = 256  # fresh-read clocks kept (callers beyond are forgotten oldest first)


def server_options() -> dict[str, Any]:
    """The HTTPServer's limits (also what the tests' server uses)."""
    return {
        "max_body_size": MAX_BODY_BYTES,
        "max_header_size": MAX_HEADER_BYTES,
        "max_buffer_size": MAX_BUFFER_BYTES,
        "idle_connection_timeout": IDLE_SECONDS,
        "body_timeout": BODY_SECONDS,
        "decompress_request": False,
    }


def peer_key(ip: str, own: frozenset[str]) -> str:
    """Whose quota of connections a peer address takes: "self" for the holder pod's own
    addresses (any loopback address, and `own`, the pod's IPs), when the pod's IPs are not
    loopback themselves; the address otherwise."""
    try:
        addr = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return ip
    if ip in own or (addr.is_loopback and own and not any(_loopback(o) for o in own)):
        return "self"
    return ip


def _loopback(ip: str) -> bool:
    try:
        return ipaddress.ip_address(ip).is_loopback
    except ValueError:
        return False


def caller(authorization: str, tokens: dict[str, str]) -> str | None:
    """Which of the named tokens the `Authorization` header shows (`Bearer <t>` or `token <t>`),
    or None (missing, malformed or wrong)."""
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() not in ("bearer", "token"):
        return None
    presented = given.strip().encode()
    found = None
    for name, token in tokens.items():  # compare with every token: no early exit to time
        if token and hmac.compare_digest(presented, token.encode()):
            found = name
    return found


class FreshLimiter:
    """At most one fresh read per caller per `interval` seconds."""

    def __init__(self, interval: float = FRESH_INTERVAL_SECONDS, max_callers: int = MAX_CALLERS) -> None:
        self.interval = interval
        self.max_callers = max_callers
        self._last: OrderedDict[str, float] = OrderedDict()

    def allow(self, key: str, now: float) -> bool:
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            return False
        self._last[key] = now
        self._last.move_to_end(key)
        while len(self._last) > self.max_callers:
            self._last.popitem(last=False)
        return True


class AgentHTTPServer(HTTPServer):
    """tornado's HTTPServer with the limits above and a cap on connections per peer."""

    def initialize(
        self,
        *args: Any,
        max_per_peer: int = MAX_CONNECTIONS_PER_PEER,
        own_addresses: frozenset[str] = frozenset(),
        **kwargs: Any,
    ) -> None:
        super().initialize(*args, **kwargs)
        self.max_per_peer = max_per_peer
        self.own = own_addresses
        self.per_peer: dict[str, int] = {}
        self.refused = 0

    def handle_stream(self, stream: IOStream, address: Any) -> None:
        ip = str(address[0]) if isinstance(address, tuple) and address else str(address)
        peer = peer_key(ip, self.own)
        if self.per_peer.get(peer, 0) >= self.max_per_peer or len(self._connections) >= MAX_CONNECTIONS:
            self.refused += 1
            if self.refused in (1, 10, 100) or self.refused % 1000 == 0:
                log.warning(
                    "refused a connection from %s: %d open from it, %d in all (%d refused so far)",
                    peer,
                    self.per_peer.get(peer, 0),
                    len(self._connections),
                    self.refused,
                )
            stream.close()
            return
        self.per_peer[peer] = self.per_peer.get(peer, 0) + 1
        super().handle_stream(stream, address)

    def on_close(self, server_conn: Any) -> None:
        super().on_close(server_conn)
        peer = peer_key(str(getattr(getattr(server_conn, "context", None), "remote_ip", "")), self.own)
        left = self.per_peer.get(peer, 1) - 1
        if left > 0:
            self.per_peer[peer] = left
        else:
            self.per_peer.pop(peer, None)
