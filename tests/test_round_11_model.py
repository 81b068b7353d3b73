"""Red team round 11 (/tmp/rtG): the model's KVCache checks for an Attention or Block called on its own, its
rotary tables, reference's masks and softmax, and to_numpy's byte count."""
import numpy as np
import pytest
import torch

import helpers.model as M
from helpers import reference as ref
from helpers import weights, worlds
from helpers.errors import to_numpy
from helpers.mlp import compute as mlp
from helpers.model import Attention, KVCache


@pytest.fixture(scope="module")
def cat():
    return weights.load_cat()


def test_round_11_reference_masks_hold_true_false_or_1_and_0_only(refused):
    """07: NaN, 0.5, text and an additive -inf mask were read as truth values (hiding keys silently)."""
    s = np.arange(9.0).reshape(3, 3)
    refused(lambda: ref.apply_mask(s, np.full((3, 3), np.nan)), "mask should hold True/False", "nan")
    refused(lambda: ref.apply_mask(s, np.full((3, 3), 0.5)), "mask should hold True/False", "0.5")
    refused(lambda: ref.apply_mask(s, np.array([["a"] * 3] * 3)), "mask", "text")
    refused(lambda: ref.apply_mask(s, np.triu(np.full((3, 3), -np.inf), 1)), "additive mask")
    refused(lambda: ref.attention(s, s, s, mask=np.full((3, 3), 0.5) * np.tril(np.ones((3, 3)))), "mask", "0.5")
    hidden = ref.causal_mask(3)
    expected = ref.apply_mask(s, hidden)
    assert np.isneginf(expected).sum() == 3
    assert np.array_equal(ref.apply_mask(s, hidden.astype(int)), expected)   # 1 hides, 0 keeps
    assert np.array_equal(ref.apply_mask(s, hidden.tolist()), expected)
    assert np.array_equal(ref.attention(s, s, s, mask=hidden)[1], ref.attention(s, s, s, causal=True)[1])


def test_round_11_reference_apply_mask_names_a_ragged_mask(refused):
    """08: a ragged mask list was NumPy's raw ValueError from inside reference.py."""
    refused(lambda: ref.apply_mask(np.ones((2, 2)), [[True, False], [True]]), "mask", "rows of one length")


def test_round_11_softmax_of_one_number_names_x_not_the_axis(refused):
    """09: softmax(3.0) blamed the default axis=-1."""
    for x in (3.0, np.array(3.0)):
        message = refused(lambda: ref.softmax(x), "x should be at least 1-D", "3.0")
        assert "axis" not in message


def test_round_11_a_rotary_table_changed_in_place_is_made_again():
    """14: a learner's function that wrote into helpers.model's rotary tables moved every rotary model's
    logits for the rest of the session."""
    induction = weights.load_induction()
    ids = worlds.repeated_tokens(1, 8, induction.cfg.vocab_size, seed=1)[0]
    with torch.no_grad():
        before = induction(ids).clone()
    cfg = induction.cfg
    tables = [t for entry in M._ROTARY_TABLES.values() for t in entry[:2]]
    assert tables
    for table in tables:   # as a learner might: in place, or through a view
        table.fill_(1.0)
        table[:4].mul_(2.0)
    cos, sin = M.rotary_cos_sin(0, 8, cfg.d_k, cfg.rotary_base)
    cos.fill_(1.0), sin.fill_(0.0)   # the rows a caller gets are its own
    with torch.no_grad():
        assert torch.equal(induction(ids), before)
    angle = M.sinusoidal_angles(3, 5, cfg.d_k, cfg.rotary_base)
    cos, sin = M.rotary_cos_sin(3, 5, cfg.d_k, cfg.rotary_base)
    assert torch.equal(cos, torch.cos(angle)) and torch.equal(sin, torch.sin(angle))


def test_round_11_mlp_forward_refuses_an_overflowing_output(refused):
    """27: values near 1e200 gave out = [inf, inf] (fixed the same day in mlp_forward; kept here)."""
    with np.errstate(all="ignore"):
        refused(lambda: mlp.mlp_forward(np.full(2, 1e200), np.ones((2, 3)), np.zeros(3), np.full((3, 2), 1e200),
                                        np.zeros(2)), "should be finite numbers", "overflows")


