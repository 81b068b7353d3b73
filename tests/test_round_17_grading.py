"""Round 17, the grader: a record made once a student's cell changed the course's recording code
counts for nothing, and the row says so (B4: helpers.grading.seal, tampered); the fence hides the
home folders and the whole repository, binding back read-only only what a run needs (B7:
fence.covered, fence.shown); a course folder that holds the repository is hidden whole (B8:
autograde.hidden_paths)."""
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

import autograde
import fence
from chapters import ROOT
from execute_notebooks import INSTRUCTOR
from helpers import exercises, grading
from helpers.tour import checks

CHAPTER = INSTRUCTOR / "00_tour.ipynb"
CELL = "ch00_ex3_check"
RIGHT = 7_087_872   # ch00_ex3_check's answer: the parameters of one GPT-2 small layer


@pytest.fixture
def recording(tmp_path, monkeypatch):
    """The record run's setting in this process: its records file (a path)."""
    path = tmp_path / "records.jsonl"
    monkeypatch.setenv("COURSE_GRADING", f"record:{path}")
    monkeypatch.setitem(grading.STATE, "cell", None)
    monkeypatch.setitem(grading.STATE, "index", 0)
    return path


def forge(self, *given, **named):
    """A student's Exercise.grade: records the right answer, whatever was answered."""
    grading.append(grading.mode()[1], {"cell": CELL, "index": 0, "check": "forged", "answer": RIGHT})


def forged_answer(exercise, answer, args, kwargs):
    return grading.encode(RIGHT)


class FakeCheck:
    grade = forge


ROUTES = {   # what a student's cell replaces: (owner, attribute, replacement)
    "record_answer": lambda: (grading, "record_answer", forged_answer),
    "encode": lambda: (grading, "encode", lambda x, depth=0, name="": RIGHT),
    "Recorder": lambda: (grading, "Recorder", type("Recorder", (), {})),
    "handle": lambda: (grading, "handle", lambda e, a, args, kw: forge(e)),
    "Exercise.grade": lambda: (exercises.Exercise, "grade", forge),
    "the check itself": lambda: (checks, "per_layer", FakeCheck()),
    "the check's own grade": lambda: (checks.per_layer, "grade", lambda *a, **k: forge(None)),
    "the code of record_answer": lambda: (grading.record_answer, "__code__", forged_answer.__code__),
    "a sys.modules entry": lambda: (sys.modules, "helpers.grading", type(sys)("helpers.grading")),
}


def graded(path):
    """(records, notes) as the grader reads the records file."""
    notes = []
    return autograde.read_records(path, {CELL}, notes), notes


@pytest.mark.parametrize("route", ROUTES)
def test_a_changed_recorder_records_no_answer_and_the_row_says_so(recording, monkeypatch, route):
    """Red team round 17 (B4): a student's cell replaced helpers.grading.record_answer, and an
    unanswered exercise was recorded as right (the judge gave full marks)."""
    owner, name, replacement = ROUTES[route]()
    if isinstance(owner, dict):
        monkeypatch.setitem(owner, name, replacement)
    else:
        monkeypatch.setattr(owner, name, replacement)
    grading.cell(CELL)                                    # the grader's line at the top of the check cell
    checks.per_layer.grade(None, d_model=768, d_ff=3072)  # its hidden test (unanswered: None)
    monkeypatch.undo()
    records, notes = graded(recording)
    assert records and all(r["answer"] == {"unknown": autograde.CHANGED} for r in records), records
    assert any(CELL in note and "recording code" in note for note in notes), notes
    problems = checks.per_layer.feedback(grading.decode(records[0]["answer"]), d_model=768, d_ff=3072)
    assert problems and "could not be judged" in problems[0]


def test_the_course_s_own_recording_is_not_taken_for_a_change(recording):
    assert grading.tampered() == [] and grading.tampered(checks.per_layer) == []
    grading.cell(CELL)
    checks.per_layer.grade(RIGHT, d_model=768, d_ff=3072)
    records, notes = graded(recording)
    assert records == [{"cell": CELL, "index": 0, "answer": RIGHT}] and notes == []


def test_a_change_made_by_the_learner_s_function_while_the_check_runs_is_seen(recording, monkeypatch):
    """The check calls a learner's function (a Function exercise): what it changes then counts too."""
    calls = []

    def sneaky(*args, **kwargs):
        calls.append(1)
        monkeypatch.setattr(grading, "encode", lambda *a, **k: RIGHT)
        raise ValueError("no")

    check = exercises.Exercise("a function check", lambda f: [] if f(1) else ["wrong"], exercises.Function())
    grading.cell(CELL)
    check.grade(sneaky)
    monkeypatch.undo()
    entry = json.loads(recording.read_text().splitlines()[-1])
    assert calls and entry["answer"] == {"unknown": grading.CHANGED} and "helpers.grading.encode" in entry["tampered"]


def test_sealing_again_cannot_bless_a_change(monkeypatch):
    monkeypatch.setattr(grading, "record_answer", forged_answer)
    grading.seal()
    grading.seal(exercises)
    assert grading.tampered() == ["helpers.grading.record_answer"]


def test_the_run_s_first_cell_is_the_grader_s_and_seals_the_recorder():
    chapter = autograde.Chapter.read(CHAPTER)
    nb = autograde.assemble(autograde.Submission("eve", CHAPTER, chapter), nbformat.read(CHAPTER, as_version=4))
    assert nb.cells[0].source == autograde.SETUP and "helpers.exercises" in nb.cells[0].source
    assert sorted(autograde.checks_at(nb).values()) == sorted(chapter.checks)


# ---------------------------------------------------------------- B7, B8: what a fenced run sees


