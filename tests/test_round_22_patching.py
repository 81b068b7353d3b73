"""Round 22 (issue 31), patching, ablation and the GPT's schedule: a switch of text that is no text is one
sentence before any pass; a whole number too large for a float never reaches float arithmetic; a frozen
norm scale no norm can have is refused, never divided by into NaN; a spread or a mean over too few
samples is refused, never NaN."""
import math
import warnings

import numpy as np
import pytest
import torch

from helpers import patching
from helpers.ablation import checks as ablation_checks
from helpers.ablation import compute as ablation
from helpers.gpt.train import learning_rate
from learner_loops import attribution_written
from helpers.model import Config, Transformer

COPULA = "<BOS> the cat is"


@pytest.fixture
def case(cat, cat_world):
    """(ids of "<BOS> the cat is", a logit-difference direction, its residual parts, its final residual row)."""
    ids = cat_world.tokenizer.encode(COPULA)
    direction = torch.zeros(cat.cfg.vocab_size)
    direction[3], direction[4] = 1.0, -1.0
    parts, h = patching.residual_parts(cat, ids)
    return ids, direction, parts, h


def passes(model):
    """A list that counts the model's forward passes from now on (one entry each)."""
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append(1))
    return seen


def induction_model():
    return Transformer(Config(vocab_size=12, d_model=16, n_heads=2, n_layers=2, d_ff=0, n_max=32), seed=0)


# ------------------------------------------------------------ 1: a kind that is no text


@pytest.mark.parametrize("kind", [np.array([]), np.array(["mean", "zero"]), ["mean"]])
def test_an_ablation_kind_that_is_no_text_is_refused_before_any_pass(cat, cat_world, refused, kind):
    lab = ablation.CatLab(cat, cat_world, draws=3)
    seen = passes(cat)
    for call in (lambda: ablation.cat_ablation(cat, cat_world, [(0, 0)], kind, draws=3),
                 lambda: ablation.rule_ablation(cat, cat_world, [(0, 0)], kind, draws=3),
                 lambda: ablation.rule_probs(cat, cat_world, [(0, 0)], kind, draws=3),
                 lambda: lab.view(COPULA, [(0, 0)], kind)):
        refused(call, "the ablation kind should be one of 'zero', 'mean', 'resample', but got")
    assert seen == []


# ------------------------------------------------------------ 2: whole numbers too large for a float


def test_the_learning_rate_after_the_run_is_min_lr_for_any_step(refused):
    for step in (10, 11, 2**70, 2**1100, 10**400, np.int64(2**63 - 1)):
        assert learning_rate(step, 1e-3, 2, 10, 1e-4) == 1e-4
    cosine = [1e-4 + 0.5 * (1 + math.cos(math.pi * (s - 2) / 8)) * (1e-3 - 1e-4) for s in range(2, 10)]
    assert [learning_rate(s, 1e-3, 2, 10, 1e-4) for s in range(2, 10)] == cosine
    refused(lambda: learning_rate(-2**1100, 1e-3, 2, 10, 1e-4), "step should be at least 0")


def test_a_huge_whole_scale_divides_as_a_float(cat, case, refused):
    ids, direction, parts, _ = case
    for got in (patching.attribute(cat, parts, direction, 2**70),
                patching.direct_logit_attribution(cat, ids, direction, scale=2**70)):
        assert all(math.isfinite(v) for v in got.values())
        assert max(abs(v) for name, v in got.items() if name != "final-norm bias") < 1e-15
    terms = patching.direct_effects(cat, ids[None, :-1], ids[None, 1:], scale=2**70)["terms"]
    assert all(bool(torch.isfinite(t).all()) and float(t.abs().max()) < 1e-15
               for name, t in terms.items() if name != "final-norm bias")
    refused(lambda: patching.attribute(cat, parts, direction, 2**1100), "scale should be a number > 0 that a float can hold")
    refused(lambda: patching.direct_effects(cat, ids[None, :-1], ids[None, 1:], scale=2**1100), "an integer of 1,101 bits")


# ------------------------------------------------------------ 3: a scale no norm can have


@pytest.mark.parametrize("scale", [1e-300, 5e-324, 1e-6, torch.tensor([1e-40]), torch.tensor([1e-300], dtype=torch.float64)])
def test_a_scale_below_the_norms_smallest_divisor_is_refused(cat, case, refused, scale):
    ids, direction, parts, _ = case
    for call in (lambda: patching.attribute(cat, parts, direction, scale),
                 lambda: patching.direct_logit_attribution(cat, ids, direction, scale=scale),
                 lambda: patching.direct_effects(cat, ids[None, :-1], ids[None, 1:], scale=scale)):
        refused(call, "scale should be at least √ε = 0.00316", "but got")


