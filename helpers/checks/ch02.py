"""Checks for chapter 02 (QKV by hand): single weights by hand, one output row, and
scaled dot-product attention in NumPy (against helpers.reference and torch).

Each check judges the answer against reference values and recognises the usual
slips (no scaling, no mask, the wrong row), without printing the expected answer.
"""
import math

import numpy as np

from . import array_problems, exercise, number_problems
from .. import reference as ref
from ..qkv import attention_steps, seed_toy, three_words


def number_with_slips(answer, reference, name, slips, atol=1e-3):
    """Problems with a single-number answer: a hint when it equals a known slip,
    else how far off it is. slips: [(value, hint), ...]."""
    found = list(number_problems(answer, reference, name, atol))
    if not found:
        return
    if isinstance(answer, (list, tuple, np.ndarray)) and np.size(answer) > 1:
        yield f"{name} should be one number, but you gave {np.size(answer)} numbers"
        return
    try:
        answer = float(answer)
    except (TypeError, ValueError):
        yield from found
        return
    for value, hint in slips:
        if abs(answer - value) <= atol:
            yield f"{name} is off: {hint}"
            return
    yield from found


def vector_with_slips(answer, reference, name, slips, atol=1e-3):
    """Problems with a vector answer: shape, a known slip's hint, or how many entries are off."""
    found = list(array_problems(answer, name, shape=np.shape(reference)))
    if found:
        yield from found
        return
    answer = np.asarray(answer, dtype=float)
    if np.allclose(answer, reference, atol=atol, rtol=0):
        return
    for value, hint in slips:
        if np.allclose(answer, value, atol=atol, rtol=0):
            yield f"{name} is off: {hint}"
            return
    off = int((~np.isclose(answer, reference, atol=atol, rtol=0)).sum())
    yield f"{off} of the {np.size(reference)} numbers of {name} are off (to ±{atol:g})"


def three_words_rows():
    """The parameter-free weights of "the cat sat": softmax(x x^T) row by row, (3, 3)."""
    x = three_words()["x"]
    return ref.softmax(x @ x.T)


@exercise("the weight 'cat' puts on 'the', by hand")
def weight_cat_on_the(answer):
    """``answer`` is row 'cat', column 'the' of softmax(x @ x.T) for "the cat sat"."""
    w = three_words_rows()
    slips = [(1 / 3, "the three scores are not equal, so the weights are not 1/3 each"),
             (0.0, "that is the score; the weight is e^score divided by the sum of e^score over the row"),
             (1.0, "e^0 = 1 is the top of the fraction; divide it by the sum over the whole row"),
             (w[1, 1], "that is the weight 'cat' puts on itself; the question asks for column 'the'"),
             (w[1, 2], "that is the weight on 'sat'; the question asks for column 'the'"),
             (w[2, 0], "that is row 'sat'; the question asks for the query 'cat'")]
    yield from number_with_slips(answer, w[1, 0], "the weight", slips)


@exercise("the output of 'cat' with queries, keys and values")
def output_of_cat(answer):
    """``answer`` (2,) is the output row of 'cat': softmax(q k^T / sqrt(2)) @ v, no mask."""
    ex = three_words()
    args = (ex["x"], ex["W_q"], ex["W_k"], ex["W_v"])
    right = attention_steps(*args)["output"]
    if np.shape(answer) == (4,) or np.shape(answer) == (3, 4):
        yield "the output should have 2 numbers, one per column of v: average the values v, not the vectors x"
        return
    if np.shape(answer) in ((3, 2),):
        yield "give only the row of 'cat' (the second row), shape (2,)"
        return
    slips = [(attention_steps(*args, scale=False)["output"][1],
              "divide the scores by √d_k = √2 before the softmax"),
             (attention_steps(*args, causal=True)["output"][1],
              "no causal mask in this exercise: 'cat' may look at all three tokens"),
             (right[0], "that is the output of 'the'; the question asks for 'cat'"),
             ((ex["x"] @ ex["W_q"] @ (ex["x"] @ ex["W_k"]).T)[1] @ (ex["x"] @ ex["W_v"]),
              "weight the values by the softmax of the scores, not by the raw scores")]
    yield from vector_with_slips(answer, right[1], "the output of 'cat'", slips)


