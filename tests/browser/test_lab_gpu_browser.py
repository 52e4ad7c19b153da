"""The GPU inside JupyterLab, in real headless Chromium: the status bar item and side panel show the
session's device and the GPU memory a kernel holds (simulated NVML); Keep and Release act on the
claim on the real apiserver; Notebook 7 shows the item and panel too."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import login, shot
from tests.integration.cullertools import annotations, slow_culler_hub, wait_warned
from tests.integration.hubtools import allocated_device, nb, process_env, spawn
from tests.integration.kerneltools import execute

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser, pytest.mark.shared_hub.with_args(slow_culler_hub)]


def test_jupyterlab_shows_the_gpu_keeps_it_and_releases_it(
    browser: Browser,
    hub: Hub,
    api: KubeAPI,
    namespace: str,
    load_file: Path,
) -> None:
    spawn(hub, "wes", {"profile": "mig-1g-10gb"})
    code, k = nb(hub, "POST", "/user/wes/api/kernels", {"name": "python3"})
    assert code == 201, code
    pid = int(execute(hub.url, "wes", k["id"], hub.token, "import os; print(os.getpid())"))
    gpu = process_env(api, namespace, "gpu-holder-wes", "kernels")["DEVCLUSTER_CDI_DEVICES"]
    load_file.write_text(json.dumps({gpu: {"memory_used_mib": 2150, "pids": {str(pid): 2150}}}))
    pool, device, node = allocated_device(api, namespace, "gpu-wes")
    wait_warned(api, namespace, "gpu-wes")

    page = browser.new_page(viewport={"width": 1280, "height": 720})
    login(page, hub, "wes")
    page.goto(hub.url + "/user/wes/lab")
    item = page.locator(".gpusessions-gpu-status")
    expect(item).to_contain_text("MIG 1g.10gb \u00b7 2.1 / 9.8 GiB \u00b7 kept", timeout=60000)
    expect(item).to_contain_text("idle: release at")
    shot(page, "lab-gpu-1-status")

    item.click()
    panel = page.locator("#gpusessions-gpu-panel")
    expect(panel).to_be_visible()
    expect(panel.locator("[data-gpu-field=device]")).to_contain_text(f"MIG 1g.10gb ({pool}/{device})")
    expect(panel.locator("[data-gpu-field=node]")).to_contain_text(node)
    expect(panel.locator("[data-gpu-field=memory]")).to_contain_text("2.1 / 9.8 GiB in use")
    expect(panel.locator(f"[data-kernel='{k['id']}']")).to_contain_text("2.1 GiB")
    expect(panel.locator(".gpusessions-gpu-warning")).to_contain_text("will be released at")
    expect(panel.locator(".gpusessions-gpu-warning")).to_contain_text("Keep my GPU holds it until")
    news = page.locator(".Toastify__toast").filter(has_text="Jupyter news")
    if news.count():  # JupyterLab's own question, not ours: out of the picture
        news.get_by_role("button", name="No", exact=True).click()
    page.wait_for_timeout(500)
    shot(page, "lab-gpu-2-panel")

    # Keep: the culler's warning goes from the claim, a keep-until comes on it.
    panel.get_by_role("button", name="Keep my GPU").click()
    expect(panel.locator(".gpusessions-gpu-message")).to_contain_text("Your GPU is kept until")
    ann = annotations(api, namespace, "gpu-wes")
    assert "gpusessions.io/warned-at" not in ann
    assert float(ann["gpusessions.io/keep-until"]) > time.time() + 3600
    expect(panel.locator("[data-gpu-field=kept-until]")).to_contain_text("held off the culler", timeout=15000)
    expect(item).not_to_contain_text("idle")

    # Notebook 7 shows the item too (in its top bar: it has no status bar) and the same panel.
    spec = {"name": "python3", "display_name": "Python 3", "language": "python"}
    content = {"cells": [], "metadata": {"kernelspec": spec}, "nbformat": 4, "nbformat_minor": 5}
    code, _ = nb(hub, "PUT", "/user/wes/api/contents/gpu.ipynb", {"type": "notebook", "content": content})
    assert code == 201, code
    page.goto(hub.url + "/user/wes/notebooks/gpu.ipynb")
    nb7_item = page.locator(".gpusessions-gpu-status")
    expect(nb7_item).to_contain_text("MIG 1g.10gb \u00b7 2.1 / 9.8 GiB \u00b7 kept", timeout=60000)
    nb7_item.click()
    expect(panel.locator("[data-gpu-field=node]")).to_contain_text(node)
    shot(page, "lab-gpu-3-notebook7")
    page.goto(hub.url + "/user/wes/lab")
    item.click()
    expect(panel).to_be_visible(timeout=60000)

    # Park my session (the kernels run in the holder, which parks them): asked first; "Cancel"
    # changes nothing, "Park" deletes the claim once the holder has parked the kernels.
    expect(panel.locator("[data-gpu-field=parks]")).to_contain_text("keeps your variables")
    panel.get_by_role("button", name="Park my session").click()
    dialog = page.locator(".jp-Dialog")
    expect(dialog).to_contain_text("Park your session?")
    dialog.get_by_role("button", name="Cancel").click()
    page.wait_for_timeout(1000)
    assert api.get_or_none("ResourceClaim", "gpu-wes", namespace) is not None
    panel.get_by_role("button", name="Park my session").click()
    dialog.get_by_role("button", name="Park", exact=True).click()
    waits.wait_for(
        lambda: api.get_or_none("ResourceClaim", "gpu-wes", namespace) is None, 60, "the claim to be deleted"
    )
    page.wait_for_url(re.compile(r"/hub/home"), timeout=30000)
    code, model = hub.api("GET", "/users/wes")
    assert model["servers"] == {}, model
    page.close()
