"""One real headless Chromium per test session (Debian's /usr/bin/chromium, driven by playwright).

Skips, never fails, when playwright or the browser is missing. Never downloads a browser.
Screenshots go to ``test-output/browser/`` at the repository root (gitignored).
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

CHROMIUM = os.environ.get("HANGSCOPE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHOTS = os.path.join(ROOT, "test-output", "browser")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="package")  # its threads end with it: later tests fork (attach does)
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright; no browser download "
                    "needed, the tests use /usr/bin/chromium)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium)")
    with sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield launched
        finally:
            launched.close()
    gc.collect()  # frees playwright's event loop, whose executor threads then end


@dataclass
class Visit:
    """A loaded page plus everything it tried: console errors, requests, dialogs."""

    page: Any
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def shot(self, name: str) -> str:
        os.makedirs(SHOTS, exist_ok=True)
        path = os.path.join(SHOTS, f"{name}.png")
        self.page.screenshot(path=path, full_page=True)
        return path


@pytest.fixture
def visit(browser: Any) -> Iterator[Any]:
    contexts = []

    def open_page(path: str) -> Visit:
        context = browser.new_context(viewport={"width": 1360, "height": 900})
        contexts.append(context)
        page = context.new_page()
        seen = Visit(page)
        page.on("console", lambda m: seen.errors.append(m.text) if m.type in ("error", "warning")
                else None)
        page.on("pageerror", lambda e: seen.errors.append(str(e)))
        page.on("request", lambda r: seen.requests.append(r.url)
                if not r.url.startswith(("file:", "data:")) else None)

        def on_dialog(dialog: Any) -> None:
            seen.dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", on_dialog)
        page.goto("file://" + os.path.abspath(path), wait_until="load")
        return seen

    yield open_page
    for context in contexts:
        context.close()
