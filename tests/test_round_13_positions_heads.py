"""Red team round 13 (scope A, entries 6 and 12): chapter 06's rotate check judged a right rotate
against the model the cell passed, so an induction model changed by an earlier experiment (its
rotary base) gave a right answer a cross; chapter 05's multi_head check ran only on layers of 2
heads, so a class with the head count written in as 2 was called correct and kept for the GPT."""
import math

import pytest
import torch
from torch import nn

from helpers import weights
from helpers.heads import checks as heads_checks
from helpers.heads.checks import SIZE_HINT
from helpers.heads.compute import module_cases, slipped_attention
from helpers.model import Attention
from helpers.positions import checks as positions_checks
from helpers.positions import compute as pos


def right_rotate(x, start=0):
    """The learner's right rotate: x (B, H, T, d_k), adjacent pairs turned through (start + t)·w_i."""
    T, d_k = x.shape[-2], x.shape[-1]
    w = 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float32) / d_k)
    angle = torch.arange(start, start + T, dtype=torch.float32)[:, None] * w
    cos, sin = angle.cos(), angle.sin()
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * cos - x[..., 1::2] * sin
    out[..., 1::2] = x[..., 0::2] * sin + x[..., 1::2] * cos
    return out


def changed_induction(how):
    """The shipped induction model after an earlier cell's experiment on its layer 0."""
    model = weights.load_induction()
    attn = model.blocks[0].attn
    if how == "rotary base":
        attn.rotary = dict(base=500.0, pairs="adjacent")
    elif how == "rotary pairs":
        attn.rotary = dict(base=10000.0, pairs="halves")
    else:
        with torch.no_grad():
            attn.W_Q.mul_(3.0)
    return model


@pytest.mark.parametrize("how", ["rotary base", "rotary pairs", "weights"])
def test_a_right_rotate_passes_on_an_induction_model_changed_by_an_earlier_cell(how, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    model = changed_induction(how)
    before = {name: t.clone() for name, t in model.state_dict().items()}
    rotary = dict(model.blocks[0].attn.rotary)
    assert positions_checks.rotate.feedback(right_rotate, model) == []
    assert positions_checks.rotate.feedback(lambda x, start=0: pos.rotate(x, start), model) == []
    # the model the cell passed is left as it was
    assert model.blocks[0].attn.rotary == rotary
    assert all(torch.equal(t, before[name]) for name, t in model.state_dict().items())


def test_a_wrong_rotate_still_gets_its_sentence_on_a_changed_model(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    model = changed_induction("rotary base")
    said = positions_checks.rotate.feedback(lambda x, start=0: right_rotate(x), model)
    assert len(said) == 1 and "start is ignored" in said[0], said


def test_the_rotate_check_still_turns_down_a_model_that_is_not_the_induction_model():
    said = positions_checks.rotate.feedback(right_rotate, weights.load_cat())
    assert len(said) == 1 and "the induction model should be the shipped one" in said[0], said


def multi_head_class(fixed_heads=None):
    """A learner's MultiHeadAttention, right in every step; with ``fixed_heads`` its head count is
    written in as that number (n_heads ignored)."""

    class MultiHeadAttention(nn.Module):
        def __init__(self, d_model, n_heads, bias=True):
            super().__init__()
            self.n_heads = fixed_heads or n_heads
            self.d_k = d_model // self.n_heads
            self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Parameter(torch.randn(d_model, d_model)) for _ in range(4))
            self.b_Q, self.b_K, self.b_V, self.b_O = ((nn.Parameter(torch.zeros(d_model)) if bias else None)
                                                      for _ in range(4))

        def forward(self, x):
            B, T, d_model = x.shape

            def project(W, b):
                return x @ W if b is None else x @ W + b

            q, k, v = (project(W, b).view(B, T, self.n_heads, self.d_k).transpose(1, 2)
                       for W, b in ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V)))
            scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
            scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            concat = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, d_model)
            return concat @ self.W_O if self.b_O is None else concat @ self.W_O + self.b_O

    return MultiHeadAttention


def test_a_right_multi_head_class_still_passes(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    assert heads_checks.multi_head.feedback(multi_head_class()) == []


@pytest.mark.parametrize("fixed_heads", [2])
def test_a_head_count_written_in_as_a_number_is_named(fixed_heads, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    said = heads_checks.multi_head.feedback(multi_head_class(fixed_heads))
    assert len(said) == 1 and SIZE_HINT in said[0] and "3 heads of d_k = 2" in said[0], said


def test_a_d_k_written_in_as_a_number_stops_on_the_other_head_count_with_the_size_hint(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))

    class MultiHeadAttention(multi_head_class()):
        def __init__(self, d_model, n_heads, bias=True):
            super().__init__(d_model, n_heads, bias)
            if d_model == 6:       # right on the 64-wide induction layer, written in as 3 on the cat's width
                self.d_k = 3

    said = heads_checks.multi_head.feedback(MultiHeadAttention)
    assert len(said) == 1 and SIZE_HINT in said[0] and "3 heads of d_k = 2" in said[0], said


def test_the_other_head_count_case_expects_the_course_layer():
    case = module_cases()[1]
    layer = Attention(6, 3)
    layer.load_state_dict(case["state"])
    with torch.no_grad():
        expected = layer(case["x"], positions=False)
    assert torch.allclose(slipped_attention(case["x"], case["state"], 3), expected, atol=1e-5)
    assert not torch.allclose(expected, case["expected"], atol=1e-3)   # another head count gives another output


def test_a_class_built_as_an_instance_is_still_refused_with_one_sentence():
    said = heads_checks.multi_head.feedback(multi_head_class()(6, 2))
    assert len(said) == 1 and "pass the class MultiHeadAttention itself" in said[0], said
