"""Headless Debian Chromium driven by Playwright, shared by the browser tests."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Error, Page, sync_playwright

from localcluster.hubproc import Hub
from localcluster.paths import REPO_ROOT

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = REPO_ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Per module: Playwright's sync API keeps an event loop running until it exits,
    # which other (asyncio/tornado) tests in the same process must not find.
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test` installs Debian's chromium", pytrace=False)
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            # No background traffic: this machine reaches no network but its own.
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-quic",
                "--no-first-run",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield b
        b.close()


def shot(page: Page, name: str) -> None:
    """Save a screenshot as a test artifact (test-artifacts/<name>.png)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


# `make screenshots` sets this to docs/images: tests marked `screenshot` then save their
# pictures for the docs there (otherwise into test-artifacts/ like any other shot).
PICTURES_ENV = "GPUSESSIONS_PICTURES"
PICTURE_MAX_BYTES = 200_000


def picture(page: Page, name: str, selector: str | None = None) -> Path:
    """A picture for the docs: docs/images/<name>.png under `make screenshots` (the viewport,
    or the element `selector`), kept under PICTURE_MAX_BYTES; else a test artifact."""
    import os

    folder = Path(os.environ.get(PICTURES_ENV) or ARTIFACTS)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    target = page.locator(selector).first if selector else page
    target.screenshot(path=str(path), animations="disabled")
    size = path.stat().st_size
    assert size <= PICTURE_MAX_BYTES, f"{path} is {size} bytes: make the viewport or the element smaller"
    return path


def login(page: Page, hub: Hub, user: str) -> None:
    page.goto(hub.url + "/hub/login")
    page.get_by_label("Username").fill(user)
    page.get_by_label("Password").fill("test-password")
    page.get_by_role("button", name=re.compile("sign in", re.I)).click()
    page.wait_for_url(re.compile(r"/(hub|user)/"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """When a browser test fails, save a screenshot of every page it has open
    (test-artifacts/FAILED-<test>-<n>.png), so the failure can be seen."""
    outcome = yield
    report = outcome.get_result()
    browser = getattr(item, "funcargs", {}).get("browser")
    if report.when != "call" or not report.failed or browser is None:
        return
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", item.name)
    pages = [p for ctx in browser.contexts for p in ctx.pages]
    for i, page in enumerate(pages):
        try:
            shot(page, f"FAILED-{name}-{i}")
        except Error as e:  # a page that crashed: say so, keep the test's own failure
            report.sections.append(("screenshot", f"page {i}: no screenshot ({e})"))
        else:
            report.sections.append(("screenshot", f"saved {ARTIFACTS / f'FAILED-{name}-{i}.png'}"))


@pytest.fixture
def demo_hub(namespace: str, tmp_path: Path) -> Iterator[Hub]:
    """A hub configured as `make demo`'s (hub_config/demo_config.py: its sizes, team queues on
    KAI, the culler) on this test's namespace and free ports, password "test-password"; the
    pictures for the docs are taken on it (run on the demo shape by `make screenshots`)."""
    from localcluster import kai
    from localcluster.hubproc import start_hub
    from localcluster.kubeapi import KubeAPI
    from localcluster.paths import ClusterPaths

    paths = ClusterPaths.default()
    api = KubeAPI.from_kubeconfig(paths.kubeconfig)
    for q in kai.demo_queues():
        api.apply(q)
    demo_config = str(REPO_ROOT / "hub_config" / "demo_config.py")
    extra = f"\nexec(compile(open({demo_config!r}).read(), {demo_config!r}, 'exec'))\n"
    env = {
        "GPUSESSIONS_DEMO_PASSWORD": "test-password",
        "GPUSESSIONS_DEMO_NAMESPACE": namespace,
        "KUBECONFIG": str(paths.kubeconfig),
    }
    hub = start_hub(extra, tmp_path / "demo-hub", timeout=90, env_extra=env)
    try:
        yield hub
    finally:
        hub.stop()
        # The demo's queues are cluster-wide: later tests make queues of the same names.
        for q in reversed(kai.demo_queues()):
            api.delete("Queue", q["metadata"]["name"])
