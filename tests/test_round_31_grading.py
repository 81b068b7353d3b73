"""Round 31 (issue 31), the grader (red team round 31, reader C): a learner's call the live check refused as too late
was recorded with its output, so the judge graded ✓ where the student's check said ✗ (entry 1); the judge's one run
had one student's time limits for the whole class (entry 2); a stopped run's status named the last cell with a
committed execution count, not the cell that ran (entry 3); execute_notebooks.py let a cell's time-out or a dead
kernel escape as a traceback, and no later chapter ran (entry 4)."""
import gc
import threading
import time

import nbformat
import pytest

import autograde
import execute_notebooks
from fence import UNFENCED
from helpers import exercises, grading
from helpers.errors import Wrong
from helpers.geometry import checks as geometry


def plus_one(x):
    return x + 1.0


# ---------------------------------------------------------------- entry 1: a call taken too late is recorded as stopped

def test_a_call_that_ended_past_its_limit_is_recorded_as_stopped(monkeypatch):
    monkeypatch.setattr(exercises, "HELD_SLACK", -100.0)   # (every call "ended too late": one long call into C)
    recorder = grading.Recorder(plus_one)
    with pytest.raises(Wrong, match="in one call into C"):
        exercises.call(recorder, 1.0, seconds=5, what="on one")
    assert recorder.calls == [{"inputs": grading.fingerprint(((1.0,), {})), "stopped": "time"}]


class SlowToCollect:
    """Garbage in a cycle whose __del__ outlasts the check's limit: collected in the function's thread, after the
    Recorder kept what the function returned (as a slow end of a call did under load in chapter 11)."""
    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(1.5)


def returns_then_lingers(x):
    SlowToCollect()
    return x + 1.0


def test_a_call_stopped_after_it_returned_is_recorded_as_stopped():
    recorder = grading.Recorder(returns_then_lingers)
    with pytest.raises(Wrong, match="was stopped"):
        exercises.call(recorder, 1.0, seconds=0.5, what="on one")
    gc.collect()
    assert recorder.calls[0].get("stopped") == "time" and "output" not in recorder.calls[0], recorder.calls


def test_a_call_that_returns_after_the_check_gave_up_keeps_no_output():
    def answer(x):
        grading.timed_out(threading.current_thread())   # (the check stops waiting while it still runs)
        return x + 1.0

    recorder = grading.Recorder(answer)
    assert recorder(1.0) == 2.0
    assert recorder.calls == [{"inputs": grading.fingerprint(((1.0,), {})), "stopped": "time"}]


def test_the_judge_says_what_the_live_check_said_of_a_call_taken_too_late(monkeypatch):
    monkeypatch.setattr(exercises, "HELD_SLACK", -100.0)
    exercise = geometry.cosine_function
    record, live = grading._recording(exercise, lambda a, b: 0.0, (), {})
    monkeypatch.undo()   # (the judge's replay answers at once)
    judged = grading.judged(exercise, record, (), {})
    assert live and "ran for more than" in live[0]
    where = live[0].split(":")[0]   # (the same case: the first call)
    assert len(judged) == 1 and judged[0].startswith(f"your function stopped {where} with no result: it ran longer"), \
        (live, judged)


# ---------------------------------------------------------------- entry 2: the judge's limits grow with the class

def test_the_judge_s_time_limits_grow_with_the_records_it_judges(tmp_path, monkeypatch):
    given = {}

    def run(nb, folder, grading, **limits):
        given.update(limits)
        return "ran to the end", None

    monkeypatch.setattr(autograde, "run", run)
    chapter = autograde.graded_chapters()[0]
    assert autograde.judge(chapter, {"a": [], "b": [], "c": []}, tmp_path) == {"a": {}, "b": {}, "c": {}}
    assert given["cell_timeout"] == 4 * autograde.CELL_TIMEOUT and given["timeout"] == 4 * autograde.TIMEOUT


# ---------------------------------------------------------------- entry 3: the status names the cell that ran

@pytest.mark.parametrize("source, said", [("import time; time.sleep(30)", "cell 1 ran longer than 3 s"),
                                          ("import os; os._exit(1)", "ended (exit() or a crash) in cell 1")])
def test_a_stopped_run_names_the_cell_that_ran_not_a_committed_count(source, said, tmp_path):
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_code_cell(source),
        nbformat.v4.new_code_cell("print('later')", execution_count=7),   # (committed, as the judge's are: never ran)
    ])
    status, _ = autograde.run(nb, tmp_path / "run", "", timeout=60, cell_timeout=3, fence=UNFENCED)
    assert said in status, status


# ---------------------------------------------------------------- entry 4: execute_notebooks.py says a stop in a line

@pytest.mark.parametrize("source, said", [("import time; time.sleep(30)", "code cell 2 ran longer than 1 s"),
                                          ("import os; os._exit(1)", "the kernel died in code cell 2")])
def test_execute_notebooks_says_a_time_out_or_a_dead_kernel_in_one_line(source, said, monkeypatch, capsys):
    monkeypatch.setattr(execute_notebooks, "CELL_TIMEOUT", 1)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# a chapter"),
                                         nbformat.v4.new_code_cell("x = 1", execution_count=1),
                                         nbformat.v4.new_code_cell(source, execution_count=2),
                                         nbformat.v4.new_code_cell("x", execution_count=3)])
    path = execute_notebooks.INSTRUCTOR / "00_tour.ipynb"
    assert execute_notebooks.run(path, nb, True) is False
    assert capsys.readouterr().out.strip() == f"✗ instructor/00_tour.ipynb: {said}" + (
        " and was stopped" if "longer" in said else " (out of memory, or a crash)")


def test_execute_notebooks_goes_on_with_the_chapters_after_one_that_failed(monkeypatch):
    ran = []
    monkeypatch.setattr(execute_notebooks, "run", lambda path, nb, check: ran.append(path) or len(ran) > 1)
    monkeypatch.setattr(execute_notebooks, "learner_version", lambda nb: nb)
    monkeypatch.chdir(execute_notebooks.ROOT)
    chapters = ["instructor/00_tour.ipynb", "instructor/02_qkv_by_hand.ipynb"]
    assert execute_notebooks.main(chapters) == 1   # (the first chapter failed)
    assert ran[1:] == [execute_notebooks.INSTRUCTOR / "02_qkv_by_hand.ipynb",
                       execute_notebooks.learner_copy(execute_notebooks.INSTRUCTOR / "02_qkv_by_hand.ipynb")]
