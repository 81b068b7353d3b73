"""Grading that a student's code cannot game or stop (scripts/autograde.py), on chapter 00.

One class of submissions is graded at once, each a way a real class goes wrong: left blank,
solved, one answer wrong, an answer of NaN, a grader patched from an answer cell, a write into
the instructor's checkout, exit() halfway, a loop that never ends, another chapter under this
chapter's name, two copies, a renamed file, lost cell metadata, a student id with a space, a
hidden folder. Each gets the row it deserves, and everyone else is still graded.
"""
import json
import shutil

import nbformat
import pytest

import autograde
import homework
from execute_notebooks import INSTRUCTOR, ROOT
from test_homework import submission

CHAPTER = "00_tour"
SOURCE = INSTRUCTOR / f"{CHAPTER}.ipynb"
OTHER = INSTRUCTOR / "02_qkv_by_hand.ipynb"
PROTECTED = ROOT / "helpers" / "exercises.py"


def meta(cell):
    return cell.metadata.get("nbgrader", {})


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = tmp_path_factory.mktemp("course")
    released_path = homework.release([CHAPTER], course)[0]
    released = nbformat.read(released_path, as_version=4)
    ids = [meta(c)["grade_id"] for c in released.cells if meta(c).get("solution")]
    solved = {g: "solution" for g in ids}
    other_path = homework.release(["02"], course)[0]
    other = submission(other_path, OTHER, {meta(c)["grade_id"]: "solution" for c in
                                           nbformat.read(other_path, as_version=4).cells if meta(c).get("solution")})
    answered = lambda answers: submission(released_path, SOURCE, answers)  # noqa: E731
    wrong_everything = {g: f"{c.source.splitlines()[0].split('=')[0].strip()} = 12345"
                        for g in ids for c in released.cells if meta(c).get("grade_id") == g}
    stripped = answered(solved)
    for cell in stripped.cells:
        cell.metadata = {}
    early_check = answered(solved)   # the check line pasted above its answer cell too
    answer_at = next(i for i, c in enumerate(early_check.cells) if meta(c).get("grade_id") == "ch00_ex2_answer")
    early_check.cells.insert(answer_at, nbformat.v4.new_code_cell("checks.next_prob(p_ran_by_hand, last_logits, ran_id)"))
    plans = {
        "blank": {CHAPTER: released},
        "solved": {CHAPTER: answered(solved)},
        "wrong": {CHAPTER: answered({**solved, "ch00_ex2_answer": "p_ran_by_hand = np.exp(last_logits[ran_id])"})},
        "nan": {CHAPTER: answered({**solved, "ch00_ex2_answer": "p_ran_by_hand = float('nan')"})},
        "patcher": {CHAPTER: answered({**wrong_everything, "ch00_ex1_answer":
                    "from helpers.exercises import Exercise\nExercise.grade = lambda self, *a, **k: None\n"
                    "import helpers.grading\nhelpers.grading.handle = lambda *a, **k: None\nscores_shape = (9, 9, 9)"})},
        "writer": {CHAPTER: answered({**solved, "ch00_ex1_answer":
                   f"try:\n    open({str(PROTECTED)!r}, 'a').write('\\nExercise.feedback = lambda *a, **k: []\\n')\n"
                   "except OSError as error:\n    print('refused:', error)\n" + "scores_shape = (2, 5, 5)"})},
        "leaver": {CHAPTER: answered({**solved, "ch00_ex2_answer": "import os\nos._exit(0)"})},
        "looper": {CHAPTER: answered({**solved, "ch00_ex3_answer": "while True:\n    pass"})},
        "mixup": {CHAPTER: other},
        "twice": {CHAPTER: answered(solved), "00_tour (1)": released},
        "escaper": {CHAPTER: answered({**solved, "ch00_ex1_answer":
                    "import subprocess\nsubprocess.run(['mount', '-o', 'remount,bind,rw', '/'])\n"
                    f"for target in [{str(PROTECTED)!r}, {str(SOURCE)!r}]:\n"
                    "    try:\n        open(target, 'a').write('# changed')\n    except OSError as error:\n"
                    "        print('refused:', error)\nscores_shape = (2, 5, 5)"})},
        "peeker": {CHAPTER: answered({**solved, "ch00_ex2_answer":
                   f"import json\ntry:\n    solution = json.load(open({str(SOURCE)!r}))\n"
                   "except OSError:\n    solution = None\np_ran_by_hand = None if solution is None else 0.5"})},
        "mallory": {CHAPTER: answered({**solved, "ch00_ex1_answer": "scores_shape = frozenset([frozenset()])"})},
        "saboteur": {CHAPTER: answered({**solved, "ch00_ex1_answer":
                     "import os\nos.mkdir('executed.ipynb')\nos.mkfifo('records.jsonl')\nscores_shape = (2, 5, 5)"})},
        "early": {CHAPTER: early_check},
        "ann lee": {"tour": answered(solved)},                                   # a space, a renamed file
        "a_student_with_a_very_long_identifier_0123456789": {CHAPTER: stripped},  # lost metadata
    }
    folder = course / "handed_in"
    for student, files in plans.items():
        (folder / student).mkdir(parents=True)
        for name, nb in files.items():
            nbformat.write(nb, folder / student / f"{name}.ipynb")
    (folder / "linked").symlink_to(folder / "solved")
    (folder / ".hidden").mkdir()
    nbformat.write(answered(solved), folder / ".hidden" / f"{CHAPTER}.ipynb")
    before = PROTECTED.read_bytes(), SOURCE.read_bytes()
    table = homework.grade(folder, course, log=lambda *a: None, cell_timeout=15)
    return dict(course=course, table=table, rows={(r["student"], r["chapter"]): r for r in table},
                protected_unchanged=(PROTECTED.read_bytes(), SOURCE.read_bytes()) == before)


