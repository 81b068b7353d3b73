"""Round 26 (fix 56, gptrun): chapter 12's functions check what the learner's model gives, and the live run puts
back what the learner's loop changed.

* A model whose logits carry no gradient (its forward under torch.no_grad()) made step_seconds and live_run raise
  torch's raw RuntimeError from the timed passes: now one sentence (``logits_of(..., grad=True)``).
* Every call chapter 12 makes of a model goes through ``gpt.logits_of``: a forward giving (logits, None), a dict,
  an array, integer logits, the wrong shape (one column too many, flat rows) or NaN, or one that needs targets or
  raises, is refused in one sentence naming what arrived (evaluate scored V + 1 columns silently).
* live_run puts back anomaly mode, float32 matmul precision and Python's and NumPy's random states after the call,
  ended or refused (``switches_kept``); step_seconds leaves torch's random state alone.
"""
import random

import numpy as np
import pytest
import torch

from helpers.errors import CourseInputError
from helpers.gpt import compute as gc
from helpers.gpt import corpus
from learner_loops import same_weights, small_gpt, weights_of

LIVE = dict(batch=2, context=8, lr=1e-3, warmup=1, min_lr=1e-4, clip=1.0, eval_every=5, eval_batches=1, seconds=30,
            sample_chars=5)


@pytest.fixture(scope="module")
def text():
    chars = corpus.CharTokenizer()
    return chars, chars.encode(corpus.load_text()[:5000])


def odd(forward):
    """small_gpt's weights in a GPT whose forward is ``forward(self, ids)`` (built on GPT.forward)."""
    model = type("OddGPT", (gc.GPT,), {"forward": forward})(vocab_size=65, d_model=16, n_heads=2, n_layers=1,
                                                            d_ff=32, n_max=32)
    model.load_state_dict(small_gpt().state_dict())
    return model


def no_grad_forward(self, ids):
    with torch.no_grad():
        return gc.GPT.forward(self, ids)


def raising_forward(self, ids):
    raise ValueError("a bug in my forward")


def needs_targets(self, ids, targets):
    return gc.GPT.forward(self, ids)


ODD = {
    "tuple": (lambda self, ids: (gc.GPT.forward(self, ids), None), r"returned a tuple \(a tensor of shape .*nanoGPT"),
    "dict": (lambda self, ids: {"logits": gc.GPT.forward(self, ids)}, r"returned a dict with the keys \['logits'\]"),
    "array": (lambda self, ids: gc.GPT.forward(self, ids).detach().numpy(), r"returned a ndarray of shape"),
    "integers": (lambda self, ids: gc.GPT.forward(self, ids).long(), r"returned a tensor of dtype torch.int64"),
    "extra column": (lambda self, ids: torch.cat([gc.GPT.forward(self, ids)] * 2, -1)[..., :66],
                     r"vocab_size\) = \(\d+, \d+, 65\), but it returned shape \(\d+, \d+, 66\)"),
    "flat": (lambda self, ids: gc.GPT.forward(self, ids).reshape(-1, 65), r"but it returned shape \(\d+, 65\)"),
    "nan": (lambda self, ids: gc.GPT.forward(self, ids) * float("nan"), r"logits should be finite numbers.*NaN or inf"),
    "targets": (needs_targets, r"forward on token ids of shape .* raised TypeError: .*targets.*take the token ids alone"),
    "raises": (raising_forward, r"your raising_forward raised ValueError: a bug in my forward"),
}


def calls(text):
    chars, ids = text
    return {
        "step_seconds": lambda m: gc.step_seconds(m, ids, 2, 8, trials=1),
        "evaluate": lambda m: gc.evaluate(m, ids, 8, 1, 2, 0),
        "spread_loss": lambda m: gc.spread_loss(m, ids[:400], context=16, every=4),
        "copy_rule": lambda m: gc.copy_rule(m, ids[:400], [1, 2], context=16, every=4),
        "train_loop": lambda m: gc.train_loop(m, ids, ids, 2, 2, 8, 1e-3, 1, 1e-4, 1.0, 1, 1),
        "live_run": lambda m: gc.live_run(gc.train_loop, m, ids, ids, chars, **LIVE),
    }


