"""Chapter 02's worked examples and the step-by-step attention they share.

* ``three_words()``: "the cat sat" as 4-number vectors with hand-picked W_q, W_k, W_v
  that keep two of the four numbers each (the Book, "Three words, by hand" and
  "Queries, keys and values"); ``BOOK_THREE_WORDS_PRINTED`` holds the numbers it prints.
* ``primer_toy()``: the one-head, 5-wide toy of the Primer §5 (X, W_Q, W_K, W_V, W_O
  given), with ``PRIMER_TOY_PRINTED``, the numbers that text prints.
* ``IT_SCORES``: the score row of "it" in "the cat sat on it" (the Lecture §7.3).
* ``attention_steps``: every intermediate of one attention head, by name.
* ``query_step`` / ``three_words_query``: one query against every key (the explorer's compute).
* ``attention_head``: one causal head in torch, from x and one head's slices of a layer's
  parameters (the course's own; exercise 5 asks for the learner's); ``head_slices`` takes
  those slices from a layer; ``cat_head_cases`` runs the shipped cat model's layer 0 on
  cat-world sentences and keeps each head's input and output.

Row-vector convention throughout: a token is a row, ``Q = X @ W_Q``.
"""
import functools
import math

import numpy as np
import torch

from .. import reference as ref
from ..errors import as_array, check_bytes, check_finite, check_index, check_number, check_switch, check_tensor_size, \
    count, fail, shown, whole
from ..explorer import check_model_and_world
from ..model import Attention, check_made, measuring
from ..states import on_the_cpu


def three_words():
    """"the cat sat" (the Book): x (3, 4) and W_q, W_k, W_v (4, 2), fresh arrays each call.

    W_q keeps numbers 1 and 2 of each vector, W_k numbers 3 and 4, W_v numbers 1 and 3.
    """
    keep = lambda a, b: np.eye(4)[:, [a, b]]
    return {
        "tokens": ["the", "cat", "sat"],
        "x": np.array([[1.0, 0.0, 0.0, 1.0],    # the
                       [0.0, 1.0, 1.0, 0.0],    # cat
                       [0.0, 1.0, 0.0, 1.0]]),  # sat
        "W_q": keep(0, 1),
        "W_k": keep(2, 3),
        "W_v": keep(0, 2),
    }


def three_words_qkv():
    """The queries, keys and values of "the cat sat": q, k, v, each (3, 2)."""
    ex = three_words()
    return tuple(ex["x"] @ ex[name] for name in ("W_q", "W_k", "W_v"))


# What the Book prints for "the cat sat" (the text's claims, kept to be checked).
BOOK_THREE_WORDS_PRINTED = {
    "scores": [[2, 0, 1], [0, 2, 1], [1, 1, 2]],
    "weights": [[0.665, 0.090, 0.245], [0.090, 0.665, 0.245], [0.212, 0.212, 0.576]],
    "context": [[0.665, 0.335, 0.090, 0.910], [0.090, 0.910, 0.665, 0.335], [0.212, 0.788, 0.212, 0.788]],
    "qk_scores": [[0, 1, 0], [1, 0, 1], [1, 0, 1]],
}


def primer_toy():
    """The one-head toy of the Primer §5: tokens, vocab (20 words), X (3, 5), W_Q, W_K, W_V, W_O (5, 5).

    X holds the embedding rows of "the", "cat", "sat" (ids 0, 1, 3); W_O is the identity.
    """
    return {
        "tokens": ["the", "cat", "sat"],
        "vocab": ["the", "cat", "dog", "sat", "ran", "on", "mat", "floor", "big", "small",
                  "red", "blue", "fast", "slow", "a", "and", ".", "is", "was", ".EOS"],
        "X": np.array([[0.10, -0.20, 0.05, 0.40, 0.15],
                       [0.30, 0.50, -0.10, 0.20, 0.00],
                       [-0.40, 0.10, 0.60, -0.30, 0.20]]),
        "W_Q": np.array([[1.0, 0.0, 0.0, 0.5, 0.0],
                         [0.0, 1.0, 0.0, 0.0, 0.5],
                         [0.0, 0.0, 1.0, 0.0, 0.0],
                         [0.5, 0.0, 0.0, 1.0, 0.0],
                         [0.0, 0.5, 0.0, 0.0, 1.0]]),
        "W_K": np.array([[0.8, 0.2, 0.0, 0.0, 0.0],
                         [0.2, 0.8, 0.0, 0.0, 0.0],
                         [0.0, 0.0, 0.9, 0.1, 0.0],
                         [0.0, 0.0, 0.1, 0.9, 0.0],
                         [0.0, 0.0, 0.0, 0.0, 1.0]]),
        "W_V": np.array([[0.5, 0.5, 0.0, 0.0, 0.0],
                         [0.5, -0.5, 0.0, 0.0, 0.0],
                         [0.0, 0.0, 1.0, 0.0, 0.0],
                         [0.0, 0.0, 0.0, 1.0, 0.0],
                         [0.0, 0.0, 0.0, 0.0, 1.0]]),
        "W_O": np.eye(5),
    }


