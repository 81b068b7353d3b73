"""Round 18, fixer F1 (issue 31): a learner's code that catches everything (``except: pass``) swallowed
each stop, so a check's thread and a live run's loop ran on for ever; the stop's end let a raise still on
its way land after it; chapter 12's unfinished train_loop (it returns ([], {})) gave a live run of 0 steps
and no sentence, and the live run's callback drew anything; a copy of the course's own function passed
as the learner's answer."""
import random
import threading
import time

import matplotlib
import pytest

from helpers import states
from helpers.gpt import compute as gc
from helpers.gpt import corpus
from doubling import doubling_check
from learner_loops import same_weights, small_gpt, weights_of

matplotlib.use("Agg")


def _sleeps_under_a_bare_except(x):
    while True:
        try:
            time.sleep(0.001)
        except:   # noqa: E722 — the learner's bare except swallows every stop
            pass


def _continues_on_base_exception(x):
    while True:
        try:
            time.sleep(0.001)
        except BaseException:
            continue


def _check_threads():
    return [t for t in threading.enumerate() if t.name == "a learner's function in a check"]


@pytest.mark.parametrize("loop", [_sleeps_under_a_bare_except, _continues_on_base_exception])
def test_round_18_a_check_stops_a_function_that_catches_everything(loop):
    doubles = doubling_check(0.5)

    start = time.perf_counter()
    found = doubles.feedback(loop)
    assert len(found) == 1 and "more than 0.5 s and was stopped" in found[0], found
    assert "still running" not in found[0]
    assert time.perf_counter() - start < 0.5 + 5
    deadline = time.monotonic() + 5
    while _check_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _check_threads() == []
    assert doubles.feedback(lambda x: 2 * x) == []


def test_round_18_a_thread_left_running_under_a_bare_except_is_stopped():
    def leaves_one(x):
        threading.Thread(target=_sleeps_under_a_bare_except, args=(x,), name="learner's own", daemon=True).start()
        return 2 * x

    doubles = doubling_check(2)

    found = doubles.feedback(leaves_one)
    assert len(found) == 1 and "(now stopped)" in found[0], found
    time.sleep(0.5)
    assert not [t for t in threading.enumerate() if t.name == "learner's own"]


def test_round_18_the_stop_raises_nothing_once_the_call_has_ended():
    class Late(states.Stop):
        pass

    assert gc.stopped_after(0.2, gc.LoopLate, lambda: 7) == 7
    time.sleep(0.5)   # past its time: nothing may arrive now
    leaks = 0
    for _ in range(300):   # a stop racing the end of the call, at random
        stoppable, returned = states.Stoppable(Late), False
        try:
            stoppable.stop(every=0.0002, after=random.random() * 0.003)
            stoppable.call(time.sleep, 0.0015)
            returned = True
            for _ in range(20000):   # a pending one would be raised at this loop's jumps back
                pass
            time.sleep(0.003)
        except Late:
            leaks += returned
    assert leaks == 0


LIVE = dict(batch=2, context=8, lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1, seconds=6,
            sample_chars=5)


def _live(loop, model):
    ids = corpus.CharTokenizer().encode(corpus.load_text()[:5000])
    return gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), **LIVE)


def test_round_18_a_live_run_stops_a_loop_that_catches_everything(monkeypatch):
    monkeypatch.setattr(gc, "LATE_SECONDS", 1.0)
    model = small_gpt()

    def swallows(model, *args):   # calls its callback, and swallows its TimeUp and the watchdog's LoopLate
        callback = args[-1]
        while True:
            try:
                time.sleep(0.001)
                callback([2.0], {})
            except:   # noqa: E722
                pass

    start = time.perf_counter()
    out = _live(swallows, model)
    assert out["done"] == 1 and time.perf_counter() - start < LIVE["seconds"] + 1 + 5


def test_round_18_a_live_run_stops_a_loop_that_never_calls_back_under_a_bare_except(refused, monkeypatch):
    monkeypatch.setattr(gc, "LATE_SECONDS", 1.0)
    model = small_gpt()
    before = weights_of(model)

    def endless(model, *args):
        while True:
            try:
                model.E.data.add_(1e-6)
                time.sleep(0.001)
            except:   # noqa: E722
                pass

    start = time.perf_counter()
    refused(lambda: _live(endless, model), "loop should call callback(losses, val_losses)", "the model was put back")
    assert time.perf_counter() - start < LIVE["seconds"] + 1 + 5
    assert same_weights(model, before)


def test_round_18_a_live_run_of_the_unfinished_loop_says_it_made_no_steps(refused):
    model = small_gpt()
    before = weights_of(model)

    def unfinished(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                   eval_batches, seed=0, callback=None):   # chapter 12's stub, as the learner finds it
        losses, val_losses = [], {}
        return losses, val_losses

    refused(lambda: _live(unfinished, model), "loop should make training steps", "made no steps",
            "write the loop's body first", "the model was put back")
    assert same_weights(model, before)


@pytest.mark.parametrize("losses, val_losses, words", [
    (["a"], {"x": 1}, ["callback should be given (losses, val_losses)", "['a']"]),
    ([1.0], {"x": 1.0}, ["callback should be given (losses, val_losses)"]),
    ([1.0, float("nan")], {}, ["finite losses", "loss at step 2 is nan", "diverged"]),
    ([1.0], {0: float("inf")}, ["finite losses", "validation loss at step 0 is inf", "diverged"]),
    ("abc", {}, ["callback should be given (losses, val_losses)"]),
])
def test_round_18_the_live_runs_callback_checks_what_it_is_given(refused, losses, val_losses, words):
    run = gc.LiveRun(10, seconds=30)
    run.callback([3.0], {0: 3.5})
    refused(lambda: run.callback(losses, val_losses), *words)
    run.finish()


def test_round_18_a_loop_whose_losses_diverge_is_told_so(refused):
    model = small_gpt()

    def diverges(model, *args):
        args[-1]([2.0, float("nan")], {})
        return [2.0, float("nan")], {}

    refused(lambda: _live(diverges, model), "callback should be given finite losses", "diverged")
    refused(lambda: gc.loop_result(([2.0, float("nan")], {}), type("Run", (), {"finish": lambda self, s: None})()),
            "loop should return finite losses", "diverged")


def test_round_18_a_copy_of_the_courses_function_is_no_answer():
    """A copy of the course's causal_attention with its code replaced (a new code object, its module renamed)."""
    import inspect
    import types

    from helpers.masking import checks as masking_checks
    from helpers.masking import compute as masking
    f = inspect.unwrap(masking.causal_attention)
    same = types.FunctionType(f.__code__.replace(), dict(f.__globals__, __name__="__main__"))
    said = masking_checks.causal_attention.feedback(same)
    assert len(said) == 1 and "ran the course's own helpers.masking.compute.causal_attention" in said[0], said


def test_round_18_a_stopped_loop_leaves_the_threads_trace_function_and_gradient_mode_as_they_were():
    import sys

    import torch

    def debugger(frame, event, arg):   # a trace function of the learner's kernel (a debugger's, say)
        return None

    def swallows():
        with torch.no_grad():
            while True:
                try:
                    time.sleep(0.001)
                except:   # noqa: E722
                    pass

    before = sys.gettrace()
    sys.settrace(debugger)
    try:
        with pytest.raises(gc.LoopLate):
            gc.stopped_after(0.2, gc.LoopLate, swallows)
        assert sys.gettrace() is debugger and torch.is_grad_enabled()
    finally:
        sys.settrace(before)
