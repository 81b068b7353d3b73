"""Where the chapters are, and the copies made from them: what the course's scripts share.

The scripts import one way: ``homework.py`` -> ``autograde.py`` -> this file, and
``execute_notebooks.py`` -> this file; this file imports none of them.

* The chapters are written once, in instructor/ (nbgrader's source: solutions and hidden tests);
  the learner's copies are in notebooks/ (``learner_version``, written and executed by
  scripts/execute_notebooks.py).
* ``student_version`` is the copy nbgrader releases (tests/test_homework.py checks the two agree).
"""
import atexit
import os
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
FIXED_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
INSTRUCTOR = ROOT / "instructor"   # the chapters as written: nbgrader's source, solutions included
LEARNER = ROOT / "notebooks"       # the copies a learner opens, made from them

MARKERS = {"solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
           "hidden": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")}
CODE_STUB = "# YOUR CODE HERE"  # the same stub as grading/nbgrader_config.py
TEXT_STUB = "YOUR ANSWER HERE"
SOLUTION_SUMMARY = "Solution (open it after you have tried)"


def all_notebooks():
    """The chapters as written (instructor/*.ipynb)."""
    return sorted(INSTRUCTOR.glob("*.ipynb"))


def learner_notebooks():
    """The learner's copies (notebooks/*.ipynb)."""
    return sorted(LEARNER.glob("*.ipynb"))


def learner_copy(path):
    """notebooks/<name> for instructor/<name>."""
    return LEARNER / Path(path).name


def nbgrader_meta(cell):
    """A cell's nbgrader metadata ({} when it has none or it is not a dict)."""
    meta = cell.get("metadata", {})
    meta = meta.get("nbgrader", {}) if isinstance(meta, dict) else {}
    return meta if isinstance(meta, dict) else {}


def kernel_env(**extra):
    """os.environ with the fixed thread counts, without MPLBACKEND (the kernel's inline backend
    saves figures), plus ``extra``."""
    env = {**os.environ, **FIXED_ENV, **extra}
    env.pop("MPLBACKEND", None)
    return env


KERNEL_STARTS = 3   # how many times a kernel that dies before it answers is started again


def run_client(client, **kwargs):
    """``client.execute(**kwargs)`` for a nbclient client, started again when its kernel dies before it
    answers. A kernel listens on TCP ports its client drew at random, each client on its own; two started
    at once (the tests run notebooks in parallel) can draw the same port, and the second kernel then exits
    at start ("Address already in use"). No cell has run then, so starting it again changes nothing else."""
    for start in range(1, KERNEL_STARTS + 1):
        try:
            return client.execute(**kwargs)
        except RuntimeError as error:   # nbclient's DeadKernelError (a kernel dead in a cell) says otherwise
            atexit.unregister(client._cleanup_kernel)   # nbclient's own, left behind by a failed start
            if "before replying to kernel_info" not in str(error) or start == KERNEL_STARTS:
                raise


# ---------------------------------------------------------------- the student's and the learner's copies

def _replace_regions(source, markers, stub):
    """Replace each marked region (marker lines included) by `stub` lines at the marker's indent."""
    begin, end = markers
    lines, inside = [], False
    for line in source.splitlines():
        if begin in line:
            inside = True
            indent = line[:len(line) - len(line.lstrip())]
            lines += [indent + stub_line for stub_line in stub]
        elif end in line:
            inside = False
        elif not inside:
            lines.append(line)
    return "\n".join(lines)


def student_version(nb):
    """A copy of the notebook as nbgrader releases it: no solutions, no hidden tests, no outputs.

    Solution regions become '# YOUR CODE HERE' (code) or 'YOUR ANSWER HERE' (markdown);
    hidden-test regions disappear. tests/test_homework.py checks this equals nbgrader's release.
    """
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution"):
            stub = [CODE_STUB] if cell.cell_type == "code" else [TEXT_STUB]
            cell.source = _replace_regions(cell.source, MARKERS["solution"], stub)
        if meta.get("grade") and cell.cell_type == "code":
            cell.source = _replace_regions(cell.source, MARKERS["hidden"], [])
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    nb.metadata.pop("widgets", None)
    return nb


def solution_lines(source):
    """The lines inside the solution markers of a cell's source."""
    begin, end = MARKERS["solution"]
    lines, inside = [], False
    for line in source.splitlines():
        if begin in line or end in line:
            inside = begin in line
        elif inside:
            lines.append(line)
    return lines


def learner_version(nb):
    """The copy a learner opens: the student version, with each exercise's solution one click away.

    After each graded check cell comes a markdown cell holding, collapsed, the solution code of the
    answer cells before it. Outputs are cleared; scripts/execute_notebooks.py runs the copy.
    """
    student, solutions, cells = student_version(nb), [], []
    for original, cell in zip(nb.cells, student.cells):
        cells.append(cell)
        meta = nbgrader_meta(original)
        if meta.get("solution"):
            solutions += solution_lines(original.source) + [""]
        if meta.get("grade") and solutions:
            code = "\n".join(solutions).strip("\n")
            text = f"<details><summary>{SOLUTION_SUMMARY}</summary>\n\n```python\n{code}\n```\n\n</details>"
            shown = nbformat.v4.new_markdown_cell(text, id=f"{meta['grade_id']}-solution"[-64:])
            shown.metadata["course"] = {"solution_of": meta["grade_id"]}
            cells.append(shown)
            solutions = []
    student.cells = cells
    return student