# What the Primer §5 prints for its toy, digit for digit (the text's claims, kept to be checked).
PRIMER_TOY_PRINTED = {
    "Q": [[0.300, -0.125, 0.050, 0.450, 0.050],
          [0.400, 0.500, -0.100, 0.350, 0.250],
          [-0.550, 0.200, 0.600, -0.500, 0.250]],
    "K": [[0.040, -0.140, 0.085, 0.365, 0.150],
          [0.340, 0.460, -0.070, 0.170, 0.000],
          [-0.300, 0.000, 0.510, -0.210, 0.200]],
    "V": [[-0.050, 0.150, 0.050, 0.400, 0.150],
          [0.400, -0.100, -0.100, 0.200, 0.000],
          [-0.150, -0.250, 0.600, -0.300, 0.200]],
    "scores": [[0.2055, 0.1175, -0.1490],
               [0.1028, 0.4325, -0.1945],
               [-0.1440, -0.2220, 0.6260]],
    "scaled": [[0.092, 0.053, -0.067],
               [0.046, 0.193, -0.087],
               [-0.064, -0.099, 0.280]],
    "weights": [[1.000, 0.000, 0.000],
                [0.463, 0.537, 0.000],
                [0.296, 0.286, 0.418]],
    "output": [[-0.050, 0.150, 0.050, 0.400, 0.150],
               [0.192, 0.016, -0.031, 0.293, 0.069],
               [0.037, -0.089, 0.237, 0.050, 0.128]],
    "h_last": [-0.363, 0.011, 0.837, -0.250, 0.328],
}

# The Primer §5's read-out: logits it says "might" come out (no unembedding U is given),
# and the probabilities it reads off them.
PRIMER_TOY_LOGITS = [-0.8, -0.2, 0.1, 0.5, 1.2, 2.4, 3.1, 2.8, 0.4, -0.1,
                     -0.3, 0.0, -0.5, -0.4, 0.6, 0.2, 1.0, -0.2, 0.3, -1.5]
PRIMER_TOY_PROBS = {"mat": 0.31, "floor": 0.23, "on": 0.16}

# The Lecture §7.3: the scores of the query "it" against the five keys of "the cat sat on it".
IT_TOKENS = ["the", "cat", "sat", "on", "it"]
IT_SCORES = [3.2, 12.8, 5.6, 2.4, 7.2]


def check_overflow(table, name, made_from, advice="scale them down"):
    """Refuse ``table`` (a NumPy array computed, under np.errstate, from finite ``made_from``) when its
    numbers overflowed float64 to inf or NaN, in one sentence; return it."""
    bad = ~np.isfinite(table)
    if bad.any():
        fail(f"{made_from} should give finite {name}, but {count(int(bad.sum()))} of the {count(table.size)} entries "
             f"overflow to inf or NaN (float64 holds numbers up to about 1.8e308): {advice}")
    return table


def check_widths(T, d_k, rows, widths):
    """Refuse no tokens (T = 0: ``rows`` names what should hold them) or queries and keys of no numbers
    (d_k = 0: ``widths`` names what makes them): no row of scores, or 0 / √0, whose softmax is NaN."""
    if T == 0:
        fail(f"{rows} should have at least one row, but it has none")
    if d_k == 0:
        fail(f"{widths} should have at least one number each (d_k >= 1), but they have d_k = 0")


