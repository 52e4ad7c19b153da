"""JupyterLab after a notebook restart, in real headless Chromium: the kept kernel is listed
and the notebook, opened again, runs on it with its variables intact."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import login, notebook, shot
from tests.integration.hubtools import gpu_hub, spawn, stop
from tests.integration.kerneltools import execute

from localcluster.hubproc import Hub

pytestmark = [pytest.mark.cluster, pytest.mark.browser]
NOTEBOOK = notebook("print('weights', weights)")


@pytest.fixture
def hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    h = gpu_hub(namespace, tmp_path / "hub")
    yield h
    h.stop()


def call(hub: Hub, method: str, path: str, body: object) -> dict:
    req = urllib.request.Request(
        hub.url + path,
        method=method,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"token {hub.token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_jupyterlab_reattaches_the_notebook_to_its_kept_kernel(browser: Browser, hub: Hub) -> None:
    spawn(hub, "kim", {"profile": "mig-1g-10gb"})
    call(hub, "PUT", "/user/kim/api/contents/train.ipynb", {"type": "notebook", "content": NOTEBOOK})
    s = call(
        hub,
        "POST",
        "/user/kim/api/sessions",
        {"path": "train.ipynb", "name": "train.ipynb", "type": "notebook", "kernel": {"name": "python3"}},
    )
    execute(hub.url, "kim", s["kernel"]["id"], hub.token, "weights = 4242")
    stop(hub, "kim")
    spawn(hub, "kim", {"profile": "mig-1g-10gb"})

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, hub, "kim")
    page.goto(hub.url + "/user/kim/lab/tree/train.ipynb")
    # The notebook finds its session: the status bar shows the kept kernel, idle.
    cell = page.locator(".jp-Notebook .jp-Cell").first
    expect(cell).to_be_visible(timeout=60000)
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60000)
    # Run the cell: it prints a variable that only the kept kernel has.
    cell.click()
    page.keyboard.press("Shift+Enter")
    expect(page.locator(".jp-OutputArea-output").first).to_contain_text("weights 4242", timeout=60000)
    shot(page, "lab-kept-kernel")
    # The running-kernels panel lists the kept kernel's session.
    page.locator('[data-id="jp-running-sessions"]').click()
    expect(page.locator(".jp-RunningSessions")).to_contain_text("train.ipynb", timeout=30000)
    page.close()
