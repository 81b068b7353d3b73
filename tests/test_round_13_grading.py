"""Round 13, the grading tools (scripts/autograde.py, helpers/grading.py): a right answer that a
check gives a callback is judged as the live check judged it; a fence that hides the course refuses
before anything runs, and a judge that fails is a row's note, never a traceback; one student's
copies, records and outputs are bounded in number and in the grader's memory; odd nbgrader metadata
costs nothing; a check cell pasted above its answer does not run before it."""
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import autograde
import fence
import homework
from execute_notebooks import INSTRUCTOR, ROOT
from helpers import grading
from learner_loops import written_loop

CH07 = INSTRUCTOR / "07_mlp.ipynb"


def meta(cell):
    return cell.metadata.get("nbgrader", {})


# ---------------------------------------------------------------- 1: callbacks replayed in the judge

def record_then_judge(exercise, answer):
    """What the judge says of ``answer``: recorded as the student's kernel records it, sent as JSON."""
    recorded = json.loads(json.dumps(grading.record_answer(exercise, answer, (), {})))
    return list(exercise.feedback(grading.decode(recorded)))


def test_a_right_training_loop_is_right_under_the_grader_too():
    """The judge replayed what train_loop returned but never called the check's callback, so every
    right chapter-12 loop (live: ✓) was graded 0: "callback was called 0 times for 12 steps"."""
    from helpers.gpt import checks

    right = written_loop(call_back=lambda step: True)
    assert list(checks.train_loop.feedback(right)) == []
    assert record_then_judge(checks.train_loop, right) == []
    said = record_then_judge(checks.train_loop, written_loop(call_back=lambda step: step % 2 == 0))   # a loop that skips some
    assert said and "callback was called 6 times for 12 steps" in said[0]
    said = record_then_judge(checks.train_loop, written_loop(call_back=lambda step: False))
    assert said and "callback was called 0 times" in said[0]


def test_a_replayed_function_calls_back_in_order_with_the_same_arguments():
    def learner(xs, report, scale=1):
        total = []
        for x in xs:
            total.append(x * scale)
            report(list(total), last=x)
        return sum(total)

    live, judged = [], []
    recorder = grading.Recorder(learner)
    assert recorder([1, 2, 3], lambda seen, last: live.append((seen, last)), scale=2) == 12
    calls = json.loads(json.dumps(recorder.calls))
    replay = grading.Replay(calls)
    assert replay([1, 2, 3], lambda seen, last: judged.append((seen, last)), scale=2) == 12
    assert judged == live == [([2], 1), ([2, 4], 2), ([2, 4, 6], 3)]


def test_forged_callback_records_are_refused_as_records():
    def learner(report):
        report(1)
        return 0

    recorder = grading.Recorder(learner)
    recorder(lambda x: None)
    for forged in ([{"at": 5, "args": {"tuple": [1]}, "kwargs": {"dict": []}}],   # no such input
                   [{"at": 0, "args": "x", "kwargs": {"dict": []}}], "calls"):
        entry = dict(recorder.calls[0], callbacks=forged)
        with pytest.raises(grading.RecordError):
            grading.Replay([entry])(lambda x: None)
    judged = []   # a callback that fails in the judge changes nothing: the record says what followed
    assert grading.Replay(recorder.calls)(lambda x: judged.append(x) or 1 / 0) == 0 and judged == [1]


# ---------------------------------------------------------------- 2: a fence that hides the course; a failing judge


def test_a_fence_whose_trial_cannot_see_the_course_refuses_in_one_sentence(monkeypatch, tmp_path):
    """The fence's own trial used only a temporary folder, so a fence that hides the course (kept
    under /tmp, which each fence covers) was chosen and every run then failed with exit code 2."""
    monkeypatch.setattr(autograde, "run", lambda *a, **k: ("the run ended with exit code 2", None))
    with pytest.raises(fence.FenceError) as refused:
        autograde.tried_fence(fence.USER_NAMESPACE, tmp_path / "work", [])
    sentence = str(refused.value)
    assert "\n" not in sentence and sentence.startswith("expected the user namespace fence to let a run see")
    assert "pass --unfenced" in sentence
    assert autograde.tried_fence(fence.USER_NAMESPACE, tmp_path / "work", [], unfenced=True,
                                 log=lambda *a: None) == fence.UNFENCED
    assert not (tmp_path / "work" / "_fence_trial").exists()