@ref.underflow_to_zero   # (NumPy's underflow ignored, whatever np.seterr a cell set: tiny numbers give 0)
def attention_steps(X, W_Q, W_K, W_V, causal=False, scale=True):
    """One attention head, every step kept.

    X: (T, d_model); W_Q, W_K: (d_model, d_k); W_V: (d_model, d_v), all finite (NaN, inf, or products that
    overflow float64 are refused: the output would be NaN).
    Returns a dict: Q, K (T, d_k); V (T, d_v); scores = Q K^T (T, T);
    scaled = scores / sqrt(d_k) (or the scores again when scale=False);
    masked (-inf above the diagonal when causal, else scaled);
    weights = softmax(masked) row by row (T, T); output = weights V (T, d_v).
    """
    causal, scale = check_switch(causal, "causal"), check_switch(scale, "scale")
    X = check_finite(as_array(X, "X", 2), "X")
    W_Q, W_K, W_V = (check_finite(as_array(W, name, 2), name)
                     for W, name in ((W_Q, "W_Q"), (W_K, "W_K"), (W_V, "W_V")))
    for W, name in ((W_Q, "W_Q"), (W_K, "W_K"), (W_V, "W_V")):
        if W.shape[0] != X.shape[1]:
            fail(f"{name} has {W.shape[0]} rows but X has d_model={X.shape[1]} columns; they must match")
    if W_K.shape[1] != W_Q.shape[1]:
        fail(f"W_K makes keys of d_k={W_K.shape[1]} but W_Q makes queries of d_k={W_Q.shape[1]}")
    check_widths(len(X), W_Q.shape[1], "X (one row a token)", "the queries and keys W_Q and W_K make")
    T, d_k, d_v = len(X), W_Q.shape[1], W_V.shape[1]
    # scores, scaled, the mask, masked, weights and the softmax's work: six (T, T) tables of float64;
    # Q, K, V and the output, with the True/False tables of their overflow checks: 16 bytes a number
    check_bytes(48 * T ** 2 + 16 * T * (2 * d_k + 2 * d_v), f"attention_steps on {count(T)} rows of X",
                "give fewer rows or narrower W_Q, W_K, W_V")
    with np.errstate(over="ignore", invalid="ignore"):   # an overflow is refused below, in one sentence
        Q, K, V = X @ W_Q, X @ W_K, X @ W_V
        scores = Q @ K.T
    for name, table in (("Q", Q), ("K", K), ("V", V), ("scores", scores)):
        check_overflow(table, name, "X and W_Q, W_K, W_V")   # finite X and W_* whose products overflow float64
    scaled = scores / math.sqrt(d_k) if scale else scores
    masked = ref.apply_mask(scaled, ref.causal_mask(T)) if causal else scaled
    weights = ref.softmax(masked)
    with np.errstate(over="ignore", invalid="ignore"):
        output = check_overflow(weights @ V, "output", "the weights and V")
    return {"Q": Q, "K": K, "V": V, "scores": scores, "scaled": scaled, "masked": masked,
            "weights": weights, "output": output}


# printed_difference's tables, bytes an entry: the differences (8), the two -inf tables and where they differ
# (3), the overflow check's (2), and before them check_finite's (4), counted as one: 16
DIFFERENCE_BYTES = 16


