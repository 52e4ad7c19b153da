"""The admin page's totals and fleet map in real headless Chromium, against the running hub,
culler and local cluster: what the page shows is compared with the cluster as the API lists it
(slices and claims), as sessions start, go idle, stop and are released; and every admin view
and its data are refused to a user who is not an admin (in the same test: one hub start)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from tests.browser.pagetools import login, picture
from tests.integration.cullertools import culler_hub
from tests.integration.hubtools import process_env, spawn, stop

from gpusessions.core.sizes import mig_slices
from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser]
ONE_G = {"profile": "mig-1g-10gb"}
Obj = dict[str, Any]


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    # A cycle a second; nothing is culled or released by itself during the test.
    h = culler_hub(namespace, tmp_path / "hub", args=("--idle-limit", "3600", "--stopped-keep", "3600"))
    yield h
    h.stop()


def gpu_devices(api: KubeAPI) -> dict[str, Obj]:
    """node/device -> device, for every GPU device the driver publishes (as the API lists them)."""
    out = {}
    for s in api.list("ResourceSlice")["items"]:
        spec = s["spec"]
        if spec["driver"] != "gpu.nvidia.com":
            continue
        for d in spec.get("devices") or []:
            if (d.get("attributes") or {}).get("type", {}).get("string") in ("gpu", "mig"):
                out[f"{spec['nodeName']}/{d['name']}"] = d
    return out


def held(api: KubeAPI, namespace: str) -> dict[str, str]:
    """node/device -> claim, for the claims allocated in the namespace."""
    out = {}
    for c in api.list("ResourceClaim", namespace)["items"]:
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []:
            out[f"{r['pool']}/{r['device']}"] = c["metadata"]["name"]
    return out


def sevenths(d: Obj) -> int:
    n = mig_slices(d)
    return 7 if n is None else n


def totals(page: Page) -> dict[str, float]:
    out = {}
    for state in ("free", "busy", "idle", "kept", "pending"):
        el = page.locator(f"#total-{state}")
        out[state] = float(el.get_attribute("data-eq") or "nan")
        out[state + "_gpus"] = float(el.get_attribute("data-gpus") or "nan")
    out["gpus"] = float(page.locator("#total-gpus").get_attribute("data-gpus") or "nan")
    out["waiting"] = float(page.locator("#total-waiting").get_attribute("data-count") or "nan")
    return out


def expect_cell(page: Page, device: str, state: str) -> None:
    expect(page.locator(f".gs-cell[data-device='{device}']")).to_have_attribute(
        "data-state", state, timeout=30000
    )


def expect_totals(page: Page, want: dict[str, float]) -> None:
    def same() -> bool:
        try:
            got = totals(page)
        except Exception:
            return False
        return all(abs(got[k] - v) < 0.011 for k, v in want.items())

    waits.wait_for(
        same, 30, f"the page's totals to be {want}", explain=lambda: f"the page shows {totals(page)}"
    )


@pytest.mark.screenshot
def test_fleet_map_and_totals_follow_the_cluster(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str, load_file: Path
) -> None:
    devices = gpu_devices(api)
    all_eq = sum(sevenths(d) for d in devices.values()) / 7
    parents = {
        d["attributes"]["parentUUID"]["string"] for d in devices.values() if "parentUUID" in d["attributes"]
    }
    wholes = [d for d in devices.values() if d["attributes"]["type"]["string"] == "gpu"]
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, hub, "admin")
    page.goto(hub.url + "/services/gpusessions/")
    # JupyterHub's own page: its navbar and its dark-mode toggle.
    expect(page.locator("#thenavbar")).to_be_visible()
    expect(page.locator("#dark-theme-toggle")).to_be_visible()
    # Every GPU device of the cluster is a cell, all free before anyone starts.
    expect(page.locator(".gs-cell")).to_have_count(len(devices), timeout=30000)
    expect_totals(page, {"gpus": len(parents) + len(wholes), "free": all_eq, "busy": 0, "idle": 0, "kept": 0})

    # ann trains (her GPU busy); ben leaves his notebook alone (idle).
    spawn(hub, "ann", ONE_G)
    ann_uuid = process_env(api, namespace, "gpu-holder-ann")["DEVCLUSTER_CDI_DEVICES"]
    load_file.write_text(json.dumps({ann_uuid: {"activity": 85, "processes": 1}}))
    spawn(hub, "ben", ONE_G)
    now_held = held(api, namespace)
    ann_dev = next(k for k, v in now_held.items() if v == "gpu-ann")
    ben_dev = next(k for k, v in now_held.items() if v == "gpu-ben")
    expect_cell(page, ann_dev, "busy")
    expect_cell(page, ben_dev, "idle")
    one = sevenths(devices[ann_dev]) / 7
    expect_totals(
        page, {"busy": one, "idle": sevenths(devices[ben_dev]) / 7, "kept": 0, "free": all_eq - 2 * one}
    )
    expect(page.locator(".gs-cell[data-state='free']")).to_have_count(len(devices) - len(now_held))
    # The holder on hover, and a click through to the session's row.
    cell = page.locator(f".gs-cell[data-device='{ann_dev}']")
    assert "ann" in (cell.get_attribute("title") or "")
    cell.click()
    row = page.locator("tr[data-claim='gpu-ann']")
    expect(row).to_have_class("gs-focus", timeout=10000)
    expect(row).to_be_in_viewport()
    page.evaluate("window.scrollTo(0, 0)")
    picture(page, "admin-fleet")  # the README's picture under `make screenshots`

    # ben stops his server: his GPU is kept for him.
    stop(hub, "ben")
    expect_cell(page, ben_dev, "kept")
    expect_totals(page, {"kept": sevenths(devices[ben_dev]) / 7, "idle": 0})
    # The admin releases it from the table: the cell is free again, as the API says.
    page.once("dialog", lambda d: d.accept())
    page.locator("tr[data-claim='gpu-ben']").get_by_role("button", name="Release the GPU of ben").click()
    waits.wait_for(
        lambda: api.get_or_none("ResourceClaim", "gpu-ben", namespace) is None, 30, "ben's claim to go"
    )
    expect_cell(page, ben_dev, "free")
    expect_totals(page, {"kept": 0, "busy": one, "free": all_eq - one})
    expect(page.locator(".gs-cell[data-state='free']")).to_have_count(
        len(devices) - len(held(api, namespace))
    )

    # The filter keeps the nodes with a busy GPU; the dark theme is the hub's.
    page.select_option("#gs-fleet-state", "busy")
    expect(page.locator(".gs-node")).to_have_count(1)
    page.locator("#dark-theme-toggle").click()
    expect(page.locator("html")).to_have_attribute("data-bs-theme", "dark")
    page.locator("#dark-theme-toggle").click()
    page.close()
    # Same hub (one start for both): non-admins get 403 on every admin view and its data.
    refused_to_non_admins(browser, hub)


def refused_to_non_admins(browser: Browser, hub: Hub) -> None:
    """Every admin view and its data: 403 for eve, in her browser and with her API token."""
    page = browser.new_context().new_page()
    login(page, hub, "eve")
    base = hub.url + "/services/gpusessions/"
    for path in ("", "api/page", "api/sessions"):
        resp = page.goto(base + path)
        assert resp is not None and resp.status == 403, (path, resp and resp.status)
    page.close()
    # With eve's own API token too, and the actions.
    code, body = hub.api("POST", "/users/eve/tokens", {"note": "test"})
    assert code in (200, 201), body
    token = body["token"]
    for method, path in (
        ("GET", "api/page"),
        ("GET", "api/sessions"),
        ("POST", "api/sessions/ns/gpu-x/release"),
        ("POST", "api/sessions/ns/gpu-x/keep"),
    ):
        req = urllib.request.Request(
            base + path,
            method=method,
            data=b"{}" if method == "POST" else None,
            headers={"Authorization": f"token {token}"},
        )
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=30)
        assert e.value.code == 403, (method, path, e.value.code)
