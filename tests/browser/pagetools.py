"""Helpers of the browser tests: log in, screenshots as artifacts, pictures for the docs, a notebook."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

from localcluster.hubproc import Hub
from localcluster.paths import REPO_ROOT

ARTIFACTS = REPO_ROOT / "test-artifacts"


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


def notebook(*sources: str) -> dict[str, Any]:
    """A notebook (nbformat 4) of one code cell per source, for the python3 kernel."""
    cells = [
        {"cell_type": "code", "metadata": {}, "source": src, "outputs": [], "execution_count": None}
        for src in sources
    ]
    spec = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    return {"cells": cells, "metadata": {"kernelspec": spec}, "nbformat": 4, "nbformat_minor": 5}
