"""Chapter 02's exercise checks: single weights by hand, one output row, scaled
dot-product attention in NumPy (against helpers.reference and torch), and one head of the
shipped cat model in torch (against the model's own trace), with the slices that feed it.

Each check judges the answer against reference values and names the usual slips
(no scaling, no mask, the wrong row) without printing the expected answer.
"""
import math

import numpy as np
import torch

from .. import reference as ref
from ..exercises import (Function, Wrong, as_array, as_number, call, close_problems, exercise, number_problems, numbers,
                         precision_problem, settled, slip)
from .compute import (attention_head as course_head, attention_steps, cat_head_cases, primer_toy, three_words,
                      three_words_qkv)


# Every course implementation of attention (scores, mask, softmax, the weighted values): each gives the answer to
# any attention exercise for the right arguments (a head is causal attention of x W_Q + b_Q, x W_K + b_K, x W_V + b_V;
# causal attention is a head with identity projections; one head is multi-head attention with n_heads = 1), so every
# attention check of chapters 02-05 names them all in its own= (after its own piece, the name it keeps it by).
COURSES_ATTENTION = (
    "helpers.reference.attention", "helpers.qkv.compute.attention_steps", "helpers.qkv.compute.query_step",
    "helpers.qkv.compute.attention_head", "helpers.masking.compute.causal_attention", "helpers.masking.compute.OneHead",
    "helpers.heads.compute.MultiHeadAttention", "helpers.heads.compute.slipped_attention", "helpers.model.Attention",
    "helpers.sampling.compute.shared_kv_attention")


def off_or_problems(problems, hint, name, rounded=None):
    """The problems of a wrong answer: the known slip's hint when there is one, else ``rounded`` (the sentence for
    an answer right to its own precision, ``precision_problem``) when there is one, else ``problems``."""
    if problems and hint:
        return [f"{name} is off: {hint}"]
    if problems and rounded:
        return [rounded]
    return problems


@exercise("the weight 'cat' puts on 'the', by hand")   # (the answer read here: a float16 one is named as such)
def weight_cat_on_the(answer):
    """``answer`` is row 'cat', column 'the' of softmax(x @ x.T) for "the cat sat"."""
    value = as_number(answer, "your answer")
    x = three_words()["x"]
    w = ref.softmax(x @ x.T)
    slips = [(1 / 3, "the three scores are not equal, so the weights are not 1/3 each"),
             (0.0, "that is the score; the weight is e^score divided by the sum of e^score over the row"),
             (1.0, "e^0 = 1 is the top of the fraction; divide it by the sum over the whole row"),
             (w[1, 1], "that is the weight 'cat' puts on itself; the question asks for column 'the'"),
             (w[1, 2], "that is the weight on 'sat'; the question asks for column 'the'"),
             (w[2, 0], "that is row 'sat'; the question asks for the query 'cat'")]
    problems = list(number_problems(value, w[1, 0], "the weight"))
    yield from off_or_problems(problems, slip(value, slips), "the weight",
                               precision_problem(answer, value, w[1, 0], "the weight", 1e-3))


@exercise("the output of 'cat' with queries, keys and values")   # (the answer read here: a float16 one is named)
def output_of_cat(answer):
    """``answer`` (2,) is the output row of 'cat': softmax(q k^T / sqrt(2)) @ v, no mask."""
    given, answer = answer, as_array(answer, "your answer")   # (given: as the learner gave it, with its dtype)
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
    yield from off_or_problems(problems, slip(answer, slips), "the output of 'cat'",
                               precision_problem(given, answer, right[1], "the output of 'cat'", 1e-3))


@exercise("the weight 'cat' puts on 'the' in the Primer's toy")   # (the answer read here: a float16 one is named)
def toy_weight(answer):
    """``answer`` is row 'cat', column 'the' of the toy's weights, scaled by sqrt(5) and masked."""
    value = as_number(answer, "your answer")
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
    problems = list(number_problems(value, right[1, 0], "the weight"))
    yield from off_or_problems(problems, slip(value, slips), "the weight",
                               precision_problem(answer, value, right[1, 0], "the weight", 1e-3))


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


