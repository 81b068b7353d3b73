"""Checks for chapter 04 (masking): the learner's causal attention (a piece of their GPT, checked
against the cat model), the causal mask, one masked weight by hand, repairing a mask applied
after softmax, and which outputs a changed token can move.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import collections
import math

import numpy as np
import torch

from ..errors import answer_shape, as_array, check_index, check_positive_int, count, fail, is_tensor, shown
from ..exercises import (Array, Function, Wrong, as_number, as_wholes, call, close_problems, exercise, number_problems,
                         numbers, precision_problem, settled, sealed, sum_shown as _sum_shown)
from ..exercises import as_array as answer_array   # (a learner's answer, Wrong; errors' as_array: the check's inputs)
from ..qkv.checks import COURSES_ATTENTION
from ..reference import softmax
from .compute import heads_from_trace


class BoolMask(Array):
    """A (T, T) mask for ``masked_fill``: boolean. A table of 0s and 1s (float or int) is refused with
    one sentence, since masked_fill refuses it; -inf passes on to the check (an additive mask)."""

    def convert(self, answer, check, args, kwargs):
        values = super().convert(answer, check, args, kwargs)
        # each row's own dtype when the rows are tensors (np.asarray would call .numpy() on one that requires grad)
        rows = answer if isinstance(answer, (list, tuple)) and any(is_tensor(v) for v in answer) else [answer]
        dtypes = {str(v.dtype if is_tensor(v) else np.asarray(v).dtype).replace("torch.", "") for v in rows}
        if dtypes == {"bool"} or np.isinf(values).any():
            return values
        T = len(values)
        placed = ((values != 0) == np.triu(np.ones((T, T), dtype=bool), 1)).all()
        raise Wrong(f"this mask holds numbers ({', '.join(sorted(dtypes))}), not True and False: "
                    "masked_fill accepts only a boolean mask, so build it with dtype=torch.bool "
                    f"(torch.ones({T}, {T}, dtype=torch.bool))"
                    + ("" if placed else ", and hide exactly the keys j > i"))


MAX_T = 1_000   # the largest T a check here takes (the chapter's use 3 to 5)


def check_T(T):
    """T, the number of tokens a check is about: a whole number from 1 to MAX_T."""
    T = check_positive_int(T, "T")
    if T > MAX_T:
        fail(f"T should be at most {MAX_T:,} here, but got {count(T)}")
    return T


def check_table(x, name, weights=False):
    """``x`` as a square (T, T) table of finite numbers (T at most MAX_T), from 0 to 1 when they are
    softmax ``weights``, or one sentence."""
    x = as_array(x, name, 2)
    if x.shape[0] != x.shape[1] or not 1 <= len(x) <= MAX_T:
        fail(f"{name} should be a square (T, T) table with T from 1 to {MAX_T:,}, but it has shape {x.shape}")
    bad = ~np.isfinite(x) | ((x < 0) | (x > 1) if weights else False)
    if bad.any():
        fail(f"{name} should hold finite numbers{' from 0 to 1 (softmax weights)' if weights else ''}, but it holds "
             f"{shown(float(x[bad][0]))}")
    return x


@exercise("the causal mask", answer=BoolMask(shape=lambda T: (check_T(T),) * 2, allow_inf=True))
def mask(answer, T=5):
    """``answer`` (T, T) is True exactly where query i must not see key j, i.e. j > i (a boolean mask)."""
    T = check_T(T)
    got = answer != 0
    want = np.triu(np.ones((T, T), dtype=bool), 1)
    if np.isinf(answer).any():
        yield infinite_mask_problem(answer, want)
        return
    if (got == want).all():
        return
    if (got == np.triu(np.ones((T, T), dtype=bool))).all():
        yield "the diagonal is hidden too: a token must be allowed to see itself (diagonal=1)"
    elif (got == ~want).all():
        yield "True marks the keys a query may see; here True should mark the keys to hide"
    elif (got == want.T).all():
        yield "this hides the past and shows the future: the hidden keys are above the diagonal (j > i)"
    else:
        yield (f"{int((got != want).sum())} of {T * T} entries are wrong: hide key j from query i "
               "exactly when j > i")


def infinite_mask_problem(answer, want):
    """The sentence for a mask ``answer`` (T, T) that holds -inf or +inf (an additive mask, or its sign flipped),
    where ``want`` (T, T) is True on the keys to hide."""
    placed = ((answer != 0) == want).all() and (np.isinf(answer) == want).all()
    if (answer == np.inf).any():   # added to a score, +inf is the largest: that key would take all the weight
        kind = ("this holds +inf: added to the scores it would give that key all the weight (e^inf), not hide it "
                "(an additive mask puts -inf where a key may not be seen)")
    else:
        kind = "this holds -inf: it is an additive mask (0 where a key may be seen, -inf where it may not)"
    return (f"{kind}; here give the boolean mask, True where query i must not see key j"
            + ("" if placed else ", and hide exactly the keys j > i"))


@exercise("one masked weight, by hand")   # (the answer read here: a float16 one is named as such)
def masked_weight(answer, scores, query, key):
    """``answer`` is weight[query, key] after the causal mask and the softmax of ``scores`` (T, T)."""
    scores = check_table(scores, "scores")
    query, key = check_index(query, "query", len(scores)), check_index(key, "key", len(scores))
    if key > query:
        fail(f"key should be at most query={query} (a later key's weight is 0 under the mask), but got {key}")
    given, answer = answer, as_number(answer, "your answer")   # (given: as the learner gave it, with its dtype)
    expected = softmax(scores[query, :query + 1])[key]
    from_one = softmax(scores[query - 1, :query])[key - 1] if query > 0 and key > 0 else math.nan
    if abs(answer - expected) < 1e-3:
        return
    rounded = precision_problem(given, answer, expected, "your weight", 1e-3)
    if abs(answer - softmax(scores[query])[key]) < 1e-3:
        yield f"your softmax includes keys after position {query}: the mask removes them first"
    elif abs(answer - from_one) < 1e-3:
        yield (f"positions count from 0: query {query} is row {query + 1} of the table (index {query}), "
               f"key {key} its column {key + 1}")
    elif rounded:
        yield rounded
    elif not 0 <= answer <= 1:
        yield (f"your weight is {answer:.4g}, but a weight lies between 0 and 1"
               + (" (give a fraction, not a percentage)" if 1 < answer <= 100 else ""))
    else:
        yield from number_problems(answer, expected, "your weight", atol=1e-3)


def check_zeroed(zeroed):
    """zeroed: softmax weights (T, T) with the future set to 0 afterwards: from 0 to 1, every row with weight."""
    zeroed = check_table(zeroed, "zeroed", weights=True)
    if not (zeroed.sum(axis=1) > 0).all():
        fail(f"zeroed should have some weight in every row, but row {int(np.argmin(zeroed.sum(axis=1)))} sums to 0")
    return zeroed


@exercise("repairing a mask applied after softmax")   # (the answer read here: a float16 one is named as such)
def renormalised(answer, zeroed):
    """``answer`` (T, T): the rows of ``zeroed`` (softmax, then future weights set to 0) rescaled to sum to 1."""
    zeroed = check_zeroed(zeroed)
    given, answer = answer, answer_array(answer, "your answer", shape=zeroed.shape)   # (given: with its dtype)
    reference = zeroed / zeroed.sum(axis=1, keepdims=True)
    # right first: when zeroed's rows already sum to 1, "unchanged" is the right answer too
    done = settled(given, answer, reference, "the weights", 1e-4, rtol=0)
    if done is not None:
        yield from done
        return
    with np.errstate(over="ignore"):   # entries near 1e308 sum to inf: not 1, as the sentence then says
        sums = answer.sum(axis=1)
    worst = int(np.argmax(np.abs(sums - 1)))
    if np.abs(np.triu(answer, 1)).max() > 1e-6:
        yield "some weight above the diagonal is not 0: the future must stay hidden"
    elif np.allclose(answer, zeroed, atol=1e-6):
        yield ("these are the zeroed weights unchanged: their rows sum to less than 1; divide each row by its "
               "own sum")
    elif np.allclose(answer, zeroed / zeroed.sum(axis=0, keepdims=True), atol=1e-6):
        yield "each column was divided by its sum; divide each row by its own sum (keepdim=True, dim=-1)"
    elif not np.allclose(sums, 1, atol=1e-4):
        yield f"row {worst} sums to {sums[worst]:.3f}; divide each row by its own sum"
    else:
        yield from close_problems(answer, reference, "weights", atol=1e-4)


@exercise("which outputs a changed token can move")
def moved_positions(answer, T, changed):
    """``answer``: the positions (from 0) whose output can change, in a causal model of T tokens,
    when only the token at position ``changed`` is replaced."""
    T = check_T(T)
    changed = check_index(changed, "changed", T)
    given = as_wholes(answer, "the positions", ordered=False)
    got = sorted(set(given))
    want = list(range(changed, T))
    if len(given) != len(got):
        twice, times = collections.Counter(given).most_common(1)[0]
        yield f"each position should be named once, but {twice} appears {times} times"
        return
    if got == want:
        return
    if any(p < 0 or p >= T for p in got):
        yield f"positions run from 0 to {T - 1}"
    elif any(p < changed for p in got):
        yield f"an earlier position cannot see position {changed}: the mask hides it from them"
    elif changed not in got:
        yield f"position {changed} itself changes: its own token is different"
    else:
        yield f"some later positions are missing: every query after {changed} may attend to it"


# ------------------------------------------------------------------ the learner's piece: causal attention

PROMPT = "<BOS> the cat sat on the mat"
BATCH = ("<BOS> the dog is big <EOS>", "<BOS> the mat was red <EOS>")
TRANSPOSE = "k must be transposed for the scores: q @ k.transpose(-2, -1), (T_q, d_k) @ (d_k, T_k)"
MATMUL = ("batch2", "mat1 and mat2", "cannot be multiplied")
NOT_YET = ("not answered yet: causal_attention returns (None, None); write its body in the answer cell above, "
           "between the docstring and the return")
RENORMALISED = ("you seem to apply the mask after the softmax and then renormalise each row: on ordinary scores "
                "that gives the right weights, but a key to the right with a huge score (212 here) takes all of "
                "the softmax, the allowed weights underflow to 0 and 0/0 is NaN; put -inf in the scores before "
                "the softmax")
SHIFT = ("with a cache, q holds only the last T_q positions while k and v hold all T_k, so query i sits at "
         "position T_k - T_q + i: hide key j when j > T_k - T_q + i (a (T_q, T_k) mask, torch.triu with "
         "diagonal=T_k - T_q + 1), not j > i")
SLIPS = (   # (how the mistake computes attention, the sentence), in the order they are tried
    (dict(after="zeroed"), "the weights are the softmax of all the scores with the future set to 0 afterwards: "
     "the rows no longer sum to 1 and the future still counts in the denominator; put -inf in the scores "
     "before the softmax"),
    (dict(after="renormalised"), RENORMALISED),
    (dict(hide="future_and_self"), "the diagonal is hidden too (j >= i): a query must see its own key, and "
     "query 0, left with no key, gets NaN; hide only the keys after it (j > i, torch.triu with diagonal=1)"),
    (dict(hide="past"), "the mask is upside down: it hides the past (j < i) and lets each query see the future; "
     "hide the keys above the diagonal (j > i)"),
    (dict(hide="visible"), "the mask is inverted: masked_fill writes -inf where the mask is True, so True must "
     "mark the keys to hide (j > i), not the keys a query may see"),
    (dict(fill=0.0), "the hidden scores are set to 0, not -inf: e^0 = 1, so every future key keeps some weight; "
     "fill them with float('-inf')"),
    (dict(hide="none"), "no key is hidden: these are the weights without the mask (adding 0 to a score hides "
     "nothing); put -inf above the diagonal before the softmax"),
    (dict(fill="nan"), "every weight is NaN: an additive mask made as triu(ones) * -inf holds 0 * (-inf) = NaN "
     "on and below the diagonal; use masked_fill, or an additive mask of 0 and -inf"),
    (dict(scale="none"), "the scores are not divided by √d_k (√3 for these heads of 3 dimensions): scale them "
     "before the softmax"),
    (dict(scale="d_k"), "the scores are divided by d_k (or by √d_k twice); divide them by √d_k once"),
    (dict(scale="T"), "the scores are divided by √T (the square root of the number of keys, √7 here), not by "
     "√d_k (the number of dimensions of a query, q.shape[-1])"),
    (dict(swap=True), "the scores are transposed: k @ q.T puts the keys in the rows; the scores are q @ k.T, "
     "one row per query, one column per key"),
    (dict(dim=-2), "the softmax runs down the columns (over the queries); each query's row must sum to 1: take "
     "the softmax over the keys, the last axis (dim=-1)"),
)


def attention_variant(q, k, v, scale="sqrt", hide="future", fill=float("-inf"), after=None, dim=-1, shift=True,
                      swap=False):
    """Attention computed right (the defaults) or with one known mistake, to name a learner's slip.

    scale: "sqrt" (√d_k), "none", "d_k" or "T" (√T_k). swap: scores k @ qᵀ instead of q @ kᵀ
    (only when T_q = T_k). hide: which keys the mask hides, "future" (j > i),
    "future_and_self" (j >= i), "past" (j < i), "visible" (j <= i) or "none". fill: the value
    written there (-inf, 0.0, or "nan" for the additive triu(ones) * -inf). after: "zeroed" or
    "renormalised" to mask the weights after the softmax instead. dim: the softmax's axis.
    shift: False places query i at position i even when T_q < T_k.
    Returns (out, weights), as ``compute.causal_attention``.
    """
    T_q, T_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = {"sqrt": math.sqrt(d_k), "none": 1.0, "d_k": d_k, "T": math.sqrt(T_k)}[scale]
    scores = (k @ q.transpose(-2, -1) if swap else q @ k.transpose(-2, -1)) / scale
    i = torch.arange(T_q)[:, None] + (T_k - T_q if shift else 0)
    j = torch.arange(T_k)[None, :]
    hidden = {"future": j > i, "future_and_self": j >= i, "past": j < i, "visible": j <= i,
              "none": torch.zeros(T_q, T_k, dtype=torch.bool)}[hide]
    if after:
        weights = torch.softmax(scores, dim=dim).masked_fill(hidden, 0.0)
        if after == "renormalised":
            weights = weights / weights.sum(-1, keepdim=True)
    elif fill == "nan":
        weights = torch.softmax(scores + hidden.float() * float("-inf"), dim=dim)
    else:
        weights = torch.softmax(scores.masked_fill(hidden, fill), dim=dim)
    return weights @ v, weights


def attention_cases():
    """The check's cases, a fresh copy on every call (``_attention_cases``)."""
    return _attention_cases()