@ref.underflow_to_zero
def printed_difference(ours, printed):
    """The largest |ours - printed| over the entries (-inf against -inf counts as 0).

    ours, printed: arrays of the same shape, finite or -inf (a masked score), -inf in the same
    entries of both; every difference finite in float64. A difference up to 0.0005 is the text's rounding.
    """
    ours, printed = as_array(ours, "ours"), as_array(printed, "printed")
    if ours.shape != printed.shape:
        fail(f"cannot compare shape {ours.shape} with the printed shape {printed.shape}")
    if ours.size == 0:   # the largest of no differences is no number
        fail(f"ours and printed should hold at least one number each, but both have shape {ours.shape}")
    check_bytes(DIFFERENCE_BYTES * ours.size, f"printed_difference on {count(ours.size)} entries",
                "compare fewer entries")
    for x, name in ((ours, "ours"), (printed, "printed")):
        check_finite(x, name, minus_inf=True)   # -inf: a masked score
    masked, printed_masked = np.isneginf(ours), np.isneginf(printed)
    if (masked != printed_masked).any():
        where = tuple(int(i) for i in np.argwhere(masked != printed_masked)[0])
        fail(f"ours and printed should hold -inf (a masked score) in the same entries, but at entry {where} "
             f"ours holds {ours[where]:g} and printed {printed[where]:g}")
    with np.errstate(over="ignore", invalid="ignore"):   # an overflow is refused next, in one sentence
        gap = np.subtract(ours, printed, out=np.empty(ours.shape))   # an array, even for two plain numbers
        np.abs(gap, out=gap)
        np.copyto(gap, 0.0, where=masked)
    return float(check_overflow(gap, "differences", "ours and printed", "compare numbers of a size float64 can "
                                "subtract").max())


@ref.underflow_to_zero
def softmax_share(scores, index, d=None):
    """The weight softmax gives entry ``index`` of a score row (T,), after dividing by sqrt(d) if given."""
    scores = check_finite(as_array(scores, "scores", 1), "scores", minus_inf=True)   # -inf: a hidden key
    if len(scores) == 0:   # before the index, which no empty row can have
        fail("scores should hold at least one score, but it is empty")
    index = check_index(index, "index", len(scores), negative=True)
    if d is not None:
        d = check_number(d, "d", low=0, low_open=True)
        seen = np.isfinite(scores)
        with np.errstate(over="ignore"):   # an overflow is refused next, in one sentence
            scaled = scores / math.sqrt(d)   # (-inf, a hidden key, stays -inf)
        check_overflow(scaled[seen], "scores / √d", f"scores up to {np.abs(scores[seen]).max(initial=0):.3g} "
                       f"and d={d:g}", "give a larger d or smaller scores")
        scores = scaled
    if np.isneginf(scores).all():
        fail("scores should leave at least one key seen (a score that is not -inf), but every score is -inf")
    return float(ref.softmax(scores)[index])


# ----------------------------------------------------------------- the explorer's compute

@ref.underflow_to_zero
def query_step(query, keys, values, scale=True, visible=None):
    """One query against T keys.

    query: (d_k,); keys: (T, d_k); values: (T, d_v).
    scale: divide the scores by sqrt(d_k). visible: how many keys, from the first,
    the query may see (the causal mask of a query at position visible - 1); None = all.
    Returns a dict: scores (T,) = keys @ query; scaled (T,); weights (T,), 0 on hidden
    keys and summing to 1; output (d_v,) = weights @ values; visible (int); scale (bool).
    """
    scale = check_switch(scale, "scale")
    query = as_array(query, "query", 1)
    keys, values = as_array(keys, "keys", 2), as_array(values, "values", 2)
    for name, x in (("query", query), ("keys", keys), ("values", values)):
        if not np.isfinite(x).all():
            fail(f"{name} should hold finite numbers, but it holds {shown(x[~np.isfinite(x)][0])}")
    T, d_k = keys.shape
    if query.shape[0] != d_k:
        fail(f"the query should have d_k={d_k} numbers, as the keys do, but it has d_k={query.shape[0]}")
    check_widths(T, d_k, "keys (one row a key)", "the query and the keys")
    if values.shape[0] != T:
        fail(f"values should have one row per key ({T} keys), but they have {values.shape[0]} rows")
    expected = f"a whole number of keys from 1 to {T}"
    visible = T if visible is None else whole(visible, "visible", expected)   # (int's own value: see whole)
    if not 1 <= visible <= T:
        fail(f"visible should be {expected}, but got {shown(visible)}")
    with np.errstate(over="ignore", invalid="ignore"):   # an overflow is refused next, in one sentence
        scores = check_overflow(keys @ query, "scores", "the query and the keys")
        scaled = scores / math.sqrt(d_k) if scale else scores
        seen = np.where(np.arange(T) < visible, scaled, -np.inf)
        weights = ref.softmax(seen)
        output = check_overflow(weights @ values, "output", "the weights and the values")
    return {"scores": scores, "scaled": scaled, "weights": weights, "output": output,
            "visible": visible, "scale": bool(scale)}


