"""Checks for chapter 08 (LayerNorm): a LayerNorm function, the residual stream's
lengths, and reading the pre-LN / post-LN training curves.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import numpy as np

from . import array_problems, close_problems, exercise, as_numbers
from .. import reference as ref
from ..normalization import PLACEMENTS, get_run, residual_names

# (x, gamma, beta, what) a layer_norm function is tried on.
LN_CASES = (
    ([0.054, 0.193, 0.865, 0.679, 0.475, 0.864], None, None, "the seed's h²_last, γ = 1, β = 0"),
    ([0.054, 0.193, 0.865, 0.679, 0.475, 0.864], [2.253, 2.390, 2.512, 2.328, 2.723, 2.476],
     [-0.339, -0.496, -0.744, 0.154, -0.418, 0.055], "the seed's h²_last with its γ and β"),
    ([[1.0, 2.0, 3.0, 4.0], [10.0, -10.0, 5.0, 0.0]], [1.0, 0.5, 2.0, 1.0], [0.0, 1.0, 0.0, -1.0],
     "a 2 × 4 matrix (each row on its own)"),
)


@exercise("a LayerNorm function")
def layer_norm_function(answer):
    """``answer`` is a function layer_norm(x, gamma, beta) normalising the last axis of x."""
    if not callable(answer):
        yield f"layer_norm should be a function of x, gamma and beta, but it is a {type(answer).__name__}"
        return
    for x, gamma, beta, what in LN_CASES:
        x = np.asarray(x)
        d = x.shape[-1]
        g = np.ones(d) if gamma is None else np.asarray(gamma)
        b = np.zeros(d) if beta is None else np.asarray(beta)
        out = answer(x, g, b)
        found = list(array_problems(out, f"the output for {what}", shape=x.shape))
        if found:
            yield from found
            return
        out = as_numbers(out)
        expected = ref.layer_norm(x, g, b)
        if np.allclose(out, expected, atol=1e-3):
            continue
        centred = x - x.mean(axis=-1, keepdims=True)
        if np.allclose(out, centred / x.std(axis=-1, ddof=1, keepdims=True) * g + b, atol=1e-3):
            yield (f"for {what} you divided by the sample standard deviation (d - 1); "
                   "LayerNorm divides by d")
        elif np.allclose(out, ref.layer_norm(x), atol=1e-3) and gamma is not None:
            yield f"for {what} the output ignores γ and β: multiply by γ, then add β"
        elif np.allclose(out, (x - x.mean()) / np.sqrt(x.var() + 1e-5) * g + b, atol=1e-3):
            yield (f"for {what} you used one mean and one standard deviation for the whole "
                   "array: take them along the last axis, row by row (keepdims=True)")
        else:
            yield from close_problems(out, expected, f"the output for {what}")
        return


@exercise("the length of the residual vectors")
def residual_lengths(answer, trace, n_layers):
    """``answer`` (2 * n_layers + 1, T): the length of each position's residual vector at
    h0, L0.h_mid, L0.h, L1.h_mid, ... of ``trace``."""
    names = residual_names(n_layers)
    stream = np.stack([as_numbers(trace[name]) for name in names])     # (points, T, d)
    expected = np.linalg.norm(stream, axis=-1)
    found = list(array_problems(answer, "norms", shape=expected.shape))
    if found:
        if np.shape(answer) == stream.shape[::2] or np.shape(answer) == (len(names), stream.shape[-1]):
            found.append("take the length over the d_model numbers of each vector (the last axis)")
        yield from found
        return
    answer = as_numbers(answer)
    if np.allclose(answer, expected ** 2, atol=1e-3) and not np.allclose(expected, 1):
        yield "these are squared lengths: take the square root"
    else:
        yield from close_problems(answer, expected, "norms")


def first_below(loss, threshold):
    """The first step (counting from 0) at which loss < threshold, or None."""
    below = np.flatnonzero(np.asarray(loss) < threshold)
    return int(below[0]) if len(below) else None


@exercise("the step at which each placement first gets below the threshold")
def steps_to_threshold(answer, curves, n_layers, lr, threshold):
    """``answer`` is a dict {"pre": step, "post": step, "none": step}: the first step
    (from 0) at which that run's loss is below ``threshold``, or None if it never is."""
    if not isinstance(answer, dict):
        yield f"the answer should be a dict with keys {PLACEMENTS}, but it is a {type(answer).__name__}"
        return
    if set(answer) != set(PLACEMENTS):
        yield f"the dict should have exactly the keys {PLACEMENTS}, but it has {tuple(answer)}"
        return
    for norm in PLACEMENTS:
        loss = get_run(curves, norm, n_layers, lr)["loss"]
        expected, given = first_below(loss, threshold), answer[norm]
        if given is None or expected is None:
            if given is not expected:
                yield (f"'{norm}': " + ("this run does get below the threshold"
                                        if expected is not None else
                                        "this run never gets below the threshold: give None"))
            continue
        if isinstance(given, bool) or not isinstance(given, (int, np.integer)):
            yield f"'{norm}' should be a whole step number, but it is {given!r}"
        elif given == expected + 1:
            yield f"'{norm}' is one too large: count steps from 0, as Python indexes the list"
        elif given != expected:
            yield f"'{norm}' is not the first step below {threshold}"
