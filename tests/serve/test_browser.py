"""End to end in a real browser: headless Chromium (Debian's package, driven
by Playwright) opens the page of a served harness, submits an input, watches
the streamed answer appear, steers while a tool runs, aborts, and saves
screenshots (laptop and phone) under the test's tmp directory."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from .conftest import TOKEN, ServerThread

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    if os.environ.get("CI"):
        raise RuntimeError("the browser test needs Debian's chromium (.ci/run installs it)")
    pytest.skip("no chromium on this machine (apt-get install chromium)", allow_module_level=True)

#: Set to a directory to keep the screenshots there as well (docs/img).
KEEP = os.environ.get("PIDURABLE_SCREENSHOTS")


def _shot(page: object, path: Path) -> None:
    page.screenshot(path=str(path))  # type: ignore[attr-defined]
    if KEEP:
        shutil.copy(path, Path(KEEP) / path.name)


def test_page_streams_steers_and_aborts_in_chromium(tmp_path: Path) -> None:
    """The page shows the answer growing (a partial before the entry), the
    running tool's output and task tree, places a steer after the tool round
    and aborts a run; it fits a phone's width."""
    expect = sync_api.expect
    with ServerThread(tmp_path / "served.sqlite") as url, sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1360, "height": 860}, device_scale_factor=1)
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"{url}/#token={TOKEN}")
            expect(page.locator(".conv-item")).to_have_count(1)
            expect(page.locator("#conn")).to_have_attribute("data-state", "live")
            assert "token" not in page.url  # the fragment is dropped once read

            # 1. an input, and its answer streaming in
            page.fill("#composer-input", "Hello durable world")
            page.click("#send")
            expect(page.locator(".entry.user .bubble")).to_have_text("Hello durable world")
            expect(page.locator("#live-partial")).to_contain_text("You said", timeout=10_000)
            partial = page.locator("#live-partial").inner_text()
            answer = page.locator(".entry[data-kind=assistant] .bubble").last
            expect(answer).to_contain_text("nothing is done twice", timeout=15_000)
            assert len(partial) < len(answer.inner_text())  # seen growing, before the entry
            expect(page.locator("#status-chip")).to_have_text("Idle")
            expect(page.locator(".conv-item .name")).to_have_text("Hello durable world")

            # 2. a tool runs with its output live; steer while it runs
            page.fill("#composer-input", "Please do the long work")
            page.click("#send")
            expect(page.locator(".live-tool .tool-output")).to_contain_text("step 2 of 16", timeout=10_000)
            expect(page.locator("#tasks .task-kind", has_text="count")).to_be_visible()
            expect(page.locator("#tasks")).to_contain_text("waiting on count")
            page.click("[data-mode=steer]")
            page.fill("#composer-input", "quick: also greet the sheep")
            page.click("#send")
            expect(page.locator("#queue .queue-item")).to_contain_text("also greet the sheep")
            _shot(page, tmp_path / "serve.png")
            steered = page.locator(".entry[data-kind=assistant] .bubble", has_text="Quick answer to: quick: also greet the sheep")
            expect(steered).to_be_visible(timeout=15_000)
            # the steer was placed after the tool round, in the same run
            kinds = page.eval_on_selector_all("#entries .entry", "els => els.map(e => e.dataset.kind)")
            assert kinds[-3:] == ["tool_result", "user", "assistant"], kinds

            # 3. abort a running tool
            page.click("[data-mode=follow_up]")
            page.fill("#composer-input", "Another long work, please")
            page.click("#send")
            expect(page.locator(".live-tool .tool-output")).to_contain_text("step 1 of 16", timeout=10_000)
            expect(page.locator("#abort")).to_be_enabled()
            page.click("#abort")
            expect(page.locator("#status-chip")).to_have_text("Idle", timeout=10_000)
            expect(page.locator("#live")).to_be_hidden()
            last_tool = page.locator(".entry[data-kind=tool_result]").last
            expect(last_tool.locator(".badge")).to_have_text("error")
            expect(last_tool).to_contain_text(re.compile("abort", re.I))
            assert not errors, errors

            # 4. a phone: nothing wider than the screen
            phone = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True, has_touch=True)
            phone.goto(f"{url}/#token={TOKEN}")
            expect(phone.locator(".entry[data-kind=assistant]").first).to_be_visible()
            assert phone.evaluate("document.documentElement.scrollWidth") <= 390
            _shot(phone, tmp_path / "serve-phone.png")
        finally:
            browser.close()