@pytest.mark.skipif(fence.fence_works(fence.USER_NAMESPACE) is not None, reason="no user namespaces here")
def test_the_fence_trial_runs_what_a_run_runs(tmp_path):
    work = tmp_path / "course" / "work"
    assert autograde.tried_fence(fence.USER_NAMESPACE, work, [tmp_path / "course"]) == fence.USER_NAMESPACE


@pytest.mark.skipif(fence.fence_works(fence.USER_NAMESPACE) is not None or fence.fence_works(fence.BUBBLEWRAP) is None,
                    reason="the user namespace is not the fence here")
def test_a_course_kept_under_tmp_is_refused_before_anything_runs(tmp_path):
    """As the instructor meets it: `homework.py grade` from a checkout under /tmp."""
    clone = tmp_path / "clone"
    for name in ("helpers", "scripts", "instructor", "notebooks", "data", "grading"):
        shutil.copytree(ROOT / name, clone / name, ignore=shutil.ignore_patterns("__pycache__"))
    student = tmp_path / "subs" / "bob"
    student.mkdir(parents=True)
    shutil.copy(ROOT / "notebooks" / "07_mlp.ipynb", student / "07_mlp.ipynb")
    done = subprocess.run([sys.executable, str(clone / "scripts" / "homework.py"), "--course", str(tmp_path / "course"),
                           "grade", str(tmp_path / "subs")], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(clone)})
    said = done.stderr.strip()
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert said.count("\n") == 0 and said.startswith("✗ expected the user namespace fence") and "under /tmp" in said
    assert not (tmp_path / "course" / "scores.csv").exists()


def test_a_judge_that_fails_with_no_answers_is_a_note_and_the_other_chapters_are_graded(tmp_path, fake_grader):
    """Its RuntimeError escaped grade() and homework.py printed a traceback, with no scores.csv."""
    good = autograde.Chapter("00_tour", INSTRUCTOR / "00_tour.ipynb", {"a_check": 1}, {})
    bad = autograde.Chapter("07_mlp", CH07, {"b_check": 1}, {})
    subs = [autograde.Submission("ann", tmp_path / "a.ipynb", good), autograde.Submission("bo", tmp_path / "b.ipynb", bad)]

    def judge(chapter, records, work, hidden, fence):
        if chapter.stem == "07_mlp":
            raise RuntimeError("judging 07_mlp did not finish cleanly: the run ended with exit code 2")
        return {key: {"a_check": []} for key in records}

    fake_grader('{"cell": "a_check", "index": 0, "answer": 1}\n{"cell": "b_check", "index": 0, "answer": 1}\n', judge)
    with pytest.raises(autograde.JudgeError, match="07_mlp"):
        autograde.grade_submissions(subs, tmp_path / "work", log=lambda *a: None, fence=autograde.UNFENCED)
    assert autograde.score(subs[0])[0] == 1 and autograde.score(subs[1])[0] == 0
    assert "not judged" in subs[1].notes[-1] and "not judged" in autograde.score(subs[1])[3]["b_check"]


def test_homework_grade_turns_any_grader_failure_into_one_sentence(tmp_path, monkeypatch):
    (tmp_path / "subs" / "ann").mkdir(parents=True)
    shutil.copy(CH07, tmp_path / "subs" / "ann" / "07_mlp.ipynb")

    def broken(*args, **kwargs):
        raise RuntimeError("judging 07_mlp did not finish cleanly")

    monkeypatch.setattr(autograde, "grade", broken)
    with pytest.raises(homework.HomeworkError, match="stopped with RuntimeError: judging 07_mlp"):
        homework.grade(tmp_path / "subs", tmp_path / "course")


# ---------------------------------------------------------------- 6: copies per student and chapter


