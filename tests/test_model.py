"""helpers.model on the trained cat model: trace names and shapes, agreement with torch, the
sub-blocks called on their own, and the switches."""
import math

import numpy as np

import pytest
import torch
import torch.nn.functional as F

import copy

from helpers.errors import CourseInputError
from helpers.model import Config, KVCache, Transformer

SHAPE_TABLE = [  # the Primer's §6 shape table, <BOS> the cat sat: T=4, d=6, h=2, d_k=3, d_ff=8, V=20
    ("h0", (4, 6)), ("ln1", (4, 6)), ("q", (4, 6)), ("k", (4, 6)), ("v", (4, 6)),
    ("scores", (2, 4, 4)), ("weights", (2, 4, 4)), ("head_out", (2, 4, 3)), ("concat", (4, 6)),
    ("attn", (4, 6)), ("h_mid", (4, 6)), ("ln2", (4, 6)), ("pre", (4, 8)), ("act", (4, 8)),
    ("mlp", (4, 6)), ("h", (4, 6)),
]


@pytest.fixture
def cat(cat, cat_world):  # noqa: F811  (the conftest fixtures as one pair)
    return cat, cat_world


def ids(world, text):
    return world.tokenizer.encode(text)


def test_trace_names_and_shapes_follow_the_shape_table(cat):
    model, world = cat
    trace = model(ids(world, "<BOS> the cat sat"), trace=True)
    layer_steps = [(f"L{layer}.{name}", shape) for layer in (0, 1) for name, shape in SHAPE_TABLE[1:]]
    expected = [SHAPE_TABLE[0]] + layer_steps + [("final_ln", (4, 6)), ("logits", (4, 20)), ("probs", (4, 20))]
    assert [(name, tuple(t.shape)) for name, t in trace.items()] == expected


def test_trace_agrees_with_plain_forward_and_probs_sum_to_one(cat):
    model, world = cat
    x = ids(world, "<BOS> the cat sat")
    trace = model(x, trace=True)
    assert torch.equal(trace["logits"], model(x))
    assert torch.allclose(trace["probs"].sum(-1), torch.ones(4))
    assert trace["L0.weights"][:, 0, 1:].abs().max() == 0  # causal: <BOS> sees only itself


def test_attention_equals_torch_scaled_dot_product_attention(cat):
    model, world = cat
    trace = model(ids(world, "<BOS> the cat sat on the red mat"), trace=True)
    for layer in (0, 1):
        q, k, v = (trace[f"L{layer}.{n}"].view(-1, 2, 3).transpose(0, 1) for n in "qkv")
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert torch.allclose(trace[f"L{layer}.head_out"], expected, atol=1e-6)


def test_layernorm_and_gelu_equal_torch(cat):
    model, world = cat
    trace = model(ids(world, "<BOS> the dog ran fast"), trace=True)
    ln1 = model.blocks[0].ln1
    by_hand = (trace["h0"] - trace["h0"].mean(-1, keepdim=True)) / torch.sqrt(
        trace["h0"].var(-1, unbiased=False, keepdim=True) + ln1.eps) * ln1.weight + ln1.bias
    assert torch.allclose(trace["L0.ln1"], by_hand, atol=1e-6)
    assert torch.allclose(trace["L0.ln1"], F.layer_norm(trace["h0"], (6,), ln1.weight, ln1.bias))
    pre = trace["L0.pre"]
    assert torch.allclose(trace["L0.act"], pre * 0.5 * (1 + torch.erf(pre / math.sqrt(2))), atol=1e-6)
    assert torch.equal(trace["L0.act"], torch.nn.GELU()(pre))


def test_attention_off_equals_zeroing_W_O_and_b_O_to_the_last_bit(cat):
    model, world = cat
    x = ids(world, "<BOS> the cat is")
    zeroed = copy.deepcopy(model)
    with torch.no_grad():
        for block in zeroed.blocks:
            block.attn.W_O.zero_()
            block.attn.b_O.zero_()
    assert (zeroed(x) - model(x, attention=False)).abs().max().item() == 0


def test_the_sub_blocks_called_on_their_own_rebuild_the_forward_pass(cat):
    model, world = cat
    x = ids(world, "<BOS> the cat sat on the mat")
    trace = model(x, trace=True)
    with torch.no_grad():
        h = model.embed(x[None])
        assert torch.equal(h[0], trace["h0"])
        for layer, block in enumerate(model.blocks):
            attn = block.attn(block.ln1(h))
            assert torch.equal(attn[0], trace[f"L{layer}.attn"])
            h_mid = block.attention_part(h)
            assert torch.equal(h_mid, h + attn)
            mlp = block.mlp(block.ln2(h_mid))
            assert torch.equal(mlp[0], trace[f"L{layer}.mlp"])
            h = block.mlp_part(h_mid)
            assert torch.equal(h, h_mid + mlp)
        assert torch.equal(model.unembed(h)[0], trace["logits"])


def test_the_attention_module_has_a_switch_for_the_mask(cat):
    model, world = cat
    x = model.blocks[0].ln1(model.embed(ids(world, "<BOS> the cat sat")[None])).detach()
    kept = {}
    model.blocks[0].attn(x, causal=False, keep=kept.__setitem__)
    assert kept["weights"][0, :, 0, 1:].sum() > 0              # <BOS> sees later tokens
    model.blocks[0].attn(x, keep=kept.__setitem__)
    assert kept["weights"][0, :, 0, 1:].abs().max() == 0       # the default is causal


def test_attention_is_the_only_channel_between_tokens(cat):
    model, world = cat
    cat_is, mat_is = ids(world, "<BOS> the cat is"), ids(world, "<BOS> the mat is")
    off = (model(cat_is, attention=False)[-1] - model(mat_is, attention=False)[-1]).abs().max().item()
    on = (model(cat_is)[-1] - model(mat_is)[-1]).abs().max().item()
    assert off == 0
    assert on > 1.0


