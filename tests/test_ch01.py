"""Chapter 01: the exercise checks and the widget's compute."""
import numpy as np
import pytest

from helpers import checks, embeddings
from helpers.checks import NOT_ANSWERED
from helpers.errors import CourseInputError
from helpers.widgets import ch01 as explore

ch01 = checks.ch01


@pytest.fixture(scope="module")
def glove():
    return embeddings.load_glove()


def assert_right(check, answer, *args):
    assert check.feedback(answer, *args) == []
    check.grade(answer, *args)          # does not raise


def assert_wrong(check, answer, *args, says=""):
    found = check.feedback(answer, *args)
    assert found and all(isinstance(s, str) and "\n" not in s for s in found)
    assert says in " ".join(found), found
    with pytest.raises(AssertionError):
        check.grade(answer, *args)


def assert_not_answered(check, *args):
    assert check.feedback(None, *args) == [NOT_ANSWERED]


# ------------------------------------------------------------------ exercise 1

def test_cosine_function():
    assert_right(ch01.cosine_function, lambda a, b: a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
    assert_wrong(ch01.cosine_function, lambda a, b: a @ b, says="dot product")
    assert_wrong(ch01.cosine_function, lambda a, b: a @ b / np.linalg.norm(a) ** 2)
    assert_wrong(ch01.cosine_function, 0.707, says="function")
    assert_not_answered(ch01.cosine_function)


def test_cosine_function_that_crashes_gets_words_not_a_traceback():
    def broken(a, b):
        raise ValueError("oops")
    assert_wrong(ch01.cosine_function, broken, says="could not use your answer")


# ------------------------------------------------------------------ exercise 2

def test_neighbours(glove):
    right = [w for w, _ in glove.most_similar("ocean", topn=5)]
    assert_right(ch01.neighbours, right, glove, "ocean", 5)
    assert_wrong(ch01.neighbours, ["ocean"] + right[:4], glove, "ocean", 5, says="itself")
    assert_wrong(ch01.neighbours, right[::-1], glove, "ocean", 5, says="order")
    assert_wrong(ch01.neighbours, right[:4] + ["desert"], glove, "ocean", 5, says="not among")
    assert_wrong(ch01.neighbours, right[:3], glove, "ocean", 5, says="5 words")
    assert_wrong(ch01.neighbours, "sea", glove, "ocean", 5)
    assert_not_answered(ch01.neighbours, glove, "ocean", 5)


# ------------------------------------------------------------------ exercise 3

def test_analogy_direction(glove):
    args = (glove, "paris", "france", "italy")
    right = embeddings.analogy_vector(*args)
    assert_right(ch01.analogy_direction, right, *args)
    assert_wrong(ch01.analogy_direction, 2 * right, *args, says="length")
    raw = glove["paris"].astype(float) - glove["france"] + glove["italy"]
    assert_wrong(ch01.analogy_direction, raw / np.linalg.norm(raw), *args, says="raw vectors")
    flipped = embeddings.unit(embeddings.unit(glove["paris"]) + embeddings.unit(glove["france"])
                              - embeddings.unit(glove["italy"]))
    assert_wrong(ch01.analogy_direction, flipped, *args, says="signs")
    assert_wrong(ch01.analogy_direction, right[:10], *args, says="shape")
    assert_not_answered(ch01.analogy_direction, *args)


# ------------------------------------------------------------------ exercise 4

HIGH = np.array([[-0.7, -0.2, 1.7], [0.7, -1.6, 0.0], [-0.6, 0.1, -1.6],
                 [0.2, 0.2, 1.6], [0.3, 0.5, -1.5], [2.3, -1.9, 1.1]])
LOW = HIGH[:, :2]


def test_kept_fractions():
    right = embeddings.neighbourhood_kept(HIGH, LOW, 2)
    assert_right(ch01.kept_fractions, right, HIGH, LOW, 2)
    assert_wrong(ch01.kept_fractions, ch01.counting_itself(HIGH, LOW, 2), HIGH, LOW, 2, says="own")
    assert_wrong(ch01.kept_fractions, np.ones(6), HIGH, LOW, 2, says="differs")
    assert_wrong(ch01.kept_fractions, right * 2, HIGH, LOW, 2, says="between 0 and 1")
    assert_wrong(ch01.kept_fractions, np.full(6, 0.3), HIGH, LOW, 2, says="whole number")
    assert_wrong(ch01.kept_fractions, right[:5], HIGH, LOW, 2, says="shape")
    assert_not_answered(ch01.kept_fractions, HIGH, LOW, 2)


# ------------------------------------------------------------------ the widget's compute

def test_vector_pair_by_hand_numbers():
    pair = explore.vector_pair(angle_a=0, length_a=3, angle_b=60, length_b=2)
    assert np.allclose(pair["a"], [3, 0]) and np.allclose(pair["b"], [1, np.sqrt(3)])
    assert pair["dot"] == pytest.approx(3.0)
    assert pair["cos"] == pytest.approx(0.5)
    assert pair["angle"] == pytest.approx(60.0)


def test_vector_pair_perpendicular_and_opposite():
    assert explore.vector_pair(30, 2, 120, 5)["dot"] == pytest.approx(0, abs=1e-12)
    opposite = explore.vector_pair(10, 1, -170, 4)
    assert opposite["cos"] == pytest.approx(-1) and opposite["angle"] == pytest.approx(180)


def test_stretching_changes_dot_not_cosine():
    short, long = explore.vector_pair(0, 1, 45, 1), explore.vector_pair(0, 1, 45, 4)
    assert long["dot"] == pytest.approx(4 * short["dot"])
    assert long["cos"] == pytest.approx(short["cos"])


def test_vector_pair_rejects_a_non_positive_length():
    with pytest.raises(CourseInputError, match="length_b"):
        explore.vector_pair(0, 1, 45, 0)


def test_pair_view_redraws_the_same_figure():
    fig, show = explore.pair_view()
    first = explore.png(show(explore.vector_pair(0, 1, 90, 1)))
    second = explore.png(show(explore.vector_pair(0, 3, 45, 2)))
    assert first[:8] == second[:8] == b"\x89PNG\r\n\x1a\n" and first != second
    assert show(explore.vector_pair()) is fig and "cos = 0.643" in fig.axes[0].get_title()


def test_arrow_labels_never_show_minus_zero():
    assert explore.arrow_label("a", [-1e-17, 2.0]) == "a = [0.00, 2.00]"


def test_explorer_builds_outside_a_notebook(capsys):
    explore.explorer()
    assert "Image" in capsys.readouterr().out
