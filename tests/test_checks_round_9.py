"""Round 9 of the checks' red team: what a learner's function returns is read only through the exercise
framework's converters (a sentence about the learner's answer, never "the check cell" or "the check itself
failed"), True/False and text are never read as numbers, a count in a float type too narrow for it is named
as such, and a learner's own exception is always shown as theirs."""
import functools

import numpy as np
import pytest
import torch
from torch import nn

from helpers import patching
from helpers.ablation import checks as ablation_checks, compute as ablation
from helpers.gpt import checks as gpt_checks
from helpers.heads import checks as heads_checks
from helpers.mlp import checks as mlp_checks
from helpers.positions import checks as positions_checks
from helpers.qkv import checks as qkv_checks
from helpers.real import checks as real_checks
from helpers.sampling import checks as sampling_checks, compute as sampling
from helpers.scaling import checks as scaling_checks
from helpers.tour import checks as tour_checks

NOT_THE_LEARNERS = ("check cell gives it", "check itself failed")


def said_about_the_answer(said):
    """The sentences, asserted to be about the learner's answer (not the check cell's, not a bug's)."""
    assert said and not any(words in s for s in said for words in NOT_THE_LEARNERS), said
    return " ".join(said)


# ------------------------------------------------------------ 13: a learner's output that is not numbers


@pytest.mark.parametrize("grid, words", [
    (lambda: torch.ones(2, 2, 4, dtype=torch.bool), "True/False"),
    (lambda: torch.ones(2, 2, 4, dtype=torch.complex64), "complex"),
    (lambda: [[["0.5"] * 4] * 2] * 2, "text"),
])
def test_round_9_patch_grid_names_a_grid_that_is_not_numbers(cat, cat_world, grid, words):
    tok, metric = cat_world.tokenizer, ablation.logit_difference(cat_world)
    args = (cat, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was"), metric)
    said = said_about_the_answer(ablation_checks.patch_grid.feedback(lambda *a: grid(), *args))
    assert "the grid" in said and words in said, said


def test_round_9_multi_head_names_an_output_of_true_and_false():
    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads, bias=True):
            super().__init__()
            self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Parameter(torch.zeros(d_model, d_model)) for _ in range(4))
            self.b_Q, self.b_K, self.b_V, self.b_O = (nn.Parameter(torch.zeros(d_model)) if bias else None
                                                      for _ in range(4))

        def forward(self, x):
            return x > 0
    said = said_about_the_answer(heads_checks.multi_head.feedback(MultiHeadAttention))
    assert "True/False" in said and "output" in said, said


