"""Round 26 (checks): an eps ignored by the LayerNorm checks' answers, module checks that never ran a backward pass
(a piece or a GPT that cannot learn got ✓), and a training loop that ignores its seed."""
import math

import numpy as np
import pytest
import torch
from torch import nn

from helpers import grading
from helpers.gpt import checks as gpt_checks
from helpers.heads import checks as head_checks
from helpers.mlp import checks as mlp_checks
from helpers.model import Config
from helpers.normalization import checks as norm_checks
from helpers.positions.compute import sinusoidal_positions
from learner_loops import written_loop


# ---- the instructor's pieces (chapters 05, 07, 08, 12), written out as the solutions write them

def layer_norm(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def layer_norm_no_eps(x, gamma, beta):   # the exercise asks for layer_norm(x, gamma, beta): ε = 1e-5 written in
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5) * gamma + beta


def layer_norm_ignoring_eps(x, gamma, beta, eps=1e-5):
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5) * gamma + beta


class LayerNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class LayerNormIgnoringEps(LayerNorm):
    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * self.weight + self.bias


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, bias=True):
        super().__init__()
        self.n_heads, self.d_k = n_heads, d_model // n_heads
        self.W_Q, self.W_K, self.W_V, self.W_O = (nn.Parameter(torch.randn(d_model, d_model)) for _ in range(4))
        self.b_Q, self.b_K, self.b_V, self.b_O = (nn.Parameter(torch.zeros(d_model)) if bias else None for _ in range(4))

    def forward(self, x):
        B, T, d_model = x.shape
        H, d_k = self.n_heads, self.d_k

        def project(t, W, b):
            return t @ W if b is None else t @ W + b
        q, k, v = (project(x, W, b) for W, b in ((self.W_Q, self.b_Q), (self.W_K, self.b_K), (self.W_V, self.b_V)))
        q, k, v = (t.view(B, T, H, d_k).transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(
            torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1), float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, d_model)
        return project(out, self.W_O, self.b_O)


class MLP(nn.Module):
    def __init__(self, d_model, d_ff, bias=True):
        super().__init__()
        self.W_1 = nn.Parameter(torch.empty(d_model, d_ff))
        self.W_2 = nn.Parameter(torch.empty(d_ff, d_model))
        self.b_1 = nn.Parameter(torch.zeros(d_ff)) if bias else None
        self.b_2 = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x):
        pre = x @ self.W_1 if self.b_1 is None else x @ self.W_1 + self.b_1
        out = 0.5 * pre * (1 + torch.erf(pre / math.sqrt(2))) @ self.W_2
        return out if self.b_2 is None else out + self.b_2


