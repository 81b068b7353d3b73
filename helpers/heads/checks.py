"""Checks for chapter 05 (multi-head): the head split, the parameter count, the memory of
the attention weights, the induction score.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import numpy as np

from ..errors import to_numpy
from ..exercises import Array, Number, Whole, close_problems, exercise, number_problems
from .compute import attention_parameters, attention_weights_bytes, induction_score


@exercise("the queries split into heads", answer=Array())
def split(answer, q, n_heads):
    """``answer`` is q (B, T, h*d_k) split into (B, h, T, d_k), head i holding columns i*d_k..(i+1)*d_k."""
    q = to_numpy(q, "q")
    B, T, width = q.shape
    d_k = width // n_heads
    if answer.shape == (B, T, n_heads, d_k):
        yield (f"the split has shape (B, T, h, d_k) = {(B, T, n_heads, d_k)}: "
               "swap the token and head axes (transpose(1, 2))")
        return
    if answer.shape != (B, n_heads, T, d_k):
        yield f"the split should have shape (B, h, T, d_k) = {(B, n_heads, T, d_k)}, but it has shape {answer.shape}"
        return
    reference = q.reshape(B, T, n_heads, d_k).transpose(0, 2, 1, 3)
    if np.allclose(answer, reference, atol=1e-6):
        return
    if np.allclose(answer, q.reshape(B, T, d_k, n_heads).transpose(0, 3, 1, 2), atol=1e-6):
        yield ("each head should get a block of neighbouring columns; yours takes one column in "
               f"every {n_heads}: view the width as (h, d_k), not (d_k, h)")
    elif np.allclose(answer, q.reshape(B, n_heads, T, d_k), atol=1e-6):
        yield ("reshaping straight to (B, h, T, d_k) mixes tokens into heads: view as "
               "(B, T, h, d_k) first, then transpose(1, 2)")
    else:
        yield from close_problems(answer, reference, "the split", atol=1e-6)


@exercise("the parameters of one attention layer", answer=Whole())
def parameters(answer, d_model):
    """``answer`` is the parameter count of one multi-head attention layer with biases
    (fused qkv and output projection) at width ``d_model``."""
    parts = attention_parameters(d_model)
    if answer == parts["qkv_weight"] + parts["proj_weight"]:
        yield "that counts the weight matrices only: every projection also has a bias"
    elif answer == parts["qkv_weight"] + parts["qkv_bias"]:
        yield "that is the qkv projection alone: the output projection W_O (and its bias) counts too"
    elif answer == 3 * parts["qkv_weight"] + 3 * parts["qkv_bias"] + parts["proj_weight"] + parts["proj_bias"]:
        yield "each of q, k, v is d_model wide, not 3*d_model: the fused layer as a whole has 3d² weights"
    else:
        yield from number_problems(answer, parts["total"], "the count", atol=0.5)


@exercise("the memory of the attention weights", answer=Number())
def weights_megabytes(answer, batch, n_heads, T):
    """``answer`` is the size in megabytes (10**6 bytes) of one layer's float32 attention
    weights for ``batch`` sequences of ``T`` tokens and ``n_heads`` heads."""
    reference = attention_weights_bytes(batch, n_heads, T) / 1e6
    if abs(answer - reference / 4) < 0.01 * reference:
        yield "that is the count of numbers in millions: each float32 number takes 4 bytes"
    elif abs(answer - reference * 1e6 / 2 ** 20) < 0.001 * reference:
        yield "that is in MiB (2**20 bytes): divide the bytes by 10**6 for megabytes"
    elif abs(answer - reference / T) < 0.01 * reference / T:
        yield "the weights hold one number per (query, key) pair: T × T per head, not T"
    else:
        yield from number_problems(answer, reference, "the size in MB", atol=0.01 * reference)


@exercise("an induction score", answer=Number())
def induction(answer, weights, length):
    """``answer`` is the mean attention from each token of the second copy to the token
    after its earlier occurrence, for ``weights`` (2L+1, 2L+1) of a repeated sequence."""
    w = to_numpy(weights, "weights")
    reference = float(induction_score(w, length))
    same_token = float(np.mean([w[length + j, j] for j in range(1, length + 1)]))
    previous = float(np.mean([w[t, t - 1] for t in range(1, len(w))]))
    if abs(answer - reference) <= 1e-3:
        return
    if abs(answer - same_token) <= 1e-3:
        yield ("that is the weight on the earlier occurrence of the same token; the induction head "
               "looks one further: at the token that came after it")
    elif abs(answer - previous) <= 1e-3:
        yield "that is the previous-token score: look L-1 positions back, from the second copy only"
    elif not 0 <= answer <= 1:
        yield "a mean of attention weights lies between 0 and 1"
    else:
        yield from number_problems(answer, reference, "the score")