def test_head_ablation_equals_zeroing_its_rows_of_W_O(cat):
    model, world = cat
    x = ids(world, "<BOS> the cat is")
    for layer in (0, 1):
        for head in (0, 1):
            zeroed = copy.deepcopy(model)
            with torch.no_grad():
                zeroed.blocks[layer].attn.W_O[head * 3:(head + 1) * 3] = 0
            diff = (zeroed(x) - model(x, ablate_heads={(layer, head)})).abs().max().item()
            assert diff == 0, (layer, head)


def test_switches_never_change_the_stored_weights(cat):
    model, world = cat
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = ids(world, "<BOS> the cat is")
    model(x, attention=False)
    model(x, ablate_heads={(0, 0), (1, 1)}, causal=False, positions=False)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_causal_mask_off_lets_early_positions_see_later_tokens(cat):
    model, world = cat
    a, b = ids(world, "<BOS> the cat is"), ids(world, "<BOS> the mat is")
    assert torch.equal(model(a)[1], model(b)[1])            # position 1 cannot see position 2
    assert not torch.equal(model(a, causal=False)[1], model(b, causal=False)[1])


def test_without_positions_or_mask_the_last_position_is_order_blind(cat):
    model, world = cat
    a, b = ids(world, "<BOS> the big cat"), ids(world, "<BOS> big the cat")
    blind = dict(positions=False, causal=False)
    assert torch.allclose(model(a, **blind)[-1], model(b, **blind)[-1], atol=1e-5)
    assert not torch.allclose(model(a, causal=False)[-1], model(b, causal=False)[-1], atol=1e-3)


def test_parameter_count_is_736_with_the_seed_breakdown(cat):
    counts = cat[0].parameter_count()
    assert (counts["embedding"], counts["per_layer"], counts["final_norm"], counts["total"]) == (120, 302, 12, 736)
    assert counts["embedding"] + 2 * counts["per_layer"] + counts["final_norm"] == 736


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rotary", "none"])
def test_kv_cache_gives_the_same_logits_as_the_full_pass(positions):
    model = Transformer(Config(vocab_size=12, d_model=8, n_heads=2, n_layers=2, d_ff=16, positions=positions))
    x = torch.tensor([1, 5, 3, 7, 2, 9])
    cache = KVCache(2)
    first = model(x[:3], cache=cache)
    steps = [model(x[t:t + 1], cache=cache) for t in range(3, 6)]
    assert torch.allclose(torch.cat([first] + steps), model(x), atol=1e-5)


@pytest.mark.parametrize("norm", ["pre", "post", "none"])
def test_every_norm_placement_and_attention_only_models_run(norm):
    cfg = Config(vocab_size=10, d_model=8, n_heads=4, n_layers=3, d_ff=0, norm=norm, final_norm=norm != "none")
    trace = Transformer(cfg)(torch.tensor([0, 3, 4, 5]), trace=True)
    assert trace["logits"].shape == (4, 10)
    assert "L2.pre" not in trace and "L2.h" in trace


# ---- bad input: one sentence naming what was expected and what arrived --------------------------

def small(**changes):
    return dict(vocab_size=12, d_model=8, n_heads=2, n_layers=1, d_ff=16, **changes)


@pytest.mark.parametrize("changes, words", [
    (dict(bias="no"), ["Config.bias", "True or False", "'no'"]),
    (dict(final_norm=1), ["Config.final_norm", "True or False"]),
    (dict(d_ff=-1), ["Config.d_ff", "at least 0", "-1"]),
    (dict(d_model=8.0), ["Config.d_model", "whole number", "8.0"]),
    (dict(n_heads="2"), ["Config.n_heads", "'2'"]),
    (dict(d_model=7, n_heads=1), ["sinusoidal", "even", "d_model=7"]),
    (dict(d_model=6, n_heads=2, positions="rotary"), ["rotary", "d_k=3"]),
    (dict(positions="alibi"), ["Config.positions", "'alibi'"]),
    (dict(d_model=6, n_heads=4), ["d_model=6", "n_heads=4"]),
])
def test_a_config_that_cannot_be_built(refused, changes, words):
    cfg = small()
    cfg.update(changes)
    refused(lambda: Config(**cfg), *words)


@pytest.mark.parametrize("ids, words", [
    ("<BOS> the cat", ["token ids", "str", "tokenizer.encode"]),
    (None, ["token ids", "NoneType"]),
    ([1.5, 2.0], ["integer", "float"]),
    ([], ["non-empty"]),
    ([1, 25], ["[0, 20)", "25"]),
    (torch.zeros(1025, dtype=torch.long), ["at most 1,024 tokens", "1,025"]),
])
def test_token_ids_that_are_not_token_ids(refused, cat, ids, words):
    refused(lambda: cat[0](ids), *words)


@pytest.mark.parametrize("heads, words", [
    ({(0, 2)}, ["head=2", "heads 0..1"]),
    ({("0", "1")}, ["two whole numbers", "('0', '1')"]),
    ({(0.5, 1.9)}, ["two whole numbers", "(0.5, 1.9)"]),
    ({(0, 1, 1)}, ["(layer, head) pairs"]),
    ("L0H1", ["set of (layer, head) pairs", "'L0H1'"]),
])
def test_ablating_heads_that_do_not_exist(refused, cat, heads, words):
    refused(lambda: cat[0](torch.tensor([1, 4, 5]), ablate_heads=heads), *words)


def test_a_kv_cache_of_another_model_or_fed_twice(refused, cat, dragon):
    model, world = cat
    prompt = world.tokenizer.encode("<BOS> the cat")
    cache = KVCache(2)
    model(prompt, cache=cache)
    refused(lambda: model(prompt, cache=cache), "already holds these 3 tokens", "new KVCache")
    refused(lambda: dragon(torch.tensor([0, 5]), cache=cache), "another model")
    refused(lambda: model(prompt, cache="cache"), "KVCache", "str")