def test_round_11_an_attention_or_block_alone_checks_its_cache(refused, cat):
    """35: an Attention (or Block) called alone with cache= made none of the model's cache checks: another
    batch size or another model's layer was a raw torch.cat error, and a cache left with 8 and 4 cached
    rows was then used by the model silently."""
    attn = cat.blocks[0].attn
    cache = KVCache(2)
    attn(torch.randn(1, 4, 6), cache=cache, layer=0)
    refused(lambda: attn(torch.randn(2, 3, 6), cache=cache, layer=0), "batch of 1", "got 2")
    refused(lambda: Attention(6, 1)(torch.randn(1, 3, 6), cache=cache, layer=0), "another Attention")
    refused(lambda: cat.blocks[1](torch.randn(1, 3, 6), cache=cache, layer=0), "another Attention")
    assert len(cache) == 4
    attn(torch.randn(1, 4, 6), cache=cache, layer=0), attn(torch.randn(1, 4, 6), cache=cache, layer=1)
    ids = worlds.cat_world().tokenizer.encode("<BOS> the")
    refused(lambda: cat(ids, cache=cache), "KVCache of this model", "an Attention called on its own")
    filled = KVCache(2)
    cat(ids, cache=filled)
    refused(lambda: attn(torch.randn(1, 1, 6), cache=filled, layer=0), "a model's passes")
    refused(lambda: cat.blocks[0](torch.randn(1, 1, 6), cache=filled, layer=0), "a model's passes")
    assert [k.shape[-2] for k in filled.k] == [2, 2]
    uneven = KVCache(2)
    uneven.extend(0, torch.zeros(1, 1, 3, 6), torch.zeros(1, 1, 3, 6))   # filled by hand, one layer only
    refused(lambda: cat(ids, cache=uneven), "same number of tokens", "0 to 3")
    induction = weights.load_induction()   # rotary: a token's keys depend on its position
    rotary, held = induction.blocks[0].attn, KVCache(1)
    rotary(torch.randn(1, 3, induction.cfg.d_model), cache=held)
    refused(lambda: rotary(torch.randn(1, 1, induction.cfg.d_model), cache=held), "start should be", "3", "start=0")
    rotary(torch.randn(1, 1, induction.cfg.d_model), cache=held, start=3)
    assert len(held) == 4


def test_round_11_an_attention_or_block_alone_leaves_its_cache_as_it_was_when_it_fails(refused, cat):
    """36: attn(x, cache=c, keep=f) with f raising failed, but the cache had grown from 3 to 5 tokens."""
    def stop_at(where):
        def keep(name, x):
            if name == where:
                raise ValueError("stop here")
        return keep

    attn, cache = cat.blocks[0].attn, KVCache(2)
    attn(torch.randn(1, 3, 6), cache=cache, layer=0)
    k, owner = cache.k[0], cache.owner
    refused(lambda: attn(torch.randn(1, 2, 6), cache=cache, layer=0, keep=stop_at("scores")), "stop here")
    assert len(cache) == 3 and cache.k[0] is k and cache.owner is owner
    block, fresh = cat.blocks[0], KVCache(2)
    refused(lambda: block(torch.randn(1, 2, 6), cache=fresh, keep=stop_at("mlp")), "stop here")
    refused(lambda: block.attention_part(torch.randn(1, 2, 6), cache=fresh, keep=stop_at("h_mid")), "stop here")
    assert len(fresh) == 0 and fresh.owner is None
    block(torch.randn(1, 2, 6), cache=fresh)
    assert len(fresh) == 2


def test_round_11_to_numpy_counts_a_tensor_before_converting_it(refused, monkeypatch):
    """37: a bfloat16 tensor was converted with x.float() (2.2 GiB for an expanded view) before its bytes
    were counted."""
    small = ref.softmax(torch.zeros(3, dtype=torch.bfloat16))
    assert np.allclose(small, 1 / 3)
    wide = torch.zeros(1, dtype=torch.bfloat16).expand(600_000_000)

    def converted(self, *args, **kwargs):
        raise AssertionError("the tensor was converted before its bytes were counted")

    monkeypatch.setattr(torch.Tensor, "float", converted)
    refused(lambda: ref.softmax(wide), "x (a tensor of 600,000,000 numbers)", "1.5 GiB")
    refused(lambda: to_numpy(wide, "x"), "1.5 GiB")
