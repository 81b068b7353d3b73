"""Red team round 14 (reader A, entries 5, 6, 7, 10 and 11): chapter 04's maps_view on a one-head
model raised a raw IndexError; a bfloat16 model made the explorers and the chapter functions that
return its numbers as NumPy raise a raw TypeError; replace= took a learner's function that returned
NaN (the mask's -inf times 0) and gave NaN logits silently; head_view with a cache put an unchecked
prompt (a list) into the cache's key; the heads explorer (and the tour's) kept showing a model's
old attention after the model changed in place."""
import copy
import warnings

import numpy as np
import pytest
import torch

from helpers.model import DIGEST_NUMBERS, weights_state
from helpers.heads import compute as heads
from helpers.heads import explorer as heads_explorer
from helpers.masking import compute as masking
from helpers.masking import explorer as masking_explorer
from helpers.positions import compute as positions
from helpers.positions import explorer as positions_explorer
from helpers.tour import explorer as tour_explorer

PNG = b"\x89PNG"
PROMPTS = ["<BOS> the cat sat on the mat", "<BOS> the big dog ran"]


@pytest.fixture(autouse=True)
def _quiet():
    import matplotlib
    matplotlib.use("Agg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@pytest.fixture(scope="module")
def bf16(cat):
    return copy.deepcopy(cat).bfloat16()


def fake_maps(n_layers, n_heads, T=4):
    """An attention_maps result for a grid of n_layers x n_heads maps of T words."""
    scores = torch.randn(n_layers, n_heads, T, T, generator=torch.Generator().manual_seed(0))
    hidden = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    weights = torch.softmax(scores.masked_fill(hidden, float("-inf")), -1)
    return dict(words=["<BOS>", "the", "cat", "sat"][:T], weights=weights, next="on", p_next=0.5, causal=True)


# ----------------------------------------------------------------- entry 5: maps_view of one head or one layer

@pytest.mark.parametrize("n_layers, n_heads", [(2, 1), (1, 2), (1, 1), (3, 1)])
def test_round_14_maps_view_draws_a_grid_of_one_head_or_one_layer(n_layers, n_heads):
    """05: fig.subplots(2, 1) gave a (2,) array and np.atleast_2d made it (1, 2): a raw IndexError."""
    draw = masking_explorer.maps_view(n_layers, n_heads)
    assert draw(fake_maps(n_layers, n_heads)).startswith(PNG)
    titles = [ax.get_title() for ax in draw.figure.axes if ax.get_title()]
    assert titles == [f"layer {L}, head {H} (L{L}H{H})" for L in range(n_layers) for H in range(n_heads)]


def test_round_14_maps_view_of_a_one_head_model_shows_its_maps(cat_world):
    """A one-head cat-world model (chapter 03's scaling models have one head) through attention_maps."""
    from helpers.model import Config, Transformer

    one_head = Transformer(Config(vocab_size=len(cat_world.tokenizer.vocab), d_model=6, n_heads=1, n_layers=2,
                                  d_ff=12, n_max=16))
    draw = masking_explorer.maps_view(one_head.cfg.n_layers, one_head.cfg.n_heads)
    assert draw(masking.attention_maps(one_head, cat_world, "<BOS> the cat sat", causal=False)).startswith(PNG)


# ----------------------------------------------------------------- entry 6: a bfloat16 model

def test_round_14_explorers_draw_a_bfloat16_model(bf16, cat_world):
    """06: .numpy() on bfloat16 tensors raised a raw TypeError; each explorer now draws its picture."""
    explorers = [tour_explorer.explorer(bf16, cat_world),
                 heads_explorer.explorer(model=bf16, tokenizer=cat_world, prompts=PROMPTS),
                 positions_explorer.explorer(bf16, cat_world),
                 masking_explorer.explorer({"bfloat16": bf16}, cat_world)]
    for ex in explorers:
        assert ex.picture().startswith(PNG)


def test_round_14_chapter_functions_read_a_bfloat16_model_as_float32(cat, bf16, cat_world):
    """06: the functions that return a model's numbers as NumPy read bfloat16 as float32 (exactly);
    a float32 model's numbers stay float32, so no number a notebook prints changes."""
    ids, w = heads.prompt_attention(bf16, cat_world.tokenizer, "<BOS> the cat sat")
    assert w.dtype == np.float32 and w.shape == (2, 2, 4, 4)
    assert np.allclose(w.sum(-1), 1, atol=1e-6)   # bfloat16's rows, rounded, divided by their sums
    assert np.abs(w - heads.prompt_attention(cat, cat_world.tokenizer, "<BOS> the cat sat")[1]).max() < 0.02
    view = heads.head_view(bf16, 1, 0, PROMPTS[0], cat_world)
    assert view["weights"].dtype == np.float32 and np.isfinite(view["previous"])
    mine, theirs = (positions.next_token_view(m, cat_world, "<BOS> the cat sat", seed=1) for m in (bf16, cat))
    assert mine["probs"].dtype == np.float32 and theirs["probs"].dtype == np.float32
    assert np.abs(mine["probs"] - theirs["probs"]).max() < 0.05
    demo = positions.model_order_demo(bf16, cat_world, "<BOS> the cat sat".split(), "<BOS> cat the sat".split())
    assert demo["row_diff"].dtype == np.float32
    assert heads.as_numpy(torch.ones(2, dtype=torch.bfloat16)).dtype == np.float32
    assert heads.as_numpy(torch.ones(2, dtype=torch.float64)).dtype == np.float64


def test_round_14_row_moves_of_a_bfloat16_model(dragon):
    """06: row_moves (chapter 06, a learned table) of a bfloat16 model."""
    moves = positions.row_moves(copy.deepcopy(dragon).bfloat16(), seed=0)
    assert moves.dtype == np.float32 and moves.shape == (dragon.cfg.n_max,)


# ----------------------------------------------------------------- entry 7: what a replace function returns

def test_round_14_replace_returning_nan_is_refused(cat, cat_world, refused):
    """07: "every score to zero" (s * 0, the mask's -inf times 0 is NaN) gave NaN logits silently."""
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    refused(lambda: cat(ids, replace={"L1.scores": lambda s: s * 0}, trace=True),
            "replace['L1.scores']", "NaN", "-inf * 0")
    refused(lambda: cat(ids, replace={"L0.h": lambda h: h * float("nan")}), "replace['L0.h']", "finite", "NaN")
    refused(lambda: cat(ids, replace={"L0.head_out": lambda x: x + float("inf")}), "replace['L0.head_out']", "inf")


def test_round_14_replace_may_hide_keys_among_the_scores(cat, cat_world, refused):
    """-inf among the scores hides a key (the mask's own, or one more): taken while each row sees a key."""
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")

    def hide_bos(s):
        s = s.clone()
        s[..., 1:, 0] = float("-inf")   # no query after the first sees <BOS>
        return s
    out = cat(ids, replace={"L0.scores": hide_bos}, trace=True)
    assert torch.isfinite(out["probs"]).all() and (out["L0.weights"][:, 1:, 0] == 0).all()
    assert torch.equal(cat(ids, replace={"L1.scores": lambda s: s.clone()}), cat(ids))
    refused(lambda: cat(ids, replace={"L0.scores": lambda s: torch.full_like(s, float("-inf"))}),
            "replace['L0.scores']", "all -inf")


def test_round_14_replace_whose_numbers_overflow_later_is_refused(cat, cat_world, refused):
    """Finite numbers too large for a later step (LayerNorm's squares) gave NaN logits: refused too."""
    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    refused(lambda: cat(ids, replace={"L0.h": lambda h: h * 1e30}), "replace=['L0.h']", "finite logits")


def test_round_14_a_refused_replace_leaves_the_cache_and_model_as_they_were(cat, cat_world, refused):
    from helpers.model import KVCache

    ids = cat_world.tokenizer.encode("<BOS> the cat sat")
    before = {name: p.detach().clone() for name, p in cat.state_dict().items()}
    cache = KVCache(cat.cfg.n_layers)
    refused(lambda: cat(ids, cache=cache, replace={"L1.scores": lambda s: s * 0}), "NaN")
    assert len(cache) == 0
    assert all(torch.equal(before[name], p) for name, p in cat.state_dict().items())


def test_round_14_a_pass_without_replace_makes_the_torch_calls_chapter_09_counts():
    """07: the check runs only with replace=; chapter 09 prints 205 torch calls for a one-token pass
    of its wide model and 223 for a cached step (199 and 217 before round 25 named the token ids' device and
    read the ambient modes)."""
    from helpers.model import Config, Transformer
    from helpers.sampling import compute as sampling

    torch.manual_seed(0)
    wide = Transformer(Config(vocab_size=1000, d_model=256, n_heads=4, n_layers=4, d_ff=1024, n_max=1024,
                              positions="learned")).eval()
    probe = torch.arange(16) % wide.cfg.vocab_size
    assert sampling.op_count(wide, probe[:1]) == 205
    assert sampling.op_count(wide, probe[-1:], cache=sampling.prefilled(wide, probe[:-1])) == 223


# ----------------------------------------------------------------- entry 10: head_view's cache and the prompt

@pytest.mark.parametrize("prompt", [["<BOS>", "the", "cat"], {"a": 1}, None, 3])
def test_round_14_head_view_checks_the_prompt_before_the_cache(cat, cat_world, refused, prompt):
    """10: a list prompt went into the cache's key first: a raw TypeError (unhashable type: 'list')."""
    cache = {}
    refused(lambda: heads.head_view(cat, tokenizer=cat_world, prompt=prompt, cache=cache), "prompt")
    if prompt is not None:   # (None: a shipped model's first prompt)
        refused(lambda: heads.head_view("cat", prompt=prompt, cache=cache), "prompt")
    assert cache == {}


# ----------------------------------------------------------------- entry 11: a model changed in place

def scale_queries(model, by, through_data=False):
    """Change the model in place as a learner would: W_Q and W_K times ``by`` (under no_grad, or through .data)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "W_Q" in name or "W_K" in name:
                (p.data if through_data else p).mul_(by)


@pytest.mark.parametrize("through_data", [False, True])
def test_round_14_heads_explorer_shows_a_model_changed_in_place(cat, cat_world, through_data):
    """11: the cache was keyed by id(model): a prompt seen before kept the old maps."""
    model = copy.deepcopy(cat)
    ex = heads_explorer.explorer(model=model, tokenizer=cat_world, prompts=PROMPTS, layer=0, head=0)
    before = ex.picture()
    scale_queries(model, 4.0, through_data)
    ex.set(head=1)
    ex.set(head=0)
    now = ex.picture()
    fresh = heads_explorer.explorer(model=model, tokenizer=cat_world, prompts=PROMPTS, layer=0, head=0).picture()
    assert now != before and now == fresh


def test_round_14_head_view_cache_follows_training_and_stays_bounded(cat, cat_world):
    """An optimizer's step changes the weights in place: the cache computes again; old keys do not pile up."""
    model, cache = copy.deepcopy(cat), {}
    first = heads.head_view(model, 0, 0, PROMPTS[0], cat_world, cache=cache)["weights"].copy()
    again = heads.head_view(model, 0, 0, PROMPTS[0], cat_world, cache=cache)["weights"]
    assert np.array_equal(first, again) and len(cache) == 1      # the same weights: read from the cache
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    ids = cat_world.tokenizer.encode(PROMPTS[0])
    torch.nn.functional.cross_entropy(model(ids[:-1]), ids[1:]).backward()
    optimizer.step()
    trained = heads.head_view(model, 0, 0, PROMPTS[0], cat_world, cache=cache)["weights"]
    assert np.array_equal(trained, heads.head_view(model, 0, 0, PROMPTS[0], cat_world)["weights"])
    assert not np.array_equal(trained, first)
    for n in range(heads.MAX_CACHED + 5):
        with torch.no_grad():
            model.E.add_(0.0)   # a new version each time
        heads.head_view(model, 0, 0, PROMPTS[n % 2], cat_world, cache=cache)
    assert len(cache) <= heads.MAX_CACHED


def test_round_14_tour_explorer_shows_a_model_changed_in_place(cat, cat_world):
    """11, the same in the tour's explorer (its views were keyed by the prompt alone)."""
    model = copy.deepcopy(cat)
    ex = tour_explorer.explorer(model, cat_world)
    before = ex.picture()
    scale_queries(model, 4.0, through_data=True)
    now = ex.picture()
    assert now != before and now == tour_explorer.explorer(model, cat_world).picture()


def test_round_14_weights_state_is_cheap_for_a_large_model():
    """A model past DIGEST_NUMBERS is keyed by ids and version counters only (no pass over its numbers)."""
    from helpers.model import Config, Transformer

    big = Transformer(Config(vocab_size=16, d_model=1024, n_heads=4, n_layers=1, d_ff=4096, n_max=8))
    assert sum(p.numel() for p in big.parameters()) > DIGEST_NUMBERS
    state = weights_state(big)
    assert all(isinstance(entry, tuple) for entry in state)
    with torch.no_grad():
        big.blocks[0].attn.W_Q.mul_(2)
    assert weights_state(big) != state


def test_exact_weights_state_sees_an_edit_no_counter_sees():
    """exact=True (the sampling explorer's prompt states) digests every number: an edit through
    ``p.data`` of a model past DIGEST_NUMBERS changes it, and the same numbers give the same key."""
    from helpers.model import Config, Transformer

    big = Transformer(Config(vocab_size=16, d_model=1024, n_heads=4, n_layers=1, d_ff=4096, n_max=8))
    cheap, exact = weights_state(big), weights_state(big, exact=True)
    before = float(big.blocks[0].attn.W_Q[0, 0])
    big.blocks[0].attn.W_Q.data[0, 0] += 1.0
    assert weights_state(big) == cheap   # no counter saw it: the cheap key is blind to it, as documented
    assert weights_state(big, exact=True) != exact
    big.blocks[0].attn.W_Q.data[0, 0] = before
    assert weights_state(big, exact=True) == exact