def test_a_prompt_longer_than_n_max_for_learned_positions(refused, dragon):
    refused(lambda: dragon(torch.zeros(129, dtype=torch.long)), "n_max=128", "129")


def test_seeds_are_whole_numbers(refused, cat):
    net = Transformer(Config(**small()))
    refused(lambda: net.reset_parameters(0.5), "seed", "0.5")
    net.reset_parameters(np.int64(3))   # a NumPy integer is a whole number


def test_replace_swaps_a_named_intermediate_and_leaves_the_weights_alone():
    model = Transformer(Config(vocab_size=9, d_model=8, n_heads=2, n_layers=2, d_ff=12))
    model.reset_parameters(seed=5)
    ids = torch.tensor([[1, 4, 2, 6], [3, 3, 0, 8]])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        same = model(ids, replace={"L1.head_out": lambda x: x, "h0": lambda x: x})
        assert torch.equal(same, model(ids))

        def zero_head(x):
            x = x.clone()
            x[:, 1] = 0
            return x
        assert torch.equal(model(ids, replace={"L0.head_out": zero_head}), model(ids, ablate_heads={(0, 1)}))
        shapes = {}
        model(ids, replace={n: (lambda x, n=n: shapes.setdefault(n, tuple(x.shape)) and x)
                            for n in ("L1.head_out", "L0.h", "L0.scores")})
        assert shapes == {"L1.head_out": (2, 2, 4, 4), "L0.h": (2, 4, 8), "L0.scores": (2, 2, 4, 4)}
        moved = model(ids, replace={"L1.h": lambda x: x + torch.arange(8.0)})
        assert not torch.allclose(moved, model(ids))
        trace = model(ids[0], trace=True, replace={"L0.mlp": torch.zeros_like})
        assert torch.equal(trace["L0.mlp"], torch.zeros(4, 8)) and torch.equal(trace["L0.h"], trace["L0.h_mid"])
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_replace_refuses_unknown_names_and_wrong_shapes(refused):
    model = Transformer(Config(vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=0))
    ids = torch.tensor([1, 2, 3])
    refused(lambda: model(ids, replace={"L3.h": lambda x: x}), "never makes", "L0.head_out")
    refused(lambda: model(ids, attention=False, replace={"L0.q": lambda x: x}), "never makes")
    refused(lambda: model(ids, replace={"L0.h": lambda x: x[:, :2]}), "shape (1, 3, 8)", "(1, 2, 8)")
    refused(lambda: model(ids, replace={"L0.h": lambda x: None}), "shape", "NoneType")
    refused(lambda: model(ids, replace=[("L0.h", abs)]), "dict")


def test_the_parts_check_their_input_when_learner_code_inside_a_pass_calls_them(refused):
    """The model checks its input once, at its entry, and its blocks skip their own checks; a replace
    function (learner code) run inside that pass gets the parts' checks back, and they return after."""
    from helpers import model as model_module
    model = Transformer(Config(vocab_size=9, d_model=8, n_heads=2, n_layers=1, d_ff=12))
    block = model.blocks[0]
    ids = torch.tensor([1, 2, 3])
    refused(lambda: model(ids, replace={"L0.h": lambda x: block.attn(x[..., :4])}), "x should be", "(1, 3, 4)")
    refused(lambda: model(ids, replace={"L0.h": lambda x: block.mlp(x.double())}), "dtype torch.float32")
    refused(lambda: model(ids, replace={"L0.h": lambda x: block(x, casual=True)}), "casual")
    assert model_module._CHECKED.depth == 0   # a failed pass leaves no part unchecked
    refused(lambda: block.attn(torch.zeros(1, 3, 5)), "(1, 3, 5)")
    refused(lambda: model.unembed(torch.zeros(2, 7)), "(2, 7)")


def first_losses(cfg, init, seeds=range(5)):
    """The loss of a fresh model (seeds 0-4) on random token ids: where training starts."""
    losses = []
    for seed in seeds:
        model = Transformer(cfg, seed=seed, init=init)
        ids = torch.randint(0, cfg.vocab_size, (8, min(cfg.n_max, 16)), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            logits = model(ids)
        losses.append(F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), ids[:, 1:].reshape(-1)).item())
    return losses


def shipped_configs():
    from helpers.normalization.compute import stack_config
    from helpers.recipes import CAT_CONFIG, DRAGON_CONFIG, INDUCTION_CONFIG
    stacks = {f"{norm} x{n}": stack_config(norm, n) for norm in ("pre", "post", "none") for n in (2, 8)}
    return {"cat": CAT_CONFIG, "dragon": DRAGON_CONFIG, "induction": INDUCTION_CONFIG, **stacks}


@pytest.mark.parametrize("name", list(shipped_configs()))
def test_a_fresh_model_starts_within_a_tenth_of_ln_V(name):
    cfg = shipped_configs()[name]
    ln_V = math.log(cfg.vocab_size)
    losses = first_losses(cfg, "small")
    assert all(abs(loss / ln_V - 1) <= 0.1 for loss in losses), (name, ln_V, losses)


def test_the_unit_start_of_the_shipped_recipes_is_far_above_ln_V():
    from helpers.recipes import INDUCTION_CONFIG
    losses = first_losses(INDUCTION_CONFIG, "unit")
    assert min(losses) > 10 * math.log(INDUCTION_CONFIG.vocab_size), losses   # the start the issue measured: 40-46 nats


def test_the_init_is_named_and_kept_by_save_and_load(refused, tmp_path):
    from helpers import weights
    from helpers.recipes import CAT_CONFIG
    refused(lambda: Transformer(CAT_CONFIG, init="gpt"), "init", "'gpt'")
    model = Transformer(CAT_CONFIG, seed=1)
    weights.save(model, tmp_path / "fresh")
    assert weights.load(tmp_path / "fresh").init == "small"
    assert weights.load_cat().init == "unit"    # the shipped cards predate the choice


