"""Colab: every notebook's first cell and badge, and the course on Colab's library versions.

Always: each notebook opens with an "Open in Colab" badge pointing at itself, and its first
code cell is the Colab cell of CONTRIBUTING.md, which is checked by running it with a stand-in
for IPython and google.colab (on Colab: clone, install without touching torch or numpy, cd,
enable the widget manager; elsewhere: nothing).

On Colab's stack (COURSE_COLAB_STACK=1, run by .ci/run): Colab's ipywidgets 7.7.1 and numpy 2.1
are laid over the project's environment with PYTHONPATH (.ci-colab/), and the unit tests and the
tour run on them. torch stays at the project's CPU build, 2.13.0: the only torch 2.11 within reach
is PyPI's CUDA build (a 530 MB wheel that will not import without ~4 GB of CUDA libraries;
PyTorch's CPU index is out of reach), too heavy for every CI run. Laid over the same way
(PYTHONPATH=<overlay>:<torch 2.11 target dir>), it was run once by hand with the same results.
Python stays 3.11: there is no CPU torch wheel for 3.13 on this machine.
"""
import copy
import os
import re
import sys
import types

import nbformat
import pytest

from execute_notebooks import INSTRUCTOR, ROOT, WIDGET_VIEW, all_notebooks, differences, execute

NOTEBOOKS = pytest.mark.parametrize("path", all_notebooks(), ids=lambda path: path.stem)
REPO = "transformer-course/transformer-course"
ON_STACK = os.environ.get("COURSE_COLAB_STACK") == "1"
COLAB_VERSIONS = {"ipywidgets": "7.7.1", "numpy": "2.1.3"}


def colab_cell():
    """The Colab cell as CONTRIBUTING.md gives it (its first python block that mentions google.colab)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "CONTRIBUTING.md").read_text(), re.S)
    return next(block for block in blocks if "google.colab" in block).strip()


def first_code_cell(path):
    return next(cell for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "code")


def run_colab_cell(on_colab):
    """Run the Colab cell as IPython would; return the shell commands, magics and widget calls it made."""
    from IPython.core.inputtransformer2 import TransformerManager

    code = TransformerManager().transform_cell(colab_cell())
    calls = []
    shell = types.SimpleNamespace(system=lambda cmd: calls.append(("!", cmd)),
                                  run_line_magic=lambda name, arg: calls.append(("%", f"{name} {arg}")))
    output = types.SimpleNamespace(enable_custom_widget_manager=lambda: calls.append(("widgets", "on")))
    colab = types.ModuleType("google.colab")
    colab.output = output
    fake = {"google": types.ModuleType("google"), "google.colab": colab} if on_colab else {}
    saved = {name: sys.modules.pop(name) for name in ("google", "google.colab") if name in sys.modules}
    sys.modules.update(fake)
    try:
        exec(compile(code, "colab-cell", "exec"), {"get_ipython": lambda: shell})
    finally:
        for name in fake:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    return calls


def test_colab_cell_does_nothing_off_colab():
    assert run_colab_cell(on_colab=False) == []


def test_colab_cell_on_colab_installs_the_course_and_enables_widgets():
    calls = run_colab_cell(on_colab=True)
    commands = [cmd for kind, cmd in calls if kind == "!"]
    assert any(cmd.startswith("git clone") and f"github.com/{REPO}" in cmd for cmd in commands), commands
    assert any(re.search(r"pip install .*--no-deps /content/course\b", cmd) for cmd in commands), commands
    installs = " ".join(cmd for cmd in commands if "pip install" in cmd)
    assert "gensim" in installs and "ipympl" in installs
    assert "anywidget" in installs   # the explorers' pictures in the page (helpers/frames.py); --no-deps skips it
    assert not re.search(r"\b(torch|numpy)\b", installs), f"the Colab cell must not reinstall torch or numpy: {installs}"
    assert ("%", "cd /content/course/notebooks") in calls
    assert calls[-1] == ("widgets", "on")


@NOTEBOOKS
def test_first_code_cell_is_the_colab_cell(path):
    assert first_code_cell(path).source.strip() == colab_cell(), (
        f"{path.name}: the first code cell must be the Colab cell of CONTRIBUTING.md, unchanged")


@NOTEBOOKS
def test_opens_with_a_colab_badge_to_itself(path):
    first = nbformat.read(path, as_version=4).cells[0]
    link = f"https://colab.research.google.com/github/{REPO}/blob/main/notebooks/{path.name}"
    assert first.cell_type == "markdown" and "colab-badge.svg" in first.source and f"]({link})" in first.source, (
        f"{path.name}: its first cell needs the line\n"
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({link})")


@NOTEBOOKS
def test_chapter_map_has_a_colab_badge(path):
    link = f"https://colab.research.google.com/github/{REPO}/blob/main/notebooks/{path.name}"
    assert link in (ROOT / "README.md").read_text(), f"README's chapter map lacks the Colab link of {path.name}"


# ---------------------------------------------------------------- on Colab's versions

stack_only = pytest.mark.skipif(not ON_STACK, reason="runs in .ci/run with COURSE_COLAB_STACK=1 and the "
                                                     ".ci-colab overlay on PYTHONPATH")


@stack_only
def test_running_on_colabs_versions():
    import ipywidgets
    import numpy

    assert {"ipywidgets": ipywidgets.__version__, "numpy": numpy.__version__} == COLAB_VERSIONS


def widget_outputs_alike(nb):
    """ipywidgets 7 shows a widget as display_data, 8 as execute_result: count them the same."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if WIDGET_VIEW in out.get("data", {}):
                out.output_type = "display_data"
                out.pop("execution_count", None)
    return nb


@stack_only
def test_tour_on_colabs_versions_prints_what_is_committed():
    path = INSTRUCTOR / "00_tour.ipynb"
    diffs = differences(widget_outputs_alike(nbformat.read(path, as_version=4)), widget_outputs_alike(execute(path)))
    assert not diffs, "the tour differs on Colab's versions:\n" + "\n".join(diffs)
