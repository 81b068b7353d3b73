"""Round 22, fixer L (issue 31): chapter 12's live run bounds a loop's losses, and no whole number reaches
float arithmetic unbounded in helpers/gpt/compute.py.

Found by the red team: head_ablations(model, 2**1100, ...) ended in a raw OverflowError in its time estimate
(so did plan_live_run and live_run with such a batch or eval_every); the live run's callback and loop_result
never bounded a loop's losses by the steps the run planned: a loop giving 3,000,000 losses made the notebook
print "3000000 steps", rewrote the bar's total, and converted, kept and plotted every entry (+455 MB).
"""
import tracemalloc

import pytest
import torch

from helpers.gpt import compute as gc
from helpers.gpt import corpus
from helpers.gpt import train as course_train
from helpers.model import Config, Transformer

BIG = 2**1100   # more than a float holds


@pytest.fixture(scope="module")
def ids():
    chars = corpus.CharTokenizer()
    text = corpus.load_text()
    return chars, chars.encode(text[:20_000]), chars.encode(text[-5_000:])


def tiny():
    return gc.small_start(Transformer(Config(vocab_size=65, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=64),
                                      seed=0), seed=0)


class Run:
    """What loop_result needs of a live run: finish(sample)."""

    def finish(self, sample):
        self.sample = sample


# ------------------------------------------------------------ 1. whole numbers bounded before float arithmetic

def test_head_ablations_bounds_n_before_counting_its_passes(refused):
    refused(lambda: gc.head_ablations(tiny(), BIG, 8, 0, 1), "n should be at most 10,000 sequences", "1,101 bits")
    refused(lambda: gc.head_ablations(tiny(), gc.MAX_SPANS + 1, 8, 0, 1), "n should be at most 10,000", "10,001")


def test_the_plan_of_a_live_run_takes_any_whole_numbers(refused, ids):
    chars, train_ids, _ = ids
    refused(lambda: gc.plan_live_run(tiny(), train_ids, BIG, 32, 30, 5, 1, 10), "training on a batch of",
            "1,101 bits", "smaller batch")
    steps, seconds = gc.plan_live_run(tiny(), train_ids, 4, 32, 30, BIG, 1, 10)   # evaluated at the start and the end
    assert 1 <= steps <= course_train.MAX_STEPS and 0 < seconds < 30


def test_pass_seconds_bounds_its_windows(refused):
    cfg = tiny().cfg
    refused(lambda: gc.pass_seconds(cfg, BIG, 32, 4), "windows should be at most", "1,101 bits")
    assert gc.pass_seconds(cfg, gc.MAX_WINDOWS, 32, 4) > gc.MAX_SECONDS   # the largest count is still a float


def test_a_huge_length_is_shown_cut_short(refused, ids):
    _, train_ids, _ = ids
    for call in (lambda: gc.head_ablations(tiny(), 2, BIG, 0, 1), lambda: gc.repeat_test(tiny(), train_ids, 2, BIG, 0),
                 lambda: gc.text_repeats(train_ids, 2, BIG, 0)):
        said = refused(call, "1,101 bits")
        assert len(said) < 400, said


# ------------------------------------------------------------ 2. the live run's losses bounded by its steps

def test_the_callback_refuses_more_losses_than_steps_before_reading_them(refused):
    run = gc.LiveRun(10, seconds=60)
    losses = [2.0] * 3_000_000
    tracemalloc.start()
    try:
        refused(lambda: run.callback(losses, {0: 3.0}), "callback should be given at most 10 losses, one per step",
                "but got 3,000,000")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak                 # nothing converted or kept (a copy alone would be 24 MB)
    assert run.losses == [] and run.bar.total == 10
    run.callback([2.0] * 10, {0: 3.0, 10: 2.5})   # as many as the steps: taken
    assert len(run.losses) == 10
    run.finish("done")


def test_the_callback_reads_a_lists_own_length(refused):
    class Short(list):   # a length that lies, and entries that cannot be read one by one
        def __len__(self):
            return 1

        def __getitem__(self, i):
            raise ZeroDivisionError

        def __iter__(self):
            raise ZeroDivisionError
    run = gc.LiveRun(10, seconds=60)
    refused(lambda: run.callback(Short([2.0] * 11), {}), "at most 10 losses", "but got 11")
    run.callback(Short([2.0] * 3), {})
    assert run.losses == [2.0, 2.0, 2.0]
    run.finish("done")


