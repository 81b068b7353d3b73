"""The course in a real browser: a JupyterLab server on localhost and headless Chromium.

tests/test_browser.py and scripts/benchmark.py --browser use these. Needs Debian's chromium
(/usr/bin/chromium, or COURSE_CHROMIUM) and the playwright package (its driver only: it
downloads no browser).
"""
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

from execute_notebooks import FIXED_ENV, LEARNER

CHROMIUM = os.environ.get("COURSE_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]

# JavaScript run in the page. The app is exposed by --LabApp.expose_app_in_browser.
NOTEBOOK = "window.jupyterapp.shell.currentWidget"
KERNEL_IDLE = (f"() => window.jupyterapp && {NOTEBOOK} && {NOTEBOOK}.sessionContext"
               f" && {NOTEBOOK}.sessionContext.session && {NOTEBOOK}.sessionContext.session.kernel"
               f" && {NOTEBOOK}.sessionContext.session.kernel.status === 'idle'")
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


class LabError(Exception):
    """The JupyterLab server did not start; the message holds the end of its log."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def lab_server(home):
    """A JupyterLab server serving a copy of notebooks/ from `home`; yields (url, token)."""
    home = Path(home)
    shutil.copytree(LEARNER, home / "notebooks")
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
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=1)
                break
            except OSError:
                if server.poll() is not None:
                    raise LabError(f"JupyterLab exited:\n{(home / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        else:
            raise LabError("JupyterLab did not answer within 60 s")
        yield url, token
    finally:
        server.terminate()
        server.wait(timeout=30)


@contextlib.contextmanager
def chromium():
    """Headless Chromium driven by playwright; yields the browser."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def open_and_run(browser, lab, notebook):
    """A page with notebooks/`notebook` open in JupyterLab, every cell run; returns the page."""
    url, token = lab
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    workspace = Path(notebook).stem  # a fresh workspace each, so no earlier tab is restored
    page.goto(f"{url}/lab/workspaces/{workspace}/tree/notebooks/{notebook}?token={token}")
    page.wait_for_function(KERNEL_IDLE, timeout=120_000)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_timeout(1000)
    page.wait_for_function(ALL_RUN, timeout=180_000, polling=500)
    return page


# Evaluate a Python expression (the argument) in the kernel of the page's notebook, silently;
# its text/plain, or null if it could not be evaluated.
KERNEL_EVAL = f"""async (expression) => {{
    const kernel = {NOTEBOOK}.sessionContext.session.kernel;
    const reply = await kernel.requestExecute({{code: '', silent: true, store_history: false,
                                               user_expressions: {{e: expression}}}}).done;
    const e = reply.content.status === 'ok' ? reply.content.user_expressions.e : null;
    return e && e.status === 'ok' ? e.data['text/plain'] : null;
}}"""


def kernel_eval(page, expression):
    """The text of ``expression`` evaluated in the kernel of the page's notebook, or None."""
    return page.evaluate(KERNEL_EVAL, expression)


# True once the explorer's picture is in the page and the kernel has sent every picture it
# guesses a move will need (helpers/frames.py), as a learner who looks before moving finds it.
SETTLED = """el => { const f = el.querySelector('.course-explorer-frames');
    return !f || (f.dataset.prefetch === 'done' && f.dataset.waiting === 'no'); }"""


def settle(page, cell, timeout_ms=30_000):
    """Wait until SETTLED (or timeout_ms); (the milliseconds waited, True if it timed out)."""
    start = time.perf_counter()
    try:
        page.wait_for_function(SETTLED, arg=cell.element_handle(), timeout=timeout_ms, polling=100)
        late = False
    except Exception:   # playwright's TimeoutError: measure anyway, the table says so
        late = True
    return 1000 * (time.perf_counter() - start), late
