"""The simulated kubelet's pod status reports (localcluster.kubelet): a status it could not send
(the apiserver was down) is sent again on the next ticks until the apiserver takes it, as a
kubelet's status manager does (no cluster: the runtime's API is a stand-in that refuses
connections while "down")."""

from __future__ import annotations

from typing import Any

import urllib3

from localcluster import podspec
from localcluster.kubeapi import ApiError
from localcluster.kubelet import Container, PodRun, Runtime


class FlakyAPI:
    def __init__(self) -> None:
        self.down = True
        self.sent: list[dict[str, Any]] = []
        self.deleted: list[str] = []

    def patch(self, kind: str, name: str, body: dict[str, Any], namespace: str, **kw: Any) -> None:
        if self.down:
            raise urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
        self.sent.append(body["status"])

    def delete(self, kind: str, name: str, namespace: str, **kw: Any) -> None:
        if self.down:
            raise ApiError(503, "ServiceUnavailable", "the apiserver is starting")
        self.deleted.append(name)


def _runtime(api: FlakyAPI) -> tuple[Runtime, PodRun]:
    rt = Runtime.__new__(Runtime)  # no node, no threads: only the status path is exercised
    pod = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {"containers": [{"name": "c"}]}}
    run = PodRun("u1", "ns", "p", "node", "127.1.0.9", "127.0.0.1", "Always", pod)
    run.containers["c"] = Container(name="c", mode=podspec.NONE)
    rt.api = api  # type: ignore[assignment]
    rt.pending = {}
    rt.undeleted = {}
    rt.pods = {run.uid: run}
    return rt, run


def test_a_status_the_apiserver_did_not_take_is_sent_again_until_it_does() -> None:
    api = FlakyAPI()
    rt, run = _runtime(api)
    rt._report(run)  # a change seen while the apiserver is down
    assert run.unreported and api.sent == []
    rt._tick()  # still down: kept, not lost
    assert run.unreported and api.sent == []
    api.down = False
    rt._tick()
    assert not run.unreported
    assert [s["phase"] for s in api.sent] == ["Running"]
    rt._tick()  # nothing changed since: nothing more is sent
    assert len(api.sent) == 1


def test_a_final_delete_the_apiserver_did_not_take_is_sent_again_until_it_does() -> None:
    """A deleted pod whose last delete (grace 0) got a 503 stays known and is deleted again on
    the next ticks: forgotten, it would stay Terminating for good, its claim reserved."""
    api = FlakyAPI()
    rt, run = _runtime(api)
    run.deleting = True  # no process left: the pod's containers are done
    rt._tick()
    assert run.uid in rt.pods and api.deleted == []
    rt._tick()  # still refused: kept
    assert run.uid in rt.pods and api.deleted == []
    api.down = False
    rt.ips = type("Ips", (), {"release": lambda self, ip: None})()  # type: ignore[assignment]
    rt.log_refs = {}
    rt._tick()
    assert api.deleted == ["p"] and run.uid not in rt.pods
