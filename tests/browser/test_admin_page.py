"""The culler's admin page in real headless Chromium: an admin releases a GPU; others get 403."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import ARTIFACTS, login
from tests.integration.cullertools import culler_hub, culler_looked_after
from tests.integration.hubtools import spawn

from gpusessions.core.labels import CULL_AT
from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    # Warned 15 s before the 20 s idle limit: time for a browser on a busy machine to log in
    # and press Keep (with 5 s the claim was often culled before the page showed the warning).
    h = culler_hub(namespace, tmp_path / "hub", args=("--warn-before", "15"))
    yield h
    h.stop()


def test_admin_releases_a_gpu_and_others_are_refused(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "gina", {"profile": "mig-1g-10gb"})
    page = browser.new_page(viewport={"width": 1400, "height": 800})
    login(page, hub, "admin")
    page.goto(hub.url + "/services/gpusessions/")
    row = page.locator("tr[data-claim='gpu-gina']")
    expect(row).to_be_visible(timeout=30000)
    expect(row).to_contain_text("mig-1g-10gb")
    expect(row).to_contain_text("gpu-node-0")
    expect(row).to_contain_text("running")
    page.locator("#filter").fill("gina")
    expect(page.locator("#summary")).to_contain_text("1 of")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "admin-1-sessions.png"), full_page=True)
    page.once("dialog", lambda d: d.accept())
    row.get_by_role("button", name="Release the GPU of gina").click()
    waits.wait_for(
        lambda: api.get_or_none("ResourceClaim", "gpu-gina", namespace) is None,
        30,
        "the admin's release to delete the claim",
    )
    expect(page.locator("tr[data-claim='gpu-gina']")).to_have_count(0, timeout=15000)
    page.screenshot(path=str(ARTIFACTS / "admin-2-released.png"), full_page=True)
    page.close()

    other = browser.new_context().new_page()
    login(other, hub, "eve")
    resp = other.goto(hub.url + "/services/gpusessions/")
    assert resp is not None and resp.status == 403
    other.close()


def test_user_is_warned_on_the_home_page_and_keeps_the_gpu(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "hal", {"profile": "mig-1g-10gb"})
    # Idle on both counts: the culler warns 15 s before the 20 s idle limit.
    waits.wait_for(
        lambda: (api.get("ResourceClaim", "gpu-hal", namespace)["metadata"].get("annotations") or {}).get(
            "gpusessions.io/warned-at"
        ),
        60,
        "the culler's warning",
    )
    page = browser.new_page()
    login(page, hub, "hal")
    page.goto(hub.url + "/hub/home")
    warning = page.locator(".gpusessions-warning")
    expect(warning).to_contain_text("will be released at", timeout=15000)
    expect(warning).to_contain_text("notebook and GPU idle")
    expect(warning).to_contain_text("Keep my GPU holds it until")  # how long a keep holds
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "home-warning.png"), full_page=True)
    cull_at = float(api.get("ResourceClaim", "gpu-hal", namespace)["metadata"]["annotations"][CULL_AT])
    page.get_by_role("button", name="Keep my GPU").click()
    expect(warning).to_have_count(0, timeout=15000)
    ann = api.get("ResourceClaim", "gpu-hal", namespace)["metadata"]["annotations"]
    assert "gpusessions.io/keep-until" in ann and "gpusessions.io/warned-at" not in ann
    # Past the moment the warning named: the culler looked again and kept it.
    culler_looked_after(hub, cull_at + 1)
    assert api.get_or_none("ResourceClaim", "gpu-hal", namespace) is not None
    assert "cull " + f"{namespace}/gpu-hal" not in hub.log_text()
    page.close()
