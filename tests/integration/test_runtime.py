"""The process runtime behaves like a kubelet where gpusessions depends on it."""

from __future__ import annotations

import ipaddress
import os
import signal
from pathlib import Path

import pytest

from localcluster import waits
from localcluster.kubeapi import KubeAPI
from localcluster.testing import claim, exec_pod

pytestmark = pytest.mark.cluster

ONE_G = ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]


def _pid(api: KubeAPI, ns: str, pod: str) -> int:
    events = waits.events_for(api, ns, "Pod", pod)
    started = [e for e in events if "Started container" in e]
    assert started, events
    return int(started[-1].split("(pid ")[1].split(",")[0])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"


def test_pods_get_unique_loopback_ips_and_the_node_ip(api: KubeAPI, namespace: str) -> None:
    for i in range(4):
        api.create(exec_pod(f"p{i}", command=["sleep", "3600"]), namespace)
    pods = [waits.pod_ready(api, namespace, f"p{i}") for i in range(4)]
    ips = [p["status"]["podIP"] for p in pods]
    assert len(set(ips)) == 4
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network("127.0.0.0/8") for ip in ips)
    node = api.get("Node", pods[0]["spec"]["nodeName"])
    internal = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
    assert {p["status"]["hostIP"] for p in pods} == {internal}


def test_deleting_a_pod_stops_its_process(api: KubeAPI, namespace: str) -> None:
    api.create(exec_pod("p", command=["sleep", "3600"]), namespace)
    waits.pod_ready(api, namespace, "p")
    pid = _pid(api, namespace, "p")
    assert _alive(pid)
    api.delete("Pod", "p", namespace)
    waits.gone(api, "Pod", "p", namespace)
    waits.wait_for(lambda: not _alive(pid), 10, f"process {pid} to end")


def test_a_dead_process_with_restart_never_fails_the_pod_and_releases_its_claim(
    api: KubeAPI, namespace: str
) -> None:
    api.create(claim("c", "mig.nvidia.com", ONE_G), namespace)
    api.create(
        exec_pod("holder", claim_name="c", command=["sleep", "3600"], restart_policy="Never"), namespace
    )
    waits.pod_ready(api, namespace, "holder")
    waits.claim_allocated(api, namespace, "c")
    os.kill(_pid(api, namespace, "holder"), signal.SIGKILL)
    pod = waits.pod_phase(api, namespace, "holder", ("Failed",))
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 128 + signal.SIGKILL
    # As in a real cluster: a finished pod no longer holds its claim.
    waits.claim_deallocated(api, namespace, "c")


def test_a_completed_process_succeeds(api: KubeAPI, namespace: str) -> None:
    api.create(exec_pod("job", command=["true"], restart_policy="Never"), namespace)
    pod = waits.pod_phase(api, namespace, "job", ("Succeeded",))
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


def test_restart_always_restarts_the_process_and_keeps_ip_and_devices(api: KubeAPI, namespace: str) -> None:
    api.create(claim("c", "mig.nvidia.com", ONE_G), namespace)
    api.create(exec_pod("holder", claim_name="c"), namespace)
    before = waits.pod_ready(api, namespace, "holder")
    pid = _pid(api, namespace, "holder")
    os.kill(pid, signal.SIGKILL)

    def restarted() -> dict | None:
        p = api.get("Pod", "holder", namespace)
        cs = p["status"]["containerStatuses"][0]
        return p if cs["restartCount"] == 1 and cs["ready"] else None

    after = waits.wait_for(
        restarted, 30, "the holder to restart once", lambda: waits.explain_pod(api, namespace, "holder")
    )
    cs = after["status"]["containerStatuses"][0]
    assert cs["lastState"]["terminated"]["exitCode"] == 128 + signal.SIGKILL
    assert after["status"]["podIP"] == before["status"]["podIP"]
    assert _pid(api, namespace, "holder") != pid
    # The claim stayed allocated the whole time: the pod never finished.
    assert api.get("ResourceClaim", "c", namespace)["status"]["allocation"]
    assert any("BackOff" in e for e in waits.events_for(api, namespace, "Pod", "holder"))


def test_environment_from_values_fields_and_secrets(api: KubeAPI, namespace: str) -> None:
    api.create(
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"token": "s3cret"}},
        namespace,
    )
    pod = exec_pod("p", command=["sh", "-c", "echo A=$A B=$B C=$C D=$D; exec sleep 3600"])
    pod["spec"]["containers"][0]["env"] = [
        {"name": "A", "value": "plain"},
        {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "C", "valueFrom": {"secretKeyRef": {"name": "s", "key": "token"}}},
        {"name": "D", "value": "$(A)-x"},
    ]
    api.create(pod, namespace)
    p = waits.pod_ready(api, namespace, "p")
    from localcluster.paths import ClusterPaths

    logf = ClusterPaths.default().pod_logs / f"{namespace}_p_main.log"
    want = f"A=plain B={p['status']['podIP']} C=s3cret D=plain-x"
    waits.wait_for(lambda: want in logf.read_text(), 10, f"{want!r} in {logf}")


