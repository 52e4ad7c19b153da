"""Test hubs get distinct ports outside Linux's ephemeral range, so a hub restarted in place
finds them free (an outgoing connection can take an ephemeral port while the hub is down), and
its proxy and hub never get the same one (binding port 0 twice can give the same port)."""

from __future__ import annotations

import socket

from localcluster.hubproc import PORT_RANGE, free_port


def _ephemeral() -> tuple[int, int]:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low, high = (int(x) for x in f.read().split())
    return low, high


def test_free_ports_are_free_and_never_ephemeral() -> None:
    low, high = _ephemeral()
    given = [free_port() for _ in range(50)]
    ports = set(given)
    assert len(ports) == 50, "never the same port twice (a hub's proxy and hub port once were)"
    assert all(PORT_RANGE[0] <= p <= PORT_RANGE[1] and not low <= p <= high for p in ports)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))  # free indeed
