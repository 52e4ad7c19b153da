"""GPUSession's seams without a cluster: the queue's admission is asked only before a claim is
created, and the one adopt-or-create helper and the one poller behave as the three copies did."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from gpusessions.core import claims as C
from gpusessions.core.progress import Refused
from gpusessions.hub.session import GPUSession, SessionNames
from gpusessions.kube.api import Conflict

REQUEST = C.GPURequest("mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",))
NAMES = SessionNames("ns", "gpu-ann", "gpu-holder-ann", "ann", "", "mig-1g-10gb")


class FakeAPI:
    """Claims in memory; `conflicts` creates answer 409 (made meanwhile by someone else)."""

    def __init__(self, conflicts: int = 0) -> None:
        self.claims: dict[str, dict[str, Any]] = {}
        self.conflicts = conflicts
        self.created: list[dict[str, Any]] = []

    async def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.claims.get(name)

    async def create_claim(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.conflicts:
            self.conflicts -= 1
            raise Conflict("exists")
        self.created.append(body)
        self.claims[body["metadata"]["name"]] = body
        return body

    async def label_claim(self, namespace: str, name: str, labels: dict[str, str]) -> bool:
        return True

    async def get_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None


class Admission:
    def __init__(self, refuse: bool = False) -> None:
        self.asked: list[C.GPURequest] = []
        self.made: list[dict[str, Any]] = []
        self.refuse = refuse

    def hold(self) -> contextlib.AbstractAsyncContextManager[None]:
        return contextlib.nullcontext()

    def created(self, claim: dict[str, Any]) -> None:
        self.made.append(claim)

    async def admit(self, request: C.GPURequest) -> dict[str, str]:
        self.asked.append(request)
        if self.refuse:
            raise Refused("over quota", reason="team-quota")
        return {"gpusessions.io/gpu-equivalents": "1/7"}


def _session(api: FakeAPI, admission: Admission | None) -> GPUSession:
    holder = C.HolderSettings(image="holder", resources={})
    return GPUSession(api, NAMES, REQUEST, holder, emit=lambda m: None, admission=admission)  # type: ignore[arg-type]


def test_a_new_claim_is_admitted_and_remembers_its_charge() -> None:
    api, admission = FakeAPI(), Admission()
    claim, kept = asyncio.run(_session(api, admission)._ensure_claim())
    assert not kept and admission.asked == [REQUEST]
    assert claim["metadata"]["annotations"]["gpusessions.io/gpu-equivalents"] == "1/7"


def test_a_kept_claim_is_never_asked_about_and_a_refusal_creates_nothing() -> None:
    api = FakeAPI()
    body = C.build_claim(NAMES.claim, NAMES.namespace, REQUEST, NAMES.username, NAMES.servername)
    api.claims[NAMES.claim] = body
    admission = Admission(refuse=True)
    claim, kept = asyncio.run(_session(api, admission)._ensure_claim())
    assert kept and claim is body and admission.asked == []
    empty = FakeAPI()
    with pytest.raises(Refused) as e:
        asyncio.run(_session(empty, Admission(refuse=True))._ensure_claim())
    assert e.value.reason == "team-quota" and empty.created == []


def test_someone_elses_claim_is_refused_and_a_409_decides_again() -> None:
    api = FakeAPI()
    api.claims[NAMES.claim] = {"metadata": {"name": NAMES.claim, "labels": {}, "annotations": {}}}
    with pytest.raises(Refused) as e:
        asyncio.run(_session(api, None)._ensure_claim())
    assert e.value.reason == "claim-conflict" and "does not belong to this server" in e.value.message
    racing = FakeAPI(conflicts=1)
    _, kept = asyncio.run(_session(racing, None)._ensure_claim())
    assert not kept and len(racing.created) == 1
    always = FakeAPI(conflicts=5)
    with pytest.raises(Refused) as e:
        asyncio.run(_session(always, None)._ensure_claim())
    assert e.value.message == f"Could not create the GPU claim {NAMES.claim}: it keeps changing."


def test_the_poller_backs_off_to_its_longest_wait_and_raises_what_expired_gives() -> None:
    session = _session(FakeAPI(), None)
    waits: list[float] = []
    calls = 0

    async def pause(interval: float) -> None:
        waits.append(interval)

    async def fifth_time() -> tuple[bool, str]:
        nonlocal calls
        calls += 1
        return calls == 5, "done"

    async def expired() -> Exception:
        return Refused("gave up", reason="gpu-timeout")

    assert asyncio.run(session._poll(fifth_time, 60, expired, 1.0, 1.5, 2.0, pause)) == "done"
    assert waits == [1.0, 1.5, 2.0, 2.0], "times 1.5 each time, never over the longest"

    async def never() -> tuple[bool, None]:
        return False, None

    with pytest.raises(Refused) as e:
        asyncio.run(session._poll(never, 0.0, expired, 0.0))
    assert e.value.reason == "gpu-timeout"
