"""Chapter 07's exercise checks: exact GELU, one token through the MLP, GPT-3's MLP
parameters, the unit that fires for a word.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import math

import numpy as np

from .. import reference as ref
from ..exercises import Array, Number, Whole, as_array, close_problems, exercise, slip
from .compute import MODELS, mlp_forward, model_parameters, unit_means


def gelu_tanh(x):
    """The tanh approximation of GELU (GPT-2's original code), for recognising it."""
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def normal_cdf(x):
    """Φ(x), the standard normal distribution function, elementwise."""
    return 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, dtype=float) / math.sqrt(2)))


@exercise("exact GELU", answer=Array(shape=lambda x: np.shape(x)))
def gelu_values(act, x):
    """``act`` (same shape as x): x * Phi(x) with Phi the standard normal CDF."""
    x = as_array(x, "x")
    if np.allclose(act, ref.gelu(x), atol=2e-5, rtol=0):
        return
    hint = slip(act, [(gelu_tanh(x), "that is the tanh approximation of GELU; use the exact x·Φ(x) "
                                     "with Φ(x) = (1 + erf(x/√2)) / 2"),
                      (ref.relu(x), "that is ReLU: GELU lets negative inputs through as small negative numbers"),
                      (x / (1 + np.exp(-1.702 * x)), "that is the sigmoid approximation x·σ(1.702x); "
                                                     "use the exact x·Φ(x)"),
                      (normal_cdf(x), "that is Φ(x) alone: multiply by x")], atol=2e-5)
    if hint:
        yield hint
    else:
        yield from close_problems(act, ref.gelu(x), "act", atol=2e-5)


@exercise("one token through the MLP block", answer=Array(shape=lambda x: np.shape(x)))
def mlp_row(out, x, W_1, b_1, W_2, b_2):
    """``out`` (d,): GELU(x W_1 + b_1) W_2 + b_2 for one row x (d,)."""
    def variant(activation="gelu", drop_b1=False, drop_b2=False):
        return mlp_forward(x, W_1, np.zeros(len(b_1)) if drop_b1 else b_1, W_2,
                           np.zeros(len(b_2)) if drop_b2 else b_2, activation)["out"]

    right = variant()
    if np.allclose(out, right, atol=1e-4, rtol=0):
        return
    hint = slip(out, [(variant("relu"), "you used ReLU; the cat model's MLP uses exact GELU"),
                      (variant("none"), "there is no activation between W_1 and W_2: apply GELU to the "
                                        "(d_ff,) pre-activation"),
                      (variant(drop_b1=True), "b_1 is missing: add it to x @ W_1 before GELU"),
                      (variant(drop_b2=True), "b_2 is missing: add it after the contraction by W_2")], atol=1e-4)
    if hint:
        yield hint
    else:
        yield from close_problems(out, right, "out", atol=1e-4)


@exercise("the parameters in GPT-3's MLP blocks", answer=Number())
def gpt3_mlp(total):
    """``total``: the number of parameters in all 96 MLP blocks of GPT-3 (d = 12,288,
    d_ff = 4d), weights W_1 and W_2; with or without the biases b_1, b_2 is accepted."""
    d, n = MODELS["GPT-3"]["d"], MODELS["GPT-3"]["n_layers"]
    right = (8 * d * d * n, model_parameters("GPT-3")["mlp"])
    if any(abs(total - r) <= 1e-3 * r for r in right):
        return
    near = {4 * d * d * n: "that counts only one of the two matrices (W_1 is d × 4d; W_2 is 4d × d)",
            8 * d * d: "that is one layer; GPT-3 has 96",
            12 * d * d * n: "that is attention and MLP together; count W_1 and W_2 only",
            2 * d * d * n: "d_ff is 4d, not d: each matrix is d × 4d"}
    for wrong, sentence in near.items():
        if abs(total - wrong) <= 1e-3 * wrong:
            yield sentence
            return
    yield (f"{total:.4g} is {'too large' if total > right[0] else 'too small'}: "
           "count 2 · d · d_ff per layer, then times 96")


@exercise("the hidden unit that fires most for a word", answer=Whole())
def strongest_unit(unit, collected, layer, word):
    """``unit``: the unit of ``layer`` whose mean activation over positions holding ``word``
    is the largest."""
    means = unit_means(collected, layer, [word])[0]
    if not 0 <= unit < len(means):
        yield f"layer {layer} has units 0 to {len(means) - 1}, but the answer is {unit}"
    elif unit == int(np.argmin(means)):
        yield "that unit is the one that fires least for this word: take the largest mean, not the smallest"
    elif unit != int(np.argmax(means)):
        yield (f"unit {unit} fires for '{word}' (mean {means[unit]:.2f}), but another unit fires more: "
               "average each unit over the positions holding the word, then take the largest")
