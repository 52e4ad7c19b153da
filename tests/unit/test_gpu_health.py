"""GPU health from device taints: the pure parts (words, counting, the map, metrics, notices,
the simulated driver's taints) and the poll's handling of a NoExecute eviction."""

from __future__ import annotations

import asyncio
import copy
from collections import Counter
from types import SimpleNamespace
from typing import Any

from gpusessions.core import health
from gpusessions.core.availability import Inventory, remaining_counters, size_figures
from gpusessions.core.claims import GPURequest
from gpusessions.culler.fleet import BROKEN, FREE, STATES, fleet, layout
from gpusessions.culler.history import History
from gpusessions.culler.metrics import exposition
from gpusessions.culler.model import Session
from gpusessions.hub import health as hub_health
from gpusessions.hub import notices as hub_notices
from gpusessions.hub import sizecheck
from gpusessions.hub.reconcile import Reconcile
from gpusessions.hub.session import SessionNames
from localcluster import gpuhealth
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import build_slices, device_classes, load_shape

Obj = dict[str, Any]
CLASSES = {dc["metadata"]["name"]: dc for dc in device_classes()}
WHOLE = GPURequest("gpu.nvidia.com", 1)
MESSAGE = (
    "Your GPU reported a fatal error (XID 79); save your work: Release and start again to get a healthy GPU."
)


def _slices() -> list[Obj]:
    return [s for n in load_shape("small", SHAPES_DIR).nodes for s in build_slices(n)]


def _device(slices: list[Obj], name: str) -> Obj:
    return next(d for s in slices for d in s["spec"].get("devices") or [] if d["name"] == name)


def _taint(slices: list[Obj], name: str, taint: Obj, when: str = "2026-12-02T10:00:00Z") -> list[Obj]:
    slices = copy.deepcopy(slices)
    gpuhealth.add_taint(_device(slices, name), taint)
    for t in _device(slices, name)["taints"]:
        t["timeAdded"] = when  # as the apiserver sets it
    return slices


def _claim(device: str, server: str = "") -> Obj:
    return {
        "metadata": {
            "name": "gpu-ann",
            "creationTimestamp": "2026-12-02T09:00:00Z",
            "annotations": {"gpusessions.io/server": server},
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-0", "device": device}
                    ]
                }
            }
        },
    }


