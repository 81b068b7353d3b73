"""Round 26 (fixer grading), the grader: an answer's kind lost on its way to the judge (G1), a student's
folder nested 1,200 deep (G2), a skipped row naming the wrong student (W3), execute_notebooks.py given a
missing chapter or a path with a trailing slash (G4)."""
import array
import json
import os
import re
import subprocess

import numpy as np
import pytest
import torch

import autograde
import execute_notebooks
import homework
from helpers import grading
from helpers.heads import checks as heads
from helpers.tour import checks as tour

pytestmark = pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")   # (np.matrix answers, on purpose)


def through_json(record):
    return grading.decode(json.loads(json.dumps(record)))


# ---------------------------------------------------------------- G1: the judge sees the answer's own kind


@pytest.mark.parametrize("check, answer, kwargs", [
    (tour.scores_shape, array.array("b", [2, 5, 5]), dict(n_heads=2, T=5)),
    (heads.parameters, np.matrix([[4 * 512 * 512 + 4 * 512]]), dict(d_model=512)),
    (tour.per_layer, np.matrix([[7_087_872]]), dict(d_model=768, d_ff=3072)),
    (tour.scores_shape, (2, 5, 5), dict(n_heads=2, T=5)),   # (a right answer stays right)
])
def test_the_judge_says_what_the_live_check_said(check, answer, kwargs):
    """Red team round 26, C1: array.array and np.matrix were recorded as plain arrays, so the judge graded
    right what the live check had refused (4/4 where the feedback page showed ✗)."""
    live = check.feedback(answer, **kwargs)
    judged = check.feedback(through_json(grading.record_answer(check, answer, (), kwargs)), **kwargs)
    assert judged == live
    assert bool(live) == (type(answer) is not tuple)


@pytest.mark.parametrize("answer", [
    array.array("b", [2, 5, 5]), array.array("d", [0.5, float("inf"), float("nan")]), array.array("f", [0.1]),
    array.array("u", "ab"), array.array("Q", [2**64 - 1]), np.matrix([[1.5, 2.0]]), np.matrix([[1, "a"]], dtype=object),
    frozenset({1, 2}), torch.Size([2, 5]), torch.Size([-1]), [frozenset({3}), (2,)],
    torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.arange(3), requires_grad=False),
    torch.ones(2, requires_grad=True), torch.ones(2),
])
def test_encode_keeps_each_kind_and_value(answer):
    back = through_json(grading.encode(answer))
    assert type(back) is type(answer)
    if isinstance(answer, array.array):
        assert back.typecode == answer.typecode and repr(back) == repr(answer)
    elif isinstance(answer, torch.Tensor):
        assert back.requires_grad == answer.requires_grad and back.dtype == answer.dtype and torch.equal(back, answer)
    elif isinstance(answer, np.matrix):
        assert back.dtype == answer.dtype and back.shape == answer.shape and (back == answer).all()
    else:
        assert back == answer and [type(v) for v in back] == [type(v) for v in answer]


def test_a_function_s_output_keeps_its_kind():
    """What a learner's function returned goes through encode too (Recorder)."""
    recorder = grading.Recorder(lambda n: np.matrix([[n]]) if n else array.array("i", [n]))
    recorder(3), recorder(0)
    outputs = [through_json(call["output"]) for call in json.loads(json.dumps(recorder.calls))]
    assert type(outputs[0]) is np.matrix and outputs[0][0, 0] == 3
    assert type(outputs[1]) is array.array and outputs[1] == array.array("i", [0])


@pytest.mark.parametrize("record, said", [
    ({"stdarray": [300], "typecode": "b"}, "fit an array.array of type code 'b'"),
    ({"stdarray": [1.5], "typecode": "b"}, "a value of an array.array of type code 'b'"),
    ({"stdarray": [1e300], "typecode": "f"}, "a value of an array.array of type code 'f'"),
    ({"stdarray": ["ab"], "typecode": "u"}, "a value of an array.array of type code 'u'"),
    ({"stdarray": [1], "typecode": "w"}, "type code"),
    ({"stdarray": [1]}, "a tagged record"),
    ({"matrix": {"list": [1, 2]}}, "a recorded matrix's 2-D array"),
    ({"matrix": {"array": [1], "shape": [1], "kind": "int64"}}, "a recorded matrix's 2-D array"),
    ({"size": [2**63]}, "a recorded torch.Size's sizes"),
    ({"frozenset": "x"}, "the items of a recorded frozenset"),
    ({"torch_grad": {"array": [1], "shape": [1], "kind": "int64"}}, "a float tensor for one that requires grad"),
    ({"parameter": {"array": [1.0], "shape": [1], "kind": "float32"}, "grad": 1}, "True or False"),
])
def test_a_forged_record_of_these_kinds_is_refused_in_one_sentence(record, said):
    with pytest.raises(grading.RecordError, match="^expected .*" + re.escape(said)) as refused:
        grading.decode(record)
    assert "\n" not in str(refused.value)