def graded_rows(tmp_path, monkeypatch):
    """autograde.grade's rows, with nothing run (the fence and the runs stubbed)."""
    monkeypatch.setattr(autograde, "choose_fence", lambda unfenced=False: autograde.UNFENCED)
    queued = []
    monkeypatch.setattr(autograde, "grade_submissions", lambda subs, *a, **k: queued.extend(subs))
    (tmp_path / "course").mkdir()
    table = autograde.grade(tmp_path / "subs", tmp_path / "course", log=lambda *a: None)
    return table, queued


def test_one_student_s_copies_of_a_chapter_are_capped_and_the_row_says_so(tmp_path, monkeypatch):
    """200 copies of one chapter, at any depth, were all queued for a full run (up to 600 s each)."""
    student = tmp_path / "subs" / "mallory"
    for i in range(6):
        (student / f"copy{i}").mkdir(parents=True)
        shutil.copy(CH07, student / f"copy{i}" / "07_mlp.ipynb")
    for i in range(4):   # renamed copies: the same chapter under other names
        shutil.copy(CH07, student / f"mine{i}.ipynb")
    found, _ = autograde.find_submissions(tmp_path / "subs")
    assert len(found) == autograde.MAX_COPIES + 4
    table, queued = graded_rows(tmp_path, monkeypatch)
    assert len(queued) == autograde.MAX_COPIES
    [row] = [r for r in table if r["student"] == "mallory"]
    assert f"only the first {autograde.MAX_COPIES} were run" in row["notes"]


# ---------------------------------------------------------------- 7: records read back


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_records_kept_are_only_what_a_check_can_ask_for_and_bounded(tmp_path):
    """A records file of new (cell, index) keys, each a list of empty lists, was kept whole: about
    1.2 GB in the grader for one submission's 49 MB."""
    path = tmp_path / "records.jsonl"
    answer = "[" + ",".join(["[]"] * 30000) + "]"
    with open(path, "w") as file:
        file.write('{"cell": "a_check", "index": 0, "answer": 7}\n')
        for index in range(1, 300):
            file.write('{"cell": "a_check", "index": %d, "answer": %s}\n' % (index, answer))
    before = peak_mb()
    records = autograde.read_records(path, {"a_check"})
    assert peak_mb() - before < 100
    assert records[0] == {"cell": "a_check", "index": 0, "answer": 7}
    assert all(r["index"] < autograde.MAX_RECORD_INDEX for r in records)
    kept = sum(json.dumps(r["answer"]).count("[") for r in records)
    assert kept <= autograde.MAX_RECORD_CONTAINERS


# ---------------------------------------------------------------- 9, 10: assembling


def student_copy(tmp_path, nb, name="carol"):
    (tmp_path / name).mkdir()
    nbformat.write(nb, tmp_path / name / "07_mlp.ipynb")
    [sub], _ = autograde.find_submissions(tmp_path)
    autograde.identify(sub, autograde.graded_chapters())
    return sub


def test_a_grade_id_that_is_not_text_costs_nothing(tmp_path):
    """A list as one unrelated cell's grade_id made assemble raise TypeError: the whole submission 0."""
    nb = nbformat.read(CH07, as_version=4)
    extra = nbformat.v4.new_code_cell("x = 1")
    extra.metadata["nbgrader"] = {"grade": False, "grade_id": ["my", "notes"], "solution": True}
    nb.cells.insert(3, extra)
    weird = nbformat.v4.new_code_cell("y = 2")
    weird.metadata["nbgrader"] = {"grade": False, "grade_id": {"a": 1}}
    nb.cells.insert(5, weird)
    sub = student_copy(tmp_path, nb)
    out = autograde.assemble(sub, nbformat.read(sub.path, as_version=4))
    sources = [c.source for c in out.cells]
    assert "x = 1" in sources and "y = 2" in sources
    assert sum("helpers.grading.cell(" in s for s in sources) == len(sub.chapter.checks)


