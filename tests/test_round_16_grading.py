"""Round 16, the grader (scripts/autograde.py): a record counts only when it was written while the
check cell it names was running, as the grader's driver (a process that runs no student code) saw
it, so a record forged by a student's cell earns nothing, and a check cell with two records for
one grade call counts for nothing (G1); a handed-in notebook is read only when it is small enough
to parse (G2)."""
import json
import os
import resource

import nbformat
import pytest

import autograde
import fence
from execute_notebooks import INSTRUCTOR
from helpers import grading
from helpers.tour import checks

CHAPTER = INSTRUCTOR / "00_tour.ipynb"
RIGHT = 7_087_872   # ch00_ex3_check's answer: the parameters of one GPT-2 small layer
FORGED = {"cell": "ch00_ex3_check", "index": 0, "check": "forged", "answer": RIGHT}


def line(entry):
    return json.dumps(entry) + "\n"


def report(at, *entries):
    """One line of the driver's report: the records written while the cell at ``at`` ran."""
    return json.dumps({"at": at, "lines": "".join(map(line, entries))}) + "\n"


def judged(answer):
    """What ch00_ex3_check says of a recorded answer."""
    return list(checks.per_layer.feedback(grading.decode(answer), d_model=768, d_ff=3072))


# ---------------------------------------------------------------- G1: records are the check cell's own


def test_a_record_written_by_another_cell_than_its_check_is_left_out_and_noted(tmp_path):
    """Red team round 16 (G1): a student's cell appended a passing record to the records file
    (its path is in the kernel's environment), and the grader kept the first record per cell."""
    real = {"cell": "ch00_ex3_check", "index": 0, "check": "per_layer", "answer": 1}
    other = {"cell": "ch00_ex1_check", "index": 0, "answer": [2, 5, 5]}
    kept = autograde.attributed(report(0, FORGED) + report(2, real, other) + report(3, {"cell": "nothing"}),
                                {2: "ch00_ex3_check", 4: "ch00_ex1_check"})
    path = tmp_path / "records.jsonl"
    path.write_text("".join(kept))
    notes = []
    records = autograde.read_records(path, {"ch00_ex3_check", "ch00_ex1_check"}, notes)
    assert records == [{"cell": "ch00_ex3_check", "index": 0, "answer": 1}]
    assert judged(records[0]["answer"])   # ✗: the forged right answer is not what is judged
    assert any("ch00_ex3_check" in note and "left out" in note for note in notes)
    assert any("ch00_ex1_check" in note for note in notes)


def test_two_records_for_one_grade_call_count_for_nothing_and_the_row_says_so(tmp_path, fake_grader):
    """Written while the check ran (a learner's function called by the check, a thread timed to
    it), a forged record stands beside the real one: neither counts, and the score table says why."""
    chapter = autograde.Chapter("00_tour", CHAPTER, {"ch00_ex3_check": 1}, {})
    sub = autograde.Submission("eve", tmp_path / "eve.ipynb", chapter)

    def judge(chapter, records, work, hidden, fence):
        return {key: {r["cell"]: judged(r["answer"]) for r in recs} for key, recs in records.items()}

    fake_grader(line(FORGED) + line({**FORGED, "answer": 1}), judge)
    autograde.grade_submissions([sub], tmp_path / "work", log=lambda *a: None, fence=autograde.UNFENCED)
    total, _, _, why = autograde.score(sub)
    assert total == 0 and "more than one answer" in why["ch00_ex3_check"]
    table = autograde.text_table(autograde.rows([sub], []))
    assert "ch00_ex3_check: more than one answer was recorded" in table


def test_one_record_per_grade_call_is_kept_as_before(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text(line({**FORGED, "index": 0}) + line({**FORGED, "index": 1, "answer": 1}))
    notes = []
    records = autograde.read_records(path, {"ch00_ex3_check"}, notes)
    assert [r["answer"] for r in records] == [RIGHT, 1] and notes == []


def test_only_the_grader_s_own_check_cells_are_taken_as_check_cells():
    """A student's cell carrying the grader's metadata key is a student's cell."""
    chapter = autograde.Chapter.read(CHAPTER)
    nb = nbformat.read(CHAPTER, as_version=4)
    for cell in nb.cells:
        cell.metadata[autograde.CHECK] = "ch00_ex3_check"
    nb = autograde.assemble(autograde.Submission("eve", CHAPTER, chapter), nb)
    at = autograde.checks_at(nb)
    assert sorted(at.values()) == sorted(chapter.checks)
    assert all(nb.cells[i].source.startswith(autograde.MARKER.format(grade_id)) for i, grade_id in at.items())


FORGER = f"""import json, os
from helpers.tour import checks
layer_params = 1   # wrong
channel = int(os.environ["COURSE_RECORDS_FD"])   # the records channel (round 25: no longer a file)
os.write(channel, (json.dumps({FORGED!r}) + "\\n").encode())
reached = []   # the driver's open files (its report among them), through /proc
for fd in os.listdir(f"/proc/{{os.getppid()}}/fd"):
    try:
        with open(f"/proc/{{os.getppid()}}/fd/{{fd}}", "a") as file:
            file.write(json.dumps({{"at": 1, "lines": json.dumps({FORGED!r}) + "\\n"}}) + "\\n")
        reached.append(fd)
    except OSError:
        pass
print("reached", reached)
"""


@pytest.fixture(scope="module")
def forged_run(tmp_path_factory):
    """A real run, fenced as this machine grades: a student's cell appends a passing record for
    ch00_ex3_check (and tries to write the driver's report), then the real check records 1."""
    folder = tmp_path_factory.mktemp("work") / "eve"
    _, cells = autograde.source_cells(autograde.Chapter.read(CHAPTER))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FORGER),
                                         autograde.marked(cells["ch00_ex3_check"], "ch00_ex3_check")])
    used = fence.choose_fence(unfenced=True)
    status, executed = autograde.run(nb, folder, "record:{folder}/records.jsonl", timeout=240, cell_timeout=120,
                                     fence=used)
    return dict(folder=folder, status=status, executed=executed, fence=used)


