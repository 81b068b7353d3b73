"""Round 14 (reader B, entries 8, 9, 10 (real half), 12, 13): attribution patching's metric without a
gradient, NaN weights in distinct_per_block, parameter_formula from the Config's own choices, and
chapter 12's whole-text losses and copy rule refused up front past about a minute here."""
import itertools

import pytest
import torch

from helpers import patching, weights, worlds
from helpers.gpt import compute as gc, corpus, shipped
from helpers.model import Config, Transformer
from helpers.real import compute as real


# ------------------------------------------------------------ entry 8: attribution_patch's metric

@pytest.fixture(scope="module")
def pair():
    model = weights.load_cat()
    tok = worlds.cat_world().tokenizer
    return model, tok.encode("<BOS> the dog was"), tok.encode("<BOS> the floor was")


def logit_difference(out):
    return out["logits"][:, -1, 3] - out["logits"][:, -1, 4]


@pytest.mark.parametrize("metric", [
    lambda out: logit_difference(out).detach(),                                   # detached
    lambda out: torch.tensor([float(logit_difference(out)[0].item())]),          # through .item()
    lambda out: torch.from_numpy(logit_difference(out).detach().numpy().copy()),  # through NumPy
    lambda out: torch.ones(out["logits"].shape[0]),                               # a constant
])
def test_a_metric_without_a_gradient_is_one_sentence(pair, refused, metric):
    model, clean, corrupt = pair
    before = {k: v.clone() for k, v in model.state_dict().items()}
    refused(lambda: patching.attribution_patch(model, clean, corrupt, metric), "metric(out)", "differentiable",
            "no gradient", ".detach()")
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_metric_gradient_that_is_not_finite_is_one_sentence(pair, refused):
    model, clean, corrupt = pair
    metric = lambda out: logit_difference(out) + torch.sqrt(out["logits"][:, -1, 3] * 0)   # noqa: E731 (sqrt'(0) = inf)
    refused(lambda: patching.attribution_patch(model, clean, corrupt, metric), "finite gradient", "NaN or infinity")


def test_a_metric_the_heads_do_not_reach_has_zero_attribution(pair):
    model, clean, corrupt = pair
    got = patching.attribution_patch(model, clean, corrupt, lambda out: out["h0"][:, 2, 0], watch=["h0"])
    assert got.shape == (2, 2, 4) and torch.equal(got, torch.zeros_like(got))


def test_a_watched_head_output_is_the_nudged_one(pair):
    model, clean, corrupt = pair
    plain = patching.attribution_patch(model, clean, corrupt, logit_difference)
    watched = patching.attribution_patch(model, clean, corrupt, logit_difference, watch=["L1.head_out"])
    assert torch.allclose(plain, watched)
    # a metric of the watched head output itself: its own cell moves it by exactly the whole gap
    own = patching.attribution_patch(model, clean, corrupt, lambda out: out["L1.head_out"][:, 0, -1, 0],
                                     watch=["L1.head_out"])
    assert float(own[1, 0, -1]) == pytest.approx(1.0) and float(own[1, 1].abs().sum()) == 0.0


def test_inside_no_grad_attribution_patching_still_works(pair):
    model, clean, corrupt = pair
    with torch.no_grad():
        inside = patching.attribution_patch(model, clean, corrupt, logit_difference)
    assert torch.allclose(inside, patching.attribution_patch(model, clean, corrupt, logit_difference))
    assert torch.is_grad_enabled()


# ------------------------------------------------------------ entry 9: distinct_per_block

@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_distinct_per_block_refuses_non_finite_weights(refused, bad):
    W = torch.zeros(64, 8)
    W[:32, 0] = bad
    refused(lambda: real.distinct_per_block(W), "W", "finite", "NaN or inf", "32")


def test_distinct_per_block_still_counts_finite_blocks():
    W = torch.arange(64 * 2, dtype=torch.float32).view(64, 2) % 5
    assert real.distinct_per_block(W) == 5


# ------------------------------------------------------------ entry 10 (real half): parameter_formula

SMOLLM2 = Config(vocab_size=49152, d_model=576, n_heads=9, n_kv_heads=3, n_layers=30, d_ff=1536, n_max=64,
                 positions="rotary", bias=False, activation="swiglu", norm_kind="rmsnorm")


def test_parameter_formula_of_smollm2_is_the_notebooks():
    parts = real.parameter_formula(SMOLLM2)
    assert {k: parts[k] for k in ("embedding", "attention", "mlp", "norms", "per_layer", "final_norm", "total")} == dict(
        embedding=28_311_552, attention=884_736, mlp=2_654_208, norms=1_152, per_layer=3_540_096, final_norm=576,
        total=134_515_008)