def row(graded, student, chapter=CHAPTER):
    return graded["rows"][(student, chapter)]


def test_blank_solved_and_wrong(graded):
    assert row(graded, "blank")["score"] == 0
    assert row(graded, "solved")["score"] == row(graded, "solved")["max_score"] == 4
    wrong = row(graded, "wrong")
    assert wrong["score"] == 3 and wrong["ch00_ex2_check"] == 0
    assert "divide by the sum of exp" in wrong["why"]["ch00_ex2_check"]


def test_nan_is_wrong_and_says_so(graded):
    nan = row(graded, "nan")
    assert nan["score"] == 3 and "NaN" in nan["why"]["ch00_ex2_check"]


def test_patching_the_grader_in_the_students_kernel_gains_nothing(graded):
    assert row(graded, "patcher")["score"] == 0


FENCED = bool(shutil.which("bwrap"))


def test_a_write_into_the_checkout_is_refused_or_undone(graded):
    assert graded["protected_unchanged"]
    writer = row(graded, "writer")
    if FENCED:   # refused: its own answers still count
        assert writer["score"] == 4
    else:        # undone, and that submission is not graded
        assert writer["score"] == 0 and "restored" in writer["notes"]
    assert row(graded, "solved")["score"] == 4          # nobody else's grade moved


def test_exit_and_endless_loops_stop_only_their_own_notebook(graded):
    leaver = row(graded, "leaver")
    assert leaver["score"] == 1 and "process ended" in leaver["notes"]
    looper = row(graded, "looper")
    assert looper["score"] == 2 and "longer than 15 s" in looper["notes"]


def test_another_chapter_under_this_name_is_graded_as_what_it_is(graded):
    mixup = row(graded, "mixup", "02_qkv_by_hand")
    assert mixup["score"] == mixup["max_score"] > 0 and "holds 02_qkv_by_hand" in mixup["notes"]


def test_two_copies_the_best_counts_and_the_row_says_so(graded):
    twice = row(graded, "twice")
    assert twice["score"] == 4 and "2 copies" in twice["notes"]


def test_renamed_files_lost_metadata_and_any_student_id_are_still_graded(graded):
    renamed = row(graded, "ann lee")
    assert renamed["score"] == 4 and "tour.ipynb" in renamed["notes"]
    stripped = row(graded, "a_student_with_a_very_long_identifier_0123456789")
    assert stripped["score"] == 4 and "metadata" in stripped["notes"]


def test_the_table_fits_long_ids_and_hidden_folders_get_a_word(graded):
    text = autograde.text_table(graded["table"])
    long_line = next(line for line in text.splitlines() if line.startswith("a_student_with_a_very_long"))
    assert "4/4" in long_line
    assert any(r["notes"].startswith("skipped: .hidden") for r in graded["table"])


def test_scores_csv_and_feedback_pages(graded):
    lines = (graded["course"] / "scores.csv").read_text().splitlines()
    assert lines[0].startswith("student,chapter,score,max_score,")
    assert len(lines) == len(graded["table"]) + 1
    page = (graded["course"] / "feedback" / "wrong" / CHAPTER / f"{CHAPTER}.html").read_text()
    assert "divide by the sum of exp" in page


def test_grading_again_after_removing_a_submission_just_works(graded, tmp_path):
    folder = tmp_path / "handed_in"
    for student in ("solved", "wrong"):
        shutil.copytree(graded["course"] / "handed_in" / student, folder / student)
    shutil.rmtree(folder / "wrong")
    again = homework.grade(folder, graded["course"], log=lambda *a: None, cell_timeout=15)
    assert [(r["student"], r["score"]) for r in again] == [("solved", 4)]


def test_records_are_data_never_code(graded):
    records = list((graded["course"] / "work").rglob("records.json*"))
    assert records
    for path in records:
        for line in path.read_text().splitlines():
            json.loads(line)


@pytest.mark.skipif(not FENCED, reason="the fence needs bubblewrap")
def test_under_the_fence_even_root_cannot_write_or_read_the_solutions(graded):
    assert graded["protected_unchanged"]
    assert row(graded, "escaper")["score"] == 4
    peeker = row(graded, "peeker")
    assert peeker["score"] == 3 and "not answered" in peeker["why"]["ch00_ex2_check"]


def test_an_answer_the_judge_cannot_rebuild_costs_only_that_exercise(graded):
    mallory = row(graded, "mallory")
    assert mallory["score"] == 3 and mallory["ch00_ex1_check"] == 0


def test_files_left_in_the_run_folder_do_not_stop_the_grader(graded):
    assert row(graded, "saboteur")["score"] == 0   # it broke its own records before the first check
    assert row(graded, "solved")["score"] == 4


def test_a_pasted_copy_of_a_check_does_not_replace_the_real_one(graded):
    assert row(graded, "early")["score"] == 4


def test_a_linked_student_folder_is_skipped_with_a_word(graded):
    assert any(r["notes"].startswith("skipped: linked") for r in graded["table"])
