"""A notebook job from JupyterLab's file browser, in real headless Chromium: right-click a
notebook, "Create Job" (jupyter-scheduler's form, our GPU sizes as its environments), watch it
complete in the Notebook Jobs panel, open the executed notebook; and "Run on a schedule",
which makes a job definition (a CronJob) listed in "Job Definitions"."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from tests.browser.pagetools import login, shot
from tests.integration.hubtools import gpu_hub, spawn
from tests.integration.jobtools import NOTEBOOK

from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser]


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    h = gpu_hub(namespace, tmp_path / "hub")
    yield h
    h.stop()


def create_job_form(browser: Browser, hub: Hub, namespace: str, cluster: Any, notebook: str) -> Page:
    """ann's JupyterLab, "Create Job" from the file browser's menu on `notebook` (in her home)."""
    home = Path(cluster.paths.homes) / namespace / "ann"
    home.mkdir(parents=True, exist_ok=True)
    (home / notebook).write_text(json.dumps(NOTEBOOK))
    spawn(hub, "ann", {"profile": "cpu"})
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, hub, "ann")
    page.goto(hub.url + "/user/ann/lab")
    item = page.locator(".jp-DirListing-item").filter(has_text=notebook)
    expect(item).to_be_visible(timeout=60000)
    item.click(button="right")
    page.locator(".lm-Menu-item").filter(has_text=re.compile("Create .*Job")).click()
    expect(page.get_by_text("Run now")).to_be_visible(timeout=30000)
    return page


def test_a_job_from_the_file_browser_completes_and_opens(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    page = create_job_form(browser, hub, namespace, cluster, "train.ipynb")
    # The environments are the hub's sizes, with what is free now.
    page.get_by_label("Environment").click()
    option = page.get_by_role("option", name="mig-1g-10gb", exact=True)
    expect(option.first).to_be_visible(timeout=15000)
    shot(page, "jobs-1-sizes")
    option.first.click()
    shot(page, "jobs-2-form")
    page.get_by_text("Parameters").locator("..").get_by_role("button").first.click()
    page.get_by_placeholder("Name", exact=True).first.fill("epochs")
    page.get_by_placeholder("Value", exact=True).first.fill("5")
    page.get_by_placeholder("Value", exact=True).first.press("Tab")
    page.get_by_role("button", name="Create").click()
    # The Notebook Jobs panel: the job, then "Completed" (reloaded as a user would).
    row = page.locator("tr").filter(has_text="train")
    expect(row.first).to_be_visible(timeout=30000)
    shot(page, "jobs-3-listed")
    for _ in range(60):
        if "Completed" in (row.first.text_content() or ""):
            break
        page.get_by_role("button", name=re.compile("reload", re.I)).first.click()
        page.wait_for_timeout(1500)
    expect(row.first).to_contain_text("Completed")
    shot(page, "jobs-4-completed")
    # Its output: the executed notebook in the home, opened from the row.
    row.first.get_by_text("Notebook", exact=True).click()
    expect(page.locator(".lm-TabBar-tab").filter(has_text="train.ipynb").last).to_be_visible(timeout=30000)
    expect(page.locator(".jp-OutputArea-output").filter(has_text="trained 5").first).to_be_visible(
        timeout=30000
    )
    shot(page, "jobs-6-output")
    # Its log (papermill's output, through the hub): one more output file of the row.
    page.locator(".lm-TabBar-tab").filter(has_text=re.compile("^Jobs$")).first.click()
    row.first.get_by_text("Log", exact=True).click()
    expect(page.locator(".lm-TabBar-tab").filter(has_text="train.log").last).to_be_visible(timeout=30000)
    expect(page.locator(".cm-content").filter(has_text="Output Notebook:").first).to_be_visible(timeout=30000)
    shot(page, "jobs-7-log")
    page.close()


def test_a_scheduled_job_from_the_file_browser_is_a_job_definition(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str, cluster: Any
) -> None:
    page = create_job_form(browser, hub, namespace, cluster, "nightly.ipynb")
    page.get_by_label("Environment").click()
    page.get_by_role("option", name="mig-1g-10gb", exact=True).first.click()
    # "Run on a schedule": the form's default interval (weekdays at 00:00) and the browser's zone.
    page.get_by_label("Run on a schedule").check()
    shot(page, "jobs-7-schedule-form")
    page.get_by_role("button", name="Create").click()
    # The definition is listed in "Notebook Job Definitions" and is a CronJob on the cluster.
    row = page.locator("tr").filter(has_text="nightly")
    expect(row.first).to_be_visible(timeout=30000)
    shot(page, "jobs-8-definitions")
    crons = api.list("CronJob", namespace, label_selector="gpusessions.io/component=jobdefinition")["items"]
    assert len(crons) == 1, crons
    spec = crons[0]["spec"]
    assert re.fullmatch(r"0+ 0+ \* \* mon-fri", spec["schedule"]), spec["schedule"]
    assert spec["suspend"] is False
    run = spec["jobTemplate"]["spec"]["template"]
    assert run["metadata"]["labels"]["gpusessions.io/component"] == "job"
    assert run["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == crons[0]["metadata"]["name"]
    page.close()
