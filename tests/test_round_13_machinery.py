"""Red team round 13 (scope A, entries 3, 4 and 15): the check machinery itself.

3: a check's cached cases could be changed in place by a learner's function that imported them, and
   every later verdict judged against the changed cases; 4: a cell that defines a piece and calls its
   keeping check made keeping run the check again and again; 15: a learner's function that replaced
   threading.Thread.join (threading was not put back) made every later check time out."""
import contextlib
import importlib.util
import io
import itertools
import math
import os
import pickle
import sys
import threading
import time

import pytest
import torch

from helpers import exercises, learner
from helpers.exercises import _fingerprint, call, sealed
from helpers.heads import compute as heads_compute
from helpers.masking import checks as masking_checks
from helpers.scaling import checks as scaling_checks


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    return tmp_path / "my_gpt"


# ---- 3: the cached cases -----------------------------------------------------------------------------


def _tensors(x):
    """Every tensor in ``x`` (dicts, lists, tuples)."""
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    return [x] if isinstance(x, torch.Tensor) else []


@pytest.mark.parametrize("cases", [scaling_checks._cat_cases, masking_checks._attention_cases,
                                   heads_compute._module_cases])
def test_cases_changed_in_place_by_whoever_imports_them_are_not_the_next_runs(cases):
    before = _fingerprint(cases())
    got = cases()
    for t in _tensors(got):
        t.zero_()
    if isinstance(got, dict):
        got.clear()
    elif isinstance(got, tuple) and isinstance(got[0], dict):
        got[0]["x"] = torch.zeros(1)
    assert _fingerprint(cases()) == before


def test_sealed_cases_changed_where_they_are_kept_are_made_again():
    built = []
    cases = sealed(lambda: built.append(1) or {"x": torch.ones(3), "n": 2, "what": ("a", [1.5])})
    first = cases()
    box = next(cell.cell_contents for cell in cases.__closure__ if isinstance(cell.cell_contents, dict))
    box["live"]["x"].zero_()
    box["live"]["what"][1].append(9)
    again = cases()
    assert torch.equal(again["x"], torch.ones(3)) and again["what"] == ("a", [1.5]) and again["n"] == 2
    assert _fingerprint(again) == _fingerprint(first) and built == [1]   # built once: made again from its bytes
    assert cases() is not cases()


def test_fingerprint_tells_changes_apart():
    x = {"a": torch.arange(4.0), "b": (1, "t")}
    assert _fingerprint(x) == _fingerprint(pickle.loads(pickle.dumps(x)))
    for changed in ({"a": torch.arange(4.0).requires_grad_(), "b": (1, "t")}, {"a": torch.arange(4.0), "b": (1, "u")},
                    {"a": torch.arange(4.0).double(), "b": (1, "t")}, {"a": torch.arange(4.0).view(2, 2), "b": (1, "t")},
                    {"b": (1, "t"), "a": torch.arange(4.0)}, {"a": torch.arange(4.0) + 1e-7, "b": (1, "t")}):
        assert _fingerprint(changed) != _fingerprint(x)
    assert _fingerprint(torch.ones(2, dtype=torch.bfloat16)) == _fingerprint(torch.ones(2, dtype=torch.bfloat16))


def _poison(x, W_Q, W_K, b_Q, b_K, n_heads):
    """Wrong, and it zeroes the check's cases and reference scores it reaches by import."""
    for _, args, reference in scaling_checks._cat_cases():
        for t in args[:5]:
            t.zero_()
        reference.masked_fill_(torch.isfinite(reference), 0.0)
    return torch.zeros(n_heads, x.shape[0], x.shape[0])


def _zeros(x, W_Q, W_K, b_Q, b_K, n_heads):
    return torch.zeros(n_heads, x.shape[0], x.shape[0])


def test_a_function_that_zeroed_the_cases_does_not_make_the_next_wrong_answer_right(store):
    with contextlib.redirect_stdout(io.StringIO()):
        assert not scaling_checks.layer_scores(_poison)
        assert not scaling_checks.layer_scores(_zeros)


# ---- 4: a kept cell that calls its check ---------------------------------------------------------------

