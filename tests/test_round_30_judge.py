"""Round 30 (issue 31), the grader (red team round 30, reader C): a learner's ``checks`` that silenced the hidden grade
call while a record of their own was written on the records channel scored a wrong answer (entry 1); ``restore``
left a namespace package at the repository's top level (entry 2); ``homework.py release`` released a learner's copy
with its solutions (entry 3); ``--course ""`` was the current folder, and a refused call wrote there (entry 4); the
judge read a learner's exception by its class name (entry 5); a pasted check cell shifted the status's cell numbers
(entry 6)."""
import copy
import json
from pathlib import Path

import nbformat
import pytest

import autograde
import homework
from execute_notebooks import INSTRUCTOR
from helpers import grading
from helpers.qkv import checks as qkv_checks
from test_round_30_grading import recorded   # (the grader's setup, a cell, then CELL's check cell, unfenced)

CHAPTER = INSTRUCTOR / "00_tour.ipynb"
CELL, RIGHT = "ch00_ex3_check", 7_087_872   # the tour's exercise 3 and its answer
LEARNER = INSTRUCTOR.parent / "notebooks" / "02_qkv_by_hand.ipynb"


# ---------------------------------------------------------------- entry 1: the hidden grade call cannot be silenced

SILENT = f"""import json, os
layer_params = 1   # wrong
class Silent:   # the notebook's `checks`: every check does nothing; the first sends a forged record of the right answer
    sent = False
    def __getattr__(self, name):
        if not Silent.sent:
            Silent.sent = os.write(int(os.environ['COURSE_RECORDS_FD']), (json.dumps({{'cell': '{CELL}', 'index': 0,
                                   'check': 'x', 'answer': {RIGHT}}}) + '\\n').encode())
        return self
    def __call__(self, *args, **kwargs):
        return None
checks = Silent()
"""


def test_a_silenced_grade_call_and_a_forged_record_score_nothing(tmp_path):
    """Red team round 30, C entry 1: the forged record was the check cell's only one, and it counted."""
    status, answers, notes = recorded(tmp_path, SILENT)
    assert RIGHT not in [a["answer"] for a in answers], (status, answers, notes)


def test_an_honest_check_cell_is_still_recorded(tmp_path):
    """(Not a failure before: the course's own record, token and all, still counts.)"""
    status, answers, _ = recorded(tmp_path, f"from helpers.tour import checks\nlayer_params = {RIGHT}")
    assert answers == [{"cell": CELL, "index": 0, "answer": RIGHT}], (status, answers)


def test_the_hidden_line_reaches_the_course_check_not_the_notebooks_name():
    _, cells = autograde.source_cells(autograde.Chapter.read(INSTRUCTOR / "02_qkv_by_hand.ipynb"))
    hidden = cells["ch02_ex4_check"].source.partition("### BEGIN HIDDEN TESTS")[2]
    assert "checks.attention_function.grade" not in hidden and "sealed_check('helpers.qkv.checks'" in hidden, hidden
    assert grading.sealed_check("helpers.qkv.checks", "attention_function") is qkv_checks.attention_function


def test_a_line_on_the_channel_without_the_drivers_token_is_no_record():
    attributor = autograde.Attributor(False, None)
    attributor.token = b"secret"
    record = json.dumps({"cell": CELL, "index": 0, "check": "x", "answer": RIGHT}) + "\n"
    assert attributor.sealed(b"secret" + record.encode() + record.encode()) == ((record + record).encode(), [1])
    report = json.dumps({"at": 2, "lines": record, "unsealed": [0]}) + "\n"
    assert autograde.attributed(report, {2: CELL}) == [json.dumps({"unsound": CELL}) + "\n", record]


# ---------------------------------------------------------------- entry 2: a namespace package left at the top level


def test_restore_removes_a_new_folder_without_init(tmp_path, monkeypatch):
    monkeypatch.setattr(autograde, "ROOT", tmp_path)
    (tmp_path / "helpers").mkdir()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "old.txt").write_text("the repository's own folder")
    before = autograde.snapshot()
    (tmp_path / "triton").mkdir()   # (an empty triton/ makes torch think triton is installed)
    (tmp_path / "tests" / "new.txt").write_text("written in a run: not the grader's to remove")
    assert autograde.restore(before) == ["triton"]
    assert not (tmp_path / "triton").exists() and (tmp_path / "tests" / "new.txt").exists()


# ---------------------------------------------------------------- entry 3: release a chapter in instructor/ only


def test_release_refuses_the_learners_copy_before_making_the_course(tmp_path):
    with pytest.raises(homework.HomeworkError, match="expected a chapter in instructor/"):
        homework.release([str(LEARNER)], tmp_path / "course")
    assert not (tmp_path / "course").exists()


# ---------------------------------------------------------------- entry 4: --course ""


def test_an_empty_course_is_refused_and_nothing_is_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert homework.main(["--course", "", "grade", str(tmp_path / "none")]) == 1
    assert "empty path" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_refused_grade_makes_no_course_folder(tmp_path):
    with pytest.raises(homework.HomeworkError, match="is not a folder"):
        homework.grade(str(tmp_path / "none"), tmp_path / "course")
    assert not (tmp_path / "course").exists()


# ---------------------------------------------------------------- entry 5: a learner's exception named as the course's


@pytest.mark.parametrize("name", ["OutOfTime", "_OutOfTime", "SystemExit"])
def test_the_judge_says_a_learners_own_exception_as_the_live_check(name):
    own = type(name, (Exception,), {})

    def attention(Q, K, V, causal=False):
        raise own("my own error: shapes do not match")

    ex = qkv_checks.attention_function
    live = ex.feedback(attention)[0]
    judged = grading.judged(ex, json.loads(json.dumps(grading.record_answer(ex, attention, (), {}))), (), {})[0]
    assert "my own error" in live and judged == live, (live, judged)


def test_a_real_exit_is_still_judged_as_one():
    def attention(Q, K, V, causal=False):
        raise SystemExit(3)

    ex = qkv_checks.attention_function
    judged = grading.judged(ex, json.loads(json.dumps(grading.record_answer(ex, attention, (), {}))), (), {})[0]
    assert judged == ex.feedback(attention)[0] and "exit()" in judged, judged


# ---------------------------------------------------------------- entry 6: cells keep the student's numbers


def test_a_pasted_check_cell_keeps_the_cell_numbers():
    chapter = autograde.Chapter.read(INSTRUCTOR / "02_qkv_by_hand.ipynb")
    nb = nbformat.read(chapter.path, as_version=4)
    check = next(i for i, c in enumerate(nb.cells) if autograde.grade_id_of(c) == "ch02_ex1_check")
    nb.cells.insert(check, copy.deepcopy(nb.cells[check]))   # pasted above itself
    nb.cells.append(nbformat.v4.new_code_cell("1 / 0  # the student's failing cell"))
    sub = autograde.Submission("dave", Path("dave/02_qkv_by_hand.ipynb"), chapter=chapter)
    assembled = autograde.assemble(sub, copy.deepcopy(nb))
    assert "failing cell" in assembled.cells[len(nb.cells)].source   # (cell 0 is the grader's setup)
    assert len(sub.notes) == 1 and "found 2 times" in sub.notes[0], sub.notes
