"""Every notebook runs headless, and its committed outputs are what re-running it produces."""
import nbformat
import pytest

from execute_notebooks import all_notebooks, differences

NOTEBOOKS = pytest.mark.parametrize("path", all_notebooks(), ids=lambda path: path.stem)


@NOTEBOOKS
def test_executes_without_error(path, executed):
    executed(path)


@NOTEBOOKS
def test_committed_outputs_match_a_rerun(path, executed):
    diffs = differences(nbformat.read(path, as_version=4), executed(path))
    assert not diffs, f"{path.name}: re-run with scripts/execute_notebooks.py and commit\n" + "\n".join(diffs)


@NOTEBOOKS
def test_committed_run_top_to_bottom_without_errors(path):
    cells = [cell for cell in nbformat.read(path, as_version=4).cells
             if cell.cell_type == "code" and cell.source.strip()]
    counts = [cell.execution_count for cell in cells]
    assert counts == list(range(1, len(cells) + 1)), f"{path.name}: execution counts {counts}"
    errors = [out.ename for cell in cells for out in cell.outputs if out.output_type == "error"]
    assert not errors, f"{path.name}: committed with errors {errors}"
