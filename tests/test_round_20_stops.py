"""Round 20, fixer B (issue 31): a learner's function that catches the stop at every level of a recursion
(``except BaseException:`` and a call again) was never stopped (CPython turns tracing off when the trace
function raises, so the stop was absorbed one level at a time): a check's thread, the import of a kept
piece and a live run's loop (in the kernel's own thread) ran on for ever; so did three loops nested in one
function. A right answer written as a lambda, or named with letters of another alphabet or at length, was
"not kept ... named like a Python function". And review items: one ``gib``, the tokenizer read once, a
model on the meta device, samples_at's time counted up front and its sentence about temperature 0, one
OutOfTime."""
import importlib.util
import sys
import threading
import time

import pytest
import torch

from helpers import errors, learner, states
from helpers.gpt import compute as gc
from helpers.gpt import corpus
from helpers.gpt import train as course_train

from doubling import doubling_check


class Late(states.Stop):
    pass


def recursing(*args):
    """Catches the stop at every level of a recursion and calls itself again (a 2**1000 tree of calls)."""
    def r(n):
        try:
            return r(n + 1)
        except BaseException:
            return r(n + 1)
    while True:
        try:
            r(0)
        except BaseException:
            pass


def nested_three_deep(*args):
    """Three loops in one function, each under its own catch-all."""
    while True:
        try:
            while True:
                try:
                    while True:
                        pass
                except BaseException:
                    pass
        except BaseException:
            pass


def ends_within(thread, seconds):
    thread.join(seconds)
    return not thread.is_alive()


@pytest.mark.parametrize("loop", [recursing, nested_three_deep])
def test_stopped_after_stops_a_loop_that_catches_the_stop_at_every_level(loop):
    said = {}

    def cell():   # as the kernel's thread runs a live run's loop
        try:
            gc.stopped_after(0.2, gc.LoopLate, loop)
        except BaseException as raised:   # (its name only: a failure is one line, not a chain of what it caught)
            said["raised"] = type(raised).__name__

    thread = threading.Thread(target=cell, daemon=True)
    thread.start()
    assert ends_within(thread, 90), "still running after 90 s"
    assert said == {"raised": "LoopLate"}


def test_a_stopped_call_leaves_the_threads_trace_and_profile_functions_as_they_were():
    def debugger(frame, event, arg):
        return None

    def profiler(frame, event, arg):
        return None

    before = sys.gettrace(), sys.getprofile()
    sys.settrace(debugger)
    sys.setprofile(profiler)
    try:
        with pytest.raises(gc.LoopLate):
            gc.stopped_after(0.2, gc.LoopLate, nested_three_deep)
        assert sys.gettrace() is debugger and sys.getprofile() is profiler
    finally:
        sys.settrace(before[0])
        sys.setprofile(before[1])


def test_a_check_stops_a_function_that_catches_the_stop_at_every_level_of_a_recursion():
    doubles = doubling_check(0.5)

    found = doubles.feedback(recursing)
    assert len(found) == 1 and "was stopped" in found[0], found
    deadline = time.monotonic() + 90   # (seconds under a loaded machine; alone about 5)
    while time.monotonic() < deadline and \
            [t for t in threading.enumerate() if t.name == "a learner's function in a check"]:
        time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "a learner's function in a check"]