def test_the_callback_bounds_the_validation_losses_and_their_steps(refused):
    run = gc.LiveRun(10, seconds=60)
    refused(lambda: run.callback([2.0], {k: 3.0 for k in range(12)}), "at most 11 validation losses",
            "steps 0 to 10", "but got 12")
    refused(lambda: run.callback([2.0], {11: 3.0}), "validation losses at steps 0 to 10", "at step 11")
    refused(lambda: run.callback([2.0], {-1: 3.0}), "validation losses at steps 0 to 10", "at step -1")
    refused(lambda: run.callback([2.0], {BIG: 3.0}), "at steps 0 to 10", "1,101 bits")
    assert run.val == {}
    run.finish("done")


def test_a_loss_too_large_for_a_float_is_one_sentence(refused):
    class Odd(float):
        def __float__(self):
            raise ZeroDivisionError
    run = gc.LiveRun(10, seconds=60)
    refused(lambda: run.callback([BIG], {}), "callback should be given (losses, val_losses)", "a list of numbers")
    refused(lambda: run.callback([2.0], {0: BIG}), "callback should be given (losses, val_losses)")
    refused(lambda: run.callback([Odd(2.0)], {}), "callback should be given (losses, val_losses)")
    run.finish("done")


def test_loop_result_bounds_the_losses_by_the_planned_steps(refused):
    refused(lambda: gc.loop_result(([2.0] * 20, {0: 3.0}), Run(), 10), "loop should return at most 10 losses",
            "one per step", "but got 20")
    refused(lambda: gc.loop_result(([2.0], {0: 3.0, 11: 2.0}), Run(), 10), "loop should return validation losses",
            "steps 0 to 10")
    refused(lambda: gc.loop_result(([2.0] * (course_train.MAX_STEPS + 1), {}), Run()), "at most 100,000 losses")
    assert gc.loop_result(([2.0] * 10, {0: 3.0, 10: 2.0}), Run(), 10) == ([2.0] * 10, {0: 3.0, 10: 2.0})


def test_loop_result_reads_a_tuples_own_entries():
    class Pair(tuple):   # entries that cannot be read by the tuple's own __getitem__ or __len__
        def __getitem__(self, i):
            raise ZeroDivisionError

        def __len__(self):
            raise ZeroDivisionError
    assert gc.loop_result(Pair(([1.0], {0: 2.0})), Run()) == ([1.0], {0: 2.0})


def test_a_live_run_refuses_a_loop_that_gives_more_losses_than_it_planned(refused, ids):
    chars, train_ids, val_ids = ids
    model = tiny()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    calls = []

    def loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
             eval_batches=4, seed=0, callback=None):
        calls.append(steps)
        losses = [2.0] * (steps + 5)
        try:
            callback(losses, {0: 3.0})            # refused: the loop swallows it and returns the list anyway
        except Exception:                         # noqa: BLE001
            pass
        return losses, {0: 3.0}

    said = refused(lambda: gc.live_run(loop, model, train_ids, val_ids, chars, batch=4, context=32, lr=1e-2, warmup=2,
                                       min_lr=1e-3, clip=1.0, eval_every=5, eval_batches=1, seconds=300),   # (ample under load)
                   "loop should return at most", "losses, one per step", "the model was put back")
    assert f"at most {calls[0]:,} losses" in said and f"but got {calls[0] + 5:,}" in said
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# ------------------------------------------------------------ 3. other lists counted before they are read

def test_copy_rule_counts_its_lengths_before_reading_them(refused, ids):
    _, train_ids, _ = ids
    lengths = [1] * 10_000_000
    tracemalloc.start()
    try:
        refused(lambda: gc.copy_rule(tiny(), train_ids, lengths, context=32), "lengths should be a list of different",
                "1 to 32", "length 10000000")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000, peak                 # no copy of the 80 MB list
    assert gc.copy_rule(tiny(), train_ids[:2_000], list(range(1, 33)), context=32, every=8)[-1]["k"] == 32


def test_spread_windows_takes_at_most_max_match_lengths(refused, ids):
    _, train_ids, _ = ids
    refused(lambda: gc.spread_windows(tiny(), train_ids, 32, 4, [1] * 33), "lengths should be a list of at most 32")
    assert gc.spread_windows(tiny(), train_ids, 32, 4, [1] * 32)[2] == (len(train_ids) - 1) // 32


def test_induction_history_counts_its_records_before_reading_them(refused):
    record = dict(step=0, induction_score=[[0.1]], loss_first_copy=2.0, loss_second_copy=2.0)
    records = [dict(record, step=i) for i in range(gc.MAX_RECORDS + 1)]
    refused(lambda: gc.induction_history({"induction": records}), "at most 10,000 induction records", "10,001")
    assert len(gc.induction_history({"induction": records[:-1]})["steps"]) == gc.MAX_RECORDS
