"""Checks for chapter 03 (scaling): the typical size of a dot product, scaled scores,
the softmax derivative, and a gradient taken with respect to the right thing.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import math

import numpy as np

from . import array_problems, close_problems, exercise, number_problems
from ..scaling import softmax_jacobian, weight_gradient


@exercise("the typical size of a raw dot product")
def typical_size(answer, d=512):
    """``answer`` is the standard deviation of q·k for standard-normal q, k of length d (theory)."""
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"the answer should be one number, but it is a {type(answer).__name__}"
        return
    if abs(value - d) < 0.5:
        yield "that is the variance of q·k; the spread (standard deviation) is its square root"
    elif abs(value - 1) < 0.05:
        yield "that is the spread after dividing by √d; the question asks about the raw dot product"
    else:
        yield from number_problems(value, math.sqrt(d), "your spread", atol=0.05)


@exercise("one query's scaled scores")
def scaled_scores(answer, q, K):
    """``answer`` (n_keys,) is K @ q / √d for a query q (d,) and keys K (n_keys, d)."""
    q, K = np.asarray(q, dtype=float), np.asarray(K, dtype=float)
    found = list(array_problems(answer, "scores", shape=(K.shape[0],)))
    if found:
        yield from found
        return
    answer = np.asarray(answer, dtype=float)
    raw, d = K @ q, len(q)
    if np.allclose(answer, raw, atol=1e-3):
        yield "these are the raw dot products: divide them by √d"
    elif np.allclose(answer, raw / d, atol=1e-4):
        yield "you divided by d; divide by its square root"
    else:
        yield from close_problems(answer, raw / math.sqrt(d), "scores")


@exercise("the derivative of softmax")
def jacobian(answer, weights):
    """``answer`` (n, n) has entry [i, j] = ∂w_i/∂s_j for the softmax output ``weights`` (n,)."""
    w = np.asarray(weights, dtype=float)
    found = list(array_problems(answer, "J", shape=(len(w), len(w))))
    if found:
        yield from found
        return
    answer = np.asarray(answer, dtype=float)
    J = softmax_jacobian(w)
    if np.allclose(answer, -J, atol=1e-4):
        yield "every sign is flipped: raising s_i raises w_i, so the diagonal is positive"
    elif np.allclose(answer, -np.outer(w, w), atol=1e-4):
        yield "the diagonal is missing its w_i term: ∂w_i/∂s_i = w_i - w_i²"
    elif np.allclose(np.diag(answer), np.diag(J), atol=1e-4) and np.allclose(answer, np.diag(np.diag(J)), atol=1e-4):
        yield "the diagonal is right, but the off-diagonal entries are -w_i·w_j, not 0"
    elif not np.allclose(answer.sum(axis=1), 0, atol=1e-4):
        yield "each row should sum to 0 (adding the same number to every score changes no weight)"
    else:
        yield from close_problems(answer, J, "J", atol=1e-4)


@exercise("the gradient with respect to the raw scores")
def gradient_wrt_raw(answer, scores, index=2, divide_by=8.0):
    """``answer`` is ‖∂w_index/∂scores‖ where w = softmax(scores / divide_by)."""
    sizes = weight_gradient(scores, index, divide_by)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"the answer should be one number, but it is a {type(answer).__name__}"
        return
    if abs(value - sizes["wrt_input"]) < 5e-4:
        yield ("that is the gradient with respect to softmax's own input (the divided scores); "
               "the chain rule adds one more factor for the division")
    elif abs(value - sizes["wrt_input"] * divide_by) < 5e-3:
        yield "the division by √d makes the gradient smaller, not larger: divide, don't multiply"
    elif abs(value - weight_gradient(scores, index)["wrt_input"]) < 5e-4:
        yield "that is the unscaled softmax's gradient; this softmax sees the scores divided first"
    else:
        yield from number_problems(value, sizes["wrt_scores"], "your gradient size", atol=5e-4)

