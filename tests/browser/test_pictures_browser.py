"""The pictures in the README, taken on a hub configured as `make demo`'s: the GPU picker, the
spawn progress and the GPU inside JupyterLab (`make screenshots` writes them to docs/images/)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect
from tests.browser.pagetools import login, picture
from tests.integration.hubtools import nb, process_env
from tests.integration.kerneltools import execute

from localcluster import waits
from localcluster.hubproc import Hub
from localcluster.kubeapi import KubeAPI

pytestmark = [pytest.mark.cluster, pytest.mark.browser, pytest.mark.screenshot]

# The spawn page reloads into JupyterLab on the progress stream's "ready" event: hold that
# event back until the test lets it go, so the picture shows the whole progress log.
HOLD_READY = """
(() => {
  const Base = window.EventSource;
  class Held extends Base {
    set onmessage(f) {
      super.onmessage = (e) => {
        let ready = false;
        try { ready = JSON.parse(e.data).ready; } catch (x) {}
        if (ready && !window.gsLetGo) { window.gsHeld = () => f(e); return; }
        f(e);
      };
    }
    get onmessage() { return super.onmessage; }
  }
  window.EventSource = Held;
})();
"""


def test_pictures_of_the_picker_the_spawn_and_the_gpu_in_jupyterlab(
    browser: Browser,
    demo_hub: Hub,
    api: KubeAPI,
    namespace: str,
    load_file: Path,
) -> None:
    hub = demo_hub
    page = browser.new_page(viewport={"width": 1100, "height": 760})
    page.add_init_script(HOLD_READY)
    login(page, hub, "alice")
    page.goto(hub.url + "/hub/spawn")
    expect(page.locator("#gs-avail-mig-1g-10gb")).to_contain_text("free now")
    page.get_by_role("radio", name="MIG 1g.10gb", exact=True).check()
    picture(page, "picker")

    page.get_by_role("button", name=re.compile("start", re.I)).click()
    page.wait_for_url(re.compile(r"/spawn-pending/alice"))
    page.locator("#progress-details").evaluate("d => d.open = true")
    expect(page.locator("#progress-log")).to_contain_text("GPU allocated: MIG 1g.10gb", timeout=90000)
    page.wait_for_function("() => window.gsHeld !== undefined", timeout=90000)
    picture(page, "spawn-progress")
    page.evaluate("() => { window.gsLetGo = true; window.gsHeld(); }")
    page.wait_for_url(re.compile(r"/user/alice/lab"), timeout=60000)

    # A notebook whose kernel holds 2.1 GiB of the slice (simulated NVML).
    code, k = hub.api("GET", "/users/alice")
    assert code == 200 and k["servers"][""]["ready"], k
    item = page.locator(".gpusessions-gpu-status")
    expect(item).to_contain_text("MIG 1g.10gb", timeout=60000)
    page.locator(".jp-LauncherCard").filter(has_text="Python 3").first.click()
    expect(page.locator(".jp-Notebook")).to_be_visible(timeout=60000)
    sessions = waits.wait_for(
        lambda: nb(hub, "GET", "/user/alice/api/sessions")[1], 60, "the notebook's kernel session"
    )
    kernel = sessions[0]["kernel"]["id"]
    pid = int(execute(hub.url, "alice", kernel, hub.token, "import os; print(os.getpid())"))
    gpu = process_env(api, namespace, "gpu-holder-alice", "kernels")["DEVCLUSTER_CDI_DEVICES"]
    load_file.write_text(
        json.dumps({gpu: {"activity": 35, "memory_used_mib": 2150, "pids": {str(pid): 2150}}})
    )
    expect(item).to_contain_text("2.1 / ", timeout=30000)
    item.click()
    panel = page.locator("#gpusessions-gpu-panel")
    expect(panel.locator("td").filter(has_text="Untitled.ipynb")).to_contain_text(
        "Untitled.ipynb", timeout=30000
    )
    news = page.locator(".Toastify__toast").filter(has_text="Jupyter news")
    if news.count():  # JupyterLab's own question, not ours: out of the picture
        news.get_by_role("button", name="No", exact=True).click()
    page.wait_for_timeout(500)
    picture(page, "lab-gpu")
    page.close()
