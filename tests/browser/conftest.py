"""Headless Debian Chromium driven by Playwright, shared by the browser tests."""

from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Error, sync_playwright

from localcluster.hubproc import Hub
from localcluster.paths import REPO_ROOT

from .pagetools import ARTIFACTS, shot

CHROMIUM = "/usr/bin/chromium"


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