class Block(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.ln1, self.attn = LayerNorm(d_model), MultiHeadAttention(d_model, n_heads)
        self.ln2, self.mlp = LayerNorm(d_model), MLP(d_model, d_ff)

    def forward(self, h):
        h_mid = h + self.attn(self.ln1(h))
        return h_mid + self.mlp(self.ln2(h_mid))


class GPT(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, n_max):
        super().__init__()
        self.cfg = Config(vocab_size, d_model, n_heads, n_layers, d_ff, n_max)
        self.E = nn.Parameter(0.02 * torch.randn(vocab_size, d_model))
        self.blocks = nn.ModuleList([Block(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.final_ln = LayerNorm(d_model)
        self.register_buffer("PE", sinusoidal_positions(n_max, d_model).float(), persistent=False)

    def embed(self, ids):
        return self.E[ids]

    def forward(self, ids):
        h = self.embed(ids) + self.PE[:ids.shape[-1]]
        for block in self.blocks:
            h = block(h)
        return self.final_ln(h) @ self.E.T


def without_gradients(cls):
    """``cls`` with its forward run under torch.no_grad(): the same outputs, no gradient for anything."""
    class NoGrad(cls):
        def forward(self, *inputs):
            with torch.no_grad():
                return super().forward(*inputs)
    NoGrad.__name__ = NoGrad.__qualname__ = cls.__name__
    return NoGrad


class GPTReadingData(GPT):
    def embed(self, ids):
        return self.E.data[ids]   # E learns only through the unembedding


class GPTDetached(GPT):
    def forward(self, ids):
        h = self.E[ids].detach() + self.PE[:ids.shape[-1]]
        for block in self.blocks:
            h = block(h)
        return self.final_ln(h) @ self.E.T.detach()


def said(check, answer, *args):
    return " ".join(check.feedback(answer, *args))


# ---- 1. eps


def test_a_layer_norm_function_ignoring_its_eps_is_refused():
    assert "ignored its eps argument" in said(norm_checks.layer_norm_function, layer_norm_ignoring_eps)


def test_the_instructors_layer_norm_function_passes_with_or_without_an_eps_parameter():
    assert said(norm_checks.layer_norm_function, layer_norm) == ""
    assert said(norm_checks.layer_norm_function, layer_norm_no_eps) == ""


def test_a_layer_norm_module_ignoring_its_eps_is_refused(cat):
    sentence = said(norm_checks.layer_norm_module, LayerNormIgnoringEps, cat)
    assert "eps=1.0" in sentence and "ignored its eps argument" in sentence


def test_the_instructors_layer_norm_module_passes(cat):
    assert said(norm_checks.layer_norm_module, LayerNorm, cat) == ""


# ---- 2. gradients


@pytest.mark.parametrize("cls, check, first", [
    (LayerNorm, "layer_norm_module", "weight"), (MLP, "mlp_module", "W_1"), (MultiHeadAttention, "multi_head", "W_Q"),
    (Block, "block_module", "ln1.weight"), (GPT, "gpt_module", "E")])
def test_a_module_without_gradients_is_refused_and_the_instructors_passes(cls, check, first, cat, dragon):
    check, args = {"layer_norm_module": (norm_checks.layer_norm_module, (cat,)),
                   "mlp_module": (mlp_checks.mlp_module, (cat, dragon)), "multi_head": (head_checks.multi_head, ()),
                   "block_module": (norm_checks.block_module, (cat,)), "gpt_module": (gpt_checks.gpt_module, (cat,))}[check]
    assert said(check, cls, *args) == ""
    sentence = said(check, without_gradients(cls), *args)
    assert sentence.startswith(f"{first} got no gradient: ") and "torch.no_grad()" in sentence
    assert "\n" not in sentence


def test_a_gpt_reading_E_through_data_or_detached_is_refused(cat):
    assert said(gpt_checks.gpt_module, GPTReadingData, cat).startswith("E's gradient differs from the course's GPT's")
    assert said(gpt_checks.gpt_module, GPTDetached, cat).startswith("E got no gradient: ")


def test_the_judge_says_what_the_live_check_says_about_gradients(cat):
    check = norm_checks.layer_norm_module
    for cls in (LayerNorm, without_gradients(LayerNorm)):
        recorded = grading.record_answer(check, cls, (cat,), {})
        assert check.feedback(grading.decode(recorded), cat) == check.feedback(cls, cat)


def test_a_run_function_of_the_learners_own_is_still_judged_on_its_outputs(cat):
    def run(args, state, x):   # a Module check takes such a function as the class's run
        module = LayerNorm(*args)
        module.load_state_dict(state)
        with torch.no_grad():
            return module(x)
    assert said(norm_checks.layer_norm_module, run, cat) == ""


# ---- 3. seed


def loop_ignoring_seed(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                       eval_batches=4, seed=0, callback=None):
    return written_loop()(model, train_ids, val_ids, steps, batch, context, lr, warmup, min_lr, clip, eval_every,
                          eval_batches=eval_batches, seed=0, callback=callback)


def test_a_training_loop_ignoring_its_seed_is_refused():
    sentence = said(gpt_checks.train_loop, loop_ignoring_seed)
    assert sentence.startswith("with seed=1 your losses are those of seed=0: the loop ignored its seed argument")
    assert said(gpt_checks.train_loop, written_loop()) == ""


def test_the_course_loop_differs_between_the_two_seeds():
    first, _ = gpt_checks.loop_reference()
    other, _ = gpt_checks._other_seed_reference()
    assert np.abs(first - other).max() > 100 * gpt_checks.LOOP_ATOL