def test_the_smallest_scale_a_norm_gives_is_taken(cat, case):
    """The divisor of a residual row of zeros is √ε itself, in float32 and in float16: never refused."""
    _, direction, parts, _ = case
    for dtype in (torch.float32, torch.float16):
        scale = patching.final_norm_scale(cat, torch.zeros(cat.cfg.d_model, dtype=dtype))
        assert all(math.isfinite(v) for v in patching.attribute(cat, parts, direction, scale).values())


def test_chapter_10s_attribution_check_says_the_scale_sentence_not_nan(cat, case):
    _, direction, parts, _ = case

    learners = attribution_written
    said = ablation_checks.direct_attribution.feedback(learners, cat, parts, direction, torch.tensor([1e-40]))
    assert len(said) == 1 and "scale should be at least" in said[0] and "nan" not in said[0].lower(), said


def test_parts_holding_nan_are_refused(cat, case, refused):
    _, direction, parts, h = case
    bad = dict(parts, embedding=torch.full((cat.cfg.d_model,), float("nan")))
    refused(lambda: patching.attribute(cat, bad, direction, patching.final_norm_scale(cat, h)),
            "parts should hold finite numbers", "'embedding'")


def test_a_normalised_metric_whose_gap_is_too_small_to_divide_by_is_refused(refused):
    for value in (torch.tensor([0.5, 1.0]), np.array([0.5, 1.0], dtype=np.float32)):
        refused(lambda: patching.normalised(value, 1e-300, 0.0), "the normalised metric should be finite", "1e-300")
    assert torch.equal(patching.normalised(torch.tensor([0.0, 1.0]), 2.0, 0.0), torch.tensor([0.0, 0.5]))


# ------------------------------------------------------------ 4: statistics over too few samples


def test_composition_baseline_refuses_one_draw_and_warns_of_nothing_with_two(refused):
    refused(lambda: patching.composition_baseline(6, 3, draws=1), "draws", "should be at least 2, but got 1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mean, spread = patching.composition_baseline(6, 3, draws=2)
    assert math.isfinite(mean) and math.isfinite(spread)


def test_a_resample_ablation_refuses_one_draw_before_any_pass(cat, cat_world, refused):
    ids = ablation.induction_pairs(4, 3, 12, 0)[0]
    model = induction_model()
    seen, seen_induction = passes(cat), passes(model)
    for call in (lambda: ablation.cat_ablation(cat, cat_world, [(0, 0)], "resample", draws=1),
                 lambda: ablation.rule_ablation(cat, cat_world, [(0, 0)], "resample", draws=1),
                 lambda: ablation.rule_probs(cat, cat_world, [(0, 0)], "resample", draws=1),
                 lambda: ablation.CatLab(cat, cat_world, draws=1),
                 lambda: ablation.induction_ablation(model, ids, [(0, 0)], "resample", draws=1)):
        refused(call, "draws should be at least 2 for a resample ablation", "but got 1")
    assert seen == [] and seen_induction == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ablation.rule_ablation(cat, cat_world, [(0, 0)], "resample", draws=2)
        assert math.isfinite(got["p_class_spread"])
        assert ablation.rule_ablation(cat, cat_world, [(0, 0)], "zero", draws=1)["p_class_spread"] == 0.0


def test_mean_head_outputs_refuses_a_position_that_no_row_reaches(cat, refused):
    ids = torch.tensor([[1, 2, 3, 4], [1, 2, 3, 4]])
    refused(lambda: patching.mean_head_outputs(cat, ids, [2, 3]), "full length 4", "the longest is 3")
    assert all(bool(torch.isfinite(x).all()) for x in patching.mean_head_outputs(cat, ids, [2, 4]).values())
    assert all(bool(torch.isfinite(x).all()) for x in patching.mean_head_outputs(cat, ids, [2, 3], False).values())


def test_induction_sequences_without_a_second_copy_to_measure_are_refused(refused):
    model, ids = induction_model(), ablation.induction_pairs(4, 1, 12, 0)[0]   # (4, 3): L = 1
    for call in (lambda: ablation.induction_ablation(model, ids, [(0, 0)], "resample", draws=3),
                 lambda: ablation.induction_direct_effects(model, ids)):
        refused(call, "with L >= 2, an odd length of at least 5", "(4, 3)")
    longer = ablation.induction_pairs(4, 2, 12, 0)[0]
    got = ablation.induction_ablation(model, longer, [(0, 0)], "resample", draws=3)
    assert all(math.isfinite(v) for v in got.values())
