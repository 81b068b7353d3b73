"""Red team round 13 (/tmp/rt13/A, entries 1, 2 and 5): Attention's ablate took an endless iterator; the
model's parts called on their own returned NaN/inf for NaN input or input whose squares overflow float32;
the course's torch attention functions returned inf/NaN for finite inputs whose products overflow."""
import itertools
import threading

import pytest
import torch

import helpers.model as M
from helpers import weights
from helpers.masking import compute as masking
from helpers.model import MLP, Attention, KVCache
from helpers.qkv import compute as qkv
from helpers.scaling import compute as scaling


@pytest.fixture(scope="module")
def cat():
    return weights.load_cat()


def finishes(call, seconds=10):
    """What call() raised or returned, run in a thread that must finish within ``seconds``."""
    result = {}

    def run():
        try:
            result["value"] = call()
        except Exception as error:   # noqa: BLE001
            result["error"] = error
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call did not finish"
    return result


# ----------------------------------------------------------------- entry 1: ablate as Transformer.check_heads


def test_round_13_attention_refuses_an_endless_iterator_for_ablate(refused):
    """01: itertools.repeat(0) never ended (a set was built from any iterable)."""
    attn, x = Attention(6, 2), torch.zeros(1, 4, 6)
    got = finishes(lambda: attn(x, ablate=itertools.repeat(0)))
    assert isinstance(got.get("error"), M.CourseInputError), got
    assert "ablate should be a set of head indices" in str(got["error"])
    refused(lambda: attn(x, ablate=(head for head in [0])), "ablate should be a set of head indices", "generator")
    refused(lambda: attn(x, ablate=iter([0])), "ablate should be a set of head indices")
    refused(lambda: attn(x, ablate=map(int, "0")), "ablate should be a set of head indices")
    refused(lambda: attn(x, ablate=range(10**20)), "ablate should name at most", "heads")


def test_round_13_attention_still_takes_sets_lists_tuples_and_ranges():
    attn, x = Attention(6, 2), torch.randn(1, 4, 6)
    expected = attn(x, ablate={0})
    for ablate in ([0], (0,), frozenset({0}), range(1), {0: None}.keys()):
        assert torch.equal(attn(x, ablate=ablate), expected), ablate
    assert torch.allclose(attn(x, ablate=[0, 1]), attn.b_O.expand(1, 4, 6))


def test_round_13_model_ablate_heads_keeps_its_refusals(cat, refused):
    """The model's check (now shared with Attention's) says the same of an iterator and too many pairs."""
    refused(lambda: cat(torch.tensor([1, 2]), ablate_heads=iter([(0, 0)])), "ablate_heads should be a set of (layer, head)")
    refused(lambda: cat(torch.tensor([1, 2]), ablate_heads=[(0, 0)] * (M.MAX_HEAD_PAIRS + 1)), "ablate_heads",
            "at most 100,000")
    assert cat.check_heads([(0, 1), (1, 0)]) == {(0, 1), (1, 0)}


# ----------------------------------------------------------------- entry 2: the parts called on their own


NAN = torch.full((1, 3, 6), float("nan"))
HUGE = torch.full((1, 3, 6), 1e30)
HUGE[..., 0] = -1e30


@pytest.mark.parametrize("part, name", [
    (lambda m: m.blocks[0].attn, "x"), (lambda m: m.blocks[0], "h"), (lambda m: m.blocks[0].mlp, "x"),
    (lambda m: m.unembed, "h"), (lambda m: m.blocks[0].attention_part, "h"), (lambda m: m.blocks[0].mlp_part, "h_mid")])
def test_round_13_parts_refuse_nan_and_entries_whose_squares_overflow(cat, refused, part, name):
    """02: NaN in, or entries of size 1e30 (a norm's variance, the scores overflow float32): NaN/inf came out."""
    call = part(cat)
    refused(lambda: call(NAN), f"{name} should hold finite numbers", "NaN or inf")
    refused(lambda: call(NAN.clone().fill_(float("inf"))), f"{name} should hold finite numbers")
    refused(lambda: call(HUGE), f"{name} should hold numbers whose squares stay finite in float32", "1e+30")
    with torch.no_grad():
        assert torch.isfinite(call(torch.randn(1, 3, 6))).all()   # ordinary input: as before


def test_round_13_a_standalone_mlp_and_a_double_attention_check_in_their_own_dtype(refused):
    refused(lambda: MLP(6, 8)(torch.full((2, 6), float("nan"))), "x should hold finite numbers")
    attn = Attention(6, 2).double()
    x = torch.full((1, 2, 6), 1e30, dtype=torch.float64)   # fine in float64
    assert torch.isfinite(attn(x)).all()
    refused(lambda: attn(torch.full((1, 2, 6), 1e160, dtype=torch.float64)), "squares stay finite in float64")


def test_round_13_a_part_whose_output_overflows_is_refused_naming_its_input_and_leaves_the_cache(refused):
    """Finite x within the squares' bound, but weights large enough that the scores overflow: a sentence naming
    x's size, and a cache the call would have filled is left as it was."""
    attn = Attention(6, 2)
    with torch.no_grad():
        attn.W_Q.mul_(1e12)
        attn.W_K.mul_(1e12)
    x = torch.full((1, 3, 6), 1e8)
    refused(lambda: attn(x), "Attention should give finite numbers", "overflow float32", "x up to 1e+08")
    cache = KVCache(1)
    refused(lambda: attn(x, cache=cache), "Attention should give finite numbers")
    assert len(cache) == 0 and cache.owner is None
    refused(lambda: attn(x, keep=lambda name, t: None), "what keep returned may hold NaN or inf")
    mlp = MLP(6, 4)
    with torch.no_grad():
        mlp.W_1[0, 0] = float("nan")
    refused(lambda: mlp(torch.ones(1, 6)), "the MLP should give finite numbers", "its weights hold NaN or inf")