def test_dropout_acts_in_training_mode_only_and_is_kept_by_save_and_load(refused, tmp_path):
    from helpers import weights
    from helpers.recipes import CAT_CONFIG
    import dataclasses
    for p in (-0.1, 1.0, True, "0.1"):
        refused(lambda: dataclasses.replace(CAT_CONFIG, dropout=p), "Config.dropout", "0 <= dropout < 1", repr(p))
    assert weights.load_cat().cfg.dropout == 0.0                   # a card without dropout means 0
    ids = torch.tensor([[0, 3, 4, 5, 6, 7, 8, 9]] * 2)
    plain = Transformer(CAT_CONFIG, seed=3)
    dropping = Transformer(dataclasses.replace(CAT_CONFIG, dropout=0.5), seed=3)
    plain.train()
    dropping.train()
    torch.manual_seed(0)
    assert torch.equal(plain(ids), plain(ids))                    # no dropout: the same pass twice
    assert not torch.allclose(dropping(ids), plain(ids))          # dropout draws in training mode
    dropping.eval()
    plain.eval()
    assert torch.equal(dropping(ids), plain(ids))                  # and nowhere else
    assert torch.equal(dropping(ids[0], trace=True)["L0.weights"],
                       plain(ids[0], trace=True)["L0.weights"])
    weights.save(dropping, tmp_path / "dropping")
    assert weights.load(tmp_path / "dropping").cfg.dropout == 0.5


# ------------------------------------------------ a failed pass leaves no trace (issue 31, item 2)

def small_learned():
    """A small model with learned positions for 8 tokens (so a length past n_max is met in the middle)."""
    return Transformer(Config(vocab_size=10, d_model=8, n_heads=2, n_layers=2, d_ff=8, n_max=8,
                              positions="learned"), seed=0)


def cache_state(cache):
    return (len(cache), [t.clone() for t in cache.k + cache.v if t is not None],
            None if cache.ids is None else cache.ids.clone(), cache.owner)


def same_cache(a, b):
    return a[0] == b[0] and len(a[1]) == len(b[1]) and all(torch.equal(x, y) for x, y in zip(a[1], b[1])) \
        and (a[2] is None and b[2] is None or torch.equal(a[2], b[2])) and a[3] is b[3]


def broken(name):
    """A replace function that raises, as a learner's may (and a KeyboardInterrupt, as a stopped cell does)."""
    def fn(x):
        raise {"runtime": RuntimeError("boom"), "interrupt": KeyboardInterrupt()}[name]
    return fn


FAILING_CALLS = {
    "replace raises in layer 1": dict(ids=[4], replace={"L1.h": broken("runtime")}),
    "interrupted in layer 1": dict(ids=[4], replace={"L1.attn": broken("interrupt")}),
    "replace returns the wrong shape": dict(ids=[4], replace={"L1.attn": lambda x: x[..., :3]}),
    "replace returns float64": dict(ids=[4], replace={"L1.h": lambda x: x.double()}),
    "a name this pass never makes": dict(ids=[4], attention=False, replace={"L1.q": lambda x: x}),
    "past n_max in the middle": dict(ids=[4, 5, 6, 7, 8, 9]),
    "a bad token id": dict(ids=[4, 10]),
    "a switch as text": dict(ids=[4], causal="False"),
}


@pytest.mark.parametrize("how", FAILING_CALLS)
def test_a_pass_that_fails_leaves_the_cache_as_it_was(how):
    """Fail a cached pass half-way: the cache holds what it held, and the next valid call answers as a
    fresh model with a fresh cache does, to the last bit."""
    model, prompt = small_learned(), torch.tensor([1, 2, 3])
    cache = KVCache(2)
    with torch.no_grad():
        model(prompt, cache=cache)
        before = cache_state(cache)
        call = dict(FAILING_CALLS[how])
        with pytest.raises((Exception, KeyboardInterrupt)):
            model(torch.tensor(call.pop("ids")), cache=cache, **call)
        assert same_cache(cache_state(cache), before), how
        after_failure = model(torch.tensor([4, 5]), cache=cache)
        fresh, fresh_cache = small_learned(), KVCache(2)
        fresh(prompt, cache=fresh_cache)
        assert torch.equal(after_failure, fresh(torch.tensor([4, 5]), cache=fresh_cache))


@pytest.mark.parametrize("name", ["trace", "causal", "attention", "positions", "scaled"])
@pytest.mark.parametrize("value", ["False", 0, 1, 0.5, None])
def test_every_switch_of_the_forward_pass_is_true_or_false(name, value):
    model = small_learned()
    with pytest.raises(CourseInputError, match=f"{name} is a switch and should be True or False, but got"):
        model(torch.tensor([1, 2]), **{name: value})


def test_numpy_bools_are_switches_too():
    model = small_learned()
    with torch.no_grad():
        assert torch.equal(model(torch.tensor([1, 2]), causal=np.bool_(False)),
                           model(torch.tensor([1, 2]), causal=False))


def test_config_refuses_what_it_cannot_build_before_building_it():
    base = dict(vocab_size=10, d_model=8, n_heads=2, n_layers=2, d_ff=8)
    for change, words in [(dict(n_heads=3), "should split into n_heads"), (dict(bias="False"), "Config.bias"),
                          (dict(positions=np.array(["none"])), "Config.positions"),
                          (dict(norm_eps=float("inf")), "Config.norm_eps"), (dict(rotary_base=10**2000), "rotary_base"),
                          (dict(dropout=1.0), "Config.dropout"), (dict(vocab_size=10**9), "1.5 GiB"),
                          (dict(n_max=10**9), "1.5 GiB"), (dict(n_kv_heads=4), "share")]:
        with pytest.raises(CourseInputError, match=words):
            Config(**{**base, **change})
    cfg = Config(**{**base, "bias": np.bool_(False), "d_model": np.int64(8)})
    assert type(cfg.bias) is bool and type(cfg.d_model) is int   # saved as JSON, so Python's own types
    with pytest.raises(CourseInputError, match="from 0 to 2\\*\\*64 - 1"):
        Transformer(cfg, seed=2**64)


