"""Round 22, chapter 11's ablated_copy_loss check: its own work after the learner's call is bounded.

The red team's entry 9: after an answer that returns at once, the check's slip search ran up to 8 passes of
SmolLM2 (62 s with the notebook's own arguments, 250 s with all 100 sequences), with no time bound. These tests
run the check on a small stand-in Transformer (the check takes any course Transformer), counting its passes;
its time is measured on a clock that every pass moves on, never on the wall clock.
"""
import time

import pytest
import torch

from helpers import exercises
from helpers.model import Config, Transformer
from helpers.real import checks as real_checks, circuit
from test_real import _ablation   # a learner's ablated_copy_loss, right or with one known slip

HEADS = [(2, 0), (1, 1), (1, 2)]   # two heads in layer 1: the "overwritten" slip has a run of its own


@pytest.fixture(scope="module")
def stand_in():
    return small_stand_in()


def small_stand_in():
    """(model, seqs): a small course Transformer and 16 repeated sequences of 21 tokens (the notebook's shape); its
    W_V and W_O scaled by 10, so that zero-ablating its heads moves the loss by more than the check's 2e-3."""
    model = Transformer(Config(vocab_size=2000, d_model=64, n_heads=4, n_layers=3, d_ff=128, n_max=64), seed=0)
    with torch.no_grad():
        for block in model.blocks:
            block.attn.W_V.mul_(10)
            block.attn.W_O.mul_(10)
    return model, circuit.random_repeats(16, 10, model.cfg.vocab_size, seed=0)


@pytest.fixture
def passes(monkeypatch):
    """The model passes made from here on: one entry per forward call, torch's grad mode and the rows it ran."""
    made = []
    forward = Transformer.forward

    def counted(self, ids, *args, **kwargs):
        made.append(dict(grad=torch.is_grad_enabled(), rows=ids.shape[0] if ids.dim() == 2 else 1))
        return forward(self, ids, *args, **kwargs)
    monkeypatch.setattr(Transformer, "forward", counted)
    return made


def zero_ablation_loss(model, seqs):
    """The second-copy loss with HEADS zero-ablated: the value the "zero" slip gives (the check's own reference)."""
    means = {layer: torch.zeros(model.cfg.n_heads, seqs.shape[1], model.cfg.d_k) for layer in (1, 2)}
    return float(circuit.copy_loss(model, seqs, HEADS, means).mean())


def test_an_instant_wrong_answer_costs_the_reference_and_one_batched_pass(stand_in, passes):
    model, seqs = stand_in
    said = real_checks.ablated_copy_loss.feedback(lambda model, seqs, heads_off: 1.234, model, seqs, HEADS)
    assert "is too small" in " ".join(said), said
    # the capture, the ablated run, then every slip that needs a run of its own in one batched pass
    assert len(passes) == 3, passes
    assert passes[-1]["rows"] == 6 * len(seqs)


def test_the_slip_runs_keep_no_autograd_graph(stand_in, passes):
    model, seqs = stand_in
    real_checks.ablated_copy_loss.feedback(lambda model, seqs, heads_off: 1.234, model, seqs, HEADS)
    assert passes and not any(p["grad"] for p in passes), passes


def test_slow_passes_keep_the_check_within_its_total_time(stand_in, monkeypatch):
    """Every pass of 16 rows takes 30 s on this clock: the check's capture and ablated run leave 60 s of its
    120, which holds one slip's run (with its margin), not six; the zero slip is then not looked at, and the
    answer gets the plain sentence without a hint, within the check's time."""
    model, seqs = stand_in
    zero = zero_ablation_loss(model, seqs)
    real_monotonic, moved = time.monotonic, [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: real_monotonic() + moved[0])
    forward = Transformer.forward

    def slow(self, ids, *args, **kwargs):
        moved[0] += 30.0 * ids.shape[0] / len(seqs)
        return forward(self, ids, *args, **kwargs)
    monkeypatch.setattr(Transformer, "forward", slow)
    start = time.monotonic()
    said = " ".join(real_checks.ablated_copy_loss.feedback(lambda model, seqs, heads_off: zero, model, seqs, HEADS))
    assert time.monotonic() - start <= exercises.LONG_CHECK_TIME_LIMIT, (moved, said)
    assert "zero ablation" not in said and "the ablated second-copy loss = 7.6" in said, said


def test_a_slip_is_named_when_the_time_holds_its_run_and_a_right_answer_passes(stand_in):
    """(Every slip on SmolLM2 itself: tests/test_real.py's test_the_ablation_exercise_names_each_slip.)"""
    model, seqs = stand_in
    zero = zero_ablation_loss(model, seqs)
    said = " ".join(real_checks.ablated_copy_loss.feedback(lambda model, seqs, heads_off: zero, model, seqs, HEADS))
    assert "zero ablation" in said, said
    assert real_checks.ablated_copy_loss.feedback(_ablation("right"), model, seqs, HEADS) == []


def test_more_tokens_than_the_checks_time_holds_are_refused_before_the_answer_runs(stand_in, refused):
    model, _ = stand_in
    seqs = circuit.random_repeats(60, 10, model.cfg.vocab_size, seed=0)          # 60 x 21 = 1,260 tokens
    refused(lambda: real_checks.checked_ablation(model, seqs, HEADS), "seqs", "at most 1,024 tokens", "1,260")
    called = []
    said = " ".join(real_checks.ablated_copy_loss.feedback(lambda *a: called.append(1) or 1.0, model, seqs, HEADS))
    assert said.startswith("the check cannot use what the check cell gives it") and not called, said


def test_a_pass_larger_than_the_courses_limit_is_refused_before_the_answer_runs(refused):
    """A vocabulary of 1,000,000: 8 sequences of 21 tokens give 168 million logits (under the old bound of 200
    million), a pass of about 0.63 GiB, over the 0.5 GiB a batched pass may hold: refused up front."""
    model = Transformer(Config(vocab_size=1_000_000, d_model=8, n_heads=2, n_layers=2, d_ff=16, n_max=32), seed=0)
    seqs = circuit.random_repeats(8, 10, model.cfg.vocab_size, seed=0)
    refused(lambda: real_checks.checked_ablation(model, seqs, [(1, 0)]), "should need at most", "8 rows of 21 tokens")
    called = []
    said = " ".join(real_checks.ablated_copy_loss.feedback(lambda *a: called.append(1) or 1.0, model, seqs, [(1, 0)]))
    assert said.startswith("the check cannot use what the check cell gives it") and not called, said