def test_round_13_block_overflow_leaves_its_cache(cat, refused):
    """A block called on its own with a cache: a refusal after the work leaves the cache as it was."""
    block = cat.blocks[0]
    original = [block.attn.W_Q.detach().clone(), block.attn.W_K.detach().clone()]
    try:
        with torch.no_grad():
            block.attn.W_Q.mul_(1e20)
            block.attn.W_K.mul_(1e20)
        cache = KVCache(2)
        refused(lambda: block(torch.randn(1, 3, 6), cache=cache), "should give finite numbers")
        assert len(cache) == 0 and cache.owner is None and cache.k == [None, None]
    finally:
        with torch.no_grad():
            block.attn.W_Q.copy_(original[0])
            block.attn.W_K.copy_(original[1])


def test_round_13_the_models_own_pass_never_runs_the_parts_checks(cat, monkeypatch):
    """The checks run only for a part called on its own: a pass (cached, traced, with replace) never calls them,
    so the torch calls chapter 09 counts do not change."""
    def never(*args, **kwargs):
        raise AssertionError("a part's own check ran inside the model's pass")
    expected = cat(torch.tensor([1, 2, 3]))
    monkeypatch.setattr(M, "check_part_input", never)
    monkeypatch.setattr(M, "check_made", never)
    with torch.no_grad():
        assert torch.equal(cat(torch.tensor([1, 2, 3])), expected)
        cache = KVCache(2)
        cat(torch.tensor([1, 2]), cache=cache)
        cat(torch.tensor([3]), cache=cache)
        cat(torch.tensor([1, 2, 3]), trace=True, ablate_heads={(0, 1)})
        cat(torch.tensor([1, 2, 3]), replace={"L0.h": lambda h: h})


def test_round_13_a_replace_function_calling_a_part_is_checked_again(cat, refused):
    """Learner code inside a pass (a replace function) calling a part: the part checks its input."""
    refused(lambda: cat(torch.tensor([1, 2, 3]), replace={"L0.h": lambda h: cat.blocks[1](h * float("nan"))}),
            "h should hold finite numbers")


# ----------------------------------------------------------------- entry 5: the torch attention functions


def test_round_13_torch_attention_functions_refuse_products_that_overflow(refused):
    """05: q = k = 1e30 or x = 1e30 gave NaN/inf silently (the NumPy versions refuse)."""
    big = torch.full((1, 1, 2, 2), 1e30)
    refused(lambda: masking.causal_attention(big, big, torch.ones(1, 1, 2, 2)), "causal_attention should give finite",
            "q up to 1e+30", "k up to 1e+30")
    x, eye = torch.full((3, 4), 1e30), torch.eye(4)
    refused(lambda: scaling.scaled_scores(x, eye, eye, torch.zeros(4), torch.zeros(4), 2),
            "scaled_scores should give finite", "x up to 1e+30")
    refused(lambda: qkv.attention_head(x, eye[:, :2], eye[:, :2], eye[:, :2], *[torch.zeros(2)] * 3),
            "attention_head should give finite", "x up to 1e+30")


def test_round_13_scaled_scores_and_attention_head_refuse_nan_inputs(refused):
    """Neither checked its inputs' numbers: NaN in gave NaN out."""
    x, eye, nan = torch.ones(3, 4), torch.eye(4), torch.full((4,), float("nan"))
    refused(lambda: scaling.scaled_scores(x * float("nan"), eye, eye, torch.zeros(4), torch.zeros(4), 2),
            "x should hold finite numbers")
    refused(lambda: scaling.scaled_scores(x, eye, eye, nan, torch.zeros(4), 2), "b_Q should hold finite numbers")
    refused(lambda: qkv.attention_head(x, eye[:, :2], eye[:, :2], eye[:, :2] * float("inf"), *[torch.zeros(2)] * 3),
            "W_V should hold finite numbers")
    refused(lambda: masking.causal_attention(torch.zeros(1, 1, 2, 0), torch.zeros(1, 1, 2, 0), torch.ones(1, 1, 2, 2)),
            "q, k and v should hold at least one number on each axis")


def test_round_13_torch_attention_functions_give_the_same_numbers_as_before(cat):
    """Ordinary input: the model's own scores and head outputs, as before."""
    trace = cat(torch.tensor([1, 2, 3, 4]), trace=True)
    attn = cat.blocks[0].attn
    scores = scaling.scaled_scores(trace["L0.ln1"], attn.W_Q.detach(), attn.W_K.detach(), attn.b_Q.detach(),
                                   attn.b_K.detach(), attn.n_heads)
    hidden = torch.triu(torch.ones(4, 4, dtype=torch.bool), 1)
    assert torch.allclose(scores.masked_fill(hidden, float("-inf")), trace["L0.scores"], atol=1e-5)
    H, d_k = attn.n_heads, attn.d_k
    q, k, v = (trace[f"L0.{name}"].view(4, H, d_k).transpose(0, 1)[None] for name in "qkv")
    out, w = masking.causal_attention(q, k, v)
    assert torch.allclose(w[0], trace["L0.weights"], atol=1e-6)
    assert torch.allclose(out[0], trace["L0.head_out"], atol=1e-6)
    head = qkv.attention_head(trace["L0.ln1"], **qkv.head_slices(attn, 1))
    assert torch.allclose(head, trace["L0.head_out"][1], atol=1e-5)