def test_the_import_of_a_kept_file_that_recurses_under_catch_alls_is_stopped(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    monkeypatch.setattr(learner, "LOAD_TIME_LIMIT", 1)
    (tmp_path / "causal_attention.py").write_text(
        "def r(n):\n    try:\n        return r(n + 1)\n    except BaseException:\n        return r(n + 1)\n"
        "while True:\n    try:\n        r(0)\n    except BaseException:\n        pass\n"
        "def causal_attention(q, k, v):\n    return None\n")
    assert learner.use("causal_attention", course=len) is len
    assert "TimeoutError" in capsys.readouterr().out
    deadline = time.monotonic() + 90   # (seconds under a loaded machine; alone about 5)
    while time.monotonic() < deadline and [t for t in threading.enumerate() if t.name == "importing a kept piece"]:
        time.sleep(0.1)
    assert not [t for t in threading.enumerate() if t.name == "importing a kept piece"]


# ------------------------------------------------------------ names a piece is kept under

def _module(tmp_path, source):
    """A module made from ``source`` in a file of its own (keep reads a piece's source from its file)."""
    path = tmp_path / "cell.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("round_20_cell", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_lambda_is_refused_as_a_lambda_not_as_a_misnamed_piece(refused, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    cell = _module(tmp_path, "piece = lambda q, k, v: q\n")
    said = refused(lambda: learner.keep(cell.piece, "04", name="causal_attention"), "written with def",
                   "but got a lambda", "def causal_attention(...)")
    assert "named like" not in said
    assert not (tmp_path / "my_gpt" / "causal_attention.py").exists()


@pytest.mark.parametrize("own", ["attention_héad", "a" * 70])
def test_a_piece_named_as_python_accepts_it_is_kept(tmp_path, monkeypatch, own):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    cell = _module(tmp_path, f"def {own}(q, k, v):\n    return q\n")
    target = learner.keep(getattr(cell, own), "04", name="causal_attention")
    assert target.read_text(encoding="utf-8").rstrip().endswith(f"causal_attention = {own}   # the name the chapters "
                                                                "ahead ask for (learner.use)")
    assert learner.use("causal_attention", course=None, quiet=True).__name__ == own


@pytest.mark.parametrize("name", ["class", "1st", "a b", "x" * 101, None])
def test_a_name_python_does_not_accept_is_still_refused(refused, name):
    refused(lambda: learner.path(name), "named like a Python function")


# ------------------------------------------------------------ review items

def test_gib_is_one_function_with_digits():
    assert errors.gib(3 * 2**29) == "1.5 GiB" and errors.gib(0.34 * 2**30, digits=2) == "0.34 GiB"
    assert course_train.gib is errors.gib


def test_learner_keeps_no_unused_time_import_and_uses_states_out_of_time():
    assert not hasattr(learner, "time") and not hasattr(learner, "_OutOfTime")
    assert issubclass(states.OutOfTime, states.Stop) and learner._Import(None).stoppable.exception is states.OutOfTime


def test_a_tokenizer_whose_vocab_raises_gets_one_sentence(refused):
    class Broken:
        @property
        def vocab(self):
            raise KeyError("no vocab today")

        def encode(self, text):
            return [0]

        def text(self, ids):
            return ""

    model = gc.GPT(65, 16, 2, 1, 32, 32)
    refused(lambda: gc.check_tokenizer(Broken(), model.cfg), "the tokenizer's vocab should be readable", "KeyError")


@pytest.mark.parametrize("make", [gc.small_start, gc.as_transformer])
def test_a_model_on_the_meta_device_is_refused(refused, make):
    with torch.device("meta"):
        model = gc.GPT(65, 16, 2, 1, 32, 32)
    refused(lambda: make(model), "the model's E", "meta device")


def test_samples_at_counts_every_temperatures_passes_up_front(refused, monkeypatch):
    model = gc.as_transformer(gc.small_start(gc.GPT(65, 16, 2, 1, 32, 64), seed=0))
    one, many = gc.cached_seconds(model.cfg, 1, 6, 50), gc.cached_seconds(model.cfg, 64, 6, 50)
    assert many > one
    monkeypatch.setattr(gc, "MAX_SECONDS", (one + many) / 2)   # one temperature fits, 64 do not
    assert len(gc.samples_at(model, corpus.CharTokenizer(), "ROMEO:", 50, [0.8])[0]) == 56
    refused(lambda: gc.samples_at(model, corpus.CharTokenizer(), "ROMEO:", 50, [0.8] * 64),
            "sampling 50 tokens for each of 64 temperatures", "draw fewer tokens")


def test_samples_at_says_where_temperature_0_is_drawn(refused):
    model = gc.as_transformer(gc.small_start(gc.GPT(65, 16, 2, 1, 32, 64), seed=0))
    refused(lambda: gc.samples_at(model, corpus.CharTokenizer(), "ROMEO:", 5, (0.0,)), "above 0",
            "gpt.sample_text(model, tokenizer, prompt, n_new, temperature=0)")
    assert gc.sample_text(model, corpus.CharTokenizer(), "ROMEO:", 5, temperature=0).startswith("ROMEO:")
