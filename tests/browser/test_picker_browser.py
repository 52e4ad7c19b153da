"""In real headless Chromium: log in, read the picker's live figures, pick MIG 1g.10gb,
spawn, land in JupyterLab. Screenshots go to test-artifacts/."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.conftest import login, shot

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI
from localcluster.testing import claim, exec_pod

pytestmark = [pytest.mark.cluster, pytest.mark.browser]

# The small shape: 2 static 1g.10gb on GPU 0 + 7 placements on partitionable GPU 1.
ONE_G_IN_SMALL_SHAPE = 9


def test_pick_a_mig_slice_and_land_in_jupyterlab(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    login(page, hub, "alice")
    page.goto(hub.url + "/hub/spawn")
    avail = page.locator("#gs-avail-mig-1g-10gb")
    expect(avail).to_have_text(f"{ONE_G_IN_SMALL_SHAPE} of {ONE_G_IN_SMALL_SHAPE} free now.")
    expect(page.locator("#gs-avail-cpu")).to_have_text("No GPU: starts right away.")
    expect(page.locator("#gs-desc-mig-1g-10gb")).to_contain_text("9.8 GiB GPU memory, 1/7 of a GPU")
    shot(page, "picker-1-all-free")

    # Someone else takes a 1g.10gb: the open page updates by itself.
    api.create(
        claim("other", "mig.nvidia.com", ["device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"]),
        namespace,
    )
    api.create(exec_pod("other", claim_name="other", command=["sleep", "3600"]), namespace)
    waits.claim_allocated(api, namespace, "other")
    expect(avail).to_have_text(
        f"{ONE_G_IN_SMALL_SHAPE - 1} of {ONE_G_IN_SMALL_SHAPE} free now.", timeout=15000
    )
    shot(page, "picker-2-live-update")

    # Keyboard: the label is the radio's accessible name.
    radio = page.get_by_role("radio", name="MIG 1g.10gb", exact=True)
    radio.focus()
    page.keyboard.press("Space")
    expect(radio).to_be_checked()
    page.get_by_role("button", name=re.compile("start", re.I)).click()
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=90000)
    expect(page.locator(".jp-LabShell, #jp-main-dock-panel").first).to_be_visible(timeout=60000)
    shot(page, "picker-3-jupyterlab")
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