def three_words_query(token="sat", query=None, scale=True, causal=False):
    """query_step on "the cat sat" with the hand-picked W_q, W_k, W_v (d_k = d_v = 2).

    token: whose query (and, with causal=True, whose position); query: a (2,) vector
    that replaces the token's own query, or None. Returns query_step's dict plus
    tokens, token, query (2,), keys (3, 2) and values (3, 2).
    """
    tokens = three_words()["tokens"]
    if type(token) is not str or token not in tokens:
        fail(f"token should be one of {tokens}, but got {shown(token)}")
    scale, causal = check_switch(scale, "scale"), check_switch(causal, "causal")
    position = tokens.index(token)
    q_all, keys, values = three_words_qkv()
    query = q_all[position] if query is None else as_array(query, "query", 1)
    result = query_step(query, keys, values, scale=scale, visible=position + 1 if causal else None)
    return {**result, "tokens": tokens, "token": token, "query": query, "keys": keys, "values": values}


# ----------------------------------------------------------------- one head in torch

@on_the_cpu
def as_tensor(x, name, ndim):
    """``x`` (a tensor, an array or nested lists of numbers) as a float tensor of ``ndim`` axes."""
    if not torch.is_tensor(x):
        x = torch.as_tensor(as_array(x, name, ndim))
    check_tensor_size(x, name)
    if x.ndim != ndim or not x.is_floating_point():
        fail(f"{name} should be a float tensor with {ndim} axes, but it has shape {tuple(x.shape)} "
             f"and dtype {x.dtype}")
    return x


@on_the_cpu
def attention_head(x, W_Q, W_K, W_V, b_Q, b_K, b_V):
    """One causal attention head, as the course's model computes it (row vectors: q = x W_Q + b_Q).

    x: (T, d_model), the layer's input (after its LayerNorm).
    W_Q, W_K, W_V: (d_model, d_k), this head's columns of the layer's matrices.
    b_Q, b_K, b_V: (d_k,), this head's entries of the layer's biases.
    Returns (T, d_k): row i is the weighted average of the values of tokens 0..i.
    """
    x = as_tensor(x, "x", 2)
    W_Q, W_K, W_V = (as_tensor(W, name, 2) for W, name in ((W_Q, "W_Q"), (W_K, "W_K"), (W_V, "W_V")))
    b_Q, b_K, b_V = (as_tensor(b, name, 1) for b, name in ((b_Q, "b_Q"), (b_K, "b_K"), (b_V, "b_V")))
    for W, b, name in ((W_Q, b_Q, "Q"), (W_K, b_K, "K"), (W_V, b_V, "V")):
        if W.shape[0] != x.shape[1]:
            fail(f"W_{name} has {W.shape[0]} rows but x has d_model={x.shape[1]} columns; they must match")
        if tuple(W.shape) != tuple(W_Q.shape) or b.shape[0] != W.shape[1]:
            fail(f"one head's W_{name} should be {tuple(W_Q.shape)} with a bias b_{name} of {W_Q.shape[1]} "
                 f"entries, but got {tuple(W.shape)} and {tuple(b.shape)}")
    T, d_k, d_model = x.shape[0], W_Q.shape[1], x.shape[1]
    check_widths(T, d_k, "x (one row a token)", "the queries and keys W_Q and W_K make")
    # in float64 at most: x and the weights made one dtype; q, k, v and the output; three (T, T) tables
    check_bytes(8 * (T * d_model + 3 * (d_model + 1) * d_k + 4 * T * d_k + 3 * T * T),
                f"attention_head on {count(T)} rows of x", "give fewer rows or narrower weights")
    inputs = dict(x=x, W_Q=W_Q, W_K=W_K, W_V=W_V, b_Q=b_Q, b_K=b_K, b_V=b_V)
    for name, value in inputs.items():
        check_finite(value.detach(), name)
    # float32 and float64 together (a model's weights, the learner's x) are computed in the wider one
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in (x, W_Q, W_K, W_V, b_Q, b_K, b_V)))
    x, W_Q, W_K, W_V, b_Q, b_K, b_V = (t.to(dtype) for t in (x, W_Q, W_K, W_V, b_Q, b_K, b_V))
    q = x @ W_Q + b_Q                                 # (T, d_k): what each token looks for
    k = x @ W_K + b_K                                 # (T, d_k): what each token can be found by
    v = x @ W_V + b_V                                 # (T, d_k): what each token hands over
    scores = q @ k.T / math.sqrt(d_k)                 # (T, T): query i against key j
    later = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(later, float("-inf"))  # no token sees a later one
    weights = torch.softmax(scores, dim=-1)           # each row (over the keys) sums to 1
    return check_made(weights @ v, "attention_head", inputs)   # (x = 1e30 would overflow the scores)


