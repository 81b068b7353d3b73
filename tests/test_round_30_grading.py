"""Round 30 (issue 31), the grader (red team round 29, reader C): a cell that hooked into how IPython runs a cell
(an input or AST transformer, run_cell_async replaced) rewrote the
grader's check cell into a forged record (entry 2); bubblewrap's /dev was a tmpfs of no size (entry 1); a check cell
turned into Markdown scored 0 as "deleted" (entry 3); ``grading.decode`` let a None among whole numbers through as a
TypeError and cast 1e308 to inf in a float16 record (entry 8)."""
import subprocess
import sys
import warnings

import nbformat
import pytest

import autograde
import fence
from execute_notebooks import INSTRUCTOR
from helpers import grading

CHAPTER = INSTRUCTOR / "00_tour.ipynb"
CELL, RIGHT = "ch00_ex3_check", 7_087_872   # the tour's exercise 3 and its answer


# ---------------------------------------------------------------- entry 2: a check cell runs as written

REWRITE = f"""import json, os
from helpers.tour import checks
layer_params = 1   # wrong
def rewrite(lines):   # the check cell, as sent, becomes a forged record of the right answer
    if "helpers.grading.cell('{CELL}')" in "".join(lines):
        return ["import json, os\\n", "os.write(int(os.environ['COURSE_RECORDS_FD']), (json.dumps({{'cell': '{CELL}', "
                "'index': 0, 'check': 'x', 'answer': {RIGHT}}}) + '\\\\n').encode())\\n"]
    return lines
"""
HOOKS = {
    "input_transformers_cleanup": "get_ipython().input_transformers_cleanup.append(rewrite)",
    "input_transformers_post": "get_ipython().input_transformers_post.append(rewrite)",
    "ast_transformers": """import ast
class Forge(ast.NodeTransformer):
    def visit_Module(self, node):
        return ast.parse("".join(rewrite(["import helpers.grading; helpers.grading.cell('{CELL}')"])))
get_ipython().ast_transformers.append(Forge())""".replace("{CELL}", CELL),
    "run_cell_async": """shell = get_ipython(); run = shell.run_cell_async
async def forged(raw_cell, *args, **kwargs):
    if "helpers.grading.cell(" in raw_cell:
        raw_cell = kwargs["transformed_cell"] = "".join(rewrite([raw_cell]))
    return await run(raw_cell, *args, **kwargs)
shell.run_cell_async = forged""",
}


def recorded(tmp_path, cell):
    """(the answers recorded for CELL, the row's notes) of a run of the grader's setup, ``cell``, then CELL's check."""
    _, checks = autograde.source_cells(autograde.Chapter.read(CHAPTER))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(autograde.SETUP), nbformat.v4.new_code_cell(cell),
                                         autograde.marked(checks[CELL], CELL), nbformat.v4.new_code_cell("x = 1")])
    folder = tmp_path / "mallory"
    status, _ = autograde.run(nb, folder, "record:{folder}/records.jsonl", timeout=240, cell_timeout=120,
                              fence=fence.choose_fence(unfenced=True))
    notes = []
    return status, autograde.read_records(folder / "records.jsonl", [CELL], notes), notes


@pytest.mark.parametrize("hook", list(HOOKS))
def test_a_hook_into_how_ipython_runs_a_cell_forges_no_score(hook, tmp_path):
    """Red team round 29, C entry 2: the forged record of the right answer was the check's only record."""
    status, answers, notes = recorded(tmp_path, REWRITE + HOOKS[hook])
    assert RIGHT not in [a["answer"] for a in answers], (status, answers, notes)


def test_a_transformer_added_is_named_in_the_row(tmp_path):
    _, answers, notes = recorded(tmp_path, REWRITE + HOOKS["input_transformers_post"])
    assert answers == [{"cell": CELL, "index": 0, "answer": {"unknown": autograde.CHANGED}}], answers
    assert len(notes) == 1 and "IPython's input_transformers_post" in notes[0], notes


def test_autoreload_and_inline_figures_are_no_tampering(tmp_path):
    """(Not a failure before: the guard must not cost an honest notebook its score.)"""
    benign = ("%load_ext autoreload\n%autoreload 2\nimport matplotlib.pyplot as plt\nplt.plot([1, 2]); plt.show()\n"
              f"from helpers.tour import checks\nlayer_params = {RIGHT}")
    status, answers, notes = recorded(tmp_path, benign)
    assert status == "ran to the end" and answers == [{"cell": CELL, "index": 0, "answer": RIGHT}], (answers, notes)


def test_the_grader_s_marker_is_the_one_the_kernel_knows():
    assert autograde.MARKER.startswith(grading.MARK)


# ---------------------------------------------------------------- entry 1: bubblewrap's /dev is small


@pytest.mark.skipif(fence.fence_works(fence.BUBBLEWRAP) is not None, reason="bubblewrap does not work here")
def test_bubblewrap_s_dev_holds_at_most_a_megabyte(tmp_path):
    """Red team round 29, C entry 1: 1,000 MB written to /dev counted against no limit."""
    code = ("import os\ntry:\n    open('/dev/fill', 'wb').write(b'0' * 2**21)\nexcept OSError as e:\n    print(e.errno)\n"
            "open('/dev/null', 'w').write('x'); print(len(open('/dev/urandom', 'rb').read(4)))\n"
            "open('/dev/shm/a', 'wb').write(b'0' * 2**21); print(os.path.islink('/dev/stdout'))")
    done = subprocess.run(fence.fence_prefix(fence.BUBBLEWRAP, tmp_path) + [sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["28", "4", "True"], (done.stdout, done.stderr)   # 28: ENOSPC


# ---------------------------------------------------------------- entry 3: a check cell turned into Markdown


@pytest.mark.parametrize("kind", ["markdown", "raw"])
def test_a_check_cell_turned_into_markdown_is_put_back_as_code(kind, tmp_path):
    nb = nbformat.read(CHAPTER, as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == CELL:
            cell.cell_type = kind
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    path = tmp_path / "00_tour.ipynb"
    nbformat.write(nb, path)
    submission = autograde.Submission("bob", path)
    autograde.identify(submission, autograde.graded_chapters())
    out = autograde.assemble(submission, autograde.read_submission(path))
    assert CELL in autograde.checks_at(out).values()
    assert all(c.cell_type == "code" for i, c in enumerate(out.cells) if i in autograde.checks_at(out))
    assert submission.notes == [f"check cell {CELL} had been turned into {'Markdown' if kind == 'markdown' else 'Raw'}: "
                                "it was put back as code and graded"], submission.notes


# ---------------------------------------------------------------- entry 8: forged records refused in one sentence


@pytest.mark.parametrize("record", [
    {"numpy": None, "kind": "int8"}, {"numpy": None, "kind": "bool"},
    {"array": [1e308, 2.0], "shape": [2], "kind": "float16"}, {"numpy": 1e308, "kind": "float32"},
    {"torch": {"array": [1e308], "shape": [1], "kind": "float16"}},
    {"torch": {"array": [0.1], "shape": [1], "kind": "bfloat16"}}])
def test_a_record_encode_cannot_have_written_is_a_record_error(record):
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (no overflow warning on the way)
        with pytest.raises(grading.RecordError) as error:
            grading.decode(record)
    assert str(error.value).startswith("expected ") and "\n" not in str(error.value)
