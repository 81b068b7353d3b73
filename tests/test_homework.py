"""Homework: the exercise format in every chapter, and a full round trip on chapter 02.

The round trip releases the chapter with nbgrader, hands in three submissions (left blank,
solved, one answer wrong), grades them with the course's grader and writes feedback, all in a
temporary course directory, then checks the scores and the words of the feedback.
tests/test_autograde.py tries the grader against the ways a class goes wrong.
"""
import ast
import html
import re
import types

import nbformat
import pytest

import autograde
import homework
from execute_notebooks import INSTRUCTOR, ROOT, learner_copy
from helpers.exercises import NOT_ANSWERED

GRADED = homework.graded_chapters()
EACH_GRADED = pytest.mark.parametrize("path", GRADED, ids=lambda path: path.stem)

# The round trip runs on this chapter (chapter 00 is graded in tests/test_autograde.py).
ROUND_TRIP = ["02_qkv_by_hand"]
# For each: one answer cell, a plausible wrong answer for it, and words its feedback must contain.
WRONG = {
    "00_tour": ("ch00_ex2_answer", "p_ran_by_hand = np.exp(last_logits[ran_id])", "divide by the sum of exp"),
    "02_qkv_by_hand": ("ch02_ex1_answer", "w_cat_the = 1.0", "e^0 = 1 is the top of the fraction"),
}


def meta(cell):
    return cell.metadata.get("nbgrader", {})


def cells_by_id(nb):
    return {meta(cell)["grade_id"]: cell for cell in nb.cells if meta(cell)}


def solution_lines(source):
    """The non-blank lines between BEGIN SOLUTION and END SOLUTION."""
    return [line for line in homework.solution_lines(source) if line.strip()]


# ---------------------------------------------------------------- every chapter: the format

def test_some_chapters_have_exercises():
    assert len(GRADED) >= 2, f"only {[p.stem for p in GRADED]} have nbgrader exercises"


@EACH_GRADED
def test_exercises_follow_the_course_format(path):
    nb = nbformat.read(path, as_version=4)
    number = path.stem[:2]
    graded = [cell for cell in nb.cells if meta(cell)]
    ids = [meta(cell)["grade_id"] for cell in graded]
    assert len(ids) == len(set(ids)), f"{path.name}: repeated grade_id in {ids}"
    for cell in graded:
        m, grade_id = meta(cell), meta(cell)["grade_id"]
        assert m.get("schema_version") == 3 and grade_id.startswith(f"ch{number}_"), grade_id
        if m.get("solution"):
            regions = cell.source.count("### BEGIN SOLUTION")
            assert regions >= 1 and regions == cell.source.count("### END SOLUTION"), grade_id
            if cell.cell_type == "code":
                # an answer is set to None before a single solution, or the cell is a skeleton (a def
                # or class the learner completes, one region or more); either way the learner's stub parses
                stub = homework._replace_regions(cell.source, homework.MARKERS["solution"], [homework.CODE_STUB])
                before = cell.source.split("### BEGIN SOLUTION")[0]
                skeleton = re.search(r"^\s*(def|class) \w+", stub, re.M)
                assert skeleton or (regions == 1 and re.search(r"^[A-Za-z_]\w* = None$", before, re.M)), (
                    f"{grade_id}: an answer cell sets the answer to None before its solution, or is a skeleton")
                ast.parse(stub.replace("%", "#"))   # (IPython magics aside) the learner's copy of the cell parses
            assert not m.get("grade"), f"{grade_id}: answer cells are not graded; their check cell is"
        if m.get("grade"):
            assert m.get("points", 0) > 0 and m.get("locked"), f"{grade_id}: a check cell is locked and has points"
            assert "### BEGIN HIDDEN TESTS" in cell.source and ".grade(" in cell.source, (
                f"{grade_id}: a check cell grades in hidden tests")
            visible = cell.source.split("### BEGIN HIDDEN TESTS")[0]
            assert visible.strip() and ".grade(" not in visible, f"{grade_id}: the visible line gives feedback"


