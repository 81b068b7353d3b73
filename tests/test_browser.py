"""The course in a real browser: JupyterLab on localhost, driven in headless Chromium.

Opens the tour in JupyterLab, runs every cell, flips the explorer's attention toggle
and checks that its figure changed; then does the same with a slider of chapter 02's
explorer, moved with the keyboard. Screenshots go to .test-artifacts/ (not committed).
Needs Debian's chromium (/usr/bin/chromium, installed by .ci/run) and the playwright
package (its driver only: no browser is downloaded). Skipped when either is missing.
"""
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from execute_notebooks import FIXED_ENV, ROOT

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = Path(os.environ.get("COURSE_TEST_ARTIFACTS", ROOT / ".test-artifacts"))
TOUR = ROOT / "notebooks" / "00_tour.ipynb"
SLIDERS = ROOT / "notebooks" / "02_qkv_by_hand.ipynb"  # its explorer: sliders and an image redrawn in place

playwright_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")

# JavaScript run in the page. The app is exposed by --LabApp.expose_app_in_browser.
NOTEBOOK = "window.jupyterapp.shell.currentWidget"
ALL_RUN = f"""() => {{
    const panel = {NOTEBOOK};
    if (!panel || !panel.sessionContext || !panel.sessionContext.session) return false;
    const kernel = panel.sessionContext.session.kernel;
    const cells = Array.from(panel.content.model.cells).filter(c => c.type === 'code');
    return kernel.status === 'idle' && cells.every(c => c.executionCount !== null);
}}"""
ERRORS = f"""() => Array.from({NOTEBOOK}.content.model.cells)
    .filter(c => c.type === 'code')
    .flatMap(c => Array.from({{length: c.outputs.length}}, (_, i) => c.outputs.get(i).toJSON()))
    .filter(o => o.output_type === 'error').map(o => o.ename + ': ' + o.evalue)"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a free localhost port, serving a copy of notebooks/ (autosave stays there)."""
    home = tmp_path_factory.mktemp("lab")
    shutil.copytree(ROOT / "notebooks", home / "notebooks")
    port, token = free_port(), uuid.uuid4().hex
    env = {**os.environ, **FIXED_ENV, "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"), "JUPYTER_RUNTIME_DIR": str(home / "runtime")}
    env.pop("MPLBACKEND", None)
    news = home / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
    news.parent.mkdir(parents=True)
    news.write_text('{"fetchNews": "false", "checkForUpdates": false}')  # no pop-up over the screenshots
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--allow-root", "--ip=127.0.0.1", f"--port={port}",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={home}",
         "--LabApp.expose_app_in_browser=True", "--LabApp.news_url=None",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        env=env, cwd=home, stdout=subprocess.DEVNULL, stderr=open(home / "server.log", "w"))
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
            break
        except OSError:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited:\n{(home / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
    else:
        server.terminate()
        pytest.fail("JupyterLab did not answer within 60 s")
    yield url, token
    server.terminate()
    server.wait(timeout=30)


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n")
    with playwright_api.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        yield chromium
        chromium.close()


def open_and_run(browser, lab, notebook):
    """A page with `notebook` open in JupyterLab, every cell run; returns the page."""
    url, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    workspace = Path(notebook).stem  # a fresh workspace each, so no earlier tab is restored
    page.goto(f"{url}/lab/workspaces/{workspace}/tree/notebooks/{notebook}?token={token}")
    page.wait_for_function(f"() => window.jupyterapp && {NOTEBOOK} && {NOTEBOOK}.sessionContext"
                           " && {NOTEBOOK}.sessionContext.session"
                           " && {NOTEBOOK}.sessionContext.session.kernel"
                           " && {NOTEBOOK}.sessionContext.session.kernel.status === 'idle'".replace(
                               "{NOTEBOOK}", NOTEBOOK), timeout=120_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_timeout(1000)
    page.wait_for_function(ALL_RUN, timeout=180_000, polling=500)
    return page


def figure_src(widget):
    images = widget.locator("img")
    return images.first.get_attribute("src") if images.count() else None


def check_figure_redraws(page, area, act, name):
    """Screenshot `area` (a locator holding the figure), call act(), and wait until its image changes."""
    area.scroll_into_view_if_needed()
    page.wait_for_function("el => el.querySelector('img') !== null", arg=area.element_handle(), timeout=30_000)
    before = figure_src(area)
    area.screenshot(path=ARTIFACTS / f"{name}_before.png")
    act()
    page.wait_for_function("([el, old]) => { const img = el.querySelector('img');"
                           " return img !== null && img.getAttribute('src') !== old; }",
                           arg=[area.element_handle(), before], timeout=30_000)
    area.screenshot(path=ARTIFACTS / f"{name}_after.png")
    assert figure_src(area) != before


def test_tour_runs_in_the_browser_and_its_toggle_redraws_the_figure(browser, lab):
    page = open_and_run(browser, lab, TOUR.name)
    assert page.evaluate(ERRORS) == [], "cells failed in the browser"
    page.evaluate(f"() => {{ {NOTEBOOK}.content.activeCellIndex = 0; }}")
    page.locator(".jp-WindowedPanel-outer").first.evaluate("el => { el.scrollTop = 0; }")
    page.wait_for_timeout(500)
    page.screenshot(path=ARTIFACTS / "tour_top.png")
    toggle = page.get_by_role("button", name="attention off")
    toggle.scroll_into_view_if_needed()
    explorer = page.locator(".jp-CodeCell", has=toggle).first  # the cell: its controls, then the picture
    check_figure_redraws(page, explorer, toggle.click, "tour_widget_attention_toggle")
    page.close()


def test_a_slider_redraws_chapter_02s_figure(browser, lab):
    page = open_and_run(browser, lab, SLIDERS.name)
    assert page.evaluate(ERRORS) == [], "cells failed in the browser"
    cell = page.locator(".jp-CodeCell", has=page.locator(".widget-slider")).first
    handle = cell.locator(".widget-slider .noUi-handle").first

    def move_slider():
        handle.focus()
        for _ in range(5):
            handle.press("ArrowRight")
    check_figure_redraws(page, cell, move_slider, "ch02_widget_slider")
    page.close()