def weight_slip(weights, Q, K, V, causal):
    """A hint when ``weights`` (T_q, T_k) match a known wrong recipe, else None."""
    d_k = Q.shape[-1]
    raw = Q @ K.T
    hidden = ref.causal_mask(len(Q)) if causal else np.zeros(raw.shape, bool)
    recipe = lambda s: ref.softmax(np.where(hidden, -np.inf, s))
    if np.allclose(weights, ref.softmax(recipe(raw / math.sqrt(d_k))), atol=1e-6):
        return ("the softmax is applied twice: the weights went through a second softmax, which flattens "
                "them and gives the hidden keys weight again; apply it once, to the masked scores")
    if hidden.any() and np.abs(weights[hidden]).max() > 1e-6:
        return ("with causal=True a query must not see later keys: put -inf above the diagonal "
                "of the scores before the softmax")
    if not np.allclose(weights.sum(-1), 1, atol=1e-6):
        after = np.where(hidden, 0, ref.softmax(raw / math.sqrt(d_k)))
        known = [(after, "you masked after the softmax: mask the scores first, so each row still sums to 1")]
        return (slip(weights, known if causal else [], atol=1e-6)
                or "each row of the weights should sum to 1: take the softmax along the last axis")
    known = [(recipe(raw), "divide the scores by √d_k before the softmax"),
             (recipe(raw / d_k), "divide by the square root of d_k, not by d_k itself"),
             (recipe(raw * math.sqrt(d_k)), "divide the scores by √d_k; you multiplied"),
             (recipe(raw / math.sqrt(V.shape[-1])), "d_k is the width of the queries and keys, Q.shape[-1]; "
                                                    "you divided by √ of the values' width, V.shape[-1]"),
             (recipe(raw / math.sqrt(len(Q))), "Q.shape[0] is the number of queries; d_k is Q.shape[-1], "
                                               "the width of each query: divide by √Q.shape[-1]")]
    if raw.shape[0] == raw.shape[1]:
        known.append((recipe(K @ Q.T / math.sqrt(d_k)), "the scores are transposed: row i must be query i "
                                                        "against every key, Q @ K.T, not K @ Q.T"))
        if not causal:
            known.append((ref.softmax(np.where(ref.causal_mask(len(Q)), -np.inf, raw / math.sqrt(d_k))),
                          "with causal=False no key is hidden: apply the mask only when causal is True"))
    return slip(weights, known, atol=1e-6)


def hides_the_diagonal(weights, shape):
    """True when causal weights of the expected ``shape`` (T, T) are what a mask hiding the diagonal too
    gives: the first row NaN (or 0 on the diagonal), every later row summing to 1 with 0 on the diagonal.
    False for weights of another shape (the check names it next, before reading a row)."""
    try:
        w = numbers(weights, "the weights", allow_inf=True, allow_nan=True)
    except Wrong:    # not numbers: the check says so next
        return False
    if w.shape != tuple(shape):
        return False
    later = w[1:]   # with the diagonal hidden, every query after the first still sees an earlier key
    seen = np.isfinite(later).all() and np.allclose(later.sum(-1), 1) and np.all(np.diag(w)[1:] == 0)
    return bool(seen and (np.isnan(w[0]).all() or w[0, 0] == 0))


def attention_problem(attention, what, Q, K, V, causal):
    """What is wrong with the learner's ``attention`` on one case, or None."""
    result = call(attention, Q.copy(), K.copy(), V.copy(), causal=causal, what=f"on {what}")
    if not (isinstance(result, (tuple, list)) and len(result) == 2):
        return "the function should return two things, (output, weights)"
    out_ref, w_ref = ref.attention(Q, K, V, causal=causal)
    if causal and hides_the_diagonal(result[1], w_ref.shape):
        return (f"the weights on {what} are off: your mask hides the diagonal too, so the first query "
                "sees nothing (0/0 is NaN); a token may see itself: hide only keys after it (k=1)")
    weights = numbers(result[1], f"the weights on {what}", shape=w_ref.shape)
    output = numbers(result[0], f"the output on {what}", shape=out_ref.shape)
    if not np.allclose(weights, w_ref, atol=1e-6):
        return precision_problem(result[1], weights, w_ref, f"the weights on {what}", 1e-6) or \
            f"the weights on {what} are off: " + (weight_slip(weights, Q, K, V, causal) or "compare each step with "
                                                  "the recipe above")
    if not np.allclose(output, out_ref, atol=1e-6):
        return precision_problem(result[0], output, out_ref, f"the output on {what}", 1e-6) or \
            f"the weights on {what} are right but the output is not: it is weights @ V"
    if not np.allclose(output, torch_attention(Q, K, V, causal), atol=1e-6):
        return f"the output on {what} differs from torch's scaled_dot_product_attention"
    return None


