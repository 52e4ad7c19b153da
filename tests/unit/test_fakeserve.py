"""The runtime's benchmark images: no process, one shared server answers HTTP per pod."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request

import pytest

from localcluster import podspec
from localcluster.fakeserve import FakeServers


def test_fake_images_map_to_their_modes_before_the_notebook_rule() -> None:
    assert podspec.image_mode("localcluster/fake-singleuser:1") == podspec.FAKE_SINGLEUSER
    assert podspec.image_mode("localcluster/fake-holder") == podspec.FAKE_HOLDER
    assert podspec.image_mode("quay.io/jupyterhub/singleuser:5") == podspec.SINGLEUSER
    assert podspec.first_port({"ports": [{"name": "notebook-port", "containerPort": 8888}]}) == 8888
    assert podspec.first_port({}) is None


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_fake_servers_answer_like_a_notebook_and_an_agent_then_close() -> None:
    fakes = FakeServers()
    nb, agent = _port(), _port()
    fakes.open("pod-a/notebook", "127.0.0.1", nb, podspec.FAKE_SINGLEUSER)
    fakes.open("pod-b/holder", "127.0.0.1", agent, podspec.FAKE_HOLDER, ["MIG-1"])
    with urllib.request.urlopen(f"http://127.0.0.1:{nb}/user/alice/api", timeout=5) as r:
        assert r.status == 200
    req = urllib.request.Request(f"http://127.0.0.1:{nb}/x", data=b"{}", method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 200
    with urllib.request.urlopen(f"http://127.0.0.1:{agent}/api/status", timeout=5) as r:
        body = json.loads(r.read())
    assert body["nvml"]["ok"] and [d["uuid"] for d in body["devices"]] == ["MIG-1"]
    assert not any(d["busy"] for d in body["devices"])
    with pytest.raises(OSError):  # the address is taken while served
        fakes.open("pod-c/notebook", "127.0.0.1", nb, podspec.FAKE_SINGLEUSER)
    fakes.close("pod-a/notebook")
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{nb}/", timeout=2)
    fakes.close("pod-b/holder")
