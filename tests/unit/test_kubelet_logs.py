"""The simulated nodes' kubelet API (localcluster.kubeletserver): which bytes of a container's
log file it serves, and its TLS and authorization, over a real socket (no cluster)."""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from localcluster.certs import PKI, ensure_pki, issue_client_cert, issue_serving_cert
from localcluster.hubproc import free_port
from localcluster.kubeletserver import KubeletServer, LogError, LogRef, read_log, segments, select

LOG = (
    b"==== 2026-01-01T00:00:00Z start (restart 0): python -c x\n"
    b"first 1\nfirst 2\n"
    b"==== 2026-01-01T00:00:05Z start (restart 1): python -c x\n"
    b"second 1\nsecond 2\nsecond 3"
)


def test_segments_are_the_outputs_between_the_runtimes_start_lines() -> None:
    segs = segments(LOG)
    assert [LOG[s:e] for s, e in segs] == [b"first 1\nfirst 2\n", b"second 1\nsecond 2\nsecond 3"]
    assert segments(b"") == [] and segments(b"no marker\n") == []
    # A line of the program's own that starts like a marker but is not a start line.
    assert [LOG[s:e] for s, e in segments(b"==== hello\n")] == []


def test_tail_lines_then_limit_bytes() -> None:
    data = b"a\nb\nc\nd"
    assert select(data, {"tailLines": "2"}) == b"c\nd"
    assert select(data, {"tailLines": "0"}) == b""
    assert select(data, {"tailLines": "9"}) == data
    assert select(data, {"tailLines": "3", "limitBytes": "3"}) == b"b\nc"
    with pytest.raises(LogError, match="tailLines must be an integer"):
        select(data, {"tailLines": "x"})
    with pytest.raises(LogError, match="must not be negative"):
        select(data, {"limitBytes": "-1"})


def test_read_log_current_previous_and_after_a_runtime_restart(tmp_path: Path) -> None:
    f = tmp_path / "ns_p_c.log"
    f.write_bytes(LOG)
    first = segments(LOG)[0]
    ref = LogRef("uid", f, segments(LOG)[1][0], previous=first)
    assert read_log(ref, f, "p", "c", previous=False) == (b"second 1\nsecond 2\nsecond 3", len(LOG))
    assert read_log(ref, f, "p", "c", previous=True) == (b"first 1\nfirst 2\n", None)
    # The runtime restarted: no ref, the file's last (or the one before) instance.
    assert read_log(None, f, "p", "c", previous=False)[0] == b"second 1\nsecond 2\nsecond 3"
    assert read_log(None, f, "p", "c", previous=True)[0] == b"first 1\nfirst 2\n"
    with pytest.raises(LogError, match='previous terminated container "c" in pod "p" not found'):
        read_log(LogRef("uid", f, 0), f, "p", "c", previous=True)
    with pytest.raises(LogError, match="is waiting to start"):
        read_log(None, tmp_path / "missing.log", "p", "c", previous=False)


@dataclass
class Served:
    srv: KubeletServer
    pki: PKI
    ip: str
    ref: LogRef
    asked: list[tuple[str, list[str], str]]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Served]:
    pki = ensure_pki(tmp_path / "pki")
    ip = "127.231.7.9"
    issue_serving_cert(pki, "kubelet", ("node-a",), (ip,), pki.kubelet_crt, pki.kubelet_key)
    f = tmp_path / "ns_pod_main.log"
    f.write_bytes(b"==== t start (restart 0): x\nline 1\nline 2\n")
    ref = LogRef("uid", f, len(b"==== t start (restart 0): x\n"))
    asked: list[tuple[str, list[str], str]] = []

    def authorize(user: str, groups: list[str], node: str) -> bool:
        asked.append((user, groups, node))
        return "system:masters" in groups

    srv = KubeletServer(
        {ip: "node-a"},
        free_port(),
        pki.kubelet_crt,
        pki.kubelet_key,
        pki.ca_crt,
        {("ns", "pod", "main"): ref},
        lambda ns, p, c: tmp_path / f"{ns}_{p}_{c}.log",
        authorize,
    )
    srv.start()
    yield Served(srv, pki, ip, ref, asked)
    srv.close()


