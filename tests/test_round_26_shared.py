"""Round 26 (issue 31), shared helpers: the peek guard's bookkeeping out of a learner's reach (a tuple rebound only by
the check: emptying or filling it in place fails, and the peek is refused); the geometry maps refuse a list or dict
for a group or a word in one sentence, and show a long or multi-line word shortened and on one line; readout's row
labels and positions.permutation_matrix refuse an object whose length or entries raise when read."""
import sys
import threading

import numpy as np
import pytest
import torch

from helpers import exercises, putback, readout
from helpers.errors import CourseInputError
from helpers.geometry import checks as geometry_checks
from helpers.geometry import compute as geometry
from helpers.positions import compute as positions

LOOKED = "looked into the check's own state"


def cosine(A, b):
    A, b = np.asarray(A, float), np.asarray(b, float)
    return A @ b / (np.linalg.norm(A, axis=-1) * np.linalg.norm(b))


def stolen_from(frames):
    """The check's expected value, read from its thread's frames (what the guard refuses)."""
    for frame in frames.values():
        while frame is not None:
            if isinstance(frame.f_locals.get("reference"), float):
                return frame.f_locals["reference"]
            frame = frame.f_back
    return None


def test_emptying_or_filling_the_guards_bookkeeping_in_place_does_not_open_the_check_to_peeks():
    stolen, tried = [], []

    def cheat(A, b):
        for change in (lambda: exercises._WATCHING.clear(),
                       lambda: exercises._WATCHING.append((threading.get_ident(), [])),
                       lambda: exercises._WATCHING[0].__setitem__("thread", threading.get_ident())):
            try:
                change()
            except (AttributeError, TypeError):
                tried.append(True)
        try:
            stolen.append(stolen_from(sys._current_frames()))
        except RuntimeError:
            pass
        return cosine(A, b)

    found = geometry_checks.cosine_function.feedback(cheat)
    assert stolen == [] and tried and len(found) == 1 and LOOKED in found[0], found
    assert exercises._WATCHING == () and sys._current_frames()
    assert geometry_checks.cosine_function.feedback(cosine) == []   # the guard as it was for the next check


def test_the_put_backs_bookkeeping_is_read_only():
    exercises.torch_globals()()   # (the owners found once)
    assert type(putback._OWNERS) is tuple and all(type(part) is tuple for part in putback._OWNERS[1])
    with pytest.raises(TypeError):
        exercises._CHANGES["os.putenv"] = "nothing"
    assert "os.putenv" in exercises._CHANGES


@pytest.fixture(scope="module")
def word_map(glove):
    return geometry.word_map(glove, ["animals", "numbers"], methods=["PCA"], k=5, seed=0)


@pytest.mark.parametrize("groups, got", [([["animals"]], r"\['animals'\]"), ([{}], r"\{\}"), (["nope"], "'nope'")])
def test_word_map_refuses_a_group_that_is_no_name_of_groups_in_one_sentence(glove, groups, got):
    with pytest.raises(CourseInputError, match=f"^each group should be one of animals, .*, but got {got}$"):
        geometry.word_map(glove, groups, methods=["PCA"], k=5, seed=0)


@pytest.mark.parametrize("word, got", [(["cat"], r"\['cat'\]"), ({}, r"\{\}"), (None, "None")])
def test_neighbour_groups_refuses_a_word_that_is_no_string_in_one_sentence(word_map, word, got):
    with pytest.raises(CourseInputError, match=f"^each word should be a string, a word of this map, but got {got}$"):
        geometry.neighbour_groups(word_map, word)


@pytest.mark.parametrize("word, got", [("x" * 100_000, "a str of length 100000"), ("one\ntwo", r"'one\\ntwo'")])
def test_a_word_not_on_the_map_is_shown_short_and_on_one_line(word_map, word, got):
    with pytest.raises(CourseInputError, match=f"^each word should be one of the 40 words of this map, but got {got}$") \
            as caught:
        geometry.neighbour_groups(word_map, word)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 200
    assert geometry.neighbour_groups(word_map, "cat")[0][0] == "animals"


class Unreadable:
    """An object whose length and entries raise when read."""

    def __len__(self):
        raise RuntimeError("boom")

    def __iter__(self):
        raise RuntimeError("boom")


class Unlistable(Unreadable):
    """One whose length reads (2) but whose entries raise."""

    def __len__(self):
        return 2


UNREADABLE = "should be a list of labels, one per row, but got a {} that raised RuntimeError when it was read$"


@pytest.mark.parametrize("kind", [Unreadable, Unlistable])
@pytest.mark.parametrize("call", [lambda bad: readout.format_matrix(np.eye(2), row_labels=bad),
                                  lambda bad: readout.format_step("h0", torch.zeros(2, 3), tokens=bad),
                                  lambda bad: readout.print_trace({"h0": torch.zeros(2, 3)}, tokens=bad)])
def test_readout_refuses_labels_that_raise_when_read_in_one_sentence(call, kind, capsys):
    with pytest.raises(CourseInputError, match="^row_labels " + UNREADABLE.format(kind.__name__)):
        call(kind())
    assert capsys.readouterr().out == ""
    assert readout.format_matrix(np.eye(2), row_labels=["a", "b"]).splitlines()[0].startswith("  a [")


def test_permutation_matrix_refuses_a_perm_whose_length_raises_in_one_sentence():
    with pytest.raises(CourseInputError, match=r"^perm should be a rearrangement of 0..T-1 \(a list of whole numbers\), "
                                               "but got a Unreadable that raised RuntimeError when it was read$"):
        positions.permutation_matrix(Unreadable())
    with pytest.raises(CourseInputError, match=r"^perm should be a rearrangement of 0..1"):
        positions.permutation_matrix(Unlistable())
    assert (positions.permutation_matrix([1, 0]) == [[0, 1], [1, 0]]).all()
