"""`kubectl logs` on the local cluster: the kube-apiserver asks the pod's node's kubelet (the
runtime's kubelet API on the node's 127.x address, over TLS with client certificates of the
cluster CA), as on a real cluster."""

from __future__ import annotations

import http.client
import ssl
from pathlib import Path
from typing import Any

import pytest

from localcluster import waits
from localcluster.certs import PKI, issue_client_cert
from localcluster.components import KUBELET_OFFSET
from localcluster.kubeapi import ApiError, KubeAPI
from localcluster.testing import exec_pod

pytestmark = pytest.mark.cluster

FIVE_LINES = ["sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done; exec sleep 3600"]
# The first instance says so and fails; the ones after it stay up.
RESTARTS = [
    "sh",
    "-c",
    'n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo "instance $n"; '
    'if [ "$n" -gt 1 ]; then exec sleep 3600; fi; exit 3',
]


def test_pod_logs_come_from_the_nodes_kubelet(api: KubeAPI, namespace: str, cluster: Any) -> None:
    api.create(exec_pod("p", command=FIVE_LINES), namespace)
    pod = waits.pod_ready(api, namespace, "p")
    text = waits.wait_for(
        lambda: (t := api.pod_log("p", namespace)).endswith("line 5\n") and t, 20, "the pod's five lines"
    )
    assert text == "line 1\nline 2\nline 3\nline 4\nline 5\n"  # the process's output only
    assert api.pod_log("p", namespace, container="main", tailLines=2) == "line 4\nline 5\n"
    assert api.pod_log("p", namespace, limitBytes=6) == "line 1"

    # Where the apiserver went: the node's InternalIP and its kubelet port (one per cluster).
    node = api.get("Node", pod["spec"]["nodeName"])
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    assert port == cluster.state.ports["apiserver"] + KUBELET_OFFSET
    [ip] = [a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP"]
    assert ip.startswith("127.") and ip != "127.0.0.1"

    # The kubelet asks the apiserver whether a client may (nodes/proxy): a certificate of the
    # cluster's CA for a user without that right is refused; the apiserver's own is served.
    pki = PKI(Path(cluster.paths.pki))
    crt, key = Path(cluster.paths.root) / "t-mallory.crt", Path(cluster.paths.root) / "t-mallory.key"
    issue_client_cert(pki, "mallory", ("developers",), crt, key)
    path = f"/containerLogs/{namespace}/p/main"
    assert _kubelet_get(ip, port, path, pki, crt, key)[0] == 403
    assert _kubelet_get(ip, port, path, pki, pki.kubelet_client_crt, pki.kubelet_client_key) == (
        200,
        text.encode(),
    )


def test_previous_and_follow(api: KubeAPI, namespace: str) -> None:
    api.create(exec_pod("r", command=RESTARTS), namespace)
    waits.wait_for(
        lambda: "instance 2" in _log_or_empty(api, namespace, "r"), 30, "the container's second instance"
    )
    assert api.pod_log("r", namespace) == "instance 2\n"
    assert api.pod_log("r", namespace, previous=True) == "instance 1\n"
    with pytest.raises(ApiError) as e:
        api.pod_log("r", namespace, container="nope")
    assert e.value.status == 400

    # follow: the output as it comes, until the container exits.
    api.create(
        exec_pod("f", command=["sh", "-c", "echo a; sleep 2; echo b"], restart_policy="Never"), namespace
    )
    waits.wait_for(lambda: _log_or_empty(api, namespace, "f"), 20, "the first line")
    assert api.pod_log("f", namespace, follow=True) == "a\nb\n"
    with pytest.raises(ApiError) as e:
        api.pod_log("f", namespace, previous=True)
    assert e.value.status == 400 and "previous terminated container" in e.value.message


def _log_or_empty(api: KubeAPI, namespace: str, pod: str) -> str:
    try:
        return api.pod_log(pod, namespace)
    except ApiError:  # not started yet
        return ""


def _kubelet_get(ip: str, port: int, path: str, pki: PKI, crt: Path, key: Path) -> tuple[int, bytes]:
    ctx = ssl.create_default_context(cafile=str(pki.ca_crt))
    ctx.load_cert_chain(str(crt), str(key))
    conn = http.client.HTTPSConnection(ip, port, context=ctx, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()