@exercise("the weight 'cat' puts on 'the' in the seed 000 toy")
def toy_weight(answer):
    """``answer`` is row 'cat', column 'the' of the toy's weights, scaled by sqrt(5) and masked."""
    toy = seed_toy()
    args = (toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"])
    weights = lambda **kw: attention_steps(*args, **kw)["weights"]
    right = weights(causal=True)
    slips = [(weights(causal=True, scale=False)[1, 0], "divide the scores by √d_k = √5 before the softmax"),
             (weights(causal=False)[1, 0],
              "'cat' must not see 'sat', which comes after it: leave that key out (the causal mask)"),
             (weights(causal=False, scale=False)[1, 0],
              "scale by √5 and leave out the key of 'sat', which comes after 'cat'"),
             (right[1, 1], "that is the weight 'cat' puts on itself; the question asks for column 'the'"),
             (right[2, 0], "that is row 'sat'; the question asks for the query 'cat'")]
    yield from number_with_slips(answer, right[1, 0], "the weight", slips)


def attention_cases():
    """(what, Q, K, V, causal) inputs an attention function is tried on."""
    rng = np.random.default_rng(2)
    toy, ex = seed_toy(), three_words()
    toy_steps = attention_steps(toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"])
    words = [ex["x"] @ ex[name] for name in ("W_q", "W_k", "W_v")]
    return [("the seed 000 toy with causal=True", toy_steps["Q"], toy_steps["K"], toy_steps["V"], True),
            ("'the cat sat' with causal=False", *words, False),
            ("2 queries, 5 keys, d_k=3, d_v=4, causal=False",
             rng.normal(size=(2, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 4)), False),
            ("6 tokens, d_k=8, d_v=2, causal=True",
             2 * rng.normal(size=(6, 8)), 2 * rng.normal(size=(6, 8)), rng.normal(size=(6, 2)), True)]


def torch_attention(Q, K, V, causal):
    """torch.nn.functional.scaled_dot_product_attention on NumPy arrays -> NumPy output."""
    import torch
    import torch.nn.functional as F

    Q, K, V = (torch.tensor(a, dtype=torch.float64) for a in (Q, K, V))
    return F.scaled_dot_product_attention(Q, K, V, is_causal=causal).numpy()


def weight_slip(weights, Q, K, causal):
    """A hint when ``weights`` match a known wrong recipe, else None."""
    d_k = Q.shape[-1]
    raw = Q @ K.T
    hidden = ref.causal_mask(len(Q)) if causal else np.zeros(raw.shape, bool)
    recipe = lambda s, axis=-1: ref.softmax(np.where(hidden, -np.inf, s), axis=axis)
    if hidden.any() and np.abs(weights[hidden]).max() > 1e-6:
        return ("with causal=True a query must not see later keys: put -inf above the diagonal "
                "of the scores before the softmax")
    if not np.allclose(weights.sum(-1), 1, atol=1e-6):
        if causal and np.allclose(weights, np.where(hidden, 0, ref.softmax(raw / math.sqrt(d_k))), atol=1e-6):
            return "you masked after the softmax: mask the scores first, so each row still sums to 1"
        return "each row of the weights should sum to 1: take the softmax along the last axis"
    known = [(recipe(raw), "divide the scores by √d_k before the softmax"),
             (recipe(raw / d_k), "divide by the square root of d_k, not by d_k itself"),
             (recipe(raw * math.sqrt(d_k)), "divide the scores by √d_k; you multiplied")]
    for value, hint in known:
        if value.shape == weights.shape and np.allclose(weights, value, atol=1e-6):
            return hint
    return None


@exercise("scaled dot-product attention in NumPy")
def attention_function(answer):
    """``answer`` is a function attention(Q, K, V, causal=False) -> (output, weights)
    that equals helpers.reference.attention and torch's scaled_dot_product_attention."""
    if not callable(answer):
        yield f"attention should be a function, but it is a {type(answer).__name__}"
        return
    for what, Q, K, V, causal in attention_cases():
        try:
            result = answer(Q.copy(), K.copy(), V.copy(), causal=causal)
        except Exception as exc:
            yield f"on {what} your function stopped with {type(exc).__name__}: {exc}"
            return
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            yield "the function should return two things, (output, weights)"
            return
        output, weights = result
        out_ref, w_ref = ref.attention(Q, K, V, causal=causal)
        problems = list(array_problems(weights, f"the weights on {what}", shape=w_ref.shape)) + list(
            array_problems(output, f"the output on {what}", shape=out_ref.shape))
        if problems:
            yield from problems
            return
        weights, output = np.asarray(weights, dtype=float), np.asarray(output, dtype=float)
        if not np.allclose(weights, w_ref, atol=1e-6):
            yield f"the weights on {what} are off: " + (
                weight_slip(weights, Q, K, causal) or "compare each step with the recipe above")
            return
        if not np.allclose(output, out_ref, atol=1e-6):
            yield f"the weights on {what} are right but the output is not: it is weights @ V"
            return
        if not np.allclose(output, torch_attention(Q, K, V, causal), atol=1e-6):
            yield f"the output on {what} differs from torch's scaled_dot_product_attention"
            return
