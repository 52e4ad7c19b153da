"""The session's orchestration without a spawner: a start's GPU phase (`hub.lifecycle`), the
poll's healing and reclaim handling (`hub.reconcile`), the kernel host started beside the
notebook pod (`hub.kernelhost`), and the notebook side's wait for a gateway still starting
(`notebook.kernels.GatewayWait`), all on plain objects: no KubeSpawner, no cluster."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gpusessions.core import claims as C
from gpusessions.core import kernels as K
from gpusessions.core import progress as P
from gpusessions.core.progress import Refused
from gpusessions.core.queues import QueuePolicy
from gpusessions.hub import lifecycle, steps
from gpusessions.hub.kernelhost import STARTING, KernelHost
from gpusessions.hub.reconcile import HOLDER_LOST_RECREATED, HOLDER_LOST_RELEASED, KERNELS_LOST, Reconcile
from gpusessions.hub.session import GPUSession, SessionNames
from gpusessions.kube.api import Conflict, KubeError
from gpusessions.notebook.kernels import GatewayWait
from localcluster.testing import allocation_status

Obj = dict[str, Any]
REQUEST = C.GPURequest("mig.nvidia.com", 1, ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",))
NAMES = SessionNames("ns", "gpu-ann", "gpu-holder-ann", "ann", "", "mig-1g-10gb")
KERNELS = K.KernelSettings(image="nb:1", secret=K.secret_name(NAMES.holder))
LOG = logging.getLogger("test")


def holder_pod(ip: str | None = "127.0.0.9", ready: bool = False, phase: str = "Running") -> Obj:
    pod = C.build_holder_pod(
        NAMES.holder,
        NAMES.namespace,
        NAMES.claim,
        C.HolderSettings("holder:1", {}),
        "ann",
        "",
        kernels=KERNELS,
    )
    pod["metadata"]["resourceVersion"] = "7"
    status: Obj = {"phase": phase, "containerStatuses": [{"name": K.KERNELS_CONTAINER, "ready": ready}]}
    if ip:
        status["podIP"] = ip
    pod["status"] = status
    return pod


class FakeAPI:
    """Objects in memory; every call is recorded, so a test sees which reads were made."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.claims: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        self.secrets: dict[str, Obj] = {}
        self.policies: dict[str, Obj] = {}
        self.events: list[Obj] = []
        self.allocate = True  # a created claim comes back allocated and reserved for the holder
        self.pod_states: list[Obj] = []  # what get_pod answers next for the holder, in turn

    async def get_device_class(self, name: str) -> Obj | None:
        self.calls.append("get DeviceClass")
        return {"metadata": {"name": name}}

    async def get_claim(self, namespace: str, name: str) -> Obj | None:
        self.calls.append("get claim")
        return self.claims.get(name)

    async def create_claim(self, body: Obj) -> Obj:
        self.calls.append("create claim")
        name = body["metadata"]["name"]
        if name in self.claims:
            raise Conflict("exists")
        body["metadata"]["uid"] = "u-1"
        if self.allocate:
            body["status"] = {
                **allocation_status("gpu-node-0", "gpu-0-mig-1g10gb-0", "gpu-node-0"),
                "reservedFor": [{"resource": "pods", "name": NAMES.holder}],
            }
        self.claims[name] = body
        return body

    async def label_claim(self, namespace: str, name: str, labels: dict[str, str]) -> bool:
        return True

    async def delete_claim(self, namespace: str, name: str) -> bool:
        self.calls.append("delete claim")
        return self.claims.pop(name, None) is not None

    async def get_secret_metadata(self, namespace: str, name: str) -> Obj | None:
        self.calls.append("get Secret")
        return (self.secrets.get(name) or {}).get("metadata")

    async def create_secret(self, body: Obj) -> None:
        self.calls.append("create Secret")
        if body["metadata"]["name"] in self.secrets:
            raise Conflict("exists")
        self.secrets[body["metadata"]["name"]] = body

    async def delete_secret(self, namespace: str, name: str) -> bool:
        return self.secrets.pop(name, None) is not None

    async def get_network_policy(self, namespace: str, name: str) -> Obj | None:
        self.calls.append("get NetworkPolicy")
        return self.policies.get(name)

    async def create_network_policy(self, body: Obj) -> None:
        self.calls.append("create NetworkPolicy")
        self.policies[body["metadata"]["name"]] = body

    async def delete_network_policy(self, namespace: str, name: str) -> bool:
        return self.policies.pop(name, None) is not None

    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        self.calls.append("get pod")
        if self.pod_states and name in self.pods:
            self.pods[name] = self.pod_states.pop(0) if len(self.pod_states) > 1 else self.pod_states[0]
        return self.pods.get(name)

    async def create_pod(self, body: Obj) -> Obj:
        self.calls.append("create pod")
        if body["metadata"]["name"] in self.pods:
            raise Conflict("exists")
        body["metadata"]["uid"] = "p-1"
        self.pods[body["metadata"]["name"]] = body
        return body

    async def annotate_pod(self, namespace: str, name: str, values: dict[str, Any]) -> bool:
        self.calls.append("annotate pod")
        if name not in self.pods:
            return False
        md = self.pods[name]["metadata"]
        md["annotations"] = {**(md.get("annotations") or {}), **values}
        return True

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> bool:
        self.calls.append("delete pod")
        return self.pods.pop(name, None) is not None

    async def wait_events(self, namespace: str, field_selector: str, found: Any, timeout: float) -> Any:
        self.calls.append(f"events {field_selector} ({timeout:g} s)")
        return found(self.events)


