"""The home page's "Park my session" button (kernels in the holder, parked when it goes; "Release
my GPU" where they are not), in real headless Chromium."""

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Dialog, expect
from tests.browser.pagetools import login, shot
from tests.integration.hubtools import server_model, spawn, stop

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser]
ONE_G = {"profile": "mig-1g-10gb"}


@pytest.mark.shared_hub
def test_release_my_gpu_button_gives_back_a_kept_gpu_and_stops_a_running_server(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "rita", ONE_G)
    stop(hub, "rita")
    assert api.get_or_none("ResourceClaim", "gpu-rita", namespace), "the stopped server keeps its GPU"
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    confirms: list[str] = []

    def accept(dialog: Dialog) -> None:
        confirms.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    login(page, hub, "rita")
    page.goto(hub.url + "/hub/home")
    button = page.get_by_role("button", name="Park my session")
    status = page.locator("#gpusessions-release-status")

    # Stopped server, kept GPU: released, the page says so.
    button.click()
    expect(status).to_have_text(
        "Your session was parked: your GPU was released, your variables are saved.", timeout=30000
    )
    shot(page, "home-release-1-released")
    assert confirms == ["Stop your server (if it runs), save your kernels' variables and give your GPU back?"]
    waits.gone(api, "ResourceClaim", "gpu-rita", namespace)
    waits.gone(api, "Pod", "gpu-holder-rita", namespace)

    # Nothing held any more: the page says that too.
    page.reload()
    page.get_by_role("button", name="Park my session").click()
    expect(status).to_have_text("You held no GPU.", timeout=30000)

    # A running server: stopped, its GPU released, the page reloaded.
    spawn(hub, "rita", ONE_G)
    page.goto(hub.url + "/hub/home")
    expect(page.get_by_role("button", name="Stop My Server")).to_be_visible()
    with page.expect_navigation(timeout=60000):
        page.get_by_role("button", name="Park my session").click()
    waits.gone(api, "ResourceClaim", "gpu-rita", namespace)
    waits.gone(api, "Pod", "gpu-holder-rita", namespace)
    waits.gone(api, "Pod", "jupyter-rita", namespace)
    assert not (server_model(hub, "rita") or {}).get("ready")
    expect(page.get_by_role("button", name="Start My Server")).to_be_visible(timeout=30000)
    shot(page, "home-release-2-stopped")
    page.close()
