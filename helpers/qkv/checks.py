"""Chapter 02's exercise checks: single weights by hand, one output row, and scaled
dot-product attention in NumPy (against helpers.reference and torch).

Each check judges the answer against reference values and names the usual slips
(no scaling, no mask, the wrong row) without printing the expected answer.
"""
import math

import numpy as np

from .. import reference as ref
from ..errors import to_numpy
from ..exercises import (Array, Function, Number, Wrong, as_array, call, close_problems, exercise,
                         number_problems, slip)
from .compute import attention_steps, primer_toy, three_words, three_words_qkv


def off_or_problems(problems, hint, name):
    """The problems of a wrong answer: the known slip's hint when there is one, else ``problems``."""
    if problems and hint:
        return [f"{name} is off: {hint}"]
    return problems


@exercise("the weight 'cat' puts on 'the', by hand", answer=Number())
def weight_cat_on_the(answer):
    """``answer`` is row 'cat', column 'the' of softmax(x @ x.T) for "the cat sat"."""
    x = three_words()["x"]
    w = ref.softmax(x @ x.T)
    slips = [(1 / 3, "the three scores are not equal, so the weights are not 1/3 each"),
             (0.0, "that is the score; the weight is e^score divided by the sum of e^score over the row"),
             (1.0, "e^0 = 1 is the top of the fraction; divide it by the sum over the whole row"),
             (w[1, 1], "that is the weight 'cat' puts on itself; the question asks for column 'the'"),
             (w[1, 2], "that is the weight on 'sat'; the question asks for column 'the'"),
             (w[2, 0], "that is row 'sat'; the question asks for the query 'cat'")]
    problems = list(number_problems(answer, w[1, 0], "the weight"))
    yield from off_or_problems(problems, slip(answer, slips), "the weight")


@exercise("the output of 'cat' with queries, keys and values", answer=Array())
def output_of_cat(answer):
    """``answer`` (2,) is the output row of 'cat': softmax(q k^T / sqrt(2)) @ v, no mask."""
    ex = three_words()
    args = (ex["x"], ex["W_q"], ex["W_k"], ex["W_v"])
    if answer.shape in ((4,), (3, 4)):
        raise Wrong("the output should have 2 numbers, one per column of v: average the values v, not the vectors x")
    if answer.shape == (3, 2):
        raise Wrong("give only the row of 'cat' (the second row), shape (2,)")
    right = attention_steps(*args)["output"]
    q, k, v = three_words_qkv()
    slips = [(attention_steps(*args, scale=False)["output"][1],
              "divide the scores by √d_k = √2 before the softmax"),
             (attention_steps(*args, causal=True)["output"][1],
              "no causal mask in this exercise: 'cat' may look at all three tokens"),
             (right[0], "that is the output of 'the'; the question asks for 'cat'"),
             ((q @ k.T)[1] @ v, "weight the values by the softmax of the scores, not by the raw scores"),
             (np.exp((q @ k.T)[1] / math.sqrt(2)) @ v,
              "the e^score are not weights yet: divide them by their sum over the row first")]
    problems = list(close_problems(answer, right[1], "the output of 'cat'"))
    yield from off_or_problems(problems, slip(answer, slips), "the output of 'cat'")