def test_unknown_executable_is_reported_not_hidden(api: KubeAPI, namespace: str) -> None:
    api.create(exec_pod("p", command=["no-such-program-xyz"], restart_policy="Never"), namespace)
    pod = waits.pod_phase(api, namespace, "p", ("Failed",))
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["reason"] == "StartError"
    assert "no-such-program-xyz" in term["message"]


def test_benchmark_images_are_served_without_a_process_and_stop_with_the_pod(
    api: KubeAPI, namespace: str
) -> None:
    import json
    import urllib.error
    import urllib.request

    api.create(claim("c", "mig.nvidia.com", ONE_G), namespace)
    for name, image, port, claim_name in (
        ("nb", "localcluster/fake-singleuser:1", 8888, None),
        ("holder", "localcluster/fake-holder:1", 9400, "c"),
    ):
        pod = exec_pod(name, claim_name=claim_name)
        main = pod["spec"]["containers"][0]
        main["image"], main["ports"] = image, [{"containerPort": port}]
        api.create(pod, namespace)
    nb, holder = (waits.pod_ready(api, namespace, n) for n in ("nb", "holder"))
    assert not [e for e in waits.events_for(api, namespace, "Pod", "nb") if "Started container" in e]
    with urllib.request.urlopen(f"http://{nb['status']['podIP']}:8888/user/x/api", timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(f"http://{holder['status']['podIP']}:9400/api/status", timeout=5) as r:
        devices = json.loads(r.read())["devices"]
    assert len(devices) == 1 and devices[0]["uuid"].startswith("MIG-") and not devices[0]["busy"]
    api.delete("Pod", "nb", namespace)
    waits.gone(api, "Pod", "nb", namespace)
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://{nb['status']['podIP']}:8888/", timeout=2)


def test_a_deleted_pod_gets_sigterm_and_its_grace_period(api: KubeAPI, namespace: str) -> None:
    """What a holder's park relies on: SIGTERM to the container, then up to
    terminationGracePeriodSeconds before the kill (the park supervisor takes 2 s here)."""
    from localcluster.paths import ClusterPaths

    pod = exec_pod(
        "p",
        command=[
            "sh",
            "-c",
            "trap 'sleep 2; echo parked; exit 0' TERM; echo up; while :; do sleep 0.1; done",
        ],
    )
    pod["spec"]["terminationGracePeriodSeconds"] = 30
    api.create(pod, namespace)
    waits.pod_ready(api, namespace, "p")
    logf = ClusterPaths.default().pod_logs / f"{namespace}_p_main.log"
    waits.wait_for(lambda: "up" in logf.read_text(), 10, "the process to start")
    api.delete("Pod", "p", namespace)
    going = api.get("Pod", "p", namespace)
    assert going["metadata"]["deletionGracePeriodSeconds"] == 30
    waits.gone(api, "Pod", "p", namespace, timeout=30)
    assert "parked" in logf.read_text(), "the process had its grace period to finish"
    assert any("grace period 30s" in e for e in waits.events_for(api, namespace, "Pod", "p"))


def test_downward_api_files_follow_the_pods_annotations(api: KubeAPI, namespace: str) -> None:
    """A kubelet rewrites a downwardAPI file when the annotation changes (the holder's session)."""
    from localcluster.paths import ClusterPaths

    pod = exec_pod("p", command=["sh", "-c", "echo F=$F; exec sleep 3600"])
    pod["metadata"]["annotations"] = {"example.com/info": "one"}
    pod["spec"]["volumes"] = [
        {
            "name": "info",
            "downwardAPI": {
                "items": [
                    {"path": "info", "fieldRef": {"fieldPath": "metadata.annotations['example.com/info']"}}
                ]
            },
        }
    ]
    c = pod["spec"]["containers"][0]
    c["volumeMounts"] = [{"name": "info", "mountPath": "/etc/info", "readOnly": True}]
    c["env"] = [{"name": "F", "value": "/etc/info/info"}]
    api.create(pod, namespace)
    waits.pod_ready(api, namespace, "p")
    logf = ClusterPaths.default().pod_logs / f"{namespace}_p_main.log"
    line = waits.wait_for(
        lambda: next((x for x in logf.read_text().splitlines() if x.startswith("F=")), None), 10, "F"
    )
    path = Path(line.removeprefix("F="))
    assert path.read_text() == "one"
    api.patch("Pod", "p", {"metadata": {"annotations": {"example.com/info": "two"}}}, namespace)
    waits.wait_for(lambda: path.read_text() == "two", 10, "the file to follow the annotation")