def _attention_cases():
    """The check's cases (``_attention_inputs``), each with its right out and weights, computed now
    (``_expected``)."""
    return {name: {**case, **_expected(case)} for name, case in _attention_inputs().items()}


@sealed   # made once, then a fresh copy on every call: a learner's function that reached them by import and
def _attention_inputs():   # changed them in place changes its own copy only, never a later verdict
    """The inputs the check runs a learner's causal_attention on, without the right outputs (kept here, they would
    be in reach of the learner's function while it runs: each is computed after its call returns, ``_expected``):
    one (the cat model's layer 0 on PROMPT), batch (layer 1 on the two BATCH sentences), cache (PROMPT's last
    three queries against all seven keys) and huge (a key to the right with a score of 212). Each a dict of q, k,
    v, where (words for the learner) and shapes (the right out's and weights', read before an answer is
    converted)."""
    from ..weights import load_cat
    from ..worlds import cat_world
    cat, world = load_cat(), cat_world()
    one = heads_from_trace(cat, world, [PROMPT], layer=0)
    batch = heads_from_trace(cat, world, list(BATCH), layer=1)
    cache = {**one, "q": one["q"][..., 4:, :]}
    q = torch.tensor([[1.0, 0.0]] * 3)[None, None]
    k = torch.tensor([[0.0, 0.0], [1.0, 0.0], [300.0, 0.0]])[None, None]
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])[None, None]
    huge = dict(q=q, k=k, v=v)
    where = {"one": f"on the cat model's layer 0 for '{PROMPT}'",
             "batch": "on layer 1 for a batch of two sentences (B = 2, T = 6)",
             "cache": "on the last 3 queries of that prompt against its 7 keys (as with a KV cache)",
             "huge": "on three keys, the last with a huge score (212) for every query"}
    return {name: {"q": case["q"], "k": case["k"], "v": case["v"], "where": where[name],
                   "shapes": (tuple(case["q"].shape[:-1]) + tuple(case["v"].shape[-1:]),
                              tuple(case["q"].shape[:-1]) + tuple(case["k"].shape[-2:-1]))}
            for name, case in (("one", one), ("batch", batch), ("cache", cache), ("huge", huge))}


