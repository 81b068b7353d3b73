"""Checks for chapter 05 (multi-head): the head split, the parameter count, the memory of
the attention weights, the induction score.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import numpy as np

from . import array_problems, close_problems, exercise, number_problems, as_numbers
from ..heads import attention_parameters, attention_weights_bytes, induction_score, split_heads


@exercise("the queries split into heads")
def split(answer, q, n_heads):
    """``answer`` is q (B, T, h*d_k) split into (B, h, T, d_k), head i holding columns i*d_k..(i+1)*d_k."""
    B, T, width = q.shape
    d_k = width // n_heads
    found = list(array_problems(answer, "the split", shape=(B, n_heads, T, d_k)))
    if found:
        if np.shape(as_numbers(answer)) == (B, T, n_heads, d_k):
            yield (f"the split has shape (B, T, h, d_k) = {(B, T, n_heads, d_k)}: "
                   "swap the token and head axes (transpose(1, 2))")
        else:
            yield from found
        return
    answer, reference = as_numbers(answer), as_numbers(split_heads(q, n_heads))
    wrong_cut = as_numbers(q).reshape(B, T, d_k, n_heads).transpose(0, 3, 1, 2)
    if np.allclose(answer, reference, atol=1e-6):
        return
    if np.allclose(answer, wrong_cut, atol=1e-6):
        yield ("each head should get a block of neighbouring columns; yours takes every "
               f"{n_heads}-th column: view the width as (h, d_k), not (d_k, h)")
    elif np.allclose(answer, as_numbers(q).reshape(B, n_heads, T, d_k), atol=1e-6):
        yield ("reshaping straight to (B, h, T, d_k) mixes tokens into heads: view as "
               "(B, T, h, d_k) first, then transpose(1, 2)")
    else:
        yield from close_problems(answer, reference, "the split", atol=1e-6)


@exercise("the parameters of one attention layer")
def parameters(answer, d_model):
    """``answer`` is the parameter count of one multi-head attention layer with biases
    (fused qkv and output projection) at width ``d_model``."""
    parts = attention_parameters(d_model)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"the count should be a single number, but it is a {type(answer).__name__}"
        return
    if value == parts["qkv_weight"] + parts["proj_weight"]:
        yield "that counts the weight matrices only: every projection also has a bias"
    elif value == parts["qkv_weight"] + parts["qkv_bias"]:
        yield "that is the qkv projection alone: the output projection W_O (and its bias) counts too"
    elif value == 3 * parts["qkv_weight"] + 3 * parts["qkv_bias"] + parts["proj_weight"] + parts["proj_bias"]:
        yield "each of q, k, v is d_model wide, not 3*d_model: the fused layer as a whole has 3d² weights"
    else:
        yield from number_problems(value, parts["total"], "the count", atol=0.5)


@exercise("the memory of the attention weights")
def weights_megabytes(answer, batch, n_heads, T):
    """``answer`` is the size in megabytes (10**6 bytes) of one layer's float32 attention
    weights for ``batch`` sequences of ``T`` tokens and ``n_heads`` heads."""
    reference = attention_weights_bytes(batch, n_heads, T) / 1e6
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"the size should be a single number, but it is a {type(answer).__name__}"
        return
    if abs(value - reference / 4) < 0.01 * reference:
        yield "that is the count of numbers in millions: each float32 number takes 4 bytes"
    elif abs(value - reference * 1e6 / 2 ** 20) < 0.001 * reference:
        yield "that is in MiB (2**20 bytes): divide the bytes by 10**6 for megabytes"
    elif abs(value - reference / T) < 0.01 * reference / T:
        yield "the weights hold one number per (query, key) pair: T × T per head, not T"
    else:
        yield from number_problems(value, reference, "the size in MB", atol=0.01 * reference)


@exercise("an induction score")
def induction(answer, weights, length):
    """``answer`` is the mean attention from each token of the second copy to the token
    after its earlier occurrence, for ``weights`` (2L+1, 2L+1) of a repeated sequence."""
    reference = float(induction_score(weights, length))
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"the score should be a single number, but it is a {type(answer).__name__}"
        return
    w = as_numbers(weights)
    same_token = float(np.mean([w[length + j, j] for j in range(1, length + 1)]))
    previous = float(np.mean([w[t, t - 1] for t in range(1, len(w))]))
    if abs(value - reference) <= 1e-3:
        return
    if abs(value - same_token) <= 1e-3:
        yield ("that is the weight on the earlier occurrence of the same token; the induction head "
               "looks one further: at the token that came after it")
    elif abs(value - previous) <= 1e-3:
        yield "that is the previous-token score: look L-1 positions back, from the second copy only"
    elif not 0 <= value <= 1:
        yield "a mean of attention weights lies between 0 and 1"
    else:
        yield from number_problems(value, reference, "the score")
