"""The GPU inside JupyterLab, in real headless Chromium: the status bar item and side panel show the
session's device and the GPU memory a kernel holds (simulated NVML); Keep and Release act on the
claim on the real apiserver; Notebook 7 shows the item and panel too; Park my session keeps a
notebook's variables across a stop and a start from the hub's home page, and JupyterLab says so."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import login, notebook, shot
from tests.integration.cullertools import annotations, slow_culler_hub, wait_warned
from tests.integration.hubtools import allocated_device, nb, process_env, spawn
from tests.integration.kerneltools import execute

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser, pytest.mark.shared_hub.with_args(slow_culler_hub)]
# A notebook whose first cell builds state (an array, a dict, an instance of a class defined in
# the notebook) and whose second reads it back.
BUILD = """import numpy as np
class Model:
    def __init__(self, name, layers):
        self.name, self.layers = name, layers
    def describe(self):
        return f"{self.name} with {len(self.layers)} layers"
weights = np.arange(250_000, dtype=np.int64).reshape(500, 500)
config = {"lr": 0.01, "layers": [64, 32]}
model = Model("tiny-net", config["layers"])
print("built", weights.shape)"""
CHECK = 'print("back:", weights.shape, int(weights.sum()), config, model.describe())'
BACK = "back: (500, 500) 31249875000 {'lr': 0.01, 'layers': [64, 32]} tiny-net with 2 layers"


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


def test_park_my_session_in_jupyterlab_and_the_variables_come_back(
    browser: Browser, hub: Hub, api: KubeAPI, namespace: str
) -> None:
    spawn(hub, "pia", {"profile": "mig-1g-10gb"})
    content = {"type": "notebook", "content": notebook(BUILD, CHECK)}
    code, _ = nb(hub, "PUT", "/user/pia/api/contents/park.ipynb", content)
    assert code == 201, code
    page = browser.new_page(viewport={"width": 1280, "height": 720})
    login(page, hub, "pia")

    # The notebook builds its state in the page: its first cell, run with Shift+Enter.
    page.goto(hub.url + "/user/pia/lab/tree/park.ipynb")
    cells = page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell")
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60000)
    cells.nth(0).click()
    page.keyboard.press("Shift+Enter")
    expect(cells.nth(0).locator(".jp-OutputArea-output")).to_contain_text("built (500, 500)", timeout=30000)
    _, sessions = nb(hub, "GET", "/user/pia/api/sessions")
    [parked] = [x["kernel"]["id"] for x in sessions if x["path"] == "park.ipynb"]

    # Park my session in the GPU panel, confirmed: the server stops, the page goes to the home page.
    page.locator(".gpusessions-gpu-status").click()
    panel = page.locator("#gpusessions-gpu-panel")
    panel.get_by_role("button", name="Park my session").click()
    page.locator(".jp-Dialog").get_by_role("button", name="Park", exact=True).click()
    page.wait_for_url(re.compile(r"/hub/home"), timeout=60000)
    waits.gone(api, "ResourceClaim", "gpu-pia", namespace)
    assert hub.api("GET", "/users/pia")[1]["servers"] == {}

    # Start again from the home page (the picker: a MIG 1g.10gb, any free one).
    page.get_by_role("button", name="Start My Server").click()
    page.get_by_role("radio", name="MIG 1g.10gb", exact=True).check()
    page.get_by_role("button", name=re.compile("start", re.I)).click()
    page.wait_for_url(re.compile(r"/user/pia/lab"), timeout=90000)

    # JupyterLab reopens the notebook (its workspace), on the restored kernel; the second cell,
    # run in the page, reads every value back.
    expect(page.get_by_role("tab", name=re.compile("park.ipynb"))).to_be_visible(timeout=60000)
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=60000)
    cells.nth(1).click()
    page.keyboard.press("Shift+Enter")
    expect(cells.nth(1).locator(".jp-OutputArea-output")).to_have_text(BACK, timeout=30000)

    # ... and says the session was restored: a notification and the GPU panel, in the words of
    # the restore's status.
    code, status = nb(hub, "GET", "/user/pia/gpusessions/restore")
    assert code == 200 and status["state"] == "restored", status
    assert status["message"].startswith("Restored your session from"), status
    [kernel] = status["kernels"]
    assert {"weights", "config", "model"} <= set(kernel["variables"]), kernel
    assert kernel["kernel"] != parked, "a new kernel, restored"
    toast = page.locator(".Toastify__toast").filter(has_text="Restored your session from")
    expect(toast).to_contain_text(status["message"], timeout=30000)
    if not panel.is_visible():  # the workspace may have kept the panel open
        page.locator(".gpusessions-gpu-status").click()
    expect(panel.locator("[data-gpu-field=restore]")).to_contain_text(status["message"], timeout=30000)
    shot(page, "lab-gpu-4-restored")
    page.close()
    code, _ = hub.api("POST", "/gpusessions/users/pia/release")  # the slice back, for later tests
    assert code == 200, code
    waits.gone(api, "ResourceClaim", "gpu-pia", namespace)