def _expected(case):
    """{out, weights}: the right outputs on ``case`` (q, k, v), the model's own (its trace's, to the bit): computed
    by the check when a learner's call has returned, never kept where its function could read them."""
    return dict(zip(("out", "weights"), attention_variant(case["q"], case["k"], case["v"])))


def _same(a, b, atol=1e-4):
    """Equal shapes, NaN in the same places, and the rest within atol (+ 1e-4 relative)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return (a.shape == b.shape and np.array_equal(np.isnan(a), np.isnan(b))
            and np.allclose(np.nan_to_num(a), np.nan_to_num(b), atol=atol, rtol=1e-4))


def _run(function, case):
    """What the learner's function returned on ``case``, as two arrays (out, weights); None when it
    returned None or (None, None), the untouched skeleton. Raises Wrong with one sentence."""
    got = call(function, case["q"], case["k"], case["v"], what=case["where"])
    if got is None or isinstance(got, (tuple, list)) and len(got) == 2 and got[0] is None and got[1] is None:
        return None
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        kind = f"one tensor of shape {tuple(got.shape)}" if hasattr(got, "shape") else f"a {type(got).__name__}"
        raise Wrong(f"causal_attention should return two things, (out, weights), but it returned {kind}")
    for value, name in zip(got, ("out", "weights")):
        if value is None:
            raise Wrong(f"causal_attention returned None for {name}; return both out and weights")
        narrow = _narrower(value, case["q"])
        if narrow:
            raise Wrong(f"causal_attention returned {name} in {narrow[0]} {case['where']}, but q, k and v are "
                        f"{narrow[1]}: return out and weights in q's dtype ({narrow[0]} keeps only about "
                        f"{narrow[2]} significant digits, too few to compare with the model's)")
    names = [f"{name} {case['where']}" for name in ("out", "weights")]
    # a list is converted first (its numbers are the learner's own); an array or a tensor only once its shape is right
    got = [value if answer_shape(value, name) is not None else _numbers(value, name) for value, name in zip(got, names)]
    if next(_shape_problems(*(tuple(value.shape) for value in got), case), None):
        return got   # wrong shapes: _problems names them from the shapes alone, before anything is copied
    return [_numbers(value, name) for value, name in zip(got, names)]


def _numbers(value, name):
    """An answer's out or weights as a float array (``numbers``), NaN and inf kept for _problems to name."""
    return numbers(value, name, allow_inf=True, allow_nan=True)