# ---------------------------------------------------------------- issue 31: the trace's memory, rotary tables

def test_rotary_tables_give_the_recomputed_angles_bit_for_bit():
    from helpers.model import rotary_cos_sin, rotate_pairs, sinusoidal_angles
    g = torch.Generator().manual_seed(0)
    for d in (2, 6, 8, 64):
        for base in (10000.0, 100.0, 100000.0):
            for start, T in ((0, 1), (0, 1024), (7, 1), (300, 29), (1023, 1), (1020, 9)):   # the last: past the table
                angle = sinusoidal_angles(start, T, d, base)
                cos, sin = rotary_cos_sin(start, T, d, base)
                assert torch.equal(cos, torch.cos(angle)) and torch.equal(sin, torch.sin(angle)), (d, base, start, T)
                x = torch.randn(1, 2, T, d, generator=g)
                for pairs in ("adjacent", "halves"):
                    c, s = torch.cos(angle), torch.sin(angle)
                    if pairs == "halves":
                        a, b = x[..., :d // 2], x[..., d // 2:]
                        old = torch.cat([a * c - b * s, a * s + b * c], dim=-1)
                    else:
                        old = torch.empty_like(x)
                        old[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
                        old[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
                    assert torch.equal(rotate_pairs(x, start, base, pairs), old)


def test_a_cached_rotary_generation_matches_the_uncached_passes():
    model = Transformer(Config(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=8, positions="rotary"), seed=1)
    ids = torch.tensor([1, 5, 2, 7, 3, 9])
    cache = KVCache(2)
    with torch.no_grad():
        steps = [model(ids[:3], cache=cache)[-1]] + [model(ids[t:t + 1], cache=cache)[-1] for t in range(3, 6)]
        whole = model(ids)
    for t, step in zip((2, 3, 4, 5), steps):
        assert torch.allclose(step, whole[t], atol=1e-5)


def test_the_trace_estimate_counts_what_a_trace_keeps():
    for choices in (dict(), dict(activation="swiglu", n_kv_heads=1, norm_kind="rmsnorm", positions="rotary", bias=False),
                    dict(d_ff=0)):
        cfg = Config(**{**dict(vocab_size=50, d_model=8, n_heads=2, n_layers=2, d_ff=16, n_max=64), **choices})
        record = Transformer(cfg, seed=0)(torch.arange(40) % 50, trace=True)
        kept = sum(t.numel() * 4 for t in record.values())
        assert kept == cfg.trace_bytes(40)


def test_a_trace_above_its_limit_is_refused_before_the_pass_and_leaves_the_cache():
    from helpers.model import MAX_TRACE_BYTES
    smollm2 = Config(vocab_size=49152, d_model=576, n_heads=9, n_layers=30, d_ff=1536, n_kv_heads=3,
                     activation="swiglu", norm_kind="rmsnorm", positions="rotary", rotary_pairs="halves",
                     bias=False, n_max=8192)
    assert smollm2.trace_bytes(200) < MAX_TRACE_BYTES < smollm2.trace_bytes(300)   # 0.38 and 0.63 GiB
    assert smollm2.trace_bytes(smollm2.longest_trace()) <= MAX_TRACE_BYTES < smollm2.trace_bytes(smollm2.longest_trace() + 1)
    wide = Transformer(Config(vocab_size=200_000, d_model=8, n_heads=2, n_layers=1, d_ff=0, n_max=1024), seed=0)
    cache = KVCache(1)
    with torch.no_grad():
        wide(torch.tensor([1, 2]), cache=cache)
    before = (len(cache), cache.k[0].clone())
    with pytest.raises(CourseInputError, match=r"trace=True should keep at most 0\.5 GiB.*1,000 tokens.*at most \d+ tokens"):
        wide(torch.zeros(1000, dtype=torch.long), cache=cache, trace=True)
    assert len(cache) == before[0] and torch.equal(cache.k[0], before[1])
    wide(torch.zeros(100, dtype=torch.long), trace=True)   # a short one runs


def test_a_list_of_id_tensors_is_a_batch():
    model = Transformer(Config(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=8), seed=1)
    a, b = torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])
    with torch.no_grad():
        assert torch.equal(model([a, b]), model(torch.stack([a, b])))


# ---------------------------------------------------------------- issue 31: a huge batch, a misspelt switch, replace

def test_a_batch_too_large_for_memory_is_refused_before_the_pass_naming_the_largest(refused, monkeypatch):
    model = Transformer(Config(vocab_size=20, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=16), seed=0)
    ran = []
    monkeypatch.setattr(Transformer, "_forward", lambda *args, **kw: ran.append(1))
    ids = torch.zeros(100_000, 16, dtype=torch.long)
    most = (3 * 2**29) // model.cfg.pass_bytes(1, 16, grad=True)   # autograd records the pass: its activations count
    refused(lambda: model(ids), "100,000 sequences of 16 tokens", "1.5 GiB", f"at most {most:,} sequences")
    assert not ran
    model(ids[:most])            # the largest batch the sentence names is taken
    assert ran == [1]
    with torch.no_grad():        # nothing kept for a backward: a larger batch fits
        most = (3 * 2**29) // model.cfg.pass_bytes(1, 16)
        refused(lambda: model(ids), f"at most {most:,} sequences")
        model(ids[:most])
    assert ran == [1, 1]


def test_a_cached_step_counts_the_cache_keys_in_its_estimate():
    cfg = Config(vocab_size=20, d_model=32, n_heads=4, n_layers=2, d_ff=64, n_max=16)
    assert cfg.pass_bytes(3, 1, 100) - cfg.pass_bytes(3, 1) == 4 * 3 * 3 * 4 * 99
    assert cfg.pass_bytes(3, 5) == cfg.pass_bytes(3, 5, 5)


def test_an_unknown_switch_is_refused_naming_the_switches_it_knows(refused):
    model = Transformer(Config(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8), seed=0)
    refused(lambda: model(torch.tensor([1, 2]), casual=False), "'casual'", "causal", "ablate_heads", "scaled")


@pytest.mark.parametrize("replace, words", [
    (torch.zeros(3, 4), ["dict", "Tensor"]),
    ({"L0.h": torch.zeros(3)}, ["functions", "'L0.h': Tensor"]),
    ({"L0.h": lambda: 1}, ["replace['L0.h']", "function of one tensor"]),
])
def test_replace_is_a_dict_of_functions_of_one_tensor_in_the_model_and_in_capture(refused, replace, words):
    from helpers import patching
    from helpers.real import circuit
    model = Transformer(Config(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8), seed=0)
    ids = torch.tensor([[1, 2, 3]])
    for call in (lambda: model(ids, replace=replace), lambda: patching.capture(model, ids, ["L0.h"], replace=replace),
                 lambda: circuit.capture(model, ids, ["L0.h"], replace=replace)):
        refused(call, *words)
    doubled = circuit.capture(model, ids, ["L0.h"], replace={"L0.h": lambda x: 2 * x})["L0.h"]
    assert torch.allclose(doubled, 2 * circuit.capture(model, ids, ["L0.h"])["L0.h"])


# ---------------------------------------------------------------- issue 31, red team round 3: the model and its parts

def test_config_ranges_and_depth_are_refused_before_building(refused):
    base = dict(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8)
    refused(lambda: Config(**{**base, "rotary_base": 1e-300, "positions": "rotary"}), "Config.rotary_base", "> 1")
    refused(lambda: Config(**{**base, "rotary_base": 1e13}), "Config.rotary_base", "at most")
    refused(lambda: Config(**{**base, "norm_eps": 1e300}), "Config.norm_eps", "at most 1")
    refused(lambda: Config(**{**base, "norm_eps": 1e-300}), "Config.norm_eps", ">= 1e-12")
    refused(lambda: Config(**{**base, "n_layers": 2_000_000}), "Config.n_layers", "at most 1,000", "2,000,000")
    for eps, base_ in ((1e-12, 1.0000001), (1.0, 1e12)):   # the ends of the ranges build (a base > 1: round 26)
        Config(**{**base, "norm_eps": eps, "rotary_base": base_, "positions": "rotary"})


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.uint8, np.int8, np.uint16])
def test_token_ids_of_any_integer_dtype_are_taken(cat, dtype):
    model, world = cat
    x = ids(world, "<BOS> the cat")
    given = x.to(dtype) if isinstance(dtype, torch.dtype) else x.numpy().astype(dtype)
    with torch.no_grad():
        assert torch.equal(model(given), model(x))


