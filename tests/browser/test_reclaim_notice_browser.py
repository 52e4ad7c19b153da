"""KAI Scheduler takes a borrowed GPU back: the user, in JupyterLab in real headless Chromium,
is told why there (the server of the tab is gone; the notice comes from the hub)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import login, shot
from tests.integration.hubtools import server_model, spawn
from tests.integration.kaitools import reclaim_hub, reclaim_teams

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


@pytest.fixture
def hub(api: KubeAPI, namespace: str, tmp_path: Path) -> Iterator[Hub]:
    yield from reclaim_hub(api, namespace, tmp_path / "hub")


def test_jupyterlab_tells_the_user_their_gpu_was_taken_back(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "cy", {"profile": "gpu-pre"})  # borrowed: cy's team has no GPU quota
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, hub, "cy")
    page.goto(hub.url + "/user/cy/lab")
    expect(page.locator("#jp-main-dock-panel")).to_be_visible(timeout=60000)
    page.wait_for_timeout(2000)  # the extension's first poll of its own server
    # The team that owns the quota asks for its GPU: KAI evicts cy's holder and notebook.
    spawn(hub, "ann", {"profile": "gpu"})
    waits.wait_for(lambda: not (server_model(hub, "cy") or {}).get("ready"), 60, "cy's server to stop")
    toast = page.locator(".Toastify__toast").filter(has_text="taken back by the scheduler")
    expect(toast).to_be_visible(timeout=60000)
    expect(toast).to_contain_text(f"your team's queue {reclaim_teams(namespace)[2]}")
    # JupyterLab cuts the notice at 140 characters; the hub home page has it whole.
    expect(toast.get_by_role("button", name="Read it on the hub")).to_be_visible()
    page.wait_for_timeout(1000)  # the toast slides in
    shot(page, "lab-reclaimed")
    page.close()