def cold_session(api: FakeAPI, said: list[str], kernels: K.KernelSettings | None = KERNELS) -> GPUSession:
    return GPUSession(
        api,  # type: ignore[arg-type]
        NAMES,
        REQUEST,
        C.HolderSettings("holder:1", {}),
        emit=said.append,
        poll_interval=0.01,
        kernels=kernels,
        claim_seen=lambda ns, name: False,  # the shared watch shows no claim
        class_seen=lambda name: True,
    )


# -- the start: objects made without reading first, the gateway's address before it is up ----
def test_a_cold_start_creates_without_reads_and_gives_the_gateway_address_before_it_is_ready() -> None:
    api, said = FakeAPI(), []
    api.pod_states = [holder_pod(ip=None), holder_pod(), holder_pod(ready=True)]
    session = cold_session(api, said)

    async def run() -> tuple[Any, str | None]:
        alloc = await session.ensure(30)
        return alloc, await session.kernel_host_ready()

    alloc, url = asyncio.run(run())
    assert api.calls[:5] == [
        "create claim",
        "create Secret",
        "create NetworkPolicy",
        "create pod",
        "get claim",
    ]
    assert "get DeviceClass" not in api.calls  # the watch shows it
    assert alloc.gateway_url == "http://127.0.0.9:8888" and alloc.kernel_host_starting
    assert url == "http://127.0.0.9:8888"
    assert said.count(STARTING) == 1, said
    assert said[0] == P.waiting(REQUEST.describe(), None)


def test_waits_read_the_watch_copy_of_the_very_objects_this_start_made() -> None:
    api, said = FakeAPI(), []
    session = cold_session(api, said)
    ready = holder_pod(ready=True)
    stale_claim = {"metadata": {"name": NAMES.claim, "uid": "old"}, "status": {}}

    def cached(kind: str, namespace: str, name: str) -> Obj | None:
        if kind == "claim":
            return api.claims.get(name)
        pod = api.pods.get(name)
        return (
            None
            if pod is None
            else {**ready, "metadata": {**ready["metadata"], "uid": pod["metadata"]["uid"]}}
        )

    session.cached = cached
    alloc = asyncio.run(session.ensure(30))
    assert api.calls == ["create claim", "create Secret", "create NetworkPolicy", "create pod"], (
        "no reads at all"
    )
    assert alloc.gateway_url == "http://127.0.0.9:8888" and not alloc.kernel_host_starting
    # A claim of the same name from before (another uid) is not taken for this one.
    session.cached = lambda kind, namespace, name: stale_claim if kind == "claim" else None
    assert session._seen("claim") is None