def _narrower(value, q):
    """(value's dtype, q's dtype, the digits value's dtype keeps) when ``value`` (a tensor or an array)
    holds floats of fewer bits than the tensor ``q`` (float16 or bfloat16 beside float32); else None."""
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:
            return None
        bits, resolution = torch.finfo(dtype).bits, torch.finfo(dtype).resolution
    elif isinstance(dtype, np.dtype) and dtype.kind == "f":
        bits, resolution = np.finfo(dtype).bits, float(np.finfo(dtype).resolution)
    else:
        return None
    if bits >= torch.finfo(q.dtype).bits:
        return None
    name = lambda d: str(d).replace("torch.", "")   # noqa: E731
    return name(dtype), name(q.dtype), round(-math.log10(resolution))


def _problems(got, case, slips=SLIPS):
    """Sentences naming what is wrong with (out, weights) ``got`` on ``case`` (none when right)."""
    out, weights = got
    want_out, want = (value.numpy() for value in _expected(case).values())   # (computed only now: after the call)
    where = case["where"]
    wrong_shape = next(_shape_problems(tuple(out.shape), tuple(weights.shape), case), None)
    if wrong_shape:
        yield wrong_shape
        return
    if not _same(weights, want):
        square = case["q"].shape[-2] == case["k"].shape[-2]
        tried = (attention_variant(case["q"], case["k"], case["v"], **how)[1]
                 if square or not how.get("swap") else None for how, _ in slips)
        yield next((sentence for (_, sentence), wrong in zip(slips, tried)
                    if wrong is not None and _same(weights, wrong)), None) \
            or _unnamed(weights, want, where)
    elif not _same(out, want_out):
        with_k = (torch.as_tensor(weights, dtype=torch.float32) @ case["k"]).numpy()
        yield ("out is weights @ k: the output mixes the values, weights @ v" if _same(out, with_k) else
               f"the weights are right {where}, but out is not weights @ v")