def _get(ip: str, port: int, path: str, ctx: ssl.SSLContext) -> tuple[int, bytes]:
    conn = http.client.HTTPSConnection(ip, port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _client(pki: PKI, tmp_path: Path, user: str, groups: tuple[str, ...]) -> ssl.SSLContext:
    crt, key = tmp_path / f"{user}.crt", tmp_path / f"{user}.key"
    issue_client_cert(pki, user, groups, crt, key)
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.load_cert_chain(str(crt), str(key))
    return ctx


def test_the_apiservers_client_reads_logs_others_are_refused(server: Served, tmp_path: Path) -> None:
    srv, pki, ip, asked = server.srv, server.pki, server.ip, server.asked
    apiserver = ssl.create_default_context(cafile=str(pki.ca_crt))
    apiserver.load_cert_chain(str(pki.kubelet_client_crt), str(pki.kubelet_client_key))
    # The serving certificate is checked for the node's address, as --kubelet-certificate-authority does.
    assert _get(ip, srv.port, "/containerLogs/ns/pod/main", apiserver) == (200, b"line 1\nline 2\n")
    assert _get(ip, srv.port, "/containerLogs/ns/pod/main?tailLines=1", apiserver) == (200, b"line 2\n")
    # A name that is not a Kubernetes name (an escaped path) is refused, no file is looked for.
    code, _ = _get(ip, srv.port, "/containerLogs/ns/..%2F..%2Fetc/main", apiserver)
    assert code == 400
    code, body = _get(ip, srv.port, "/containerLogs/ns/other/main", apiserver)
    assert code == 400 and b'container "main" in pod "other" is waiting to start' in body
    assert _get(ip, srv.port, "/pods", apiserver)[0] == 404
    assert asked[0] == ("kube-apiserver-kubelet-client", ["system:masters"], "node-a")

    # A certificate of the CA whose user may not get nodes/proxy: 403.
    code, body = _get(ip, srv.port, "/containerLogs/ns/pod/main", _client(pki, tmp_path, "mallory", ("x",)))
    assert code == 403 and b"user=mallory" in body

    # No client certificate: no TLS session at all.
    anonymous = ssl.create_default_context(cafile=str(pki.ca_crt))
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.RemoteDisconnected)):
        _get(ip, srv.port, "/containerLogs/ns/pod/main", anonymous)


def test_follow_streams_until_the_container_exits(server: Served) -> None:
    srv, pki, ip, ref = server.srv, server.pki, server.ip, server.ref
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.load_cert_chain(str(pki.kubelet_client_crt), str(pki.kubelet_client_key))

    def write_then_exit() -> None:
        time.sleep(0.5)
        with open(ref.path, "ab") as f:
            f.write(b"line 3\n")
        time.sleep(0.5)
        ref.running = False

    threading.Thread(target=write_then_exit).start()
    t0 = time.monotonic()
    code, body = _get(ip, srv.port, "/containerLogs/ns/pod/main?follow=true&tailLines=1", ctx)
    assert code == 200 and body == b"line 2\nline 3\n"
    assert time.monotonic() - t0 >= 0.9


def test_a_printed_line_is_waited_for_not_missed(tmp_path: Path) -> None:
    """A container is ready once its process runs; its first line can reach the log a moment
    later. printed_env waits for the line (CI of 4b08b31 read the log too early and failed)."""
    from localcluster.paths import ClusterPaths
    from localcluster.testing import printed_env

    paths = ClusterPaths(tmp_path)
    paths.pod_logs.mkdir(parents=True)
    logf = paths.pod_logs / "ns_p_main.log"

    def write_late() -> None:
        time.sleep(0.5)
        logf.write_text("NVIDIA_VISIBLE_DEVICES=void\nDEVCLUSTER_CDI_DEVICES=MIG-1\n")

    writer = threading.Thread(target=write_late)
    writer.start()
    try:
        assert printed_env("ns", "p", "DEVCLUSTER_CDI_DEVICES", paths=paths) == "MIG-1"
    finally:
        writer.join()
    assert printed_env("ns", "p", "NVIDIA_VISIBLE_DEVICES", paths=paths) == "void"
    with pytest.raises(AssertionError, match="has no OTHER line"):
        printed_env("ns", "p", "OTHER", paths=paths, timeout=0.3)
