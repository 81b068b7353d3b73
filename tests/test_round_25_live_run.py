"""Round 25 (issue 55): chapter 12's live run bounds every call of the learner's code, and stops the threads a
loop leaves before it says what became of the model.

Found by the red team: live_run(seconds=8) bounded only the loop. A learner's tokenizer whose encode (the prompt,
before the run) or text (the sample, after it) ran 30 s, or a loss the loop returned whose __float__ ran 30 s
(read by loop_result after the loop's bound), kept the call going for 30 s past its time. And a loop that started
a thread and then failed was refused with "the model was left as it was before the call" while its thread went
on changing the model.
"""
import threading
import time

import pytest
import torch

from helpers.gpt import compute as gc
from helpers.gpt import corpus
from learner_loops import LATE, LIVE, MARGIN, SLOW, same_weights, small_gpt, weights_of

pytestmark = pytest.mark.usefixtures("late")   # LATE_SECONDS = LATE in every test


@pytest.fixture(scope="module")
def ids():
    return corpus.CharTokenizer().encode(corpus.load_text()[:5000])


def busy(seconds=SLOW):
    """Run Python for ``seconds`` (a learner's slow code: a stop lands at once)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class SlowTokenizer(corpus.CharTokenizer):
    """The course's character tokenizer with one method (``slow``) that runs SLOW seconds first."""

    def __init__(self, slow):
        super().__init__()
        self.slow = slow

    def encode(self, text):
        busy() if self.slow == "encode" else None
        return super().encode(text)

    def text(self, ids):
        busy() if self.slow == "text" else None
        return super().text(ids)


def timed_refusal(refused, call, *words):
    """refused(call, *words) and the seconds the call took."""
    start = time.perf_counter()
    said = refused(call, *words)
    return said, time.perf_counter() - start


# ------------------------------------------------------------ 1. the learner's code outside the loop, bounded

@pytest.mark.parametrize("slow, words", [
    ("encode", ["tokenizer.encode of the prompt should end within", "was stopped"]),
    ("text", ["tokenizer.text of the sample should end within", "was stopped", "the model was put back"]),
])
def test_a_slow_tokenizer_is_stopped_within_the_live_runs_time(refused, ids, slow, words):
    model = small_gpt()
    before = weights_of(model)
    said, took = timed_refusal(refused, lambda: gc.live_run(gc.train_loop, model, ids, ids, SlowTokenizer(slow),
                                                            **LIVE), *words)
    assert took < LIVE["seconds"] + LATE + MARGIN, (took, said)
    assert same_weights(model, before)


class SlowLoss(float):
    """A loss whose float() runs SLOW seconds (a learner's float subclass)."""

    def __float__(self):
        busy()
        return 2.0


def test_a_returned_loss_whose_float_is_slow_is_stopped(refused, ids):
    model = small_gpt()
    before = weights_of(model)

    def loop(model, *args):
        return [SlowLoss(2.0)], {}

    said, took = timed_refusal(refused, lambda: gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), **LIVE),
                               "float() of the losses the loop returned should end within", "the model was put back")
    assert took < LIVE["seconds"] + LATE + MARGIN, (took, said)
    assert same_weights(model, before)


def test_a_loss_whose_float_is_slow_given_to_the_callback_is_stopped_with_the_loop(refused, ids):
    model = small_gpt()

    def loop(model, *args):
        args[-1]([SlowLoss(2.0)], {})   # the callback reads it inside the loop's bounded call
        return [2.0], {}

    said, took = timed_refusal(refused, lambda: gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), **LIVE),
                               "the model was put back")
    assert took < LIVE["seconds"] + LATE + MARGIN, (took, said)


def test_a_right_tokenizer_and_loop_still_run(ids):
    model = small_gpt()
    out = gc.live_run(gc.train_loop, model, ids, ids, corpus.CharTokenizer(), **LIVE)
    assert out["done"] >= 1 and out["sample"].startswith("ROMEO:") and len(out["sample"]) == len("ROMEO:") + 5
    assert out["seconds"] < LIVE["seconds"] + MARGIN


# ------------------------------------------------------------ 2. the threads a loop leaves, stopped

def changing(model, seconds=8.0, ticks=None):
    """Start a thread of the learner's that adds to the model's E (None: to the list ``ticks`` instead) every 50 ms
    for ``seconds``."""
    def keep():
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            if model is None:
                ticks.append(1)
            else:
                with torch.no_grad():
                    model.E.add_(0.01)
            time.sleep(0.05)
    threading.Thread(target=keep, daemon=True).start()


def still(model, seconds=1.0):
    """Whether the model's weights stay as they are for ``seconds``."""
    before = weights_of(model)
    time.sleep(seconds)
    return same_weights(model, before)


def test_a_failed_loops_thread_is_stopped_before_the_model_is_put_back(refused, ids):
    model = small_gpt()
    before = weights_of(model)

    def loop(model, *args):
        changing(model)
        raise ValueError("a slip in my loop")

    refused(lambda: gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), **LIVE), "ValueError: a slip in my loop",
            "the model was left as it was before the call")
    assert still(model) and same_weights(model, before)


def test_a_loop_that_trains_and_leaves_a_thread_is_refused_and_put_back(refused, ids):
    model = small_gpt()
    before = weights_of(model)

    ticks = []

    def loop(model, *args):
        changing(None, ticks=ticks)   # (not the model: a weight changed in place would fail the loop's backward)
        return gc.train_loop(model, *args)   # stopped by its callback when the time is up

    refused(lambda: gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), **LIVE),
            "the training loop should end and leave nothing running", "1 thread of its own running (now stopped)",
            "the model was put back as it was before the call")
    assert same_weights(model, before)
    counted = len(ticks)
    time.sleep(0.5)
    assert len(ticks) == counted   # the thread has stopped


def test_a_thread_left_in_a_long_c_call_is_said_not_claimed_put_back(refused, ids):
    model = small_gpt()

    def loop(model, *args):
        threading.Thread(target=time.sleep, args=(3,), daemon=True).start()   # one C call: no stop lands
        raise ValueError("a slip in my loop")

    said = refused(lambda: gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), **LIVE),
                   "the training loop should end and leave nothing running", "could not be stopped",
                   "it may still change the model")
    assert "as it was before the call" not in said, said


def test_a_thread_left_by_the_tokenizer_is_stopped(refused, ids):
    model = small_gpt()
    before = weights_of(model)

    class Leaves(corpus.CharTokenizer):
        def text(self, ids):
            changing(model)
            return super().text(ids)

    refused(lambda: gc.live_run(gc.train_loop, model, ids, ids, Leaves(), **LIVE),
            "tokenizer.text of the sample should end and leave nothing running", "(now stopped)",
            "the model was put back")
    assert still(model) and same_weights(model, before)
