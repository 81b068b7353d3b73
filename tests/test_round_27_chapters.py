"""Round 27 (chapters 08-10): with_temperature's T = 0 is the limit (tied maxima share the mass) while
greedy sampling keeps one token; per_pair refuses a dict result whose values are not single numbers;
the cat-world measures refuse the trace and cache switches before any pass; layer_norm_function
passes eps by keyword only."""
import contextlib
import io

import numpy as np
import pytest
import torch

from helpers import worlds
from helpers.ablation import compute as ablation
from helpers.errors import CourseInputError
from helpers.model import KVCache
from helpers.normalization import checks as ln_checks
from helpers.sampling import checks as sampling_checks
from helpers.sampling import compute as sampling
from helpers.weights import load_cat


@pytest.fixture(scope="module")
def cat():
    return load_cat(), worlds.cat_world()


def printed(check, answer):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        check(answer)
    return buf.getvalue().strip()


# ------------------------------------------------------------ entry 1: the limit at T = 0

def test_with_temperature_zero_shares_the_mass_among_tied_maxima():
    logits = torch.tensor([3.0, 1.0, 3.0, 2.0])
    assert sampling.with_temperature(logits, 0).tolist() == [0.5, 0.0, 0.5, 0.0]
    assert sampling.with_temperature(torch.tensor([2.0, 1.0, 0.0, -1.0]), 0).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert sampling.with_temperature(torch.tensor([1.0, -float("inf"), 1.0, 1.0]), 0).tolist() == \
        pytest.approx([1 / 3, 0.0, 1 / 3, 1 / 3])
    assert sampling.with_temperature(logits, 0).dtype == torch.float32
    # the limit of softmax(logits / T): a small T already gives it
    assert torch.allclose(sampling.with_temperature(logits, 0), sampling.with_temperature(logits, 1e-3), atol=1e-6)


def test_with_temperature_zero_is_what_the_chapters_check_asks_for():
    cases = [np.array(logits) for logits, T, _ in sampling_checks.TEMPERED_CASES if T == 0]
    assert any((c == c.max()).sum() > 1 for c in cases)   # (the check tries ties)
    for logits in cases:
        expected = sampling_checks.greedy_limit(logits)
        assert np.allclose(sampling.with_temperature(torch.tensor(logits), 0).numpy(), expected, atol=1e-6)


def test_greedy_decoding_still_picks_the_first_largest_logit(cat):
    logits = torch.tensor([3.0, 1.0, 3.0, 2.0])
    assert sampling.next_distribution(logits, temperature=0).tolist() == [1.0, 0.0, 0.0, 0.0]
    model, world = cat
    ids = world.tokenizer.encode("<BOS> the cat sat")
    runs = [sampling.generate(model, ids, 4, temperature=0, seed=s) for s in (0, 1)]
    assert torch.equal(runs[0], runs[1])
    assert "greedy decoding" in sampling.next_distribution.__doc__ and "limit" in sampling.with_temperature.__doc__


# ------------------------------------------------------------ entry 4: per_pair's dict results

@pytest.mark.parametrize("value, shown", [(torch.ones(2), "a tensor of shape (2,)"), ("x", "'x'"), (None, "None"),
                                          (True, "True")])
def test_per_pair_refuses_a_dict_value_that_is_not_one_number(cat, value, shown):
    model, _ = cat
    clean, corrupt = torch.randint(0, 20, (2, 5)), torch.randint(0, 20, (2, 5))
    with pytest.raises(CourseInputError, match=r"patch's result\['grid'\] should be one number .*but got " +
                       shown.replace("(", r"\(").replace(")", r"\)")) as caught:
        ablation.per_pair(lambda m, c, k: {"grid": value}, model, clean, corrupt)
    assert "\n" not in str(caught.value)


def test_per_pair_still_stacks_numbers_and_one_number_tensors(cat):
    model, _ = cat
    clean, corrupt = torch.randint(0, 20, (3, 5)), torch.randint(0, 20, (3, 5))
    out = ablation.per_pair(lambda m, c, k: {"a": 0.5, "b": torch.tensor(2.0), "c": np.float64(1.5)}, model, clean, corrupt)
    assert out["a"].tolist() == [0.5] * 3 and out["b"].tolist() == [2.0] * 3 and out["c"].tolist() == [1.5] * 3


# ------------------------------------------------------------ entries 5 and 6: trace= and cache=

SWITCH_CALLS = {
    "prompt_row": lambda m, w, **s: ablation.prompt_row(m, w, "<BOS> the cat is", **s),
    "damage_row": lambda m, w, **s: ablation.damage_row(m, w, **s),
    "cat_scores": lambda m, w, **s: ablation.cat_scores(m, w, **s),
    "copula_figures": lambda m, w, **s: ablation.copula_figures(m, w, **s),
    "next_token_probs": lambda m, w, **s: worlds.next_token_probs(m, w, [["<BOS>", "the"]], **s),
    "copula_report": lambda m, w, **s: worlds.copula_report(m, w, **s),
    "slot_accuracy": lambda m, w, **s: worlds.slot_accuracy(m, w, **s),
    "rule_accuracy": lambda m, w, **s: worlds.rule_accuracy(m, w, **s),
}


@pytest.mark.parametrize("name", sorted(SWITCH_CALLS))
def test_trace_and_cache_are_refused_before_any_pass(cat, name):
    model, world = cat
    calls = []
    handle = model.register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(CourseInputError, match=r"the model's switches should be among .*, but got 'trace'"):
            SWITCH_CALLS[name](model, world, trace=True)
        cache = KVCache(model.cfg.n_layers)
        with pytest.raises(CourseInputError, match=r"the model's switches should be among .*, but got 'cache'"):
            SWITCH_CALLS[name](model, world, cache=cache)
    finally:
        handle.remove()
    assert calls == [] and len(cache) == 0 and cache.owner is None   # no pass ran, the learner's cache is untouched


def test_the_measures_still_take_the_switches_they_can_use(cat):
    model, world = cat
    plain = ablation.damage_row(model, world)
    assert plain["held_out_rule"] == 1.0 and plain["copula"] == 1.0
    off = ablation.damage_row(model, world, ablate_heads={(0, 0)})
    assert set(off) == set(plain)
    assert ablation.prompt_row(model, world, "<BOS> the cat is", attention=False)["top"] in world.tokenizer.vocab


# ------------------------------------------------------------ entry 7: eps by keyword

def _ln(x, gamma, beta, eps=1e-5, axis=-1):
    return gamma * (x - x.mean(axis, keepdims=True)) / np.sqrt(x.var(axis, keepdims=True) + eps) + beta


def test_layer_norm_check_gives_eps_only_by_keyword():
    def with_axis(x, gamma, beta, axis=-1):           # ε = 1e-5 written in, as the exercise allows
        return _ln(x, gamma, beta, 1e-5, axis)

    def with_eps(x, gamma, beta, eps=1e-5):
        return _ln(x, gamma, beta, eps)

    def axis_then_eps(x, gamma, beta, axis=-1, eps=1e-5):
        return _ln(x, gamma, beta, eps, axis)

    def ignores_eps(x, gamma, beta, eps=1e-5):
        return _ln(x, gamma, beta)

    assert printed(ln_checks.layer_norm_function, with_axis).startswith("✓")
    assert printed(ln_checks.layer_norm_function, with_eps).startswith("✓")
    assert printed(ln_checks.layer_norm_function, axis_then_eps).startswith("✓")
    verdict = printed(ln_checks.layer_norm_function, ignores_eps)
    assert verdict.startswith("✗") and "ignored its eps argument" in verdict