def _shape_problems(out, weights, case):
    """The sentence for the shapes ``out`` and ``weights`` (tuples) returned on ``case``, when they are not
    the right ones (none when they are): read from the shapes alone, before any answer is converted."""
    want_out, want = case["shapes"]
    where = case["where"]
    if out == want and weights == want_out and want != want_out:
        yield f"it returns (weights, out) {where}; return out first, then weights"
        return
    for shape, right, name, axes in ((weights, want, "weights", "(B, H, T_q, T_k)"),
                                     (out, want_out, "out", "(B, H, T_q, d_k)")):
        if shape != right:
            yield f"{name} should have shape {right} {axes} {where}, but it has shape {shape}"
            return


def _unnamed(weights, want, where):
    """One sentence for wrong weights that no known slip explains."""
    if np.isnan(weights).any():
        return (f"your weights hold NaN in {int(np.isnan(weights).sum())} of {weights.size} entries {where} "
                "(a row with every key hidden, or 0/0?)")
    with np.errstate(over="ignore"):   # weights near 1e308 sum to inf: not 1, as the sentence then says
        sums = weights.sum(-1)
    if not np.isfinite(sums).all():
        return (f"the rows of your weights sum to numbers past float64's range (about ±1.8e308) {where}, not 1: "
                "take the softmax over the keys, after the mask")
    if not np.allclose(sums, 1, atol=1e-4):
        return (f"the rows of your weights sum to between {_sum_shown(sums.min())} and {_sum_shown(sums.max())} {where}, "
                "not 1: take the softmax over the keys, after the mask")
    if (np.abs(weights) * (want == 0) > 1e-6).any():
        return f"some query puts weight on a key to its right {where}: the mask must hide it"
    bad = ~np.isclose(weights, want, atol=1e-4, rtol=1e-4)
    b, h, i, j = (int(x) for x in np.argwhere(bad)[0])
    return (f"your weights differ from the model's in {int(bad.sum())} of {bad.size} entries {where} "
            f"(the first at batch {b}, head {h}, query {i}, key {j})")


