"""The idle-GPU warning inside JupyterLab, in real headless Chromium: seen, then "Keep my GPU"."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import login, shot
from tests.integration.cullertools import SLOW_CULL, annotations, culler_hub, wait_warned
from tests.integration.hubtools import spawn

from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    h = culler_hub(namespace, tmp_path / "hub", args=SLOW_CULL)
    yield h
    h.stop()


def test_jupyterlab_shows_the_warning_and_keeps_the_gpu(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "ivy", {"profile": "mig-1g-10gb"})
    wait_warned(api, namespace, "gpu-ivy")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, hub, "ivy")
    page.goto(hub.url + "/user/ivy/lab")
    toast = page.locator(".Toastify__toast").filter(has_text="will be released")
    expect(toast).to_be_visible(timeout=60000)
    expect(toast).to_contain_text("mig-1g-10gb")
    expect(toast).to_contain_text("notebook and GPU idle")
    page.wait_for_timeout(1000)  # the toast slides in
    shot(page, "lab-1-warning")
    toast.get_by_role("button", name="Keep my GPU").click()
    expect(page.locator(".Toastify__toast").filter(has_text="Your GPU is kept")).to_be_visible(timeout=15000)
    shot(page, "lab-2-kept")
    ann = annotations(api, namespace, "gpu-ivy")
    assert "gpusessions.io/keep-until" in ann and "gpusessions.io/warned-at" not in ann
    until = float(ann["gpusessions.io/keep-until"])
    assert until > time.time() + 3600
    page.close()
