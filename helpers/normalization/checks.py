"""Checks for chapter 08 (LayerNorm): a LayerNorm function, the residual stream's
lengths, and reading the pre-LN / post-LN training curves.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import numpy as np

from .. import reference as ref
from ..exercises import Array, Function, Wrong, as_array, as_whole, call, close_problems, exercise
from .compute import PLACEMENTS, get_run, residual_names

# (x, gamma, beta, what) a layer_norm function is tried on.
LN_CASES = (
    ([0.054, 0.193, 0.865, 0.679, 0.475, 0.864], None, None, "the Primer's h²_last, γ = 1, β = 0"),
    ([0.054, 0.193, 0.865, 0.679, 0.475, 0.864], [2.253, 2.390, 2.512, 2.328, 2.723, 2.476],
     [-0.339, -0.496, -0.744, 0.154, -0.418, 0.055], "the Primer's h²_last with its γ and β"),
    ([[1.0, 2.0, 3.0, 4.0], [10.0, -10.0, 5.0, 0.0]], [1.0, 0.5, 2.0, 1.0], [0.0, 1.0, 0.0, -1.0],
     "a 2 × 4 matrix (each row on its own)"),
    ([0.500, 0.501, 0.499, 0.502], None, None, "a row with a tiny spread (variance about 10⁻⁶, where ε matters)"),
)


def layer_norm_slip(out, x, g, b, with_affine):
    """The hint for a known LayerNorm mistake that gives ``out``, or None."""
    centred = x - x.mean(axis=-1, keepdims=True)
    if np.allclose(out, centred / x.std(axis=-1, ddof=1, keepdims=True) * g + b, atol=1e-3):
        return "you divided by the sample standard deviation (d - 1); LayerNorm divides by d"
    std = x.std(axis=-1, keepdims=True)
    if np.allclose(out, centred / std * g + b, atol=1e-3):
        return "you left out ε: add ε = 10⁻⁵ to the variance, inside the square root"
    if np.allclose(out, centred / (std + 1e-5) * g + b, atol=1e-3):
        return "ε goes inside the square root, added to the variance, not to the standard deviation"
    if with_affine and np.allclose(out, ref.layer_norm(x), atol=1e-3):
        return "the output ignores γ and β: multiply by γ, then add β"
    if x.ndim > 1 and np.allclose(out, (x - x.mean()) / np.sqrt(x.var() + 1e-5) * g + b, atol=1e-3):
        return ("you used one mean and one standard deviation for the whole array: take them "
                "along the last axis, row by row (keepdims=True)")
    return None


@exercise("a LayerNorm function", answer=Function("a function of x, gamma and beta"))
def layer_norm_function(answer):
    """``answer`` is a function layer_norm(x, gamma, beta) normalising the last axis of x."""
    for x, gamma, beta, what in LN_CASES:
        x = np.asarray(x)
        d = x.shape[-1]
        g = np.ones(d) if gamma is None else np.asarray(gamma)
        b = np.zeros(d) if beta is None else np.asarray(beta)
        out = as_array(call(answer, x, g, b, what=f"on {what}"), f"the output for {what}", shape=x.shape)
        expected = ref.layer_norm(x, g, b)
        if np.allclose(out, expected, atol=1e-3):
            continue
        hint = layer_norm_slip(out, x, g, b, with_affine=gamma is not None)
        if hint:
            yield f"for {what} {hint}"
        else:
            yield from close_problems(out, expected, f"the output for {what}")
        return


@exercise("the length of the residual vectors", answer=Array())
def residual_lengths(answer, trace, n_layers):
    """``answer`` (2 * n_layers + 1, T): the length of each position's residual vector at
    h0, L0.h_mid, L0.h, L1.h_mid, ... of ``trace``."""
    names = residual_names(n_layers)
    stream = np.stack([as_array(trace[name], name) for name in names])     # (points, T, d)
    expected = np.linalg.norm(stream, axis=-1)
    if answer.shape != expected.shape:
        hint = ("; take the length over the d_model numbers of each vector (the last axis)"
                if answer.shape == (len(names), stream.shape[-1]) else "")
        raise Wrong(f"norms should have shape {expected.shape}, but it has shape {answer.shape}{hint}")
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
        raise Wrong(f"the answer should be a dict with keys {PLACEMENTS}, but it is a {type(answer).__name__}")
    if set(answer) != set(PLACEMENTS):
        raise Wrong(f"the dict should have exactly the keys {PLACEMENTS}, but it has {tuple(answer)}")
    for norm in PLACEMENTS:
        loss = get_run(curves, norm, n_layers, lr)["loss"]
        expected, given = first_below(loss, threshold), answer[norm]
        if given is None or expected is None:
            if given is not expected:
                yield (f"'{norm}': " + ("this run does get below the threshold"
                                        if expected is not None else
                                        "this run never gets below the threshold: give None"))
            continue
        given = as_whole(given, f"'{norm}'")
        if given == expected + 1:
            yield f"'{norm}' is one too large: count steps from 0, as Python indexes the list"
        elif given != expected:
            yield f"'{norm}' is not the first step below {threshold}"
