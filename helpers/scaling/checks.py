"""Chapter 03's exercise checks: every head's scaled scores of the cat model (a function the learner
writes, kept for the chapters ahead), the typical size of a dot product, the softmax derivative,
and a gradient taken with respect to the right thing.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import math

import numpy as np

import torch

from ..exercises import (Function, Wrong, as_array, as_number, call, close_problems, exercise, number_problems, numbers,
                         precision_problem, settled, sealed, slip)
from ..errors import answer_shape, check_positive_int, count, fail
from ..qkv.checks import COURSES_ATTENTION
from .compute import check_weights, layer_case, scaled_scores as course_scores, softmax_jacobian, weight_gradient


MAX_D = 10**12   # the widest d typical_size takes (models use up to about 10**4)


@exercise("the typical size of a raw dot product")   # (the answer read here: a float16 one is named as such)
def typical_size(answer, d=512):
    """``answer`` is the standard deviation of q·k for standard-normal q, k of dimension d (theory)."""
    d = check_positive_int(d, "d")
    if d > MAX_D:
        fail(f"d should be at most {MAX_D:,} here, but got {count(d)}")
    given, answer = answer, as_number(answer, "your answer")   # (given: as the learner gave it, with its dtype)
    if abs(answer - math.sqrt(d)) <= 0.05:   # the right spread first: at d = 1 it is also both slips' value
        return
    hint = slip(answer, [(d, "that is the variance of q·k; the spread (standard deviation) is its square root"),
                         (1, "that is the spread after dividing by √d; the question asks about the raw "
                             "dot product")], atol=0.05)
    if hint:
        yield hint
    else:
        yield precision_problem(given, answer, math.sqrt(d), "your spread", 0.05) or \
            next(number_problems(answer, math.sqrt(d), "your spread", atol=0.05))


@exercise("the derivative of softmax")   # (the answer read here: a float16 one is named as such)
def jacobian(answer, weights):
    """``answer`` (n, n) has entry [i, j] = ∂w_i/∂s_j for the softmax output ``weights`` (n,)."""
    w = check_weights(weights)
    given, answer = answer, as_array(answer, "your answer", shape=(len(w), len(w)))   # (given: with its dtype)
    J = softmax_jacobian(w)
    done = settled(given, answer, J, "J", 1e-4, rtol=0)   # right first: a one-hot w gives J = 0 = -J
    if done is not None:
        yield from done
        return
    hint = slip(answer, [(-J, "every sign is flipped: raising s_i raises w_i, so the diagonal is positive"),
                         (-np.outer(w, w), "the diagonal is missing its w_i term: ∂w_i/∂s_i = w_i - w_i²"),
                         (np.diag(np.diag(J)), "the diagonal is right, but the off-diagonal entries are "
                                               "-w_i·w_j, not 0")], atol=1e-4)
    with np.errstate(over="ignore"):   # entries near 1e308 sum to inf: not 0, as the sentence then says
        sums = answer.sum(axis=1)
    if hint:
        yield hint
    elif not np.allclose(sums, 0, atol=1e-4):
        yield "each row should sum to 0 (adding the same number to every score changes no weight)"
    else:
        yield from close_problems(answer, J, "J", atol=1e-4)


@exercise("the gradient with respect to the raw scores")   # (the answer read here: a float16 one is named as such)
def gradient_wrt_raw(answer, scores, index=2, divide_by=8.0):
    """``answer`` is ‖∂w_index/∂scores‖ where w = softmax(scores / divide_by)."""
    sizes = weight_gradient(scores, index, divide_by)
    given, answer = answer, as_number(answer, "your answer")   # (given: as the learner gave it, with its dtype)
    if abs(answer - sizes["wrt_scores"]) <= 5e-4:   # right first: with divide_by = 1 the slips give it too
        return
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
        yield precision_problem(given, answer, sizes["wrt_scores"], "your gradient size", 5e-4) or \
            next(number_problems(answer, sizes["wrt_scores"], "your gradient size", atol=5e-4))


# ----------------------------------------------------------------- every head's scaled scores, on the cat model

# Real cat-world prompts (lengths 4, 7 and 9, none equal to d_model = 6), each through both layers.
CAT_PROMPTS = ("<BOS> the dog was", "<BOS> the cat sat on the red", "<BOS> the big cat sat on the blue floor")
NOT_WRITTEN = "not answered yet: scaled_scores returns None; write its body where the cell says # YOUR CODE HERE"


def cat_cases():
    """The check's cases, a fresh copy on every call (``_cat_cases``)."""
    return _cat_cases()