def test_parameter_formula_counts_the_cat_models_own_choices():
    cat = weights.load_cat()
    assert real.parameter_formula(cat.cfg)["total"] == real.parameters_counted(cat) == 736


CHOICES = list(itertools.product(("sinusoidal", "learned", "rotary", "none"), ("pre", "post", "none"),
                                 ("layernorm", "rmsnorm"), ("gelu", "swiglu"), (True, False), (True, False), (0, 12),
                                 (0, 2)))


@pytest.mark.parametrize("positions, norm, kind, activation, bias, final_norm, d_ff, kv", CHOICES[::3])
def test_parameter_formula_is_the_model_for_every_choice(positions, norm, kind, activation, bias, final_norm, d_ff, kv):
    cfg = Config(vocab_size=11, d_model=8, n_heads=4, n_kv_heads=kv, n_layers=2, d_ff=d_ff, n_max=9, positions=positions,
                 norm=norm, norm_kind=kind, activation=activation, bias=bias, final_norm=final_norm)
    model = Transformer(cfg, seed=0)
    parts = real.parameter_formula(cfg)
    assert parts["total"] == real.parameters_counted(model)
    assert parts["per_layer"] == model.parameter_count()["per_layer"]


def test_parameter_formula_refuses_what_is_no_config(refused):
    class Sizes:
        n_layers, kv_heads, d_k, d_model, d_ff, vocab_size = 2, 2, 3, 6, 8, 20
    refused(lambda: real.parameter_formula(Sizes()), "Config", "Sizes")


# ------------------------------------------------------------ entries 12 and 13: a minute at most

@pytest.fixture(scope="module")
def shakespeare():
    return shipped.load_model()


def many_ids(n):
    return torch.randint(0, 65, (n,), generator=torch.Generator().manual_seed(0))


def test_the_whole_text_loss_of_the_longest_text_is_refused_up_front(shakespeare, refused):
    ids = many_ids(corpus.MAX_CHARS)
    shakespeare.train()
    try:
        refused(lambda: shipped.whole_text_loss(shakespeare, ids), "whole_text_loss", "60 s", "shorter text",
                "spread_loss")
        assert shakespeare.training
    finally:
        shakespeare.eval()


def test_the_spread_loss_of_every_window_of_the_longest_text_is_refused(shakespeare, refused):
    ids = many_ids(corpus.MAX_CHARS)
    refused(lambda: gc.spread_loss(shakespeare, ids, every=1), "spread_loss", "60 s", "larger every")


def test_the_copy_rule_within_its_old_step_budget_is_refused_for_its_pass(shakespeare, refused):
    ids = many_ids(1_000_000)      # 499,968 kept positions x 6 lengths: under MAX_RULE_STEPS, minutes of passes
    refused(lambda: gc.copy_rule(shakespeare, ids, [1, 2, 4, 8, 16, 32], context=256, every=2), "copy_rule",
            "60 s", "larger every")


def test_the_notebooks_calls_are_counted_well_within_the_minute(shakespeare):
    """Chapter 12's own calls (validation text: 111,539 characters, about 45,000 BPE tokens)."""
    chars, bpe = shakespeare.cfg, shipped.load_model("bpe").cfg
    val, bpe_val = 111_539, 45_000
    assert gc.pass_seconds(chars, val // 256, 256, 64) < gc.MAX_SECONDS / 2                 # build: text_losses
    assert gc.pass_seconds(chars, val // 256 // 8 + 1, 256, 16) < gc.MAX_SECONDS / 10     # spread_loss every=8
    for context in (256, 98):                                                              # text_losses, BPE
        assert gc.pass_seconds(bpe, bpe_val // context, context, 64) < gc.MAX_SECONDS / 4
    for cfg, n, k in ((chars, val, 5), (bpe, bpe_val, 3)):                                 # copy_rule, every=4
        kept = n // 256 // 4 + 1
        assert gc.pass_seconds(cfg, kept, 256, 16) + kept * 256 * k * gc.SECONDS_PER_RULE_STEP < gc.MAX_SECONDS / 4


def test_token_macs_counts_shared_kv_and_swiglu():
    cfg = Config(vocab_size=50, d_model=48, n_heads=6, n_kv_heads=2, n_layers=2, d_ff=128, activation="swiglu",
                 norm_kind="rmsnorm", positions="rotary", bias=False, n_max=64)
    d, d_kv = 48, 2 * 8
    assert gc.token_macs(cfg, 8) == 2 * (2 * d * d + 2 * d * d_kv + 3 * d * 128 + 2 * 8 * d) + 50 * d


def test_a_small_text_is_still_measured(shakespeare):
    ids = many_ids(2_000)
    whole = shipped.whole_text_loss(shakespeare, ids, context=64)
    assert gc.spread_loss(shakespeare, ids, context=64, every=1)["loss"] == pytest.approx(whole, abs=1e-5)