@on_the_cpu
def head_slices(attn, head):
    """One head's parameters of an attention layer (helpers.model.Attention): a dict of W_Q, W_K, W_V
    (d_model, d_k) and b_Q, b_K, b_V (d_k,). The query's are columns head*d_k .. (head+1)*d_k - 1; with
    grouped-query attention (n_kv_heads < n_heads) the key's and value's are those of the key/value head
    the query head shares, head // (n_heads / n_kv_heads). A layer without biases (Config bias=False)
    gives biases of zeros, which add nothing, as the layer adds none."""
    if not isinstance(attn, Attention):
        fail(f"attn should be a layer's attention (model.blocks[i].attn), but got {shown(attn)}")
    head = check_index(head, "head", attn.n_heads)
    group = attn.n_heads // attn.n_kv_heads   # query heads per key/value head
    own = {"Q": head, "K": head // group, "V": head // group}
    out = {}
    for n in "QKV":
        columns = slice(own[n] * attn.d_k, (own[n] + 1) * attn.d_k)
        W, b = getattr(attn, f"W_{n}").detach(), getattr(attn, f"b_{n}")
        out[f"W_{n}"] = W[:, columns]
        out[f"b_{n}"] = torch.zeros(attn.d_k, dtype=W.dtype) if b is None else b.detach()[columns]
    return {name: out[name] for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V")}


MAX_HEAD_PROMPTS = 100   # the most prompts cat_head_cases traces in one call

# Cat-world sentences a head is checked on (three lengths).
CAT_HEAD_PROMPTS = ["<BOS> the cat sat on the mat <EOS>",
                    "<BOS> the big dog sat on the red floor <EOS>",
                    "<BOS> the floor was red <EOS>"]


@on_the_cpu
def cat_head_cases(model=None, world=None, prompts=CAT_HEAD_PROMPTS, layer=0):
    """Every head of the cat model's ``layer`` on each prompt, from the model's own trace.

    Returns a list of dicts: prompt, head, x (T, d_model) = the trace's L<layer>.ln1,
    the head's slices (head_slices) and expected (T, d_k) = the trace's head_out for that head.
    """
    from .. import weights, worlds

    model = weights.load_cat() if model is None else model
    world = worlds.cat_world() if world is None else world
    check_model_and_world(model, world)
    if model.cfg.positions == "rotary":   # the model turns its queries and keys; attention_head does not
        fail("cat_head_cases should get a model whose heads attention_head computes, without rotary positions, "
             "but this one has positions='rotary'")
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts \
            or not all(isinstance(p, str) for p in prompts):
        fail(f"prompts should be a non-empty list of prompts (strings), but got {shown(prompts)}")
    if len(prompts) > MAX_HEAD_PROMPTS:   # one traced pass each
        fail(f"prompts should hold at most {MAX_HEAD_PROMPTS} prompts (one traced pass each), "
             f"but holds {count(len(prompts))}")
    attn = model.blocks[check_index(layer, "layer", len(model.blocks))].attn
    ids = [world.tokenizer.encode(prompt) for prompt in prompts]   # every prompt checked before any pass
    cases = []
    for prompt, prompt_ids in zip(prompts, ids):
        with measuring(model), torch.no_grad():   # no dropout: the trace is the head's one output
            trace = model(prompt_ids, trace=True)
        for head in range(attn.n_heads):
            cases.append({"prompt": prompt, "head": head, "x": trace[f"L{layer}.ln1"],
                          **head_slices(attn, head), "expected": trace[f"L{layer}.head_out"][head]})
    return cases
