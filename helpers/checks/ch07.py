"""Checks for chapter 07 (MLP): exact GELU, one token through the MLP, GPT-3's MLP
parameters, the unit that fires for a word.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import math

import numpy as np

from . import array_problems, close_problems, exercise, as_numbers
from .. import reference as ref
from ..mlp import gpt_parameters, mlp_forward, unit_means


def gelu_tanh(x):
    """The tanh approximation of GELU (GPT-2's original code), for recognising it."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


@exercise("exact GELU")
def gelu_values(answer, x):
    """``answer`` (same shape as x): x * Phi(x) with Phi the standard normal CDF."""
    x = np.asarray(x, dtype=float)
    found = list(array_problems(answer, "act", shape=x.shape))
    if found:
        yield from found
        return
    act = as_numbers(answer)
    if np.allclose(act, ref.gelu(x), atol=2e-5, rtol=0):
        return
    if np.allclose(act, gelu_tanh(x), atol=2e-5, rtol=0):
        yield "that is the tanh approximation of GELU; use the exact x·Φ(x) with Φ(x) = (1 + erf(x/√2)) / 2"
    elif np.allclose(act, ref.relu(x)):
        yield "that is ReLU: GELU lets negative inputs through as small negative numbers"
    elif np.allclose(act, x / (1 + np.exp(-1.702 * x)), atol=2e-5):
        yield "that is the sigmoid approximation x·σ(1.702x); use the exact x·Φ(x)"
    elif np.allclose(act, 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))), atol=2e-5):
        yield "that is Φ(x) alone: multiply by x"
    else:
        yield from close_problems(act, ref.gelu(x), "act", atol=2e-5)


@exercise("one token through the MLP block")
def mlp_row(answer, x, W_1, b_1, W_2, b_2):
    """``answer`` (d,): GELU(x W_1 + b_1) W_2 + b_2 for one row x (d,)."""
    x = np.asarray(x, dtype=float)
    found = list(array_problems(answer, "out", shape=x.shape))
    if found:
        yield from found
        return
    out = as_numbers(answer)

    def variant(activation="gelu", drop_b1=False, drop_b2=False):
        zeros = np.zeros
        return mlp_forward(x, W_1, zeros(len(b_1)) if drop_b1 else b_1, W_2,
                           zeros(len(b_2)) if drop_b2 else b_2, activation)["out"]

    if np.allclose(out, variant(), atol=1e-4, rtol=0):
        return
    slips = [(variant("relu"), "you used ReLU; the cat model's MLP uses exact GELU"),
             (variant("none"), "there is no activation between W_1 and W_2: apply GELU to the (d_ff,) pre-activation"),
             (variant(drop_b1=True), "b_1 is missing: add it to x @ W_1 before GELU"),
             (variant(drop_b2=True), "b_2 is missing: add it after the contraction by W_2")]
    for value, sentence in slips:
        if np.allclose(out, value, atol=1e-4, rtol=0):
            yield sentence
            return
    yield from close_problems(out, variant(), "out", atol=1e-4)


@exercise("the parameters in GPT-3's MLP blocks")
def gpt3_mlp(answer):
    """``answer``: the number of parameters in all 96 MLP blocks of GPT-3 (d = 12,288,
    d_ff = 4d), weights W_1 and W_2; with or without the biases b_1, b_2 is accepted."""
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"the answer should be one number, but it is a {type(answer).__name__}"
        return
    d, n = 12288, 96
    right = (8 * d * d * n, gpt_parameters("GPT-3")["mlp"])
    if any(abs(value - r) <= 1e-3 * r for r in right):
        return
    near = {4 * d * d * n: "that counts only one of the two matrices (W_1 is d × 4d; W_2 is 4d × d)",
            8 * d * d: "that is one layer; GPT-3 has 96",
            12 * d * d * n: "that is attention and MLP together; count W_1 and W_2 only",
            2 * d * d * n: "d_ff is 4d, not d: each matrix is d × 4d"}
    for wrong, sentence in near.items():
        if abs(value - wrong) <= 1e-3 * wrong:
            yield sentence
            return
    yield f"{value:.4g} is {'too large' if value > right[0] else 'too small'}: count 2 · d · d_ff per layer, then times 96"


@exercise("the hidden unit that fires most for a word")
def strongest_unit(answer, collected, layer, word):
    """``answer``: the unit of ``layer`` whose mean activation over positions holding ``word``
    is the largest."""
    means = unit_means(collected, layer, [word])[0]
    if isinstance(answer, (bool, np.bool_)) or not isinstance(answer, (int, np.integer)):
        yield f"the answer should be a unit number (an int from 0 to {len(means) - 1}), but it is a {type(answer).__name__}"
        return
    if not 0 <= answer < len(means):
        yield f"layer {layer} has units 0 to {len(means) - 1}, but the answer is {answer}"
        return
    best = int(np.argmax(means))
    if answer == int(np.argmin(means)):
        yield "that unit is the one that fires least for this word: take the largest mean, not the smallest"
    elif answer != best:
        yield (f"unit {answer} fires for '{word}' (mean {means[answer]:.2f}), but another unit fires more: "
               "average each unit over the positions holding the word, then take the largest")