def test_the_course_folder_is_hidden_whole_even_when_it_holds_the_repository():
    """Red team round 17 (B8): --course at the repository or above it was silently not hidden, so
    later runs read earlier students' executed notebooks, scores.csv and feedback."""
    for course in (ROOT, ROOT.parent):
        hidden = autograde.hidden_paths(course, Path("/srv/submissions"))
        assert course.resolve() in hidden and ROOT in hidden
        shown = fence.shown(hidden, autograde.needed_paths())
        assert {str(ROOT / name) for name in autograde.NEEDED} <= set(shown)
        assert not any(fence.within(str(p), folder) for p in hidden for folder in shown)   # none bound back


def test_bubblewrap_covers_the_homes_then_binds_back_what_a_run_needs():
    """Both fences do the same: bubblewrap's command, read (bubblewrap is not on every machine)."""
    hidden = autograde.hidden_paths(ROOT.parent)
    command = fence.bubblewrap_prefix(Path("/srv/run"), hidden, autograde.needed_paths())
    tmpfs = [command[i + 1] for i, arg in enumerate(command) if arg == "--tmpfs"]
    bound = [command[i + 1] for i, arg in enumerate(command) if arg == "--ro-bind"]
    assert {"/root", str(ROOT.parent)} <= set(tmpfs) and str(ROOT / "helpers") in bound
    assert max(command.index(p) for p in tmpfs) < command.index("--ro-bind", 2)   # covered first, then bound back
    assert command.index("--bind") < min(i for i, arg in enumerate(command) if arg == "--remount-ro")
    assert sys.base_prefix.startswith("/root") <= any(fence.within(sys.base_prefix, p) for p in bound)


USER_NAMESPACE_WORKS = fence.fence_works(fence.USER_NAMESPACE) is None


@pytest.fixture
def in_home():
    """A folder under this user's home (not under /tmp, which every fence covers anyway)."""
    with tempfile.TemporaryDirectory(dir=Path.home(), prefix="round17-") as base:
        yield Path(base)


def fenced(folder, hidden, needed, code):
    """What ``code`` prints inside the user-namespace fence."""
    command = fence.fence_prefix(fence.USER_NAMESPACE, folder, hidden, needed) + [sys.executable, "-c", code]
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    return done.stdout + done.stderr


@pytest.mark.skipif(not USER_NAMESPACE_WORKS, reason="no user namespaces here")
def test_a_fenced_run_reads_no_home_folder_but_imports_the_course(in_home):
    """Red team round 17 (B7): a submission read a file in the instructor's home folder, and what it
    printed came back on its feedback page."""
    secret = in_home / "solutions.txt"
    secret.write_text("instructor-only 7f3a")
    folder = in_home / "run"
    folder.mkdir()
    said = fenced(folder, autograde.hidden_paths(in_home / "course"), autograde.needed_paths(),
                  f"import helpers.grading, numpy, os\nprint('course', os.path.isdir({str(ROOT / 'data')!r}))\n"
                  f"print('instructor' if os.path.exists({str(ROOT / 'instructor')!r}) else 'none')\n"
                  f"try:\n    print(open({str(secret)!r}).read())\n"
                  "except OSError as error:\n    print(type(error).__name__)")
    assert "course True" in said and "\nnone\n" in said and "FileNotFoundError" in said and "7f3a" not in said, said


@pytest.mark.skipif(not USER_NAMESPACE_WORKS, reason="no user namespaces here")
def test_a_course_folder_holding_the_package_is_hidden_but_the_package_is_read(in_home):
    """The course folder at or above the package: its scores, feedback and kept notebooks are hidden,
    the package in it is bound back read-only."""
    course = in_home / "course"
    for name in ("pkg/module.py", "scores.csv", "feedback/bob/00.html", "work/_executed/bob.ipynb"):
        (course / name).parent.mkdir(parents=True, exist_ok=True)
        (course / name).write_text("kept 7f3a")
    folder = course / "work" / "00" / "eve"
    folder.mkdir(parents=True)
    said = fenced(folder, [course], [course / "pkg"],
                  f"import os\nprint(open({str(course / 'pkg/module.py')!r}).read())\n"
                  f"print(sorted(os.listdir({str(course)!r})), sorted(os.listdir({str(course / 'work')!r})))\n"
                  f"try:\n    open({str(course / 'pkg/new.py')!r}, 'w')\n"
                  "except OSError as error:\n    print('refused')")
    assert "kept 7f3a" in said and "['pkg', 'work'] ['00']" in said and "refused" in said, said


def test_in_a_real_run_a_replaced_recorder_earns_nothing(tmp_path):
    """The record run as the grader runs it (its first cell, the fence this machine has): a student's
    cell replaces helpers.grading.record_answer and leaves the exercise unanswered."""
    _, cells = autograde.source_cells(autograde.Chapter.read(CHAPTER))
    student = ("import helpers.grading as g\nfrom helpers.tour import checks\nlayer_params = None\n"
               f"g.record_answer = lambda exercise, answer, args, kwargs: g.encode({RIGHT})")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(autograde.SETUP), nbformat.v4.new_code_cell(student),
                                         autograde.marked(cells[CELL], CELL)])
    status, _ = autograde.run(nb, tmp_path / "eve", "record:{folder}/records.jsonl", timeout=240, cell_timeout=120,
                              fence=fence.choose_fence(unfenced=True))
    records, notes = graded(tmp_path / "eve" / "records.jsonl")
    assert status == "ran to the end", status
    assert records and all(r["answer"] == {"unknown": autograde.CHANGED} for r in records), records
    assert any("helpers.grading.record_answer" in note for note in notes), notes
