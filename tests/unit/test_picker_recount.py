"""The picker's figures are recounted when the watch reports a change, not by the next page view."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gpusessions.core import availability
from gpusessions.core.profiles import default_profiles
from gpusessions.hub import picker
from gpusessions.kube import watch
from gpusessions.kube.watch import ClusterView
from localcluster.paths import SHAPES_DIR
from localcluster.shapes import build_slices, device_classes, load_shape

SPAWNER = SimpleNamespace(
    gpu_device_class="", gpu_count=1, gpu_selectors=[], gpu_first_available=[], gpu_size=None
)


def watch_recounts(view: ClusterView) -> asyncio.Event:
    """An event set each time the view's scheduled recount has run (whatever it decided)."""
    ran = asyncio.Event()
    real = view._recount_now

    def recount_now() -> None:
        real()
        ran.set()

    view._recount_now = recount_now  # type: ignore[method-assign]
    return ran


async def settled(view: ClusterView, ran: asyncio.Event) -> None:
    """Until the recount that the last change scheduled has run and none is due: the witness
    that whatever a change makes happen has happened."""
    async with asyncio.timeout(5):
        while view._recount is not None:
            ran.clear()
            await ran.wait()


def _obj(o: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    md = o["metadata"]
    return f"{md.get('namespace', '')}/{md['name']}", o


def _allocated_claim(device: str) -> dict[str, Any]:
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": "gpu-node-0", "device": device}
    return {
        "metadata": {"name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_a_claim_change_is_recounted_before_the_next_view(monkeypatch: pytest.MonkeyPatch) -> None:
    counted: list[str] = []
    real = availability.size_figures

    def counting(*args: Any, **kwargs: Any) -> Any:
        counted.append(args[0].describe())
        return real(*args, **kwargs)

    monkeypatch.setattr(availability, "size_figures", counting)
    profiles = default_profiles()

    def page_view(view: ClusterView) -> dict[str, Any]:
        view.viewed()
        figures = picker.compute_figures(
            SPAWNER, profiles, view.derived(), view.figures, view.computed_version
        )
        return {f["slug"]: f for f in figures}

    async def run() -> None:
        api = SimpleNamespace(
            list_resource_slice=None, list_resource_claim_for_all_namespaces=None, list_device_class=None
        )
        view = ClusterView(min_interval=0.1, api=api, start=False)
        ran = watch_recounts(view)
        slices = [s for n in load_shape("small", SHAPES_DIR).nodes for s in build_slices(n)]
        view.slices.objects = dict(_obj(s) for s in slices)
        view.classes.objects = dict(_obj(c) for c in device_classes())
        for cache in (view.slices, view.claims, view.classes):
            cache.ready.set()
        view._changed()
        await settled(view, ran)
        assert view.recounts == 0  # nobody looked yet: nothing is counted ahead of a view

        first = page_view(view)
        assert first["mig-1g-10gb"]["free"] == 9
        assert len(counted) == 4  # the first view counts each of the four sizes once

        # A claim takes a 1g.10gb: the watch's change recounts the sizes views asked for.
        counted.clear()
        key, claim = _obj(_allocated_claim("gpu-0-mig-1g10gb-19-3"))
        view.claims.objects[key] = claim
        view._changed()
        await settled(view, ran)
        assert view.recounts == 1 and len(counted) == 4
        counted.clear()
        after = page_view(view)
        assert after["mig-1g-10gb"]["free"] == 8
        assert counted == [], "the view after a change reads figures made by the recount"

        # Nobody has looked for a while: changes cost nothing until the next view.
        view.last_view -= watch.VIEWS_RECENT + 1
        view.claims.objects.pop(key)
        view._changed()
        await settled(view, ran)
        assert view.recounts == 1 and counted == [] and view.figures.recent == {}
        assert page_view(view)["mig-1g-10gb"]["free"] == 9
        view.stop()

    asyncio.run(run())


def test_a_failing_recount_waits_for_new_data_and_does_not_spin() -> None:
    async def run() -> None:
        api = SimpleNamespace(
            list_resource_slice=None, list_resource_claim_for_all_namespaces=None, list_device_class=None
        )
        view = ClusterView(min_interval=0.1, api=api, start=False)
        ran = watch_recounts(view)
        view.slices.objects = {"bad": {"metadata": {"name": "bad"}, "spec": {}}}  # no driver
        calls: list[int] = []
        derived = view.derived

        def counted() -> Any:
            calls.append(1)
            return derived()

        view.derived = counted  # type: ignore[method-assign]
        for cache in (view.slices, view.claims, view.classes):
            cache.ready.set()
        view.viewed()
        view._changed()
        await settled(view, ran)
        assert len(calls) == 1, "no retry without new data"
        view._changed()
        view._changed()
        await settled(view, ran)
        assert len(calls) == 2, f"{len(calls)} recounts for one new version"
        view.stop()

    asyncio.run(run())