def _cat_cases():
    """The check's cases (``_cat_inputs``), each with its reference scores computed now: (label, args, the right
    scores (H, T, T) with -inf above the diagonal, where the trace hides the future keys)."""
    cases = []
    for label, args in _cat_inputs():
        scores = course_scores(*args)
        future = torch.ones(scores.shape[-2:], dtype=torch.bool).triu(1)
        cases.append((label, args, scores.masked_fill(future, -math.inf)))
    return tuple(cases)


@sealed   # made once, then a fresh copy on every call: a learner's function that reached them by import and
def _cat_inputs():   # changed them in place changes its own copy only, never a later verdict
    """The check's inputs: (label, args) per case, without the right scores (kept here, they would be in reach of
    the learner's function while it runs: ``scores_problem`` computes them after its call returns). The shipped
    cat model's layer 0 and layer 1 on each of CAT_PROMPTS, then layer 0 on the last prompt read as three heads
    of d_k = 2."""
    from ..weights import load_cat
    cat, cases = load_cat(), []
    for prompt in CAT_PROMPTS:
        for layer in (0, 1):
            case = layer_case(cat, prompt.split(), layer)
            args = tuple(case[name] for name in ("x", "W_Q", "W_K", "b_Q", "b_K", "n_heads"))
            cases.append((f'layer {layer}\'s input for "{prompt}"', args))
    args = args[:5] + (3,)
    cases.append((f'layer 1\'s parameters read as 3 heads of d_k = 2, for "{CAT_PROMPTS[-1]}"', args))
    return tuple(cases)


def score_variants(x, W_Q, W_K, b_Q, b_K, n_heads):
    """The known wrong versions of every head's scaled scores: [(scores (H, T, T), what went wrong), ...].

    Each structural slip (weights transposed, heads from the wrong columns or in the wrong order, a bias
    left out, queries and keys swapped) is combined with each divisor (the right √d_k, none, d_k,
    √d_model, d_model); the right structure with the right divisor is not among them."""
    T, d_model = x.shape
    d_k = d_model // n_heads
    zero = torch.zeros_like(b_Q)

    def raw(W_q=W_Q, W_k=W_K, b_q=b_Q, b_k=b_K, split="blocks"):
        q, k = x @ W_q + b_q, x @ W_k + b_k
        if split == "strided":          # head h gets columns h, h + H, h + 2H, ...
            q, k = (t.view(T, d_k, n_heads).permute(2, 0, 1) for t in (q, k))
        elif split == "reshape":        # (T, d_model) read straight as (H, T, d_k): rows cut across heads
            q, k = (t.reshape(n_heads, T, d_k) for t in (q, k))
        else:
            q, k = (t.view(T, n_heads, d_k).transpose(0, 1) for t in (q, k))
        return q @ k.transpose(-2, -1)

    right = raw()
    structures = [
        (right, None),
        (raw(W_Q.T, W_K.T), "W_Q and W_K are used transposed: with one row per token, q = x @ W_Q + b_Q "
                            "(W_Q's rows take x's d_model entries, its columns are the queries' entries)"),
        (raw(W_q=W_Q.T), "W_Q is used transposed: q = x @ W_Q + b_Q, not x @ W_Qᵀ"),
        (raw(W_k=W_K.T), "W_K is used transposed: k = x @ W_K + b_K, not x @ W_Kᵀ"),
        (raw(split="strided"), "the heads take their entries from the wrong columns: head h owns the block of "
                               "d_k neighbouring columns h*d_k:(h+1)*d_k of q and k, not every n_heads-th column "
                               "(view q as (T, n_heads, d_k), not (T, d_k, n_heads))"),
        (raw(split="reshape"), "the heads are cut with q.reshape(n_heads, T, d_k), which splits q's rows (the "
                               "tokens), not its columns: view q as (T, n_heads, d_k), then transpose(0, 1)"),
        (right.flip(0), "the heads come in reverse order: scores[0] should be head 0's (columns 0:d_k)"),
        (right.transpose(-2, -1), "rows and columns are swapped: scores[h, i, j] is query i against key j, "
                                  "q_i·k_j, so each head's matrix is q @ kᵀ, not k @ qᵀ"),
        (raw(b_q=zero, b_k=zero), "b_Q and b_K are missing: q = x @ W_Q + b_Q and k = x @ W_K + b_K"),
        (raw(b_q=zero), "b_Q is missing: q = x @ W_Q + b_Q"),
        (raw(b_k=zero), "b_K is missing: k = x @ W_K + b_K"),
    ]
    divisors = [
        (math.sqrt(d_k), None),
        (1.0, "the division by √d_k is missing: these are the raw q·k"),
        (float(d_k), f"the scores are divided by d_k = {d_k}, that is by √d_k twice: divide once, by "
                     f"√d_k = {math.sqrt(d_k):.3f}"),
        (math.sqrt(d_model), f"the scores are divided by √d_model = √{d_model}: each head's dot product has only "
                             f"d_k = d_model / n_heads = {d_k} terms, so divide by √d_k"),
        (float(d_model), f"the scores are divided by d_model = {d_model}: divide by √d_k, with d_k = {d_k} "
                         "the dimension of one head"),
    ]
    out = []
    for scores, structure in structures:
        for divisor, division in divisors:
            if structure or division:
                out.append((scores / divisor, "; and ".join(w for w in (structure, division) if w)))
    return out


