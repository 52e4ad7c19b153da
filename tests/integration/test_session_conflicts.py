"""A claim or holder that already exists (409): adopted when ours and matching, refused otherwise.

On the real apiserver: through the hub (a hub that lost its state finds the objects it made
before), and through `GPUSession` with the race made certain: its first read does not see
the object, so the create gets the apiserver's 409 and the session must decide again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import config as kube_config

from gpusessions.core import claims as C
from gpusessions.hub.session import Allocation, GPUSession, Refused, SessionNames
from gpusessions.kube.api import Obj, SessionAPI
from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI
from localcluster.paths import ClusterPaths
from localcluster.testing import exec_pod

from .hubtools import follow_spawn, gpu_hub, gpu_objects, spawn, start, stop, wait_ready

pytestmark = pytest.mark.cluster
ONE_G = {"profile": "mig-1g-10gb"}
ONE_G_REQUEST = C.GPURequest(
    "mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",)
)


def test_a_hub_that_lost_its_state_adopts_the_claim_and_holder_it_made(
    hub: Hub, api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """The hub's database is gone (a new hub, say, after a crash between creating the objects and
    saving its state): the user's next start finds claim and holder, ours and matching, and
    keeps them."""
    spawn(hub, "nora", ONE_G)
    claim = api.get("ResourceClaim", "gpu-nora", namespace)
    holder = api.get("Pod", "gpu-holder-nora", namespace)
    stop(hub, "nora")
    hub.stop()
    fresh = gpu_hub(namespace, tmp_path / "fresh-hub")
    try:
        (code, body), messages = follow_spawn(fresh, "nora", ONE_G)
        assert code in (201, 202), (code, body)
        wait_ready(fresh, "nora")
        assert any(m.startswith("GPU kept from your last start, reattaching") for m in messages), messages
        assert api.get("ResourceClaim", "gpu-nora", namespace)["metadata"]["uid"] == claim["metadata"]["uid"]
        assert api.get("Pod", "gpu-holder-nora", namespace)["metadata"]["uid"] == holder["metadata"]["uid"]
        objs = gpu_objects(api, namespace)
        assert (len(objs["claims"]), len(objs["holders"]), len(objs["notebooks"])) == (1, 1, 1)
    finally:
        fresh.stop()


def test_a_hub_that_lost_its_state_releases_the_gpu_when_the_user_picks_cpu_only(
    hub: Hub, api: KubeAPI, namespace: str, tmp_path: Path
) -> None:
    """Same loss of state; the user's next start is CPU only: the claim and holder found by name,
    ours, are released (the hub's state never knew them), and the user is told."""
    spawn(hub, "otto", ONE_G)
    stop(hub, "otto")
    hub.stop()
    fresh = gpu_hub(namespace, tmp_path / "fresh-hub")
    try:
        (code, body), messages = follow_spawn(fresh, "otto", {"profile": "cpu"})
        assert code in (201, 202), (code, body)
        wait_ready(fresh, "otto")
        assert any("released a GPU left from an earlier start" in m for m in messages), messages
        waits.wait_for(
            lambda: gpu_objects(api, namespace)["claims"] == [], 30, "otto's old claim to be released"
        )
        assert gpu_objects(api, namespace)["holders"] == []
    finally:
        fresh.stop()


@pytest.mark.shared_hub
def test_a_holder_pod_that_is_not_ours_is_refused_and_left_alone(
    hub: Hub, api: KubeAPI, namespace: str
) -> None:
    api.create(exec_pod("gpu-holder-olga", command=["sleep", "3600"]), namespace)
    before = api.get("Pod", "gpu-holder-olga", namespace)
    code, body = start(hub, "olga", ONE_G)
    assert code == 400, (code, body)
    assert body["message"] == (
        f"A pod named gpu-holder-olga already exists in {namespace} and does not belong to this "
        "server; nothing was changed. Ask your admin."
    )
    assert api.get("Pod", "gpu-holder-olga", namespace)["metadata"]["uid"] == before["metadata"]["uid"]
    assert api.get_or_none("Pod", "jupyter-olga", namespace) is None
    assert gpu_objects(api, namespace)["claims"] == [], "the claim made for this start is withdrawn"


class RacingAPI(SessionAPI):
    """The real API, except that the first read of the claim and of the holder finds nothing,
    as when another hub process creates them just after this one looked."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = {"claim", "pod"}
        self.conflicts: list[str] = []

    def _first_read_misses(self, kind: str) -> bool:
        missed = kind in self.hidden
        self.hidden.discard(kind)
        return missed

    async def get_claim(self, namespace: str, name: str) -> Obj | None:
        return None if self._first_read_misses("claim") else await super().get_claim(namespace, name)

    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        return None if self._first_read_misses("pod") else await super().get_pod(namespace, name)

    async def _noted(self, kind: str, create: Callable[[Obj], Awaitable[Obj]], body: Obj) -> Obj:
        try:
            return await create(body)
        except Exception as e:
            self.conflicts.append(f"{kind}: {type(e).__name__}")
            raise

    async def create_claim(self, body: Obj) -> Obj:
        return await self._noted("claim", super().create_claim, body)

    async def create_pod(self, body: Obj) -> Obj:
        return await self._noted("pod", super().create_pod, body)


def _names(namespace: str, user: str) -> SessionNames:
    return SessionNames(namespace, f"gpu-{user}", f"gpu-holder-{user}", user, "", "mig-1g-10gb")


def _holder_settings() -> C.HolderSettings:
    return C.HolderSettings(image="gpusessions-holder:0.1.0", resources={"requests": {"cpu": "10m"}})


async def _ensure(namespace: str, user: str, api: RacingAPI | None = None) -> tuple[Any, RacingAPI]:
    await kube_config.load_kube_config(config_file=str(ClusterPaths.default().kubeconfig))
    api = api or RacingAPI()
    session = GPUSession(
        api,
        _names(namespace, user),
        ONE_G_REQUEST,
        _holder_settings(),
        emit=lambda m: None,
        log=logging.getLogger("test"),
    )
    try:
        return await session.ensure(60), api
    except Refused as e:
        return e, api


def test_a_409_on_our_matching_claim_and_holder_adopts_them(api: KubeAPI, namespace: str) -> None:
    n = _names(namespace, "pia")
    api.create(C.build_claim(n.claim, namespace, ONE_G_REQUEST, "pia", "", "mig-1g-10gb"), namespace)
    api.create(C.build_holder_pod(n.holder, namespace, n.claim, _holder_settings(), "pia", ""), namespace)
    claim_uid = api.get("ResourceClaim", n.claim, namespace)["metadata"]["uid"]
    holder_uid = api.get("Pod", n.holder, namespace)["metadata"]["uid"]
    waits.claim_allocated(api, namespace, n.claim)

    result, racing = asyncio.run(_ensure(namespace, "pia"))
    assert racing.conflicts == ["claim: Conflict", "pod: Conflict"], "the apiserver answered 409 to both"
    assert isinstance(result, Allocation), result
    assert result.kept and result.claim["metadata"]["uid"] == claim_uid
    assert api.get("Pod", n.holder, namespace)["metadata"]["uid"] == holder_uid


def test_a_409_on_a_claim_that_is_not_ours_fails_clearly(api: KubeAPI, namespace: str) -> None:
    from localcluster.testing import claim

    api.create(claim("gpu-quinn", "mig.nvidia.com"), namespace)
    uid = api.get("ResourceClaim", "gpu-quinn", namespace)["metadata"]["uid"]

    result, racing = asyncio.run(_ensure(namespace, "quinn"))
    assert racing.conflicts == ["claim: Conflict"]
    assert isinstance(result, Refused) and result.reason == "claim-conflict"
    assert result.message == (
        f"A ResourceClaim named gpu-quinn already exists in {namespace} and does not belong to this "
        "server; nothing was changed. Ask your admin."
    )
    assert api.get("ResourceClaim", "gpu-quinn", namespace)["metadata"]["uid"] == uid
    assert api.get_or_none("Pod", "gpu-holder-quinn", namespace) is None