def runs_on_k_transposed(answer, case):
    """Whether ``answer``, which stopped on ``case`` with a matrix product's shapes, runs when given k
    already transposed (T_k, d_k) -> (d_k, T_k): then the missing transpose is the true cause, as TRANSPOSE says."""
    try:
        _run(answer, {**case, "k": case["k"].transpose(-2, -1).contiguous()})
    except Wrong:
        return False
    return True


@exercise("your causal attention", answer=Function("a function causal_attention(q, k, v)",
          own=("helpers.masking.compute.causal_attention", *COURSES_ATTENTION)), keeps="04")
def causal_attention(answer):
    """``answer(q, k, v)`` -> (out, weights): scaled dot-product attention with the causal mask,
    checked on the cat model's own queries, keys and values against its trace, then on a batch,
    a cache (T_q < T_k) and a key with a huge score."""
    cases = _attention_inputs()   # (each case's right outputs computed after its call: ``_problems``)
    try:
        got = _run(answer, cases["one"])
    except Wrong as wrong:
        yield f"{wrong}; {TRANSPOSE}" if any(word in str(wrong) for word in MATMUL) and runs_on_k_transposed(
            answer, cases["one"]) else str(wrong)
        return
    if got is None:
        yield NOT_YET
        return
    for name in ("one", "batch", "cache", "huge"):
        if name != "one":
            try:
                got = _run(answer, cases[name])
            except Wrong as wrong:
                yield f"{wrong}; {SHIFT}" if name == "cache" else str(wrong)
                return
            if got is None:
                yield f"causal_attention returned None {cases[name]['where']}"
                return
        slips = SLIPS + ((dict(shift=False), SHIFT),) if name == "cache" else SLIPS
        found = list(_problems(got, cases[name], slips))
        if found:
            yield found[0]
            return