@exercise("scaled dot-product attention in NumPy", answer=Function("a function attention(Q, K, V, causal)",
                                                                   own=COURSES_ATTENTION))
def attention_function(answer):
    """``answer`` is a function attention(Q, K, V, causal=False) -> (output, weights)
    that equals helpers.reference.attention and torch's scaled_dot_product_attention."""
    for case in attention_cases():
        problem = attention_problem(answer, *case)
        if problem:
            yield problem
            return


# --- exercise 5: one head of the cat model, in torch ---------------------------------------------

SLICES = ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")
HEAD_ATOL = 1e-4   # the model computes in float32; a head's outputs reach about 4


def head_variant(case, divide="sqrt", biases="QKV", dim=-1, mask="before", scores="qk", average="v",
                 softmaxes=1):
    """What a head computes with one known slip, in float64, for one of cat_head_cases' cases.

    divide: "sqrt" (right), "none", "d_k", "times" (multiplied by √d_k) or "d_model" (by √d_model);
    biases: which of Q, K, V get theirs; dim: the softmax's axis; mask: "before" (right), "none",
    "after" (zeros after the softmax), "zero" (masked scores set to 0, not -inf) or "earlier" (the keys
    before each query hidden, a tril mask); scores: "qk" (right) or "kq" (k q^T); softmaxes: 1 (right)
    or 2; average: "v" (right), "k", "x" (x's first d_k columns), "x_W_K" (values made with W_K) or
    "weights_T" (weights.T @ v). divide may also be "T" (by √T); biases may be "swapped" (b_K on q, b_Q on k).
    """
    x = case["x"].double()
    W = {name: case[name].double() for name in SLICES}
    bias = {"Q": "b_K", "K": "b_Q", "V": "b_V"} if biases == "swapped" else {n: f"b_{n}" for n in "QKV"}
    q, k, v = (x @ W[f"W_{n}"] + (W[bias[n]] if n in biases or biases == "swapped" else 0) for n in "QKV")
    T, d_k = x.shape[0], q.shape[1]
    s = q @ k.T if scores == "qk" else k @ q.T
    s = {"sqrt": s / math.sqrt(d_k), "none": s, "d_k": s / d_k, "times": s * math.sqrt(d_k),
         "d_model": s / math.sqrt(x.shape[1]), "T": s / math.sqrt(T)}[divide]
    later = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    if mask in ("before", "zero", "earlier"):
        hidden = later if mask != "earlier" else torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)
        s = s.masked_fill(hidden, float("-inf") if mask != "zero" else 0.0)
    weights = torch.softmax(s, dim=dim)
    if softmaxes == 2:
        weights = torch.softmax(weights, dim=dim)
    if mask == "after":
        weights = weights.masked_fill(later, 0.0)
    if average == "weights_T":
        return (weights.T @ v).numpy()
    averaged = {"v": v, "k": k, "x": x[:, :d_k], "x_W_K": x @ W["W_K"] + W["b_V"]}[average]
    return (weights @ averaged).numpy()


