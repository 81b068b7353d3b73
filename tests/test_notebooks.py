"""Every notebook runs headless, and its committed outputs are what re-running it produces:
text exactly, numbers exactly unless their cell declares a justified tolerance."""
import nbformat
import pytest

from execute_notebooks import all_notebooks, cpu_path, differences, learner_notebooks

# the chapters as written (instructor/) and the copies a learner opens (notebooks/)
NOTEBOOKS = pytest.mark.parametrize("path", all_notebooks() + learner_notebooks(),
                                    ids=lambda path: f"{path.parent.name}/{path.stem}")


@NOTEBOOKS
def test_executes_without_error(path, executed):
    executed(path)


@NOTEBOOKS
def test_committed_outputs_match_a_rerun(path, executed):
    diffs = differences(nbformat.read(path, as_version=4), executed(path))
    assert not diffs, (f"{path.name} printed other outputs than the committed ones on this CPU path "
                       f"({cpu_path()}):\n" + "\n".join(diffs) + "\nIf you changed the notebook or what it "
                       "calls, execute it again (scripts/execute_notebooks.py) and commit it; if you did not, "
                       "the lines above say which number moved and whether float rounding can explain it.")


@NOTEBOOKS
def test_committed_run_top_to_bottom_without_errors(path):
    cells = [cell for cell in nbformat.read(path, as_version=4).cells
             if cell.cell_type == "code" and cell.source.strip()]
    counts = [cell.execution_count for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: execution counts {counts}"
    errors = [out.ename for cell in cells for out in cell.outputs if out.output_type == "error"]
    assert not errors, f"{path.name}: committed with errors {errors}"


def notebook_printing(*texts, tolerance=None):
    """A one-cell notebook whose outputs are the printed ``texts``."""
    cell = nbformat.v4.new_code_cell("print(x)")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text) for text in texts]
    if tolerance is not None:
        cell.metadata["course"] = {"tolerance": tolerance}
    return nbformat.v4.new_notebook(cells=[cell])


def test_the_output_check_passes_identical_outputs():
    assert differences(notebook_printing("loss 0.055 after 1,000 steps"),
                       notebook_printing("loss 0.055 after 1,000 steps")) == []


def test_the_output_check_names_the_number_that_moved_and_why():
    found = differences(notebook_printing("d = 14.476825\n"), notebook_printing("d = 14.476824\n"))
    assert len(found) == 1 and "14.476825 (committed) is 14.476824" in found[0]
    assert "float rounding differs between CPU paths" in found[0]
    found = differences(notebook_printing("kept 0.735"), notebook_printing("kept 0.724"))
    assert "too large for float rounding alone" in found[0]


def test_text_and_counts_must_match_exactly_even_with_a_tolerance():
    declared = {"abs": 0.02, "why": "UMAP's layout depends on rounding"}
    assert differences(notebook_printing("kept 0.735", tolerance=declared),
                       notebook_printing("kept 0.724", tolerance=declared)) == []
    found = differences(notebook_printing("top-1 124/432", tolerance=declared),
                        notebook_printing("top-1 232/432", tolerance=declared))
    assert "beyond this cell's declared tolerance" in found[0]
    found = differences(notebook_printing("the cat sat", tolerance=declared),
                        notebook_printing("the dog sat", tolerance=declared))
    assert "differs beyond its numbers" in found[0]


def test_a_tolerance_without_a_reason_is_refused():
    with pytest.raises(ValueError, match="reason"):
        differences(notebook_printing("1.0", tolerance={"abs": 0.1}), notebook_printing("1.0"))


DYING_KERNEL = """import os
counter = os.environ.get("COURSE_TEST_KERNEL_DEATHS")
if counter and int(open(counter).read()) > 0:   # die at start, as a kernel whose port was taken does
    left = int(open(counter).read())
    open(counter, "w").write(str(left - 1))
    os._exit(1)
"""


def run_dying_kernel(tmp_path, deaths):
    """Run a one-cell notebook whose kernel dies at start `deaths` times: (the notebook, deaths left, error)."""
    import os

    from chapters import run_client
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook
    (tmp_path / "sitecustomize.py").write_text(DYING_KERNEL)
    counter = tmp_path / "deaths"
    counter.write_text(str(deaths))
    nb = new_notebook(cells=[new_code_cell("print(6 * 7)")])
    env = {**os.environ, "COURSE_TEST_KERNEL_DEATHS": str(counter),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))}
    try:
        run_client(NotebookClient(nb, kernel_name="python3", startup_timeout=60), env=env)
    except RuntimeError as error:
        return nb, int(counter.read_text()), error
    return nb, int(counter.read_text()), None


def test_a_kernel_that_dies_at_start_is_started_again(tmp_path):
    """Two kernels started at once can draw the same TCP port; the second exits before it answers.
    run_client starts it again (no cell has run), up to three times, and then says so."""
    nb, left, error = run_dying_kernel(tmp_path, deaths=1)
    assert error is None and left == 0 and nb.cells[0].outputs[0].text == "42\n"
    nb, left, error = run_dying_kernel(tmp_path, deaths=5)
    assert "before replying to kernel_info" in str(error) and left == 2 and nb.cells[0].outputs == []
