"""Red team round 19, tester B (chapter 12's compute): samples_at refuses a temperature whose logits /
temperature overflow as chapter 09 does (B4); head_ablations, repeat_test, step_seconds and evaluate count
their passes' time before the first (B5); small_start, as_transformer and live_run count the model's copies
before the first (B7). Models too large to copy are built on the meta device: the refusal comes before any
copy, so no memory is spent on them."""
import signal

import pytest
import torch

from helpers.gpt import compute as gc
from helpers.gpt import corpus, shipped
from helpers.model import Config, Transformer


@pytest.fixture(scope="module")
def shakespeare():
    return shipped.load_model()


@pytest.fixture(scope="module")
def chars():
    return corpus.CharTokenizer()


@pytest.fixture(scope="module")
def ids(chars):
    return chars.encode(corpus.load_text()[:20_000])


class Late(Exception):
    """Raised by the alarm in ``refused_at_once``: the call ran on instead of refusing."""


def refused_at_once(refused, call, *words):
    """``refused(call, *words)``, the call stopped after a generous 30 s (the old code ran it for minutes)."""
    def late(*_):
        raise Late("still running after 30 s: the call was not refused up front")

    previous = signal.signal(signal.SIGALRM, late)
    signal.alarm(30)
    try:
        return refused(call, *words)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def meta_model(d_model, n_layers, d_ff):
    """A Transformer of the Shakespeare vocabulary whose weights live on the meta device: sized, never held."""
    with torch.device("meta"):
        return Transformer(Config(vocab_size=65, d_model=d_model, n_heads=8, n_layers=n_layers, d_ff=d_ff, n_max=64),
                           seed=None)


# ------------------------------------------------------------ B4: a temperature whose logits / T overflow

def test_samples_at_refuses_an_overflowing_temperature_as_sample_text_does(refused, shakespeare, chars):
    said = refused(lambda: gc.sample_text(shakespeare, chars, "ROMEO:", 5, temperature=1e-308),
                   "temperature should be large enough")
    assert refused(lambda: gc.samples_at(shakespeare, chars, "ROMEO:", 5, [1e-308])) == said
    assert refused(lambda: gc.samples_at(shakespeare, chars, "ROMEO:", 5, [0.8, 1e-308])) == said


def test_samples_at_draws_what_it_drew_before(shakespeare, chars):
    first = gc.samples_at(shakespeare, chars, "ROMEO:", 30, (0.8, 1.2), seed=0)
    assert first == gc.samples_at(shakespeare, chars, "ROMEO:", 30, (0.8, 1.2), seed=0)
    # row 0 is chapter 09's draw at temperature 0.8, row 1 at 1.2: each its own generator, seeded alike
    one = gc.samples_at(shakespeare, chars, "ROMEO:", 30, (1.2,), seed=0)
    assert one == first[1:]


# ------------------------------------------------------------ B5: the passes' time, counted up front

def test_head_ablations_counts_its_passes_before_the_first(refused, shakespeare):
    said = refused_at_once(refused, lambda: gc.head_ablations(shakespeare, n=60, length=127, seed=1, reference_seed=2),
                           "head_ablations' 18 passes", "60 sequences", "at most about 60 s")
    assert "fewer sequences" in said
    cfg = shakespeare.cfg   # the chapter's call stays well within the limit
    assert 18 * gc.pass_seconds(cfg, 8, 96, 8, fused=False) < gc.MAX_SECONDS / 10


def test_head_ablations_checks_n_before_anything(refused, shakespeare):
    refused(lambda: gc.head_ablations(shakespeare, n=0, length=8, seed=1, reference_seed=2), "n should be at least 1")
    refused(lambda: gc.head_ablations(shakespeare, n=True, length=8, seed=1, reference_seed=2), "n should be")


def test_unfused_passes_count_their_scores():
    cfg = shipped.CONFIG
    fused, watched = gc.pass_seconds(cfg, 40, 254, 40), gc.pass_seconds(cfg, 40, 254, 40, fused=False)
    assert watched - fused == pytest.approx(40 * 4 * 4 * 254 * 254 * gc.SECONDS_PER_SCORE)


def test_repeat_test_counts_its_passes_before_the_first(refused, ids):
    deep = gc.GPT(65, 32, 4, 24, 64, 256)      # many layers: little memory a pass, much time
    refused_at_once(refused, lambda: gc.repeat_test(deep, ids, n=200, length=127, seed=2),
                    "repeat_test's 2 passes", "200 pairs", "at most about 60 s")