@pytest.mark.parametrize("kind", sorted(ODD))
@pytest.mark.parametrize("function", ["step_seconds", "evaluate", "spread_loss", "copy_rule", "train_loop", "live_run"])
def test_odd_model_output_refused_in_one_sentence(text, kind, function):
    forward, said = ODD[kind]
    model = odd(forward)
    if kind == "nan" and function == "train_loop":   # a run that diverged records its NaN losses (documented)
        losses, val_losses = calls(text)[function](model)
        assert all(np.isnan(losses)) and all(np.isnan(list(val_losses.values())))
        return
    before = weights_of(model)
    with pytest.raises(CourseInputError, match=said) as refused:
        calls(text)[function](model)
    assert "\n" not in str(refused.value)
    assert same_weights(model, before)


@pytest.mark.parametrize("function", ["step_seconds", "live_run", "train_loop"])
def test_logits_without_gradient_refused(text, function):
    model = odd(no_grad_forward)
    before = weights_of(model)
    with pytest.raises(CourseInputError, match=r"logits should carry a gradient .* carry none: .*torch.no_grad\(\)"):
        calls(text)[function](model)
    assert same_weights(model, before)


def test_sample_text_of_a_model_that_needs_targets(text):
    chars, _ = text
    with pytest.raises(CourseInputError, match=r"raised TypeError: .*targets"):
        gc.sample_text(odd(needs_targets), chars, "ROMEO:", 3)


def test_course_model_still_measured_the_same(text):
    _, ids = text
    model = small_gpt()
    with torch.no_grad():
        x, y = corpus.windows(ids, 2, 8, torch.Generator().manual_seed(0))
        expected = float(torch.nn.functional.cross_entropy(model(x).reshape(-1, 65), y.reshape(-1)))
    assert gc.evaluate(model, ids, 8, 1, 2, 0) == pytest.approx(expected, abs=1e-6)
    double = odd(lambda self, ids: gc.GPT.forward(self, ids).double())   # float64 logits: floating point, taken
    assert gc.evaluate(double, ids, 8, 1, 2, 0) == pytest.approx(expected, abs=1e-5)


def snapshot():
    return dict(anomaly=(torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()),
                matmul=torch.get_float32_matmul_precision(), python=random.getstate(),
                numpy=np.random.get_state()[1].tolist(), dtype=torch.get_default_dtype())


def switching_loop(fails):
    def loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
             eval_batches=4, seed=0, callback=None):
        torch.autograd.set_detect_anomaly(True)
        torch.set_float32_matmul_precision("medium")
        random.seed(5)
        np.random.seed(5)
        torch.manual_seed(5)
        if fails:
            raise ValueError("a bug in my loop")
        return gc.train_loop(model, train_ids, val_ids, 2, batch, context, lr, 1, min_lr, clip, eval_every,
                             eval_batches, seed, callback)
    return loop


@pytest.mark.parametrize("fails", [False, True])
def test_live_run_puts_back_switches_and_random_states(text, fails):
    chars, ids = text
    model = small_gpt()
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    before, torch_state = snapshot(), torch.get_rng_state()
    try:
        if fails:
            with pytest.raises(CourseInputError, match="ValueError: a bug in my loop"):
                gc.live_run(switching_loop(True), model, ids, ids, chars, **LIVE)
        else:
            assert gc.live_run(switching_loop(False), model, ids, ids, chars, **LIVE)["done"] == 2
        assert snapshot() == before
        # torch's own: put back on a refusal; a run that ends leaves it as the loop seeded it (documented)
        assert torch.equal(torch.get_rng_state(), torch_state) == fails
    finally:
        torch.autograd.set_detect_anomaly(False)
        torch.set_float32_matmul_precision("highest")


def test_step_seconds_leaves_torch_random_state(text):
    _, ids = text
    drawing = odd(lambda self, ids: gc.GPT.forward(self, ids) + 0 * torch.rand(()))   # draws as dropout would
    torch.manual_seed(3)
    state = torch.get_rng_state()
    gc.step_seconds(drawing, ids, 2, 8, trials=1)
    assert torch.equal(torch.get_rng_state(), state)