@exercise("the weight 'cat' puts on 'the' in the Primer's toy", answer=Number())
def toy_weight(answer):
    """``answer`` is row 'cat', column 'the' of the toy's weights, scaled by sqrt(5) and masked."""
    toy = primer_toy()
    args = (toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"])
    weights = lambda **kw: attention_steps(*args, **kw)["weights"]
    right = weights(causal=True)
    slips = [(weights(causal=True, scale=False)[1, 0], "divide the scores by √d_k = √5 before the softmax"),
             (weights(causal=False)[1, 0],
              "'cat' must not see 'sat', which comes after it: leave that key out (the causal mask)"),
             (weights(causal=False, scale=False)[1, 0],
              "scale by √5 and leave out the key of 'sat', which comes after 'cat'"),
             (ref.softmax(attention_steps(*args, scale=False)["scores"][1, :2] / 5)[0],
              "divide by the square root of d_k = 5, not by 5 itself"),
             (right[1, 1], "that is the weight 'cat' puts on itself; the question asks for column 'the'"),
             (right[2, 0], "that is row 'sat'; the question asks for the query 'cat'")]
    problems = list(number_problems(answer, right[1, 0], "the weight"))
    yield from off_or_problems(problems, slip(answer, slips), "the weight")


def attention_cases():
    """(what, Q, K, V, causal) inputs an attention function is tried on."""
    rng = np.random.default_rng(2)
    toy = primer_toy()
    toy_steps = attention_steps(toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"])
    return [("the Primer's toy with causal=True", toy_steps["Q"], toy_steps["K"], toy_steps["V"], True),
            ("'the cat sat' with causal=False", *three_words_qkv(), False),
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
    """A hint when ``weights`` (T_q, T_k) match a known wrong recipe, else None."""
    d_k = Q.shape[-1]
    raw = Q @ K.T
    hidden = ref.causal_mask(len(Q)) if causal else np.zeros(raw.shape, bool)
    recipe = lambda s: ref.softmax(np.where(hidden, -np.inf, s))
    if hidden.any() and np.abs(weights[hidden]).max() > 1e-6:
        return ("with causal=True a query must not see later keys: put -inf above the diagonal "
                "of the scores before the softmax")
    if not np.allclose(weights.sum(-1), 1, atol=1e-6):
        after = np.where(hidden, 0, ref.softmax(raw / math.sqrt(d_k)))
        known = [(after, "you masked after the softmax: mask the scores first, so each row still sums to 1")]
        return (slip(weights, known if causal else [], atol=1e-6)
                or "each row of the weights should sum to 1: take the softmax along the last axis")
    return slip(weights, [(recipe(raw), "divide the scores by √d_k before the softmax"),
                          (recipe(raw / d_k), "divide by the square root of d_k, not by d_k itself"),
                          (recipe(raw * math.sqrt(d_k)), "divide the scores by √d_k; you multiplied")],
                atol=1e-6)


def hides_the_diagonal(weights):
    """True when causal weights (T, T) are NaN on the first row or zero on the diagonal."""
    try:
        w = to_numpy(weights, "the weights")
    except ValueError:    # not numbers: as_array says so next
        return False
    if w.ndim != 2 or w.shape[0] != w.shape[1]:
        return False
    return bool(np.isnan(w[0]).all() or np.all(np.nan_to_num(np.diag(w)) == 0))


def attention_problem(attention, what, Q, K, V, causal):
    """What is wrong with the learner's ``attention`` on one case, or None."""
    result = call(attention, Q.copy(), K.copy(), V.copy(), causal=causal, what=f"on {what}")
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        return "the function should return two things, (output, weights)"
    out_ref, w_ref = ref.attention(Q, K, V, causal=causal)
    if causal and hides_the_diagonal(result[1]):
        return (f"the weights on {what} are off: your mask hides the diagonal too, so the first query "
                "sees nothing (0/0 is NaN); a token may see itself: hide only keys after it (k=1)")
    weights = as_array(result[1], f"the weights on {what}", shape=w_ref.shape)
    output = as_array(result[0], f"the output on {what}", shape=out_ref.shape)
    if not np.allclose(weights, w_ref, atol=1e-6):
        return f"the weights on {what} are off: " + (
            weight_slip(weights, Q, K, causal) or "compare each step with the recipe above")
    if not np.allclose(output, out_ref, atol=1e-6):
        return f"the weights on {what} are right but the output is not: it is weights @ V"
    if not np.allclose(output, torch_attention(Q, K, V, causal), atol=1e-6):
        return f"the output on {what} differs from torch's scaled_dot_product_attention"
    return None


@exercise("scaled dot-product attention in NumPy", answer=Function("a function attention(Q, K, V, causal)"))
def attention_function(answer):
    """``answer`` is a function attention(Q, K, V, causal=False) -> (output, weights)
    that equals helpers.reference.attention and torch's scaled_dot_product_attention."""
    for case in attention_cases():
        problem = attention_problem(answer, *case)
        if problem:
            yield problem
            return
