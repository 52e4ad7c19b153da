"""The admin page's idle-reclaim section in real headless Chromium: the policy in words and the
GPU-hours held, idle and reclaimed from the culler's record, per profile and queue."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import ARTIFACTS, login
from tests.integration.cullertools import culler_hub
from tests.integration.hubtools import spawn

from localcluster import waits

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


def test_admin_page_explains_the_policy_and_shows_idle_gpu_hours(
    browser: Browser, namespace: str, tmp_path: Path
) -> None:
    hub = culler_hub(namespace, tmp_path / "hub", args=("--gpu-idle-limit-contended", "900"))
    try:
        spawn(hub, "iris", {"profile": "mig-1g-10gb"})

        def recorded() -> dict | None:
            req = urllib.request.Request(
                hub.url + "/services/gpusessions/api/sessions",
                headers={"Authorization": f"token {hub.token}"},
            )
            with urllib.request.urlopen(req, timeout=30) as r:
                rows = json.loads(r.read())["record"]["today"]["rows"]
            return next((x for x in rows if x["profile"] == "mig-1g-10gb" and x["idle"] > 0), None)

        row = waits.wait_for(recorded, 30, "the record to hold iris's idle GPU time")
        assert row["held"] >= row["idle"] > 0 and row["queue"] == ""
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        login(page, hub, "admin")
        page.goto(hub.url + "/services/gpusessions/")
        section = page.locator("#reclaim")
        expect(section.get_by_role("heading", name="Idle GPUs and reclaim")).to_be_visible(timeout=30000)
        expect(page.locator("#reclaim-policy")).to_contain_text("culled after 15 min of GPU idleness instead")
        # --keep-contended at its default: how long a user's keep holds while someone waits.
        expect(page.locator("#reclaim-policy")).to_contain_text("a user's Keep my GPU holds 5 min")
        expect(page.locator("#reclaim-policy")).to_contain_text("A busy GPU")
        # Parking (issue 27): what a cull means for a session that parks, in its own block.
        expect(page.locator("#park-policy-lines")).to_contain_text("A cull parks the session")
        for window, label in (("today", "Today"), ("7d", "Last 7 days")):
            tr = page.locator(f"#reclaim-record tr[data-window='{window}'][data-profile='mig-1g-10gb']")
            expect(tr).to_contain_text(label)
            cells = tr.locator("td")
            expect(cells).to_have_count(11)
            assert float(cells.nth(3).inner_text()) >= float(cells.nth(5).inner_text()) >= 0  # held >= idle
        ARTIFACTS.mkdir(exist_ok=True)
        section.screenshot(path=str(ARTIFACTS / "admin-reclaim.png"))
        page.close()
    finally:
        hub.stop()