def test_a_claim_the_watch_missed_is_read_after_its_409_and_adopted() -> None:
    api, said = FakeAPI(), []
    kept = C.build_claim(NAMES.claim, NAMES.namespace, REQUEST, NAMES.username, NAMES.servername)
    kept["status"] = {
        **allocation_status("gpu-node-0", "gpu-0-mig-1g10gb-0", "gpu-node-0"),
        "reservedFor": [{"resource": "pods", "name": NAMES.holder}],
    }
    api.claims[NAMES.claim] = kept
    api.pods[NAMES.holder] = holder_pod(ready=True)
    api.pods[NAMES.holder]["metadata"]["annotations"][C.L.CLAIM_ANNOTATION] = NAMES.claim
    api.secrets[KERNELS.secret] = K.build_secret(
        KERNELS.secret, "ns", "t", "ann", "", {**kept, "metadata": {**kept["metadata"], "uid": "u-1"}}
    )
    kept["metadata"]["uid"] = "u-1"
    alloc = asyncio.run(cold_session(api, said).ensure(30))
    assert api.calls[:2] == ["create claim", "get claim"], "a 409 decides again, reading"
    assert alloc.kept and not alloc.kernel_host_starting and alloc.gateway_url == "http://127.0.0.9:8888"
    # A kept claim's objects are read first (they most likely exist), not created.
    assert "create Secret" not in api.calls and "create pod" not in api.calls


