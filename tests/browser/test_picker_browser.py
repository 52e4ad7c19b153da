"""In real headless Chromium: log in, read the picker's live figures, pick MIG 1g.10gb,
spawn, land in JupyterLab. Screenshots go to test-artifacts/."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from tests.browser.pagetools import login, shot

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI
from localcluster.testing import claim, exec_pod

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

ONE_G = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"


def one_g_slices(api: KubeAPI) -> tuple[int, int]:
    """(1g.10gb devices no claim holds, all 1g.10gb devices), read from the cluster's
    ResourceSlices and claims. Every 1g.10gb device is its own placement (a static slice, or one of
    the disjoint placements on a partitionable GPU), so all of them can be held at once while no
    bigger device of those GPUs is allocated: then the free ones are what the picker must show."""
    devices = {
        (s["spec"]["pool"]["name"], d["name"])
        for s in api.list("ResourceSlice")["items"]
        for d in s["spec"].get("devices") or []
        if (d.get("attributes") or {}).get("profile", {}).get("string") == "1g.10gb"
    }
    held = {
        (r["pool"], r["device"])
        for c in api.list("ResourceClaim")["items"]
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", [])
    }
    assert not held - devices, f"devices other than 1g.10gb slices are allocated: {held - devices}"
    return len(devices - held), len(devices)


def tab_to(page: Page, selector: str, limit: int = 60) -> None:
    """Press Tab until the focused element matches `selector` (as a keyboard user would)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("s => document.activeElement && document.activeElement.matches(s)", selector):
            return
    raise AssertionError(f"{limit} presses of Tab never reached {selector}")


def test_pick_a_mig_slice_and_land_in_jupyterlab(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    free, total = one_g_slices(api)
    assert free > 1, "the test needs two free 1g.10gb slices"
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    login(page, hub, "alice")
    page.goto(hub.url + "/hub/spawn")
    avail = page.locator("#gs-avail-mig-1g-10gb")
    expect(avail).to_have_text(f"{free} of {total} free now.")
    expect(page.locator("#gs-avail-cpu")).to_have_text("No GPU: starts right away.")
    expect(page.locator("#gs-desc-mig-1g-10gb")).to_contain_text("9.8 GiB GPU memory, 1/7 of a GPU")
    shot(page, "picker-1-all-free")

    # Someone else takes a 1g.10gb: the open page updates by itself.
    api.create(claim("other", "mig.nvidia.com", [ONE_G]), namespace)
    api.create(exec_pod("other", claim_name="other", command=["sleep", "3600"]), namespace)
    waits.claim_allocated(api, namespace, "other")
    assert one_g_slices(api) == (free - 1, total)
    expect(avail).to_have_text(f"{free - 1} of {total} free now.", timeout=15000)
    shot(page, "picker-2-live-update")

    # Keyboard only: Tab into the size group (it lands on the checked size), arrow keys to
    # MIG 1g.10gb (the label is the radio's accessible name), Tab on to Start, Enter.
    radio = page.get_by_role("radio", name="MIG 1g.10gb", exact=True)
    tab_to(page, "input[type=radio][name=profile]")
    assert page.evaluate("() => document.activeElement.value") == "cpu", "Tab lands on the checked size"
    for _ in range(page.locator("input[type=radio][name=profile]").count()):
        if page.evaluate("() => document.activeElement.value") == "mig-1g-10gb":
            break
        page.keyboard.press("ArrowDown")
    expect(radio).to_be_focused()
    expect(radio).to_be_checked()
    shot(page, "picker-3-keyboard-choice")
    tab_to(page, "button[type=submit], input[type=submit]")
    expect(page.get_by_role("button", name=re.compile("start", re.I))).to_be_focused()
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90000)
    expect(page.locator(".jp-LabShell, #jp-main-dock-panel").first).to_be_visible(timeout=60000)
    expect(page.locator("#jupyterlab-splash")).to_have_count(0, timeout=60000)
    shot(page, "picker-4-jupyterlab")
    c = api.get("ResourceClaim", "gpu-alice", namespace)
    assert "1g10gb" in c["status"]["allocation"]["devices"]["results"][0]["device"]
    page.close()


def test_the_basic_choice_works_without_javascript(browser: Browser, hub: Hub) -> None:
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    page.goto(hub.url + "/hub/login")
    page.fill("#username_input", "bob")
    page.fill("#password_input", "test-password")
    page.click("#login_submit")
    page.goto(hub.url + "/hub/spawn")
    text = page.locator("fieldset.gpusessions-picker").inner_text()
    assert "MIG 1g.10gb" in text and "free now" in text
    labels: list[Any] = page.locator("fieldset.gpusessions-picker input[type=radio]").evaluate_all(
        "els => els.map(e => e.labels.length)"
    )
    assert labels and all(n == 1 for n in labels), "every radio has a label"
    shot(page, "picker-0-no-javascript")
    ctx.close()