HEAD_SLIPS = [
    (dict(divide="none"), "the scores are not divided by √d_k: divide q kᵀ by √d_k (here √3) before the softmax"),
    (dict(divide="d_k"), "the scores are divided by d_k (or by √d_k twice): divide them by √d_k once"),
    (dict(divide="times"), "the scores are multiplied by √d_k: divide them by √d_k"),
    (dict(divide="d_model"), "the scores are divided by √d_model = √6: d_k is the head's own dimension, "
                             "W_Q.shape[1] = 3, not d_model; divide by √d_k"),
    (dict(mask="zero"), "the masked scores are set to 0, and a score of 0 still gets weight (e^0 = 1): "
                        "fill the entries above the diagonal with -inf"),
    (dict(mask="earlier"), "the mask hides the earlier keys (below the diagonal) instead of the later ones: "
                           "hide the entries above the diagonal, torch.triu(..., diagonal=1)"),
    (dict(softmaxes=2), "the softmax is applied twice: a second softmax flattens the weights and gives the "
                        "hidden keys weight again; apply it once"),
    (dict(average="weights_T"), "the weights are transposed before averaging: output = weights @ v, row i "
                                "being token i's weights over the keys"),
    (dict(dim=0), "the softmax runs over the wrong axis (down each column, over the queries): "
                  "each row, one query's scores against the keys, must sum to 1: softmax over the last axis"),
    (dict(biases=""), "the biases are left out: q = x @ W_Q + b_Q, and the same for k and v"),
    (dict(biases="QK"), "the value bias is left out: v = x @ W_V + b_V"),
    (dict(biases="KV"), "the query bias is left out: q = x @ W_Q + b_Q"),
    (dict(mask="none"), "no causal mask: a token must not see later tokens: put -inf above the diagonal "
                        "of the scores before the softmax"),
    (dict(mask="after"), "the mask comes after the softmax: the weights left on each row no longer sum to 1; "
                         "put -inf into the scores before the softmax instead"),
    (dict(scores="kq"), "the scores are transposed: row i must be token i's query against every key, q @ k.T"),
    (dict(average="k"), "the weights average the keys: they average the values v"),
    (dict(divide="T"), "the scores are divided by √T, T being the number of tokens: d_k is the head's "
                       "width, W_Q.shape[1] = 3; divide by √d_k"),
    (dict(average="x_W_K"), "the values are made with W_K: v = x @ W_V + b_V"),
    (dict(average="x"), "the weights average the token vectors x: they average the values v = x @ W_V + b_V"),
    (dict(biases="swapped"), "b_Q and b_K are swapped: q = x @ W_Q + b_Q and k = x @ W_K + b_K"),
]


def transposed_hint(head, case, where):
    """A hint when ``head`` stops on the model's W_Q, W_K, W_V but runs on their transposes (x @ W.T)."""
    flipped = {name: case[name].T.contiguous() if name.startswith("W") else case[name] for name in SLICES}
    try:
        out = numbers(call(head, case["x"], *(flipped[name] for name in SLICES), what=where), "the output",
                      allow_inf=True, allow_nan=True)
    except Wrong:
        return None
    if out.shape == tuple(case["expected"].shape):   # it runs only on transposed matrices
        return (f"your function stopped {where}: it multiplies by the transposed matrices (x @ W.T, as nn.Linear "
                "stores its weight); here W_Q, W_K, W_V are (d_model, d_k) and a token is a row: q = x @ W_Q + b_Q")
    return None


def not_finite_hint(finite):
    """What a head's output that is NaN or inf on some tokens says about its mask, from ``finite`` (T,):
    whether each token's output row is finite; None when no known slip gives that pattern."""
    if finite.all():
        return None
    if not finite.any():
        return ("is not finite on any token: every key is hidden (a row of scores all -inf has a softmax of "
                "0/0 = NaN); hide only the keys after each token, torch.triu(..., diagonal=1)")
    if len(finite) > 2 and not finite[0] and finite[-1] and not finite[1:-1].all():
        return ("is not finite on every token but the last: you filled the weights with -inf after the softmax "
                "(a weight of -inf times a value is -inf or NaN); put -inf into the scores, before the softmax, "
                "which turns it into a weight of 0")
    if not finite[0] and finite[1:].all():
        return ("is NaN on the first token: the mask hides the diagonal too; a token may see itself: hide only "
                "the keys after it (diagonal=1)")
    return None