def test_an_empty_batch_is_refused(refused, cat):
    model, _ = cat
    refused(lambda: model(torch.zeros(0, 5, dtype=torch.long)), "non-empty", "(0, 5)")


def test_a_kv_cache_takes_new_ids_that_repeat_its_tokens(refused, cat):
    """'the cat', then 'the cat' encoded again, is a continuation ('the cat the cat'), as it is
    without a cache; the same ids object fed again by the next call (a cell run twice) is refused."""
    model, world = cat
    cache = KVCache(2)
    with torch.no_grad():
        model(ids(world, "<BOS> the"), cache=cache)
        cached = model(ids(world, "<BOS> the"), cache=cache)
        whole = model(ids(world, "<BOS> the <BOS> the"))
    assert len(cache) == 4 and torch.allclose(cached, whole[2:], atol=1e-5)
    prompt = ids(world, "the cat")
    model(prompt, cache=cache)
    refused(lambda: model(prompt, cache=cache), "already holds these 2 tokens")
    assert len(cache) == 6


def attention_of(cat):
    return cat[0].blocks[0].attn


@pytest.mark.parametrize("make, words", [
    (lambda: __import__("helpers.model").model.Attention(8, 2, n_kv_heads=3), ["share"]),
    (lambda: __import__("helpers.model").model.Attention(8, 2, dropout=5), ["dropout", "5"]),
    (lambda: __import__("helpers.model").model.Attention(10**6, 1), ["1.5 GiB", "Attention(1,000,000, 1)"]),
    (lambda: __import__("helpers.model").model.Attention(8, 2, rotary=dict(base=0.5, pairs="halves")), ["rotary base"]),
    (lambda: __import__("helpers.model").model.Attention(8, 2, bias="no"), ["bias"]),
    (lambda: __import__("helpers.model").model.MLP(8, -1), ["d_ff", "-1"]),
    (lambda: __import__("helpers.model").model.MLP(10**6, 10**6), ["1.5 GiB"]),
    (lambda: __import__("helpers.model").model.MLP(8, 16, activation="tanh"), ["activation", "tanh"]),
    (lambda: __import__("helpers.model").model.Block("cfg"), ["Config"]),
])
def test_the_parts_refuse_what_they_cannot_build(refused, make, words):
    refused(make, *words)