def test_a_kept_claim_on_a_broken_gpu_is_released_and_a_new_one_made() -> None:
    api, said = FakeAPI(), []
    kept = C.build_claim(NAMES.claim, NAMES.namespace, REQUEST, NAMES.username, NAMES.servername)
    kept["metadata"]["uid"] = "u-0"
    kept["status"] = allocation_status("gpu-node-0", "gpu-0-mig-1g10gb-0", "gpu-node-0")
    api.claims[NAMES.claim] = kept
    session = cold_session(api, said, kernels=None)
    session.claim_seen = lambda ns, name: True
    xid = {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    session.broken = lambda claim: [xid] if claim["metadata"]["uid"] == "u-0" else []
    alloc = asyncio.run(session.ensure(30))
    assert said[0] == (
        "The GPU kept for you reported a fatal error (XID 79): releasing it and allocating a "
        "healthy GPU of the same size ..."
    )
    assert api.calls[:3] == ["get claim", "delete pod", "delete claim"], api.calls
    assert not alloc.kept and alloc.claim["metadata"]["uid"] == "u-1", "a new claim, not the kept one"


def test_create_first_falls_back_to_reading_on_a_conflict() -> None:
    made: list[str] = []

    async def get() -> Obj | None:
        made.append("get")
        return {"metadata": {"labels": {}}}

    async def adopt(obj: Obj) -> bool:
        return True

    async def create() -> Obj:
        made.append("create")
        raise Conflict("exists")

    _, adopted = asyncio.run(
        steps.adopt_or_create("pod", "holder pod", "h", "ns", "r", lambda o: True, get, adopt, create, True)
    )
    assert adopted and made == ["create", "get"]


def test_the_kernel_host_wait_is_woken_by_the_holder_watch_and_times_out_in_words() -> None:
    api, said = FakeAPI(), []
    api.pods[NAMES.holder] = holder_pod()
    waits: list[tuple[str | None, float]] = []

    async def changed(namespace: str, name: str, seen: str | None, timeout: float) -> None:
        waits.append((seen, timeout))

    host = KernelHost(api, "ns", NAMES.holder, "ann", "", KERNELS, said.append, 0.5, changed)
    with pytest.raises(Refused) as e:
        asyncio.run(host.ready(0.05))
    assert e.value.reason == "kernels-timeout"
    assert waits and all(seen == "7" for seen, _ in waits), "waits on the watch from the version it read"
    assert said == [STARTING]


def test_with_kernel_host_waits_for_both_and_cancels_the_host_when_the_pod_fails() -> None:
    async def run(pod_fails: bool) -> tuple[Any, asyncio.Future[str | None]]:
        host: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()

        async def started() -> str:
            await asyncio.sleep(0.01)
            if pod_fails:
                raise RuntimeError("pod failed")
            asyncio.get_running_loop().call_later(0.05, host.set_result, "http://gw")
            return "http://notebook"

        try:
            return await lifecycle.with_kernel_host(started(), lambda: host), host
        except RuntimeError as e:
            return e, host

    url, host = asyncio.run(run(False))
    assert url == "http://notebook" and host.result() == "http://gw"
    err, host = asyncio.run(run(True))
    assert isinstance(err, RuntimeError) and host.cancelled()


# -- prepare: the start's GPU phase ---------------------------------------------------------
class View:
    """A cluster picture that cannot tell (still listing): the size check says nothing."""

    figures = None
    errors: list[str] = []

    async def wait_ready(self, timeout: float = 10) -> bool:
        return False

    def derived(self) -> Any:
        raise AssertionError("not read when not ready")


def _prepare(request: C.GPURequest, api: FakeAPI, state: dict[str, str], said: list[str]) -> Any:
    return asyncio.run(
        lifecycle.prepare(
            request,
            lambda r: cold_session(api, said, kernels=None if r is None else KERNELS),
            state,
            timeout=30,
            queue="team-a",
            kept_settings={"keep_gpu_on_stop": True},
            view=View,
            emit=said.append,
            log=LOG,
            who="ann",
        )
    )


def test_prepare_saves_what_a_restarted_hub_needs() -> None:
    api, said = FakeAPI(), []
    api.pod_states = [holder_pod(ready=True)]
    prepared = _prepare(REQUEST, api, {}, said)
    assert prepared.alloc is not None and prepared.alloc.node == "gpu-node-0"
    state = prepared.state
    assert {k: state[k] for k in ("namespace", "claim", "holder", "profile", "kernels", "queue")} == {
        "namespace": "ns",
        "claim": "gpu-ann",
        "holder": "gpu-holder-ann",
        "profile": "mig-1g-10gb",
        "kernels": "1",
        "queue": "team-a",
    }
    assert state["request_hash"] == REQUEST.hash() and state["settings"] == '{"keep_gpu_on_stop": true}'
    assert state["park"] == ("1" if KERNELS.park else "")


def test_prepare_for_a_cpu_profile_releases_the_kept_gpu_and_an_api_error_is_a_refusal() -> None:
    api, said = FakeAPI(), []
    api.claims[NAMES.claim] = {"metadata": {"name": NAMES.claim}}
    prepared = _prepare(C.GPURequest(), api, {"claim": NAMES.claim}, said)
    assert prepared.alloc is None and prepared.state == {}
    assert said == ["You picked a profile without a GPU: releasing the GPU you had ..."]
    assert NAMES.claim not in api.claims

    class Failing(FakeAPI):
        async def create_claim(self, body: Obj) -> Obj:
            raise KubeError(403, "forbidden")

    with pytest.raises(Refused) as e:
        _prepare(REQUEST, Failing(), {}, [])
    assert (
        e.value.reason == "gpu-api-error"
        and e.value.message == "The cluster refused the GPU request: forbidden"
    )


# -- reconcile: the poll's work ---------------------------------------------------------------
class Holders:
    def __init__(self, objects: dict[str, Obj]) -> None:
        self.objects = objects
        self.error: str | None = None
        self.ready = asyncio.Event()
        self.ready.set()


def _reconcile(api: FakeAPI, done: list[str], **kw: Any) -> Reconcile:
    class Session:
        async def heal_holder(self) -> str:
            done.append("healed")
            return "recreated"

    async def release() -> bool:
        done.append("released")
        return True

    return Reconcile(
        api=api,
        names=NAMES,
        notebook_pod="jupyter-ann",
        policy=QueuePolicy(),
        session=lambda: Session(),  # type: ignore[arg-type,return-value]
        release=release,
        notify=lambda text: done.append(f"told: {text}"),
        log=LOG,
        **kw,
    )


def test_a_healthy_holder_in_the_watch_costs_no_api_call() -> None:
    api, done = FakeAPI(), []
    holders = Holders({"ns/gpu-holder-ann": holder_pod(ready=True)})
    assert asyncio.run(_reconcile(api, done, holders=holders).running()) is None
    assert api.calls == [] and done == []


def test_a_lost_holder_is_recreated_or_released_as_configured() -> None:
    api, done = FakeAPI(), []
    assert asyncio.run(_reconcile(api, done, kernels=True).running()) is None
    assert done == ["healed", f"told: {HOLDER_LOST_RECREATED}{KERNELS_LOST}"]
    done.clear()
    assert asyncio.run(_reconcile(api, done, on_holder_loss="release").running()) == 1
    assert done == [f"told: {HOLDER_LOST_RELEASED}", "released"]


def _evict(pod: str) -> Obj:
    return {
        "reason": "Evict",
        "message": f"Pod ns/{pod} was preempted by workload ns/pg-team-b-job.",
        "lastTimestamp": "2026-12-01T10:00:00Z",
    }


def test_a_holder_kai_evicted_is_released_with_the_reclaim_notice_not_recreated() -> None:
    api, done = FakeAPI(), []
    api.events = [_evict(NAMES.holder)]
    assert asyncio.run(_reconcile(api, done, queue="team-a", evict_event_wait=5).running()) == 1
    assert done[0].startswith(
        "told: Your GPU session was taken back by the scheduler: your team's queue team-a"
    )
    assert done[1:] == ["released"]
    assert "parked" not in done[0], "kernels that did not park are not said to be parked"
    assert api.calls == [
        "get pod",
        "events involvedObject.kind=Pod,reason=DeviceTaintManagerEviction (2 s)",
        "events involvedObject.kind=PodGroup,reason=Evict (5 s)",
    ], "one read of the holder; a device taint's eviction looked for first"


def test_a_reclaim_of_a_parking_holder_tells_the_user_the_kernels_were_parked() -> None:
    api, done = FakeAPI(), []
    api.events = [_evict(NAMES.holder)]
    r = _reconcile(api, done, queue="team-a", evict_event_wait=5, kernels=True, parks=True)
    assert asyncio.run(r.running()) == 1
    assert "Your kernels were parked first" in done[0] and "start again and they are restored" in done[0]
    assert done[1:] == ["released"]


def test_a_stopped_server_is_a_reclaim_only_with_an_evict_event_for_its_pods() -> None:
    api, done = FakeAPI(), []
    api.pods[NAMES.holder] = holder_pod(ready=True)
    assert not asyncio.run(_reconcile(api, done, queue="team-a").stopped())
    assert api.calls == ["get pod"], "a running holder: no events read"
    api.pods.clear()
    api.events = [_evict("someone-else")]
    assert not asyncio.run(_reconcile(api, done, queue="team-a").stopped())
    api.events = [_evict("jupyter-ann")]
    assert asyncio.run(_reconcile(api, done, queue="team-a").stopped())
    assert done[-1] == "released"


# -- the notebook side: a gateway still starting ---------------------------------------------
def test_the_notebook_waits_for_a_gateway_that_starts_late_and_gives_up_in_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def run() -> tuple[bool, bool]:
        probe = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        late: list[asyncio.Server] = []

        async def start_late() -> None:
            await asyncio.sleep(0.3)
            late.append(await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port))

        task = asyncio.create_task(start_late())
        wait = GatewayWait(f"http://127.0.0.1:{port}", 10, LOG, interval=0.05)
        came = await wait()
        await task
        late[0].close()
        gone = GatewayWait(f"http://127.0.0.1:{port}", 0.2, LOG, interval=0.05)
        return came, await gone()

    with caplog.at_level(logging.INFO, logger="test"):
        came, gone = asyncio.run(run())
    assert came and not gone
    assert "is still starting; waiting for it (at most 10 s)" in caplog.text
    assert "the kernel host answers (after" in caplog.text
    assert "did not answer within 0 s: kernels cannot start until it does" in caplog.text