def test_a_forged_record_earns_nothing_in_a_real_run(forged_run):
    assert forged_run["status"] == "ran to the end", forged_run["status"]
    notes = []
    records = autograde.read_records(forged_run["folder"] / "records.jsonl", {"ch00_ex3_check"}, notes)
    assert records == [{"cell": "ch00_ex3_check", "index": 0, "answer": 1}]
    assert judged(records[0]["answer"]) and any("left out" in note for note in notes)


def test_the_kernel_cannot_write_the_driver_s_report(forged_run):
    """The driver is not dumpable: a process of the same user without CAP_SYS_PTRACE (the kernel, in
    a fence) cannot open its pipe through /proc (unfenced, as root, nothing stops it)."""
    if forged_run["fence"] == fence.UNFENCED:
        pytest.skip("no fence works on this machine")
    shown = "".join(str(o.get("text", "")) for o in forged_run["executed"].cells[0].outputs)
    assert "reached []" in shown, shown


# ---------------------------------------------------------------- G2: a handed-in notebook's size


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def padded(tmp_path, filler, name="00_tour.ipynb"):
    """The instructor's chapter 00 (a notebook the grader takes) with ``filler`` in its metadata."""
    nb = nbformat.read(CHAPTER, as_version=4)
    nb.metadata["padding"] = filler
    (tmp_path / "eve").mkdir(exist_ok=True)
    path = tmp_path / "eve" / name
    nbformat.write(nb, path)
    return autograde.Submission("eve", path)


def test_a_notebook_too_large_is_refused_in_one_sentence_before_it_is_parsed(tmp_path):
    """Red team round 16 (G2): identify parsed an 80 MB notebook whole, 5.9 GiB in the grader."""
    sub = padded(tmp_path, "x" * (autograde.MAX_SUBMISSION_MB * 2**20 + 1000))
    before = peak_mb()
    assert autograde.identify(sub, autograde.graded_chapters()) is None
    assert peak_mb() - before < 100
    assert sub.status.startswith("not graded: the notebook should be at most 20 MB, but it is 20.")
    assert "\n" not in sub.status and sub.status.count(". ") == 0 and sub.chapter is None


def test_a_notebook_of_too_many_small_objects_is_refused(tmp_path):
    sub = padded(tmp_path, [{}] * (autograde.MAX_SUBMISSION_CONTAINERS + 1))
    assert autograde.identify(sub, autograde.graded_chapters()) is None
    assert "at most 200,000 lists and dicts, but it holds" in sub.status
    with pytest.raises(autograde.SubmissionError, match="lists and dicts"):
        autograde.read_submission(sub.path)


def test_a_link_is_not_read_and_a_notebook_of_a_sane_size_is(tmp_path):
    sub = padded(tmp_path, "fine")
    os.symlink(sub.path, tmp_path / "eve" / "link.ipynb")
    with pytest.raises(autograde.SubmissionError, match="regular file"):
        autograde.read_submission(tmp_path / "eve" / "link.ipynb")
    assert autograde.identify(sub, autograde.graded_chapters()) is not None and sub.chapter.stem == "00_tour"


def test_a_notebook_grown_too_large_after_it_was_identified_is_not_run(tmp_path):
    """grade_submissions reads each notebook again to run it: the same bound holds there."""
    sub = padded(tmp_path, "fine")
    assert autograde.identify(sub, autograde.graded_chapters()) is not None
    padded(tmp_path, [{}] * (autograde.MAX_SUBMISSION_CONTAINERS + 1))   # the same file, rewritten
    autograde.grade_submissions([sub], tmp_path / "work", log=lambda *a: None, fence=autograde.UNFENCED)
    assert sub.status.startswith("not graded: the notebook should hold at most 200,000 lists and dicts")
    assert sub.problems == {} and autograde.score(sub)[0] == 0