def test_a_check_cell_pasted_above_its_answer_runs_after_the_answer_and_is_noted(tmp_path):
    """By metadata the first copy ran, before the answer existed (live ✓, graded 0, no note)."""
    nb = nbformat.read(CH07, as_version=4)
    i_check = next(i for i, c in enumerate(nb.cells) if meta(c).get("grade_id") == "ch07_ex1_check")
    i_answer = next(i for i, c in enumerate(nb.cells) if meta(c).get("grade_id") == "ch07_ex1_answer")
    nb.cells.insert(i_answer, nbformat.from_dict(json.loads(json.dumps(nb.cells[i_check]))))
    sub = student_copy(tmp_path, nb)
    out = autograde.assemble(sub, nbformat.read(sub.path, as_version=4))
    code = [c.source for c in out.cells if c.cell_type == "code"]
    at_check = next(i for i, s in enumerate(code) if "helpers.grading.cell('ch07_ex1_check')" in s)
    at_answer = next(i for i, s in enumerate(code) if "BEGIN SOLUTION" in s and "act = " in s)
    assert at_answer < at_check
    assert sum("helpers.grading.cell('ch07_ex1_check')" in s for s in code) == 1
    assert any("ch07_ex1_check was found 2 times" in note for note in sub.notes)


# ---------------------------------------------------------------- 11: executed notebooks read back


def test_an_executed_notebook_of_many_outputs_is_not_parsed_whole_nor_kept(tmp_path):
    """270,000 empty outputs (20 MB) cost the grader half a gigabyte, kept for every submission."""
    out = {"output_type": "display_data", "data": {"text/plain": ""}, "metadata": {}}
    cell = {"cell_type": "code", "execution_count": 1, "metadata": {}, "source": "", "outputs": [out] * 45000}
    nb = {"cells": [dict(cell, id=f"c{i}") for i in range(6)], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "executed.ipynb"
    path.write_text(json.dumps(nb))
    before = peak_mb()
    assert autograde.read_executed(path) is None
    assert peak_mb() - before < 150
    nb["cells"] = [dict(cell, id=f"c{i}", outputs=[out] * 1000) for i in range(3)]
    path.write_text(json.dumps(nb))
    read = autograde.read_executed(path)
    counts = [len(c.outputs) for c in read.cells]
    assert counts == [autograde.MAX_OUTPUTS_PER_CELL + 1] * 3 and "900 more outputs" in read.cells[0].outputs[-1].text
    kept = autograde.keep_executed(read, tmp_path / "pages" / "x.ipynb")
    assert kept == tmp_path / "pages" / "x.ipynb" and autograde.read_executed(kept).cells[0].outputs[-1] == \
        read.cells[0].outputs[-1]


def test_the_instructor_s_chapter_12_graded_as_a_submission_gets_full_marks(tmp_path):
    """End to end, as `homework.py grade` runs it (fenced where a fence works): the instructor's own
    notebook 12 scored 2/3, with ch12_ex3 (the training loop) 0, "callback was called 0 times"."""
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    shutil.copy(INSTRUCTOR / "12_your_gpt.ipynb", tmp_path / "subs" / "alice" / "12_your_gpt.ipynb")
    unfenced = all(fence.fence_works(f) is not None for f in (fence.BUBBLEWRAP, fence.USER_NAMESPACE))
    [row] = homework.grade(tmp_path / "subs", tmp_path / "course", log=lambda *a: None, unfenced=unfenced)
    assert row["score"] == row["max_score"] == 3, row["why"]
    assert row["ch12_ex3_check"] == 1 and row["notes"] == ""


def test_a_run_keeps_torch_s_caches_in_its_own_folder(tmp_path, monkeypatch):
    """The e2e grade above failed in CI only: an earlier test in the same worker had imported torch._dynamo,
    which writes TORCHINDUCTOR_CACHE_DIR=/tmp/torchinductor_root into os.environ; the run inherited it, and
    inside the fence /tmp is read-only, so the instructor's chapter 12 failed on its first optimizer."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_root")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/tmp/triton")
    env = autograde.run_env(tmp_path, "record")
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "TMPDIR"):
        assert Path(env[name]).is_relative_to(tmp_path), (name, env[name])