@pytest.mark.parametrize("call, words", [
    (lambda m: m.blocks[0].attn(torch.zeros(4, 6)), ["(B, T, d_model)", "(4, 6)"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 4, 5)), ["d_model=6", "(1, 4, 5)"]),
    (lambda m: m.blocks[0].attn(np.zeros((1, 4, 6))), ["torch tensor", "ndarray"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 4, 6, dtype=torch.float64)), ["float32", "float64"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 0, 6)), ["non-empty", "(1, 0, 6)"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 4, 6), ablate={5}), ["ablated head", "0 to 1", "5"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 4, 6), ablate={-1}), ["ablated head", "-1"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 4, 6), ablate="0"), ["ablate", "set of head indices"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 4, 6), start=-5), ["start", "-5"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 2000, 6)), ["at most 1,024", "2,000"]),
    (lambda m: m.blocks[0].attn(torch.zeros(1, 4, 6), casual=False), ["switches", "casual"]),
    (lambda m: m.blocks[0](torch.zeros(4, 6)), ["h should", "(4, 6)"]),
    (lambda m: m.blocks[0](torch.zeros(1, 4, 6), casual=False), ["switches", "casual"]),
    (lambda m: m.blocks[0](torch.zeros(1, 4, 6), attention=False, casual=False), ["switches", "casual"]),
    (lambda m: m.blocks[0].mlp(torch.zeros(3, 5)), ["d_model=6", "(3, 5)"]),
    (lambda m: m.blocks[0].mlp([[0.0] * 6]), ["torch tensor", "list"]),
    (lambda m: m.embed("the cat"), ["token ids", "str"]),
    (lambda m: m.embed(torch.tensor([[1, 100]])), ["[0, 20)", "100"]),
    (lambda m: m.embed(torch.tensor([[1, 2]]), start=-3), ["start", "-3"]),
    (lambda m: m.unembed(torch.zeros(3, 5)), ["d_model=6", "(3, 5)"]),
])
def test_the_parts_check_what_they_are_called_with(refused, cat, call, words):
    model = cat[0]
    before = [p.detach().clone() for p in model.parameters()]
    refused(lambda: call(model), *words)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_parts_still_run_on_their_own(cat):
    model, world = cat
    with torch.no_grad():
        trace = model(ids(world, "<BOS> the cat"), trace=True)
        h0 = trace["h0"][None]
        x = model.blocks[0].ln1(h0)
        assert torch.allclose(model.blocks[0].attn(x), trace["L0.attn"][None], atol=1e-6)
        assert torch.allclose(model.blocks[0].attn(x, ablate=[0, 1]), model.blocks[0].attn.b_O.expand(1, 3, 6))
        assert torch.allclose(model.blocks[0](h0), trace["L0.h"][None], atol=1e-6)
        assert torch.allclose(model.blocks[0].mlp(trace["L0.ln2"]), trace["L0.mlp"], atol=1e-6)
        assert torch.allclose(model.embed(ids(world, "<BOS> the cat")[None])[0], trace["h0"])
        assert torch.equal(model.embed(ids(world, "<BOS> the cat").tolist()), trace["h0"])   # a list of ids too
        assert torch.allclose(model.unembed(trace["L1.h"]), trace["logits"], atol=1e-5)


def test_a_config_counts_the_floats_its_model_holds():
    """Config.floats (what building a model allocates, checked before it is built) is an upper bound
    close to what the model holds: SwiGLU's gate bias b_G is counted (it was left out)."""
    for options in (dict(), dict(activation="swiglu"), dict(activation="swiglu", bias=False, norm_kind="rmsnorm"),
                    dict(n_kv_heads=2, positions="learned"), dict(d_ff=0, positions="rotary")):
        cfg = Config(vocab_size=11, d_model=32, n_heads=4, n_layers=2, d_ff=48, **options) if "d_ff" not in options \
            else Config(vocab_size=11, d_model=32, n_heads=4, n_layers=2, **options)
        model = Transformer(cfg)
        held = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
        assert held <= cfg.floats() <= held + 5 * cfg.n_layers * cfg.d_model, options   # an upper bound, close


def test_round_6_a_cache_keeps_the_switches_it_was_filled_with(cat, refused):
    """Red team round 6: a KVCache filled under one set of switches and read under another gave
    logits that match no full pass; an endless ablate_heads hung. (A cache filled without the causal
    mask stays possible: chapter 04 shows why prefill needs the mask, and that decoding does not.)"""
    import itertools

    cat, ids = cat[0], torch.tensor([0, 3, 5, 7, 2])
    with torch.no_grad():
        cache = KVCache(2)
        cat(ids[:4], cache=cache, ablate_heads={(0, 0)})
        refused(lambda: cat(ids[4:], cache=cache), "switches", "ablate_heads")
        assert len(cache) == 4   # the refused pass left the cache as it was
        step = cat(ids[4:], cache=cache, ablate_heads=[(0, 0)])[-1]
        assert torch.allclose(step, cat(ids, ablate_heads={(0, 0)})[-1], atol=1e-5)
        for heads in (itertools.repeat((0, 0)), ((0, 0) for _ in range(3)), iter([(0, 0)])):
            refused(lambda heads=heads: cat(ids, ablate_heads=heads), "ablate_heads should be a set")
        assert torch.equal(cat(ids, ablate_heads={(0, 0): None}.keys()), cat(ids, ablate_heads=[(0, 0)]))
        refused(lambda: cat(ids, ablate_heads=[(0, 0)] * 100_001), "at most 100,000")


def test_round_7_ids_are_checked_before_they_are_converted(cat, refused):
    """Red team round 7: range(10**12) as ids hung the model, the tokenizer and generate; True among
    ids was read as 1; meta and sparse ids stopped in torch; uint64 ids wrapped round to -1."""
    import numpy as np

    from helpers.sampling import compute as sampling

    model, world = cat
    for call in (lambda: model(range(10**12)), lambda: world.tokenizer.decode(range(10**12)),
                 lambda: sampling.generate(model, range(10**12), 3)):
        refused(call, "range of 1,000,000,000,000")
    for call in (lambda: model([True, 2]), lambda: world.tokenizer.decode([True, 1]),
                 lambda: sampling.generate(model, [True, 5], 2), lambda: model([[1, 2], [True, 3]])):
        refused(call, "bool")
    refused(lambda: model(torch.tensor([1, 2, 3], device="meta")), "meta device")
    refused(lambda: model(torch.tensor([1, 2, 3]).to_sparse()), "sparse")
    refused(lambda: model(np.array([2**64 - 1], dtype=np.uint64)), "about 1.84e+19")
    assert model(range(3)).shape == (3, model.cfg.vocab_size)


