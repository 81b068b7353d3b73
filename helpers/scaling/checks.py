"""Chapter 03's exercise checks: the typical size of a dot product, scaled scores, the
softmax derivative, and a gradient taken with respect to the right thing.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import math

import numpy as np

from ..exercises import Array, Number, as_array, close_problems, exercise, number_problems, slip
from .compute import softmax_jacobian, weight_gradient


@exercise("the typical size of a raw dot product", answer=Number())
def typical_size(answer, d=512):
    """``answer`` is the standard deviation of q·k for standard-normal q, k of length d (theory)."""
    hint = slip(answer, [(d, "that is the variance of q·k; the spread (standard deviation) is its square root"),
                         (1, "that is the spread after dividing by √d; the question asks about the raw "
                             "dot product")], atol=0.05)
    if hint:
        yield hint
    else:
        yield from number_problems(answer, math.sqrt(d), "your spread", atol=0.05)


@exercise("one query's scaled scores", answer=Array(shape=lambda K: (len(K),)))
def scaled_scores(answer, q, K):
    """``answer`` (n_keys,) is K @ q / √d for a query q (d,) and keys K (n_keys, d)."""
    q, K = as_array(q, "q"), as_array(K, "K")
    raw, d = K @ q, len(q)
    hint = slip(answer, [(raw, "these are the raw dot products: divide them by √d"),
                         (raw / d, "you divided by d; divide by its square root")], atol=1e-4)
    if hint:
        yield hint
    else:
        yield from close_problems(answer, raw / math.sqrt(d), "scores")


@exercise("the derivative of softmax", answer=Array(shape=lambda weights: (len(weights), len(weights))))
def jacobian(answer, weights):
    """``answer`` (n, n) has entry [i, j] = ∂w_i/∂s_j for the softmax output ``weights`` (n,)."""
    w = as_array(weights, "weights")
    J = softmax_jacobian(w)
    hint = slip(answer, [(-J, "every sign is flipped: raising s_i raises w_i, so the diagonal is positive"),
                         (-np.outer(w, w), "the diagonal is missing its w_i term: ∂w_i/∂s_i = w_i - w_i²"),
                         (np.diag(np.diag(J)), "the diagonal is right, but the off-diagonal entries are "
                                               "-w_i·w_j, not 0")], atol=1e-4)
    if hint:
        yield hint
    elif not np.allclose(answer.sum(axis=1), 0, atol=1e-4):
        yield "each row should sum to 0 (adding the same number to every score changes no weight)"
    else:
        yield from close_problems(answer, J, "J", atol=1e-4)


@exercise("the gradient with respect to the raw scores", answer=Number())
def gradient_wrt_raw(answer, scores, index=2, divide_by=8.0):
    """``answer`` is ‖∂w_index/∂scores‖ where w = softmax(scores / divide_by)."""
    sizes = weight_gradient(scores, index, divide_by)
    hint = slip(answer, [(sizes["wrt_input"], "that is the gradient with respect to softmax's own input (the "
                                              "divided scores); the chain rule adds one more factor for the "
                                              "division"),
                         (sizes["wrt_input"] * divide_by, "the division by √d makes the gradient smaller, not "
                                                          "larger: divide, don't multiply"),
                         (weight_gradient(scores, index)["wrt_input"], "that is the unscaled softmax's gradient; "
                                                                       "this softmax sees the scores divided "
                                                                       "first")], atol=5e-4)
    if hint:
        yield hint
    else:
        yield from number_problems(answer, sizes["wrt_scores"], "your gradient size", atol=5e-4)