@EACH_GRADED
def test_learner_copy_is_made_from_the_chapter(path):
    learner = nbformat.read(learner_copy(path), as_version=4)
    made = homework.learner_version(nbformat.read(path, as_version=4))
    assert [(c.cell_type, c.source) for c in learner.cells] == [(c.cell_type, c.source) for c in made.cells], (
        f"notebooks/{path.name} is not the learner's copy of instructor/{path.name}: execute the chapter "
        "(scripts/execute_notebooks.py), which writes both")


@EACH_GRADED
def test_learner_meets_each_exercise_before_its_solution(path):
    """No solution line shows before its exercise's collapsed solution; checks come before solutions."""
    learner = nbformat.read(learner_copy(path), as_version=4)
    text = "\n".join(cell.source for cell in learner.cells)
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and ".grade(" not in text
    answers = {meta(c)["grade_id"]: solution_lines(c.source) for c in nbformat.read(path, as_version=4).cells
               if meta(c).get("solution")}
    hidden, checks, shown = dict(answers), set(), 0
    for cell in learner.cells:
        if meta(cell).get("grade"):
            checks.add(meta(cell)["grade_id"])
        solution_of = cell.metadata.get("course", {}).get("solution_of")
        if solution_of:
            assert solution_of in checks, f"the solution of {solution_of} comes before its check"
            assert cell.source.startswith(f"<details><summary>{homework.SOLUTION_SUMMARY}"), "a solution is open"
            shown += 1
            hidden = {g: lines for g, lines in hidden.items() if not all(l in cell.source for l in lines)}
            continue
        for grade_id, lines in hidden.items():   # the whole solution (its lines of some length) in one cell
            distinct = [line for line in lines if len(line.strip()) > 12]
            leaked = [line for line in distinct if line in cell.source.splitlines()]
            assert not distinct or leaked != distinct, (
                f"{grade_id}: its solution is shown before the exercise's collapsed solution: {leaked}")
    assert not hidden, f"exercises without a collapsed solution: {sorted(hidden)}"
    assert shown == len(checks)


def test_every_exercise_is_in_the_instructor_guide():
    guide = (ROOT / "README.md").read_text().split("## Instructor guide", 1)[-1]
    missing = [grade_id for path in GRADED for grade_id, _, _ in homework.exercises(path)
               if grade_id.rsplit("_", 1)[0] not in guide]
    assert not missing, f"add these exercises to the README's instructor guide table: {missing}"


# ---------------------------------------------------------------- the commands' own checks

def test_find_chapter_by_number_name_and_path():
    tour = INSTRUCTOR / "00_tour.ipynb"
    if not tour.exists():
        pytest.skip("no tour yet")
    assert homework.find_chapter("00") == homework.find_chapter("00_tour") == homework.find_chapter(str(tour))


def test_unknown_chapter_is_one_sentence():
    with pytest.raises(homework.HomeworkError, match="matches 0 notebooks"):
        homework.find_chapter("99")


def test_grade_refuses_a_missing_folder_and_one_without_notebooks(tmp_path):
    with pytest.raises(homework.HomeworkError, match="is not a folder"):
        homework.grade(tmp_path / "nowhere", tmp_path / "course")
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    with pytest.raises(homework.HomeworkError, match="found none"):
        homework.grade(tmp_path / "subs", tmp_path / "course")


def test_a_file_that_is_not_a_notebook_gets_a_row(tmp_path):
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    (tmp_path / "subs" / "alice" / "notes.ipynb").write_text("{}")
    rows = homework.grade(tmp_path / "subs", tmp_path / "course", log=lambda *a: None)
    assert [(r["student"], r["score"]) for r in rows] == [("alice", 0)] and "not a readable notebook" in rows[0]["notes"]


def test_release_without_chapters_says_what_to_do(capsys):
    assert homework.main(["release"]) == 1
    assert "pass --all" in capsys.readouterr().err


# ---------------------------------------------------------------- the round trip

def submission(released, source, answers):
    """The released notebook with answer cells filled: answers[grade_id] is 'solution' or code."""
    nb = nbformat.read(released, as_version=4)
    solutions = cells_by_id(nbformat.read(source, as_version=4))
    for grade_id, cell in cells_by_id(nb).items():
        answer = answers.get(grade_id)
        if answer == "solution":
            cell.source = "\n".join(line for line in solutions[grade_id].source.splitlines()
                                    if "### " not in line)
        elif answer is not None:
            cell.source = answer
    return nb