def head_problem(head, case):
    """What is wrong with the learner's ``head`` on one case of cat_head_cases, or None."""
    where = f"on L0H{case['head']} for '{case['prompt']}'"
    T, d_k = case["expected"].shape
    try:
        out = call(head, case["x"], *(case[name] for name in SLICES), what=where)
    except Wrong:
        hint = transposed_hint(head, case, where)
        if hint:
            raise Wrong(hint) from None
        raise
    if out is None:
        return ("not answered yet: attention_head returns None; write its body where the cell says "
                "# YOUR CODE HERE, so that output holds the head's output")
    if isinstance(out, (tuple, list)):
        return "attention_head should return only the output (T, d_k), not a tuple"
    arr = numbers(out, f"the output {where}", allow_inf=True, allow_nan=True)   # NaN and inf are named below
    if arr.ndim != 2:
        return f"the output {where} should have shape ({T}, {d_k}), but it has shape {arr.shape}"
    if arr.shape == (T, case["x"].shape[1]):
        return (f"the output {where} has d_model = {arr.shape[1]} columns: the weights average the values "
                "v = x @ W_V + b_V, which have d_k columns, not the rows of x")
    if arr.shape == (d_k, T):
        return f"the output {where} is transposed: one row per token, shape (T, d_k) = ({T}, {d_k})"
    if arr.shape == (T, d_k):
        hint = not_finite_hint(np.isfinite(arr).all(-1))
        if hint:
            return f"the output {where} {hint}"
    arr = as_array(arr, f"the output {where}", shape=(T, d_k))
    if np.allclose(arr, case["expected"].numpy(), atol=HEAD_ATOL):
        return None
    narrow = precision_problem(out, arr, case["expected"].numpy(), f"the output {where}", HEAD_ATOL)
    if narrow:
        return narrow
    hint = slip(arr, [(head_variant(case, **kind), words) for kind, words in HEAD_SLIPS], atol=HEAD_ATOL)
    return f"the output {where} is off: " + (hint or "compare each step with the recipe above it")


@exercise("one attention head in torch, checked on the cat model", answer=Function("a function attention_head",
          own=("helpers.qkv.compute.attention_head", *COURSES_ATTENTION)), keeps="02")
def attention_head(answer):
    """``answer`` is attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V) -> (T, d_k), run on every head of
    the shipped cat model's layer 0 for cat-world sentences, against the model's own head outputs."""
    for case in cat_head_cases():
        problem = head_problem(answer, case)
        if problem:
            yield problem
            return


# --- exercise 6: head 1's slices -------------------------------------------------------------------

HEAD_PROMPT = "<BOS> the cat sat"


def head_one_slips(trace, attn):
    """(what head 1's output would be with a known slicing slip, the hint) for the trace of HEAD_PROMPT."""
    x = trace["L0.ln1"]
    params = {name: getattr(attn, name).detach() for name in SLICES}
    run = lambda cut_W, cut_b, x=x: course_head(x, *(params[n][..., cut_W if n[0] == "W" else cut_b] for n in SLICES))
    right, first = slice(3, 6), slice(0, 3)
    out = [(run(first, first), "those are head 0's columns (0, 1, 2): head 1 owns columns 3, 4, 5, "
                               "that is head·d_k to (head+1)·d_k"),
           (run(slice(1, None, 2), slice(1, None, 2)), "a head owns d_k neighbouring columns (3, 4, 5 for head 1), "
                                                        "not every second column"),
           (run(right, first), "the matrices are head 1's columns but the biases are head 0's: slice b_Q, "
                               "b_K, b_V the same way, [3:6]"),
           (run(right, right, x=trace["h0"]), "the head reads the LayerNormed input, trace['L0.ln1'], "
                                                "not the embeddings h0")]
    zero = {n: torch.zeros(3) for n in ("b_Q", "b_K", "b_V")}
    out.append((course_head(x, *(params[n][:, right] if n[0] == "W" else zero[n] for n in SLICES)),
                "the biases are missing: pass head 1's b_Q[3:6], b_K[3:6], b_V[3:6]"))
    return [(o.numpy(), words) for o, words in out]


@exercise("head 1 of layer 0 from its slices")   # (the answer read here: a float16 one is named as such)
def head_one_output(answer):
    """``answer`` (4, 3) is L0H1's output for "<BOS> the cat sat", from head 1's slices of layer 0."""
    from .. import weights, worlds

    given, answer = answer, as_array(answer, "your answer", shape=(4, 3))   # (given: with its dtype)
    model, world = weights.load_cat(), worlds.cat_world()
    with torch.no_grad():
        trace = model(world.tokenizer.encode(HEAD_PROMPT), trace=True)
    right = trace["L0.head_out"][1].numpy()
    done = settled(given, answer, right, "the output of L0H1", HEAD_ATOL)
    if done is not None:
        yield from done
        return
    hint = slip(answer, head_one_slips(trace, model.blocks[0].attn), atol=HEAD_ATOL)
    yield "the output of L0H1 is off: " + (hint or "take columns 3 to 5 of W_Q, W_K, W_V and entries 3 to 5 "
                                           "of b_Q, b_K, b_V; if your attention_head does not pass exercise 5 "
                                           "yet, use qkv.attention_head")
