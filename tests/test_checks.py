"""The exercise-check framework: feedback never raises, grade raises with the same words."""
import numpy as np
import pytest

from helpers.checks import NOT_ANSWERED, array_problems, close_problems, exercise, number_problems


@exercise("rows of the weights")
def rows(answer):
    found = list(array_problems(answer, "weights", shape=(2, 2)))
    yield from found
    if not found and not np.allclose(np.sum(answer, axis=-1), 1):
        yield "each row should sum to 1"


def test_right_answer_passes_and_prints_a_tick(capsys):
    assert rows(np.array([[0.5, 0.5], [1.0, 0.0]]))
    assert capsys.readouterr().out.startswith("✓ rows of the weights")
    rows.grade(np.eye(2))


def test_wrong_answers_get_words_not_tracebacks(capsys):
    assert not rows(np.ones((2, 2)))
    assert "each row should sum to 1" in capsys.readouterr().out
    assert not rows(np.ones(3))
    assert "shape (2, 2)" in capsys.readouterr().out
    assert not rows("banana")
    with pytest.raises(AssertionError, match="each row should sum to 1"):
        rows.grade(np.ones((2, 2)))


def test_none_means_not_answered(capsys):
    assert not rows(None)
    assert NOT_ANSWERED in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not answered"):
        rows.grade(None)


def test_a_crashing_check_becomes_a_sentence(capsys):
    @exercise("fragile")
    def fragile(answer):
        yield from ["x"][answer:]  # TypeError for a string answer
    assert not fragile("a")
    assert "could not use your answer" in capsys.readouterr().out


def test_close_and_number_problems():
    assert list(close_problems(np.array([1.0, -np.inf]), np.array([1.0, -np.inf]), "s")) == []
    assert "1 of 2 entries" in next(close_problems(np.array([1.0, 2.0]), np.array([1.0, 3.0]), "s"))
    assert "too large" in next(number_problems(0.5, 0.4, "p"))
    assert list(number_problems("0.4", 0.4, "p")) == []


def test_the_verdict_is_invisible_as_a_cells_last_value():
    """nbgrader's student version ends a check cell with the visible call; it must not print True/False."""
    import nbformat
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook
    nb = new_notebook(cells=[new_code_cell("from helpers.checks import Verdict\nVerdict(False)")])
    NotebookClient(nb, kernel_name="python3").execute()
    assert nb.cells[0].outputs == []