def scores_problem(answer, label, args):
    """One sentence on what is wrong with the learner's scores for one case, or None."""
    out = call(answer, *args, what=f"on {label}")
    if out is None:
        raise Wrong(NOT_WRITTEN)
    right = course_scores(*args)   # (computed only now, after the call: ``_cat_inputs`` keeps no answer)
    shape = tuple(right.shape)
    if isinstance(out, (list, tuple)):
        return (f"scaled_scores returns a {type(out).__name__} of {len(out)} items on {label}: return one tensor "
                "of shape (n_heads, T, T), the heads stacked with torch.stack(heads)")
    if not isinstance(out, torch.Tensor):
        return (f"scaled_scores returns {type(out).__name__} output on {label}: return a torch tensor of shape "
                "(n_heads, T, T), computed with torch from the tensors it receives")
    given = answer_shape(out, f"the scores on {label}")   # read before the scores are converted
    if given != shape:
        heads = args[-1]
        if given[1:] == shape[1:]:
            return (f"your function returns {given[0]} heads on {label}, where n_heads = {heads}: take the "
                    "head count from n_heads and d_k = d_model // n_heads, not fixed numbers")
        return (f"the scores on {label} should have shape (n_heads, T, T) = {shape}, heads first, "
                f"but they have shape {given}")
    scores = numbers(out, f"the scores on {label}", allow_inf=True)
    hidden = np.triu(np.ones(shape[1:], dtype=bool), k=1)
    if np.isinf(scores).any():
        if (np.isneginf(scores) == hidden).all():
            return (f"the scores on {label} are -inf above the diagonal: that is the causal mask, the next "
                    "chapter's piece; return every score, before the mask")
        return f"the scores on {label} hold inf or -inf in {int(np.isinf(scores).sum())} entries; a score is finite"
    right = right.numpy().astype(float)
    close = lambda a, b: np.allclose(a, b, atol=1e-4, rtol=1e-4)
    if close(scores, right):
        return None
    narrow = precision_problem(out, scores, right, f"the scores on {label}", 1e-4)
    if narrow:
        return narrow
    if (scores >= 0).all() and np.allclose(scores.sum(-1), 1, atol=1e-4):
        return (f"on {label} every row of your scores sums to 1: those are the softmax weights; return the "
                "scores before the softmax, q·k / √d_k")
    for wrong, hint in score_variants(*args):
        if close(scores, wrong.numpy().astype(float)):
            return f"on {label}, {hint}"
    if args[-1] == 3:                            # the earlier cases, with the cat model's 2 heads, passed
        return (f"your scores are right for the cat model's 2 heads but not on {label}: take the head count "
                "from n_heads and d_k = d_model // n_heads, not fixed numbers")
    bad = ~np.isclose(scores, right, atol=1e-4, rtol=1e-4)
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"the scores on {label} differ from the model's in {int(bad.sum())} of {bad.size} entries (the first "
            f"at [head, query, key] = {list(where)}); build q and k, split them into heads, take q @ kᵀ per head, "
            "divide by √d_k")


@exercise("every head's scaled scores, on the cat model",
          answer=Function("a function scaled_scores(x, W_Q, W_K, b_Q, b_K, n_heads)",
                          own=("helpers.scaling.compute.scaled_scores", "helpers.scaling.compute.layer_case",
                               *COURSES_ATTENTION)), keeps="03")   # (scores are a step of every attention's)
def layer_scores(answer):
    """``answer`` is a function scaled_scores(x, W_Q, W_K, b_Q, b_K, n_heads) -> (H, T, T), every head's
    q·k / √d_k before the mask, as helpers.scaling.compute.scaled_scores. It runs on the shipped cat
    model's layers (the course's function on the inputs its trace gives is the reference) and must name no fixed
    head count."""
    for label, args in _cat_inputs():
        problem = scores_problem(answer, label, args)
        if problem:
            yield problem
            return