def test_induction_figures_counts_its_passes_before_the_first(refused, shakespeare):
    refused_at_once(refused, lambda: shipped.induction_figures(shakespeare, n=450, length=127),
                    "induction_figures' 2 passes", "450 sequences", "at most about 60 s")
    cfg, test = shakespeare.cfg, shipped.INDUCTION   # the build's recording stays well within the limit
    assert 2 * gc.pass_seconds(cfg, test["n"], 2 * test["length"] + 1, test["n"], fused=False) < gc.MAX_SECONDS / 20


def test_sample_text_counts_its_passes_before_the_first(refused, shakespeare, chars):
    refused_at_once(refused, lambda: gc.sample_text(shakespeare, chars, "ROMEO:", 5000),
                    "sampling 5,000 tokens, each a pass over up to 256 tokens", "at most about 60 s")
    assert len(gc.sample_text(shakespeare, chars, "ROMEO:", 20, context=64)) == 26   # a short sample runs


def test_live_run_counts_its_sample_before_it_trains(refused, chars, ids):
    model = gc.GPT(65, 16, 2, 1, 32, 32)
    before = [p.detach().clone() for p in model.parameters()]
    refused_at_once(refused, lambda: gc.live_run(gc.train_loop, model, ids[:15000], ids[15000:], chars, batch=2,
                                                 context=32, lr=1e-3, warmup=0, min_lr=1e-4, clip=1.0, eval_every=1,
                                                 eval_batches=1, sample_chars=5000),
                    "sampling 5,000 tokens", "at most about 60 s")
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_step_seconds_counts_its_timed_passes_before_the_first(refused, shakespeare, ids):
    refused_at_once(refused, lambda: gc.step_seconds(shakespeare, ids, 16, 256, trials=100),
                    "step_seconds' 101 timed training passes", "fewer trials")


def test_evaluate_and_train_loop_count_an_evaluation_before_the_first(refused, shakespeare, ids):
    said = refused_at_once(refused, lambda: gc.evaluate(shakespeare, ids, 256, 1000, 16, 0),
                           "an evaluation of 1,000 batches of 16 windows of 256 tokens", "at most about 60 s")
    before = [p.detach().clone() for p in shakespeare.parameters()]
    assert refused_at_once(refused, lambda: gc.train_loop(shakespeare, ids, ids[:5000], steps=1, batch=16, context=256,
                                                          lr=1e-3, warmup=0, min_lr=1e-4, clip=1.0, eval_every=1,
                                                          eval_batches=1000)).startswith(said.split(" should")[0])
    assert all(torch.equal(a, b) for a, b in zip(before, shakespeare.parameters()))


# ------------------------------------------------------------ B7: the model's copies, counted up front

def test_small_start_and_as_transformer_count_the_second_model_before_making_it(refused):
    big = meta_model(1024, 16, 4096)           # 0.75 GiB of weights: two copies pass the 1.5 GiB limit
    refused(lambda: gc.small_start(big, seed=0), "small_start(model)", "0.75 GiB of weights 2 times", "1.5 GiB")
    refused(lambda: gc.as_transformer(big), "as_transformer(model)", "0.75 GiB of weights 2 times")


def test_live_run_counts_the_copies_of_training_before_planning(refused, chars, ids):
    model = meta_model(768, 10, 3072)          # 0.26 GiB: five copies fit, the live run's six do not
    said = refused(lambda: gc.live_run(gc.train_loop, model, ids[:15000], ids[15000:], chars, batch=1, context=8,
                                       lr=1e-3, warmup=0, min_lr=1e-4, clip=1.0, eval_every=1, eval_batches=1),
                   "live_run", "0.26 GiB of weights 6 times", "1.5 GiB")
    assert "put the model back" in said


def test_copies_within_the_limit_still_run():
    model = gc.GPT(65, 16, 2, 1, 32, 32)
    assert isinstance(gc.as_transformer(model), Transformer)
    assert gc.small_start(model, seed=0) is model


def test_a_model_that_is_no_module_is_refused_by_live_run(refused, chars, ids):
    class Fake:
        cfg = Config(vocab_size=65, d_model=16, n_heads=2, n_layers=1, d_ff=32, n_max=32)

    refused(lambda: gc.live_run(gc.train_loop, Fake(), ids[:15000], ids[15000:], chars, batch=1, context=8, lr=1e-3,
                                warmup=0, min_lr=1e-4, clip=1.0, eval_every=1, eval_batches=1), "an nn.Module")
