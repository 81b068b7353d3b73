"""The course in a real browser: JupyterLab on localhost, driven in headless Chromium.

Opens the tour in JupyterLab, runs every cell, flips the explorer's attention toggle
and checks that its figure changed; then does the same with a slider of chapter 02's
explorer, moved with the keyboard, and with chapter 05's explorer opened on a learner's
Shakespeare model as chapter 12 opens it. Screenshots go to .test-artifacts/ (not committed).
Needs Debian's chromium (/usr/bin/chromium, installed by .ci/run) and the playwright
package (its driver only: no browser is downloaded). Skipped when either is missing.
"""
import contextlib
import os
from pathlib import Path

import pytest

from browser import CHROMIUM, ERRORS, NOTEBOOK, SETTLED, chromium, kernel_eval, lab_server, open_and_run
from execute_notebooks import LEARNER, ROOT

ARTIFACTS = Path(os.environ.get("COURSE_TEST_ARTIFACTS", ROOT / ".test-artifacts"))
TOUR = LEARNER / "00_tour.ipynb"
SLIDERS = LEARNER / "02_qkv_by_hand.ipynb"  # its explorer: sliders and an image redrawn in place

PlaywrightTimeout = pytest.importorskip("playwright.sync_api").TimeoutError
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason=f"no Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def lab_home(tmp_path_factory):
    """The folder the JupyterLab server serves: a copy of notebooks/ in its notebooks/ folder."""
    return tmp_path_factory.mktemp("lab")


@pytest.fixture(scope="module")
def lab(lab_home):
    """A JupyterLab server on a free localhost port, serving a copy of notebooks/ (autosave stays there)."""
    with lab_server(lab_home) as served:
        yield served


@pytest.fixture(scope="module")
def browser():
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n")
    with chromium() as launched:
        yield launched


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
    try:
        page.wait_for_function("([el, old]) => { const img = el.querySelector('img');"
                               " return img !== null && img.getAttribute('src') !== old; }",
                               arg=[area.element_handle(), before], timeout=30_000)
    except PlaywrightTimeout:
        frames = area.locator(".course-explorer-frames")
        seen = frames.first.evaluate("el => ({...el.dataset})") if frames.count() else "no live picture"
        message = area.locator(".widget-html").first.inner_text(timeout=5_000) if area.locator(".widget-html").count() else ""
        with contextlib.suppress(Exception):
            area.screenshot(path=ARTIFACTS / f"{name}_stuck.png", timeout=5_000)
        pytest.fail(f"{name}: the picture did not change within 30 s. The page's picture widget: {seen}"
                    " (waiting 'no': the page holds the picture of the controls' values, so it was not put"
                    f" on screen; 'yes': it never arrived). The explorer's message line: {message!r}."
                    f" The kernel's explorers: {kernel_eval(page, KERNEL_EXPLORERS)}")
    area.screenshot(path=ARTIFACTS / f"{name}_after.png")
    assert figure_src(area) != before
    seen = area.locator(".course-explorer-frames").first.evaluate("el => ({...el.dataset})")
    if "wanted" in seen or "late" in seen:   # the page asked again, or swapped before a decode: keep the facts
        (ARTIFACTS / f"{name}_notes.txt").write_text(f"{seen}\n{kernel_eval(page, KERNEL_EXPLORERS)}\n")
    return area.locator("img").first.get_attribute("data-from")


# What the kernel's explorers hold (helpers/explorer.py), read through the page's kernel when a
# picture did not arrive: the controls' state, how many pictures it sent (and the last two),
# the states it refused, the renders that failed, the message line.
KERNEL_EXPLORERS = ("[(x.state(), x.live, x.renders, len(x.sent), sorted(x.sent)[-2:], sorted(x.refused), x.failed,"
                    " x.message.value) for x in __import__('gc').get_objects()"
                    " if type(x).__name__ == 'Explorer' and type(x).__module__ == 'helpers.explorer']")


def settled(page, area):
    """Wait until the explorer in `area` shows its picture and the kernel has sent the pictures
    it guesses a move will need (helpers/frames.py); then the plain first image is gone."""
    area.locator(".course-explorer-frames").scroll_into_view_if_needed()   # it sends ahead only when seen
    page.wait_for_function(SETTLED, arg=area.element_handle(), timeout=60_000, polling=100)
    assert area.locator("img:visible").count() == 1, "the plain first picture should give way to the live one"
    index = page.evaluate(f"el => {NOTEBOOK}.content.widgets.findIndex(c => c.node.contains(el))", area.element_handle())
    kinds = page.evaluate(f"i => Array.from({{length: {NOTEBOOK}.content.model.cells.get(i).outputs.length}},"
                          f" (_, j) => Object.keys({NOTEBOOK}.content.model.cells.get(i).outputs.get(j).data))", index)
    assert any("image/png" in k for k in kinds), f"the saved notebook should keep the plain picture; outputs: {kinds}"


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
    settled(page, explorer)
    # a toggle row (a menu: the page names it by label) moved to a state sent ahead: no round trip
    assert check_figure_redraws(page, explorer, toggle.click, "tour_widget_attention_toggle") == "page"
    prompt = explorer.locator(".widget-text input").first

    def new_prompt():
        prompt.fill("<BOS> the dog is")
        prompt.press("Enter")
    # free text is never guessed: the kernel draws it
    assert check_figure_redraws(page, explorer, new_prompt, "tour_widget_new_prompt") == "kernel"
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
    settled(page, cell)
    # five steps of a float slider (0.1 each), every one sent ahead: the page names them as the kernel does
    assert check_figure_redraws(page, cell, move_slider, "ch02_widget_slider") == "page"
    page.close()


# Chapter 12's step, on its own: a learner's GPT (the course's assembly, as for a learner who skipped
# the exercise) trained a few steps on Tiny Shakespeare by the chapter's loop, put into the course's
# Transformer, and chapter 05's explorer opened on it with the chapter's prompts.
LEARNER_MODEL = """import helpers
helpers.setup_notebook()
from helpers.gpt import corpus, compute as gpt
from helpers.heads import explorer as heads_explorer

text = corpus.load_text()
train_text, val_text = corpus.split(text)
chars = corpus.CharTokenizer(text)
model = gpt.small_start(gpt.GPT(vocab_size=65, d_model=64, n_heads=4, n_layers=4, d_ff=256, n_max=128), seed=0)
gpt.train_loop(model, chars.encode(train_text[:50_000]), chars.encode(val_text[:5_000]), steps=20, batch=8,
               context=64, lr=1e-2, warmup=5, min_lr=1e-3, clip=1.0, eval_every=20, eval_batches=1)
yours = gpt.as_transformer(model)
heads_explorer.explorer(yours, layer=0, head=0, tokenizer=chars, prompts=["ROMEO:\\nWhat light", "First Citizen:\\nBefore we"])"""


def test_chapter_05s_explorer_opens_on_a_learners_shakespeare_model(browser, lab, lab_home):
    import nbformat

    name = "12_learner_model.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(LEARNER_MODEL)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, lab_home / "notebooks" / name)
    page = open_and_run(browser, lab, name)
    assert page.evaluate(ERRORS) == [], "cells failed in the browser"
    cell = page.locator(".jp-CodeCell", has=page.locator(".widget-slider")).first
    assert cell.locator(".widget-dropdown select").first.input_value() == "your model"
    heads = cell.locator(".widget-slider .noUi-handle").nth(1)   # layer, then head

    def next_head():
        heads.focus()
        heads.press("ArrowRight")
    settled(page, cell)
    check_figure_redraws(page, cell, next_head, "ch12_learner_model_heads")
    page.close()