def _lens_case(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat sat on the mat")
    with torch.no_grad():
        trace = cat(ids, trace=True)
    return trace, ["h0", "L0.h", "L1.h"], torch.cat([ids[1:], ids[:1]])


def test_round_9_lens_ranks_refuses_ranks_of_true_and_false(cat, cat_world):
    trace, points, targets = _lens_case(cat, cat_world)

    def lens(model, trace, points, targets):
        with torch.no_grad():
            logits = torch.stack([model.unembed(trace[p]) for p in points])
        return logits, torch.zeros(logits.shape[:2], dtype=torch.bool)
    said = said_about_the_answer(ablation_checks.lens_ranks.feedback(lens, cat, trace, points, targets))
    assert "ranks" in said and "True/False" in said, said


def test_round_9_outputs_of_true_and_false_are_named_in_every_chapter(cat):
    """The same refusal where other chapters read what a learner's function returns (exercises.as_array
    alone would read a bool tensor as 1s and 0s and judge it, or name a slip it matches)."""
    attention = lambda Q, K, V, causal=False: (np.ones((len(Q), V.shape[1])) > 0, np.ones((len(Q), len(K))) > 0)
    said = said_about_the_answer(qkv_checks.attention_function.feedback(attention))
    assert "True/False" in said, said
    head = lambda x, W_Q, W_K, W_V, b_Q, b_K, b_V: torch.ones(x.shape[0], W_Q.shape[1], dtype=torch.bool)
    assert "True/False" in said_about_the_answer(qkv_checks.attention_head.feedback(head))
    scores = lambda x, W_Q, W_K, b_Q, b_K, n_heads: torch.ones(n_heads, len(x), len(x), dtype=torch.bool)
    assert "True/False" in said_about_the_answer(scaling_checks.layer_scores.feedback(scores))
    table = lambda n, d: torch.ones(n, d, dtype=torch.bool)
    assert "True/False" in said_about_the_answer(positions_checks.sinusoidal_positions.feedback(table, cat))
    top_p = lambda probs, p: probs > 0.2
    assert "True/False" in said_about_the_answer(sampling_checks.top_p_function.feedback(top_p))


# ------------------------------------------------------------ 14: a count no float can hold


def test_round_9_layer_parameters_names_a_count_past_any_float(cat):
    said = said_about_the_answer(real_checks.layer_parameters.feedback(lambda cfg: 10 ** 5000, cat.cfg))
    assert "4,000 digits" in said, said
    for got, words in (("7087872", "str"), (True, "bool"), (float("nan"), "NaN"), (np.float64("inf"), "inf")):
        said = said_about_the_answer(real_checks.layer_parameters.feedback(lambda cfg, got=got: got, cat.cfg))
        assert words in said, said


# ------------------------------------------------------------ 16: a returned value read with float()


def _drop_case(cat, cat_world):
    ids, cls, _ = ablation.copula_prompts(cat_world)
    return cat, ids, cls, ids, ablation.rule_reference(cat_world, "all")


def learners_drop(model, head, task_ids, class_ids, reference_ids):
    """A learner's mean_ablation_drop (the instructor's solution of chapter 10): the fall in mean p(class)
    when the head's output is replaced by its per-position mean over reference_ids."""
    layer, h = head
    name, seen = f"L{layer}.head_out", {}

    def keep(x):
        seen["out"] = x
        return x

    def put_mean(x):
        x = x.clone()
        x[:, h] = seen["out"][:, h].mean(0)
        return x

    def p_class(**switches):
        probs = torch.softmax(model(task_ids, **switches)[:, -1], dim=-1)
        return probs.gather(-1, class_ids).sum(-1).mean()

    with torch.no_grad():
        model(reference_ids, replace={name: keep})
        return float(p_class() - p_class(replace={name: put_mean}))


def test_round_9_mean_ablation_drop_reads_what_it_returns_as_one_number(cat, cat_world):
    case = _drop_case(cat, cat_world)
    right = learners_drop
    assert ablation_checks.mean_ablation_drop.feedback(right, *case) == []
    assert ablation_checks.mean_ablation_drop.feedback(lambda *a: torch.tensor(right(*a)), *case) == []
    for wrong, words in ((lambda *a: str(right(*a)), "str"), (lambda *a: float("nan"), "NaN"),
                         (lambda *a: True, "truth value")):
        said = said_about_the_answer(ablation_checks.mean_ablation_drop.feedback(wrong, *case))
        assert words in said and "too small" not in said and "too large" not in said, said


def test_round_9_direct_attribution_reads_each_entry_as_one_number(cat, cat_world):
    from test_ablation import _attribution_case

    parts, direction, scale = _attribution_case(cat, cat_world)
    right = patching.attribute(cat, parts, direction, scale)
    as_text = lambda model, parts, direction, scale: {name: str(v) for name, v in right.items()}
    said = said_about_the_answer(ablation_checks.direct_attribution.feedback(as_text, cat, parts, direction, scale))
    assert "str" in said, said
    as_bools = lambda model, parts, direction, scale: {name: v > 0 for name, v in right.items()}
    said = said_about_the_answer(ablation_checks.direct_attribution.feedback(as_bools, cat, parts, direction, scale))
    assert "truth value" in said, said


# ------------------------------------------------------------ 18: a count in a float type too narrow for it


def test_round_9_a_count_in_bfloat16_is_named_as_rounded_not_as_a_counting_mistake():
    d, d_ff = 768, 3072
    right = 4 * d * d + 4 * d + d * d_ff + d_ff + d_ff * d + d + 4 * d
    said = tour_checks.per_layer.feedback(torch.tensor(float(right), dtype=torch.bfloat16), d_model=d, d_ff=d_ff)
    assert len(said) == 1 and "bfloat16" in said[0] and "only the matrices" not in said[0], said
    matrices = 4 * d * d + 2 * d * d_ff   # a wrong count in bfloat16: the rounding is still what can be said
    assert "bfloat16" in tour_checks.per_layer.feedback(torch.tensor(float(matrices), dtype=torch.bfloat16),
                                                        d_model=d, d_ff=d_ff)[0]
    for same in (right, float(right), np.int64(right), torch.tensor(right), np.float32(right), [right]):
        assert tour_checks.per_layer.feedback(same, d_model=d, d_ff=d_ff) == [], same
    assert "only the matrices" in tour_checks.per_layer.feedback(matrices, d_model=d, d_ff=d_ff)[0]
    assert "float16" in tour_checks.per_layer.feedback(torch.tensor(float(right), dtype=torch.float16),
                                                       d_model=d, d_ff=d_ff)[0]
    assert "truth value" in tour_checks.per_layer.feedback(True, d_model=d, d_ff=d_ff)[0]


def test_round_9_other_counts_name_a_float_type_too_narrow_for_them():
    right = 4 * 4096 ** 2 + 4 * 4096   # one attention layer at d = 4096, past bfloat16's and float32's exact range
    assert heads_checks.parameters.feedback(right, 4096) == []
    said = heads_checks.parameters.feedback(torch.tensor(right, dtype=torch.bfloat16), 4096)
    assert len(said) == 1 and "bfloat16" in said[0], said
    assert "bias" in heads_checks.parameters.feedback(4 * 4096 ** 2, 4096)[0]
    sizes = (33, 4095, 7, 127, 3)   # 720,810,090 bytes: float32 holds 720,810,112
    right = sampling.kv_cache_bytes(*sizes)
    assert sampling_checks.kv_bytes.feedback(right, *sizes) == []
    said = sampling_checks.kv_bytes.feedback(torch.tensor(right, dtype=torch.float32), *sizes)
    assert len(said) == 1 and "float32" in said[0] and "16,777,216" in said[0], said
    d = 12288   # one matrix of the two in bfloat16: the count it reads is the slip's, but only by rounding
    said = mlp_checks.gpt3_mlp.feedback(torch.tensor(4 * d * d * 96 + 12345, dtype=torch.bfloat16))
    assert len(said) == 1 and "bfloat16" in said[0] and "one of the two" not in said[0], said
    assert "one of the two" in mlp_checks.gpt3_mlp.feedback(4 * d * d * 96)[0]
    assert mlp_checks.gpt3_mlp.feedback(torch.tensor(8 * d * d * 96)) == []


def test_round_9_layer_parameters_names_a_count_in_bfloat16(cat):
    said = real_checks.layer_parameters.feedback(
        lambda cfg: torch.tensor(float(real_checks.counted_in_block(cfg)), dtype=torch.bfloat16), cat.cfg)
    assert len(said) == 1 and "bfloat16" in said[0] and "too" not in said[0], said


# ------------------------------------------------------------ 19: generate_loop's sentences


def test_round_9_generate_loop_names_true_and_false_and_ids_outside_the_vocabulary(cat, dragon):
    as_bools = lambda m, ids, n, **kw: sampling.generate(m, ids, n, **kw).bool()
    said = said_about_the_answer(sampling_checks.generate_loop.feedback(as_bools, cat, dragon))
    assert "True/False" in said and "prompt" not in said, said
    outside = lambda m, ids, n, **kw: torch.cat([ids, torch.full((n,), 99999)])
    said = said_about_the_answer(sampling_checks.generate_loop.feedback(outside, cat, dragon))
    assert "99999" in said and "vocabulary" in said and "most probable" not in said, said
    in_bfloat16 = lambda m, ids, n, **kw: sampling.generate(m, ids, n, **kw).to(torch.bfloat16)
    assert sampling_checks.generate_loop.feedback(in_bfloat16, cat, dragon) == []   # ids below 256: exact


def test_round_9_a_learners_own_exception_is_shown_as_theirs(cat, dragon):
    def generate(model, ids, n_new, **settings):
        raise ValueError("LoopSlip: all cases right")
    said = said_about_the_answer(sampling_checks.generate_loop.feedback(generate, cat, dragon))
    assert "your function stopped with ValueError: LoopSlip: all cases right" in said, said

    def again(model, ids, n_new, **settings):   # the watched model's own LoopSlip is still the check's sentence
        for _ in range(n_new):
            ids = torch.cat([ids, model(ids)[-1].argmax().reshape(1)])
            model(ids[:1])
        return ids
    said = said_about_the_answer(sampling_checks.generate_loop.feedback(again, cat, dragon))
    assert "your function stopped" not in said and "pass 2" in said, said


def test_round_9_a_learners_own_evalslip_text_is_shown_as_theirs():
    def train_loop(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                   eval_batches, seed=0, callback=None):
        raise ValueError("EvalSlip: all right")
    said = said_about_the_answer(gpt_checks.train_loop.feedback(train_loop))
    assert "your function stopped" in said and "ValueError: EvalSlip: all right" in said, said


def test_round_9_the_transpose_hint_is_given_only_when_k_transposed_is_the_cause():
    from helpers.masking import checks as masking_checks

    def stops(q, k, v):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (7x3 and 9x9)")
    said = said_about_the_answer(masking_checks.causal_attention.feedback(stops))
    assert "your function stopped" in said and "must be transposed" not in said, said

    def forgot(q, k, v):
        weights = torch.softmax(q @ k / q.shape[-1] ** 0.5, -1)
        return weights @ v, weights
    assert "k must be transposed" in said_about_the_answer(masking_checks.causal_attention.feedback(forgot))