def test_round_7_a_recorded_pass_counts_what_autograd_keeps(cat, refused):
    """Red team round 7: a pass the estimate allowed in grad mode peaked at 3 GB (the estimate
    counted a no-grad pass); with autograd recording, every layer's activations count too."""
    model = cat[0]
    big = torch.zeros(4_100_000, 1, dtype=torch.long)
    refused(lambda: model(big), "at most 1.5 GiB")
    cfg = model.cfg
    assert cfg.pass_bytes(8, 64, grad=True) == cfg.pass_bytes(8, 64) + 8 * cfg.trace_bytes(64)


def test_round_7_a_cache_keeps_the_dtype_it_was_filled_in(refused):
    """Red team round 7: a cache filled in float32 took float64 keys after model.double() and then
    broke in torch's matmul after model.float()."""
    from helpers.weights import load_cat

    model, cache = load_cat(), KVCache(2)
    with torch.no_grad():
        model(torch.tensor([1, 2]), cache=cache)
        refused(lambda: model.double()(torch.tensor([3]), cache=cache), "dtype")
        assert len(cache) == 2
        model.float()(torch.tensor([3]), cache=cache)
        assert len(cache) == 3


def test_round_7_a_replace_function_that_raises_gives_one_sentence(cat, refused):
    model = cat[0]
    refused(lambda: model(torch.tensor([3]), replace={"L0.h": lambda x: 1 / 0}),
            "replace['L0.h']", "ZeroDivisionError")


def test_a_cache_is_refused_with_attention_off(cat, refused):
    """attention=False computes no keys or values: a cache stayed empty, every cached step sat at
    position 0, and a cached generation drew other tokens than an uncached one."""
    from helpers.sampling.compute import generate

    model, ids = cat[0], torch.tensor([0, 3, 5, 7])
    cache = KVCache(2)
    with torch.no_grad():
        refused(lambda: model(ids, cache=cache, attention=False), "attention=False", "cache=None")
        assert len(cache) == 0 and cache.switches is None
        refused(lambda: generate(model, ids, 5, attention=False), "cache=False", "attention=False")
        assert len(generate(model, ids, 5, attention=False, cache=False)) == 9


def test_round_8_sizes_are_counted_before_a_pass_and_config_names_its_settings(cat, refused):
    """Red team round 8: a block spent 11 GB on an expanded input before refusing it; ids given as a
    broadcast array were made into 2.5 GB; a list whose __len__ lies reached torch's IndexError; a
    misspelt Config setting got Python's own TypeError."""
    import numpy as np

    from helpers.model import Config

    class LyingList(list):
        def __len__(self):
            return 10

    model = cat[0]
    refused(lambda: model.blocks[0](torch.zeros(1, 1, 6).expand(200_000, 1000, 6)), "a part of the model", "GiB")
    refused(lambda: model(np.broadcast_to(np.array([1]), (300_000, 1000))), "token ids of shape (300000, 1000)")
    refused(lambda: model(LyingList([1, 2])), "token ids", "LyingList")
    refused(lambda: Config(20, 6, 2, 2, 24, n_head=2), "Config's settings should be among", "n_head")
    refused(lambda: Config(20, 6, 2), "n_layers, d_ff are missing")
    import copy
    config = Config(20, 6, 2, 2, 24)
    assert copy.deepcopy(config) == config


def test_round_9_a_cache_is_not_extended_by_several_tokens_without_the_mask(cat, refused):
    """Red team round 9: cat(ids[4:], cache=kv, causal=False) after a causal prefill gave logits that are
    neither the causal pass's nor the unmasked one's. One token without the mask (the mask changes nothing)
    and an unmasked prefill into an empty cache still run; a cache filled without the mask is not extended."""
    cat, ids = cat[0], torch.tensor([1, 4, 5, 9, 3, 7])
    kv = KVCache(cat.cfg.n_layers)
    cat(ids[:4], cache=kv)
    refused(lambda: cat(ids[4:], cache=kv, causal=False), "expected causal=True", "2 new tokens after 4 cached")
    assert len(kv) == 4
    assert torch.allclose(cat(ids[4:5], cache=kv, causal=False), cat(ids[:5])[4:], atol=1e-5)
    unmasked = KVCache(cat.cfg.n_layers)
    assert torch.allclose(cat(ids[:4], cache=unmasked, causal=False), cat(ids[:4], causal=False), atol=1e-5)
    refused(lambda: cat(ids[4:5], cache=unmasked), "filled without it (causal=False)")
    assert len(unmasked) == 4


def test_round_9_a_replace_function_returning_no_dense_tensor_is_named(cat, refused):
    """Red team round 9: a replace function returning a meta or a sparse tensor gave raw torch errors, and a
    callable whose __signature__ raises a raw RuntimeError from the check itself."""
    cat, ids = cat[0], torch.tensor([1, 4, 5, 9])

    class Odd:
        __signature__ = property(lambda self: (_ for _ in ()).throw(RuntimeError("signature")))

        def __call__(self, x):
            return x
    refused(lambda: cat(ids, replace={"L0.h": lambda x: torch.empty_like(x, device="meta")}),
            "replace['L0.h'] should return a dense tensor", "meta")
    refused(lambda: cat(ids, replace={"L0.h": lambda x: x.to_sparse()}), "replace['L0.h'] should return a dense",
            "sparse")
    assert torch.equal(cat(ids, replace={"L0.h": Odd()}), cat(ids))
