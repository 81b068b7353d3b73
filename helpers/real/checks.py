"""Checks for chapter 11 (a real model): one layer's parameters, the KV cache per token, the
best induction head.

Each check judges the answer against a reference computed from the model's sizes or scores
and names the likely slip, without printing the expected answer.
"""
import torch

from ..exercises import Whole, exercise, number_problems, slip
from . import compute as real


@exercise("the parameters of one SmolLM2 layer", answer=Whole())
def layer_parameters(answer, cfg):
    """``answer`` is the number of parameters in one layer of the model configured by ``cfg``."""
    d, d_ff, d_kv = cfg.d_model, cfg.d_ff, cfg.kv_heads * cfg.d_k
    reference = real.parameter_formula(cfg)["per_layer"]
    hint = slip(answer, (
        (reference + 2 * d * (d - d_kv), "you gave W_K and W_V as many columns as W_Q, but the "
         f"{cfg.n_heads} query heads share {cfg.kv_heads} key/value heads"),
        (reference - d * d_ff, "that MLP has two matrices; SwiGLU has three (gate, up and down)"),
        (reference + 2 * d, "RMSNorm keeps a scale but no bias: d numbers each, not 2d"),
        (reference - 2 * d, "you left out the two RMSNorms' scales"),
        (reference - d, "each layer has two RMSNorms (before attention and before the MLP)"),
        (reference + 2 * d + 2 * d_kv + 2 * d_ff + d, "this model has no biases on its projections"),
        (reference + 2 * d * (d - d_kv) - d * d_ff, "K and V are shared by groups of heads, and the MLP "
         "has three matrices: both are off"),
        (reference + 2 * d * (d - d_kv) - 2 * d, "that is the Lecture's 12d² of a GPT-style layer: here the "
         "query heads share their keys and values, and each RMSNorm adds its scales"),
    ), atol=0.5)
    if hint:
        yield hint
    else:
        yield from number_problems(answer, reference, "the parameters of one layer", atol=0.5)


@exercise("the KV cache per token", answer=Whole())
def kv_per_token(answer, cfg):
    """``answer`` is the bytes the float32 KV cache of ``cfg``'s model grows by per token."""
    reference = real.kv_bytes_per_token(cfg)
    hint = slip(answer, (
        (reference * cfg.n_heads // cfg.kv_heads, "that caches one key and value per query head, but "
         "the cache holds only the shared key/value heads"),
        (reference // 2, "that is half: either K or V alone (the cache keeps both), or 2 bytes a number "
         "(these are float32)"),
        (reference // 4, "that counts numbers, not bytes: float32 takes 4 bytes"),
        (reference // cfg.n_layers, "that is one layer: every layer keeps its own"),
        (reference * 3 // 2, "queries are not cached: each is used once, by its own token"),
    ), atol=0.5)
    if hint:
        yield hint
    else:
        yield from number_problems(answer, reference, "the bytes per token", atol=0.5)


@exercise("the best induction head", answer=Whole(length=2))
def best_induction_head(answer, induction, previous):
    """``answer`` is (layer, head) of the highest induction score; induction, previous: (layers, heads)."""
    induction, previous = torch.as_tensor(induction), torch.as_tensor(previous)
    n_layers, n_heads = induction.shape
    best = real.best_heads(induction)[0]
    layer, head = answer
    if answer == best:
        return
    if answer == real.best_heads(previous)[0]:
        yield "that is the best previous-token head; the question asks for the induction score"
    elif (head, layer) == best:
        yield "you swapped the two: give (layer, head)"
    elif (layer - 1, head - 1) == best:
        yield "layers and heads are counted from 0 here, not from 1"
    elif not (0 <= layer < n_layers and 0 <= head < n_heads):
        yield f"there is no head ({layer}, {head}): layers run 0..{n_layers - 1}, heads 0..{n_heads - 1}"
    else:
        yield (f"head ({layer}, {head}) scores {float(induction[layer, head]):.2f}, and another head "
               "scores higher: look at the largest entry of the whole table")