CELL = '''import math, torch
from helpers.scaling import checks

def scaled_scores(x, W_Q, W_K, b_Q, b_K, n_heads):
    T, d = x.shape; d_k = d // n_heads
    q = (x @ W_Q + b_Q).view(T, n_heads, d_k).transpose(0, 1)
    k = (x @ W_K + b_K).view(T, n_heads, d_k).transpose(0, 1)
    return q @ k.transpose(-2, -1) / math.sqrt(d_k)

checks.layer_scores(scaled_scores)   # the check called in the cell that defines the piece
'''


def test_a_cell_that_calls_its_keeping_check_is_not_kept_and_the_check_runs_once(store, tmp_path):
    path = tmp_path / "cell_05.py"
    path.write_text(CELL)
    stdout, threads = sys.stdout, set(threading.enumerate())
    buffer = io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(buffer):
        spec = importlib.util.spec_from_file_location("cell_05", path)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    took = time.monotonic() - start
    lines = [line for line in buffer.getvalue().splitlines() if line.startswith(("✓", "✗"))]
    assert took < 5 and len(lines) == 1, (took, lines)
    assert "correct; not kept for the chapters ahead: the cell that defines scaled_scores also calls a check" in lines[0]
    assert not (store / "scaled_scores.py").exists()
    assert sys.stdout is stdout
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline and set(threading.enumerate()) - threads:
        time.sleep(0.05)
    assert not {t for t in set(threading.enumerate()) - threads if t.is_alive()}


def test_a_kept_file_that_calls_a_check_is_used_without_running_it(store, capsys):
    store.mkdir(parents=True)
    (store / "double.py").write_text("from helpers.scaling import checks\n\ndef double(x):\n    return 2 * x\n\n"
                                     "print('ran:', bool(checks.typical_size(22.6)))\n"
                                     "checks.typical_size.grade(1.0)\n")
    double = learner.use("double", course=None)
    assert double(3) == 6
    out = capsys.readouterr().out
    assert "ran: False" in out and "✓" not in out and "✗" not in out and "yours, from my_gpt/double.py" in out


def test_checks_run_as_ever_outside_a_kept_files_import(capsys):
    assert not learner.importing()
    assert scaling_checks.typical_size(math.sqrt(512))
    assert "✓" in capsys.readouterr().out


# ---- 15: what a learner's function replaces in the machinery's own modules -------------------------------


def _replaces_join():
    threading.Thread.join = lambda self, timeout=None: None
    return 1


def _replaces_is_alive():
    threading.Thread.is_alive = lambda self: True
    return 2


def _replaces_many():
    import matplotlib.figure
    threading.Event.wait = lambda self, timeout=None: True
    threading.Thread.start = lambda self: None
    threading.current_thread = lambda: None
    itertools.repeat = lambda *args: iter(())
    pickle.dumps = lambda *args, **kwargs: b""
    os.getcwd = lambda: "/nowhere"
    matplotlib.figure.Figure.savefig = lambda self, *args, **kwargs: None
    return 3


def test_a_function_that_replaces_threads_methods_gets_its_verdict_and_they_are_put_back():
    import matplotlib.figure
    originals = (threading.Thread.join, threading.Thread.is_alive, threading.Thread.start, threading.Event.wait,
                 threading.current_thread, itertools.repeat, pickle.dumps, os.getcwd, matplotlib.figure.Figure.savefig)
    try:
        assert call(_replaces_join) == 1
        assert threading.Thread.join is originals[0]
        assert call(_replaces_is_alive) == 2   # the check's own wait does not ask the replaced is_alive
        assert threading.Thread.is_alive is originals[1]
        assert call(_replaces_many) == 3
        assert (threading.Thread.join, threading.Thread.is_alive, threading.Thread.start, threading.Event.wait,
                threading.current_thread, itertools.repeat, pickle.dumps, os.getcwd,
                matplotlib.figure.Figure.savefig) == originals
        start = time.monotonic()
        assert call(lambda: 4) == 4 and time.monotonic() - start < 2
    finally:
        (threading.Thread.join, threading.Thread.is_alive, threading.Thread.start, threading.Event.wait,
         threading.current_thread, itertools.repeat, pickle.dumps, os.getcwd,
         matplotlib.figure.Figure.savefig) = originals


def test_the_checks_own_threads_keep_their_methods():
    assert issubclass(exercises._Run, exercises._Thread)
    for name, method in vars(threading.Thread).items():
        if callable(method) and not name.startswith("__init_subclass"):
            assert vars(exercises._Thread).get(name) is method, name