def test_the_driver_taint_shapes() -> None:
    assert gpuhealth.xid_taint(79) == {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}
    assert gpuhealth.xid_taint(13)["effect"] == "None", "an application error does not block the GPU"
    assert gpuhealth.gpu_lost_taint() == {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
    d: Obj = {"name": "gpu-1"}
    assert gpuhealth.add_taint(d, gpuhealth.xid_taint(48))
    d["taints"][0]["timeAdded"] = "2026-12-02T10:00:00Z"
    assert not gpuhealth.add_taint(d, gpuhealth.xid_taint(48)), "the same taint again changes nothing"
    assert gpuhealth.add_taint(d, gpuhealth.xid_taint(79))
    assert d["taints"] == [gpuhealth.xid_taint(79)], "one taint per key: the value replaced, timeAdded reset"


def test_the_fake_driver_keeps_taints_across_republishes() -> None:
    want = _slices()[0]
    current = _taint([want], "gpu-1", gpuhealth.xid_taint(79))[0]
    carried = gpuhealth.carry_taints(want, current)
    assert _device([carried], "gpu-1")["taints"] == _device([current], "gpu-1")["taints"]
    assert "taints" not in _device([want], "gpu-1"), "the built slice itself is left alone"


def test_words_for_a_user_and_an_admin() -> None:
    xid = {**gpuhealth.xid_taint(79), "timeAdded": "2026-12-02T10:00:00Z"}
    assert health.user_message([xid]) == MESSAGE
    assert health.user_message([gpuhealth.gpu_lost_taint()]).startswith("Your GPU was lost")
    assert health.reason(xid) == "a fatal error (XID 79)"
    assert health.since([xid]) == 1796205600.0
    assert not health.blocking({"key": "k", "effect": "None"})
    assert health.blocking({"key": "k", "effect": "NoExecute"})


def test_a_tainted_device_is_never_free() -> None:
    slices = _slices()
    inv = Inventory.from_slices(slices)
    f = size_figures(WHOLE, inv, set(), CLASSES, remaining_counters(inv, set()))
    assert (f.free, f.total) == (1, 1)
    broken = Inventory.from_slices(_taint(slices, "gpu-1", gpuhealth.xid_taint(79)))
    f = size_figures(WHOLE, broken, set(), CLASSES, remaining_counters(broken, set()))
    assert (f.state, f.free, f.total) == ("none-free", 0, 1), "broken: there, but not free"
    info = Inventory.from_slices(_taint(slices, "gpu-1", gpuhealth.xid_taint(13)))
    assert size_figures(WHOLE, info, set(), CLASSES, remaining_counters(info, set())).free == 1


def test_the_size_check_names_tainted_devices() -> None:
    inv = Inventory.from_slices(_taint(_slices(), "gpu-1", gpuhealth.xid_taint(79)))
    assert sizecheck.tainted([("h100", WHOLE)], inv, CLASSES) == [
        "profile h100: 1 of 1 device(s) of this size are tainted and are not allocated: "
        "gpu-1 on node gpu-node-0 (a fatal error (XID 79))"
    ]
    assert sizecheck.tainted([("h100", WHOLE)], Inventory.from_slices(_slices()), CLASSES) == []


def test_a_held_broken_gpu_is_a_notice_for_its_user() -> None:
    tainted = health.tainted_devices(_taint(_slices(), "gpu-1", gpuhealth.xid_taint(79)))
    [n] = hub_health.notices([_claim("gpu-1")], tainted)
    assert (n["text"], n["level"], n["kind"], n["at"]) == (MESSAGE, "error", "gpu-health", 1796205600.0)
    assert hub_health.notices([_claim("gpu-1")], tainted, server="other") == []
    assert hub_health.notices([_claim("gpu-2-mig-1g10gb-19-0")], tainted) == []


def test_the_fleet_map_and_metrics_show_broken_devices() -> None:
    slices = _taint(_slices(), "gpu-1", gpuhealth.xid_taint(79))
    s = Session("ns", "gpu-ann", "ann", "", profile="p", queue="q", allocated=True, running=True)
    s.devices = ["gpu-node-0/gpu-1"]
    doc = fleet(layout(slices), [s])
    cell = next(c for n in doc["nodes"] for g in n[2] for c in g[3] if c[0] == "gpu-1")
    assert (STATES[cell[1]], cell[3]) == (BROKEN, 0), "broken, and still held by its session"
    assert doc["totals"]["broken"] == [
        {
            "node": "gpu-node-0",
            "gpu": "GPU 1",
            "device": "gpu-1",
            "why": "a fatal error (XID 79)",
            "session": 0,
        }
    ]
    assert doc["totals"]["devices"][BROKEN] == 1 and doc["totals"]["gpus_by_state"][FREE] == 2
    state = SimpleNamespace(
        sessions=[s],
        actions=Counter(),
        culls=Counter(),
        idle_gpu_seconds={},
        history=History(),
        cycles=1,
        last_cycle_seconds=None,
        cluster=SimpleNamespace(slices=SimpleNamespace(objects={str(i): x for i, x in enumerate(slices)})),
    )
    assert (
        'gpusessions_tainted_devices{device="gpu-1",effect="NoSchedule",held="true",key="gpu.nvidia.com/xid",'
        'node="gpu-node-0",pool="gpu-node-0",value="79"} 1.0'
    ) in exposition(state)  # type: ignore[arg-type]


# -- the poll: pods evicted for a NoExecute taint (an admin's DeviceTaintRule) ----------------
NAMES = SessionNames("ns", "gpu-ann", "gpu-holder-ann", "ann", "")


class _API:
    def __init__(self, events: list[Obj]) -> None:
        self.events = events
        self.selectors: list[str] = []

    async def get_pod(self, namespace: str, name: str) -> Obj | None:
        return None  # the holder is gone

    async def wait_events(self, namespace: str, field_selector: str, found: Any, timeout: float) -> Any:
        self.selectors.append(field_selector)
        return found(self.events)


def _eviction(pod: str) -> Obj:
    return {
        "reason": "DeviceTaintManagerEviction",
        "involvedObject": {"kind": "Pod", "namespace": "ns", "name": pod},
        "lastTimestamp": "2026-12-02T10:00:00Z",
    }


def _poll(events: list[Obj], on_holder_loss: str) -> tuple[int | None, list[str]]:
    done: list[str] = []

    async def release() -> bool:
        done.append("released")
        return True

    class _Session:
        async def heal_holder(self) -> str:
            done.append("healed")
            return "recreated"

    r = Reconcile(
        api=_API(events),  # type: ignore[arg-type]
        names=NAMES,
        notebook_pod="jupyter-ann",
        policy=SimpleNamespace(evict_events_selector="x", evicted_by=lambda *a: None),  # type: ignore[arg-type]
        session=_Session,  # type: ignore[arg-type]
        release=release,
        notify=lambda text: done.append("told: " + text),
        on_holder_loss=on_holder_loss,
    )
    return asyncio.run(r.running()), done


def test_a_taint_eviction_stops_the_server_and_keeps_or_releases_the_gpu() -> None:
    status, done = _poll([_eviction("gpu-holder-ann")], "recreate")
    assert status == 1 and done == ["told: " + health.TAINT_EVICTED_KEPT], (
        "not healed: it would be evicted again"
    )
    status, done = _poll([_eviction("jupyter-ann")], "release")
    assert status == 1 and done == ["told: " + health.TAINT_EVICTED_RELEASED, "released"]
    status, done = _poll([_eviction("someone-else")], "recreate")
    assert status is None and done[0] == "healed", "another pod's eviction: a plain lost holder"
    assert health.taint_evicted_pod(
        {"status": {"conditions": [{"type": "DisruptionTarget", "reason": "DeletionByDeviceTaintManager"}]}}
    )


def test_an_eviction_two_polls_see_is_told_once_per_start() -> None:
    hub_notices.clear("zoe")
    assert hub_notices.post_once("zoe", "", "evicted", since=100.0)
    assert not hub_notices.post_once("zoe", "", "evicted", since=100.0)
    assert hub_notices.post_once("zoe", "other", "evicted", since=100.0), "another server"
    assert [n["server"] for n in hub_notices.for_user("zoe")] == ["", "other"]
    hub_notices.clear("zoe")