def test_a_matrix_of_an_unknown_dtype_comes_back_as_the_unknown_marker():
    back = through_json(grading.encode(np.matrix([[1 + 2j]])))
    assert isinstance(back, grading.Unknown) and tour.scores_shape.feedback(back, n_heads=2, T=5)[0].startswith(
        "your answer could not be judged")


# ---------------------------------------------------------------- G2: a folder nested 1,200 deep


@pytest.fixture
def deep(tmp_path):
    """tmp_path, removed after the test by rm: shutil.rmtree, as pytest's clean-up of old temporary folders,
    recurses once per level (RecursionError on a folder nested 1,200 deep)."""
    yield tmp_path
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=True)   # (rm walks without recursing; so does not os.walk)


def nested(where, depth, name="00_tour.ipynb"):
    here = os.getcwd()
    os.makedirs(where)
    os.chdir(where)
    try:
        for _ in range(depth):
            os.mkdir("a")
            os.chdir("a")
        open(name, "w").write("{}")
    finally:
        os.chdir(here)


def test_a_deep_folder_is_skipped_with_a_row_and_the_others_are_found(deep):
    """Red team round 26, C2: Path.rglob recursed once per level: RecursionError, and no one was graded."""
    nested(deep / "eve", 1200)
    nested(deep / "bob", 2)
    nested(deep / "ann", autograde.MAX_FOLDER_DEPTH)   # (the deepest searched)
    found, skipped = autograde.find_submissions(deep)
    assert sorted(sub.student for sub in found) == ["ann", "bob"]
    table = autograde.rows(found, skipped)
    eve = [row["notes"] for row in table if row["student"] == "eve"]
    assert eve == [f"skipped: eve/: 1 folder nested more than {autograde.MAX_FOLDER_DEPTH} deep was not searched "
                   f"for notebooks (at most {autograde.MAX_FOLDER_DEPTH} folders deep per student)",
                   "skipped: eve/: no notebook inside"]


def test_homework_grade_checks_a_deep_folder_without_a_traceback(deep):
    nested(deep / "subs" / "eve", 1200)
    with pytest.raises(homework.HomeworkError, match="found none"):
        homework.grade(deep / "subs", deep / "course")


def test_notebooks_in_leaves_out_hidden_parts_and_keeps_odd_entries_for_their_row(tmp_path):
    for path in ["a/x.ipynb", ".hidden/y.ipynb", "a/.ipynb_checkpoints/x-checkpoint.ipynb", "b/.z.ipynb"]:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("{}")
    (tmp_path / "dir.ipynb").mkdir()
    (tmp_path / "link.ipynb").symlink_to(tmp_path / "a" / "x.ipynb")
    found, deeper = autograde.notebooks_in(tmp_path)
    assert deeper == 0
    assert [p.relative_to(tmp_path).as_posix() for p in found] == ["a/x.ipynb", "dir.ipynb", "link.ipynb"]


# ---------------------------------------------------------------- W3: a skipped row names its own student


def test_a_skipped_row_names_the_folder_it_is_about(tmp_path):
    """Red team round 26, C3: the student was read back from the sentence, up to its first ':'."""
    (tmp_path / "alice: resubmission").mkdir()
    (tmp_path / "bob:notes.txt").write_text("")
    (tmp_path / "carl/x").mkdir(parents=True)
    table = autograde.rows(*autograde.find_submissions(tmp_path))
    assert sorted(row["student"] for row in table) == ["alice: resubmission", "bob:notes.txt", "carl"]


# ---------------------------------------------------------------- G4: execute_notebooks.py's paths


@pytest.mark.parametrize("name, said", [
    ("instructor/99_nope.ipynb", "'instructor/99_nope.ipynb' is not a file there"),
    ("instructor/00_tour.ipynb/", "'instructor/00_tour.ipynb/' is not named as one"),
    ("instructor/README.md", "is not named as one"),
    ("notebooks/00_tour.ipynb", "but got 'notebooks/00_tour.ipynb'"),
])
def test_execute_notebooks_refuses_a_path_that_is_no_chapter_in_one_sentence(name, said, capsys, monkeypatch):
    monkeypatch.chdir(execute_notebooks.ROOT)
    monkeypatch.setattr(execute_notebooks, "run", lambda *a: pytest.fail("a notebook was run"))
    assert execute_notebooks.main(["--check", name]) == 1
    out = capsys.readouterr().out
    assert out.startswith("✗ expected chapters in instructor/") and said in out and out.count("\n") == 1


def test_execute_notebooks_takes_a_chapter_as_it_is_named(monkeypatch):
    monkeypatch.chdir(execute_notebooks.ROOT)
    paths, refused = execute_notebooks.chapter_paths(["instructor/00_tour.ipynb"])
    assert refused is None and paths == [execute_notebooks.INSTRUCTOR / "00_tour.ipynb"]