@pytest.fixture(scope="module", params=ROUND_TRIP)
def trip(request, tmp_path_factory):
    source = INSTRUCTOR / f"{request.param}.ipynb"
    course = tmp_path_factory.mktemp(f"course_{request.param}")
    released = homework.release([request.param], course)[0]
    answer_ids = [grade_id for grade_id, cell in cells_by_id(nbformat.read(source, as_version=4)).items()
                  if meta(cell).get("solution")]
    wrong_id, wrong_code, wrong_words = WRONG[request.param]
    solved = {grade_id: "solution" for grade_id in answer_ids}
    plans = {"blank": {}, "solved": solved, "wrong": {**solved, wrong_id: wrong_code}}
    subs = course / "handed_in"
    for student, answers in plans.items():
        (subs / student).mkdir(parents=True)
        nbformat.write(submission(released, source, answers), subs / student / source.name)
    rows = {row["student"]: row for row in homework.grade(subs, course, log=lambda *a: None)}
    return types.SimpleNamespace(chapter=request.param, course=course, source=source, released=released,
                                 rows=rows, wrong_id=wrong_id, wrong_words=wrong_words)


def autograded(trip, student):
    """The student's notebook as the grader ran it."""
    return trip.rows[student]["submission"].executed


def check_cells(row):
    return {key: value for key, value in row.items() if key.endswith("_check")}


def test_student_version_contains_no_solution_code(trip):
    released = nbformat.read(trip.released, as_version=4)
    text = "\n".join(cell.source for cell in released.cells)
    assert "BEGIN SOLUTION" not in text and "HIDDEN TESTS" not in text and ".grade(" not in text
    original = cells_by_id(nbformat.read(trip.source, as_version=4))
    for grade_id, cell in cells_by_id(released).items():
        leaked = [line for line in solution_lines(original[grade_id].source) if line in cell.source]
        assert not leaked, f"{grade_id}: solution lines in the student version: {leaked}"
        if meta(cell).get("solution"):
            assert "# YOUR CODE HERE" in cell.source


def test_our_student_version_is_nbgraders(trip):
    ours = homework.student_version(nbformat.read(trip.source, as_version=4))
    released = nbformat.read(trip.released, as_version=4)
    assert [cell.source for cell in ours.cells] == [cell.source for cell in released.cells]


def test_blank_student_version_runs_and_scores_zero(trip):
    row = trip.rows["blank"]
    assert row["score"] == 0 and all(score == 0 for score in check_cells(row).values()), row
    for cell in autograded(trip, "blank").cells:
        errors = [out for out in cell.get("outputs", []) if out.output_type == "error"]
        assert not errors, f"a cell failed: {cell.source[:80]!r} {errors}"
        if meta(cell).get("grade"):  # the visible check says what is missing; the hidden test only records
            assert NOT_ANSWERED.split(":")[0] in cell.outputs[0].text
    assert all("not answered yet" in why for why in trip.rows["blank"]["why"].values())


def test_solved_version_gets_full_marks(trip):
    row = trip.rows["solved"]
    assert row["score"] == row["max_score"] > 0, row


def test_one_wrong_answer_gets_a_partial_score(trip):
    row = trip.rows["wrong"]
    assert 0 < row["score"] < row["max_score"], row
    zero = [grade_id for grade_id, score in check_cells(row).items() if score == 0]
    assert zero == [trip.wrong_id.replace("_answer", "_check")], row


def test_feedback_names_what_is_wrong(trip):
    feedback = trip.course / "feedback" / "wrong" / trip.chapter / f"{trip.chapter}.html"
    text = html.unescape(re.sub(r"<[^>]+>", "", feedback.read_text()))
    assert trip.wrong_words in text, f"the feedback does not say {trip.wrong_words!r}"


def test_score_table_is_written(trip):
    table = (trip.course / "scores.csv").read_text().splitlines()
    assert table[0].startswith("student,chapter,score,max_score,")
    assert sorted(line.split(",")[0] for line in table[1:]) == ["blank", "solved", "wrong"]
    text = autograde.text_table(list(trip.rows.values()))
    assert "blank" in text and "ex1" in text