def test_the_start_is_done_once_the_notebook_server_listens_and_says_so_when_it_never_does() -> None:
    """JupyterHub's own check after a start backs off up to 5 s between tries: the spawner looks
    for the server's port itself, every `notebook_listen_interval`, and is done when it listens."""

    async def run() -> tuple[float, float, str]:
        probe = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
        port = probe.sockets[0].getsockname()[1]
        probe.close()
        await probe.wait_closed()
        listening = asyncio.Event()
        late: list[asyncio.Server] = []

        async def listen_later() -> None:
            await listening.wait()
            late.append(await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port))

        task = asyncio.create_task(listen_later())
        wait = asyncio.create_task(lifecycle.notebook_listening(f"http://127.0.0.1:{port}", 10, 0.05))
        for _ in range(20):  # several looks find nothing
            await asyncio.sleep(0)
        assert not wait.done()
        listening.set()
        await task
        t0 = asyncio.get_running_loop().time()
        await wait
        took = asyncio.get_running_loop().time() - t0
        late[0].close()
        await late[0].wait_closed()
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(Refused) as e:
            await lifecycle.notebook_listening(f"http://127.0.0.1:{port}", 0.3, 0.05)
        return took, asyncio.get_running_loop().time() - t0, e.value.message

    took, gave_up, message = asyncio.run(run())
    assert took < 1.0, took
    assert 0.25 < gave_up < 2.0, gave_up
    assert message.startswith(
        "Your notebook server's pod started, but the server in it did not answer within 0.3 s"
    )


# -- parking: holders go with their grace period, and a terminating one is waited for --------
class GraceAPI(FakeAPI):
    """Records each pod delete's grace; a terminating holder is gone after `stops` reads."""

    def __init__(self, stops: int = 0) -> None:
        super().__init__()
        self.graces: list[int | None] = []
        self.stops = stops

    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        pod = self.pods.get(name)
        if pod is not None and pod["metadata"].get("deletionTimestamp"):
            self.stops -= 1
            if self.stops < 0:
                self.pods.pop(name)
        return await super().get_pod(namespace, name)

    async def delete_pod(self, namespace: str, name: str, grace_seconds: int | None = None) -> bool:
        self.graces.append(grace_seconds)
        return await super().delete_pod(namespace, name, grace_seconds)


def test_a_terminating_holder_is_waited_for_never_forced_and_the_new_one_gets_its_session() -> None:
    api, said = GraceAPI(stops=2), []
    parking = K.KernelSettings(image="nb:1", secret=K.secret_name(NAMES.holder), park=True, park_timeout=30)
    session = cold_session(api, said, kernels=parking)
    claim = {
        "metadata": {"name": NAMES.claim, "namespace": "ns", "uid": "c-1"},
        "spec": REQUEST.spec(),
        "status": allocation_status("pool", "gpu-0", "gpu-node-0"),
    }
    api.claims[NAMES.claim] = claim
    going = holder_pod()
    going["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    api.pods[NAMES.holder] = going
    assert asyncio.run(session.heal_holder()) == "recreated"
    assert api.graces == [], "a holder parking its kernels is not deleted again"
    made = api.pods[NAMES.holder]
    assert "deletionTimestamp" not in made["metadata"]
    assert '"claim": "gpu-ann"' in made["metadata"]["annotations"]["gpusessions.io/session"]
    assert made["spec"]["terminationGracePeriodSeconds"] == 30 + K.PARK_MARGIN
    assert session.release_wait() == 60 + 30 + K.PARK_MARGIN
    asyncio.run(session.release())
    assert api.graces == [None], "the release deletes the holder with its own grace period"
