"""Checks for chapter 05 (multi-head): the learner's MultiHeadAttention module, the head split,
the parameter count, the memory of the attention weights, the induction score.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import numpy as np
import torch

from ..errors import as_array, check_positive_int, count, fail, shown
from ..exercises import (Module, as_number, close_problems, count_answer, exercise, gradient_problems, module_output,
                         number_problems, numbers, precision_problem, settled)
from ..exercises import as_array as answer_array   # (a learner's answer, Wrong; errors' as_array: the check's inputs)
from ..qkv.checks import COURSES_ATTENTION
from .compute import (attention_parameters, attention_weights_bytes, induction_score, module_cases,
                      slipped_attention)

# The mistake each known slip of a MultiHeadAttention makes, in the learner's words (compute.SLIPS).
SLIP_SENTENCES = {
    "transposed": ("it matches the course's layer with every weight matrix transposed: the course's W_Q "
                   "is (d_model in, d_model out) and is used as x @ W_Q + b_Q, not x @ W_Q.T as nn.Linear does"),
    "no_W_O": "its output is the heads' outputs side by side: the output projection (@ W_O + b_O) is missing",
    "no_W_O_bias_kept": "its output is the heads' outputs side by side plus b_O: the multiplication by W_O is missing",
    "sqrt_d_model": ("the scores are divided by √d_model; each head's dot products have d_k terms, "
                     "so divide by √d_k = √(d_model / n_heads)"),
    "unscaled": "the scores are not divided by √d_k",
    "scaled_twice": "the scores are divided by d_k, that is by √d_k twice: divide once",
    "no_mask": ("each token also attends to the tokens after it: the causal mask is missing "
                "(set the scores above the diagonal to -inf before the softmax)"),
    "mask_hides_diagonal": ("the mask hides the diagonal too, so the first token sees nothing (NaN): "
                            "a token may attend to itself; hide only the keys after the query"),
    "mask_after_softmax": ("the mask is applied after the softmax, so the rows no longer sum to 1: "
                           "set the scores to -inf before the softmax"),
    "softmax_over_queries": ("the softmax runs over the queries (axis -2): each query's weights over "
                             "the keys should sum to 1, a softmax over the last axis"),
    "softmax_over_heads": "the softmax runs over the heads (axis 1): run it over the keys, the last axis",
    "interleaved_split": ("each head should own a block of neighbouring columns (head i: i·d_k to (i+1)·d_k - 1); "
                          "yours takes one column in every n_heads: view as (B, T, n_heads, d_k), not (B, T, d_k, n_heads)"),
    "interleaved_split_and_merge": ("the heads are split and merged as (B, T, d_k, n_heads): head i owns the "
                                    "neighbouring columns i·d_k to (i+1)·d_k - 1 of W_Q, W_K, W_V and those rows "
                                    "of W_O, so view as (B, T, n_heads, d_k)"),
    "split_without_transpose": ("the split mixes tokens into heads: view q, k, v as (B, T, n_heads, d_k) "
                                "first, then transpose(1, 2)"),
    "split_and_merge_without_transpose": ("the split and the merge mix tokens into heads: view as "
                                          "(B, T, n_heads, d_k) and transpose(1, 2), and undo both in the merge"),
    "merge_without_transpose": ("the merge mixes tokens into heads: (B, n_heads, T, d_k) must become "
                                "(B, T, n_heads, d_k) (transpose(1, 2)) before the reshape to (B, T, d_model)"),
    "heads_reversed": ("the heads are concatenated in the wrong order: head 0's output belongs in the first "
                       "d_k columns, the ones that meet W_O's first d_k rows"),
    "no_biases": "the biases b_Q, b_K, b_V and b_O are left out",
    "scores_transposed": ("the scores are k @ qᵀ, each key against every query: a query's row holds "
                          "q @ kᵀ, so write q @ k.transpose(-2, -1)"),
    "scaled_after_softmax": ("the weights are divided by √d_k after the softmax, so the rows no longer sum "
                             "to 1: divide the scores by √d_k before the mask and the softmax"),
    "mask_with_zero": ("the masked scores are set to 0, and e⁰ = 1 still gives the later keys weight: "
                       "set them to -inf before the softmax"),
    "mask_hides_past": ("the mask hides the keys before each query and lets it see the ones after: "
                        "hide the keys after the query (torch.triu(..., diagonal=1)), not before it"),
    "no_b_O": "the output bias b_O is missing: the layer's output is concat @ W_O + b_O",
    "b_O_before_W_O": "b_O is added before the multiplication by W_O: the output is concat @ W_O + b_O",
    "residual_added": ("the output is the attention plus its input x: the residual connection belongs to "
                       "the block (chapter 08), not to the attention layer"),
}

NO_BIAS = ("with bias=False the module has no biases (b_Q, b_K, b_V and b_O are None): add each bias only "
           "when it exists, e.g. x @ self.W_Q if self.b_Q is None else x @ self.W_Q + self.b_Q")

SIZE_HINT = ("it is right on the cat model's layers (2 heads of 3): is a size written in as a number "
             "instead of taken from d_model, n_heads or x?")


def _close(a, b):
    """Equal up to float32 rounding (NaN where the other has NaN)."""
    scale = max(1.0, float(np.nanmax(np.abs(b))) if np.isfinite(b).any() else 1.0)
    both = np.isnan(a) == np.isnan(b)
    return bool(both.all()) and bool(np.all(np.abs(np.nan_to_num(a - b)) <= 1e-4 * scale))


@exercise("your MultiHeadAttention", answer=Module("a class MultiHeadAttention(nn.Module)", own=(
    "helpers.heads.compute.MultiHeadAttention", *COURSES_ATTENTION)), keeps="05")
def multi_head(run):
    """``run`` is the learner's class MultiHeadAttention(d_model, n_heads) as a ``Module`` run:
    built, loaded with a shipped layer's parameters (the names of helpers.model.Attention) and
    run on the layer's real input. Its output must equal the course's layer to float32 rounding
    on the cat model's two layers, on the induction model's layer 1 (without its positions), on
    the cat model's layer 0 without biases and on its layer 1 read as 3 heads (another head count)."""
    if isinstance(run, torch.nn.Module):   # an instance is callable too, and would be taken for a run
        yield "pass the class MultiHeadAttention itself, not a module built from it " \
              "(MultiHeadAttention, not MultiHeadAttention(6, 2))"
        return
    cases = module_cases()
    cases += [_bias_free(cases[0]), _other_heads(cases[1])]
    for case in cases:
        x, expected = case["x"], case["expected"].numpy()
        slip_state = case.get("slip_state", case["state"])
        out = module_output(run, case["args"], case["state"], x, case["what"],
                            none=("not answered yet: forward returns None; write its steps in the answer cell above "
                                  "(where it says YOUR CODE HERE) and return the output"),
                            shape=lambda found: (f"on {case['what']}, x has shape {tuple(x.shape)} and forward should "
                                                 f"return the same shape, but returned {found}"),
                            error=_error_hint(case, cases[0]))
        # a tensor of x's shape (B, T, d_model), as module_output checked; True/False, complex or text: one
        # sentence about the output (NaN is kept: a mask that hides the diagonal gives NaN, named below)
        given, out = out, numbers(out, f"the output on {case['what']}", allow_inf=True, allow_nan=True)
        if _close(out, expected):
            continue
        narrow = precision_problem(given, out, expected, f"the output on {case['what']}", 1e-4)
        if narrow:
            yield narrow
            return
        for slip, sentence in SLIP_SENTENCES.items():
            if _close(out, slipped_attention(x, slip_state, case["args"][1], slip).numpy()):
                yield sentence
                return
        if np.isnan(out).any():
            yield (f"on {case['what']} its output holds NaN in {int(np.isnan(out).sum())} of {out.size} entries: "
                   "a softmax over a row that is all -inf gives NaN")
        elif "slip_state" in case:               # right with biases, wrong without them
            yield f"it is not right on {case['what']}; {NO_BIAS}"
        elif case["args"] != cases[0]["args"]:   # right on the cat model, wrong at another size
            yield f"it is not right on {case['what']}; {SIZE_HINT}"
        else:
            gap = float(np.abs(out - expected).max())
            yield (f"on {case['what']} its output differs from the course's layer by up to {gap:.3g}, "
                   "and not by one of the known slips: compare each step with section 1 "
                   "(split, scores / √d_k, mask, softmax over the keys, weights @ v, merge, @ W_O + b_O)")
        return
    from .compute import MultiHeadAttention   # the course's, whose gradients the learner's must give
    yield from gradient_problems(run, MultiHeadAttention, cases[0]["args"], cases[0]["state"], (cases[0]["x"],),
                                 "MultiHeadAttention")


def _bias_free(case):
    """``case`` (the cat model's layer 0) run as MultiHeadAttention(d_model, n_heads, bias=False):
    only the weight matrices are loaded, and the expected output is the layer's without biases."""
    zero = {name: torch.zeros_like(t) if name.startswith("b_") else t for name, t in case["state"].items()}
    return {**case, "what": case["what"].replace("the cat model's layer 0", "the cat model's layer 0 built with "
                                                 "bias=False (its weight matrices only)"),
            "args": (*case["args"], False), "slip_state": zero,
            "state": {name: t for name, t in case["state"].items() if not name.startswith("b_")},
            "expected": slipped_attention(case["x"], zero, case["args"][1])}


def _other_heads(case, n_heads=3):
    """``case`` (the cat model's layer 1, 2 heads of 3) run as MultiHeadAttention(d_model, n_heads):
    the same parameters read as ``n_heads`` heads of d_k = d_model / n_heads, so that a head count
    written in as 2 shows; the expected output is the course's layer's with that head count."""
    d_model = case["args"][0]
    layer = "the cat model's layer 1"
    return {**case, "what": case["what"].replace(layer, f"{layer} read as {n_heads} heads of d_k = "
                                                 f"{d_model // n_heads} (MultiHeadAttention({d_model}, {n_heads}))"),
            "args": (d_model, n_heads), "expected": slipped_attention(case["x"], case["state"], n_heads)}


def _error_hint(case, first):
    """What a stop on ``case`` adds to its sentence: nothing on the first case, the size hint on
    another size, the bias hint on the bias-free case."""
    if "slip_state" in case:
        return lambda sentence: f"{sentence}; {NO_BIAS}"
    return None if case["args"] == first["args"] else lambda sentence: f"{sentence}; {SIZE_HINT}"


@exercise("the queries split into heads")   # (the answer read here: a float16 one is named as such)
def split(answer, q, n_heads):
    """``answer`` is q (B, T, h*d_k) split into (B, h, T, d_k), head i holding columns i*d_k..(i+1)*d_k."""
    q = as_array(q, "q", 3)
    n_heads = check_positive_int(n_heads, "n_heads")
    B, T, width = q.shape
    if width == 0 or width % n_heads:   # (so n_heads is at most the width: no huge reshape is tried)
        fail(f"n_heads should divide q's width {width} into equal heads of at least one column, "
             f"but got n_heads={count(n_heads)}")
    d_k = width // n_heads
    given, answer = answer, answer_array(answer, "your answer")   # (given: as the learner gave it, with its dtype)
    unswapped = q.reshape(B, T, n_heads, d_k)
    reference = unswapped.transpose(0, 2, 1, 3)
    # right first: when T == n_heads the unswapped split has the right shape too
    done = settled(given, answer, reference, "the split", 1e-6)
    if done is not None:
        yield from done
        return
    if answer.shape == unswapped.shape and (T != n_heads or np.allclose(answer, unswapped, atol=1e-6)):
        yield (f"the split has shape (B, T, h, d_k) = {(B, T, n_heads, d_k)}: "
               "swap the token and head axes (transpose(1, 2))")
        return
    if answer.shape != (B, n_heads, T, d_k):
        yield f"the split should have shape (B, h, T, d_k) = {(B, n_heads, T, d_k)}, but it has shape {answer.shape}"
        return
    if np.allclose(answer, q.reshape(B, T, d_k, n_heads).transpose(0, 3, 1, 2), atol=1e-6):
        yield ("each head should get a block of neighbouring columns; yours takes one column in "
               f"every {n_heads}: view the width as (h, d_k), not (d_k, h)")
    elif np.allclose(answer, q.reshape(B, n_heads, T, d_k), atol=1e-6):
        yield ("reshaping straight to (B, h, T, d_k) mixes tokens into heads: view as "
               "(B, T, h, d_k) first, then transpose(1, 2)")
    else:
        yield from close_problems(answer, reference, "the split", atol=1e-6)


@exercise("the parameters of one attention layer")
def parameters(answer, d_model):
    """``answer`` is the parameter count of one multi-head attention layer with biases
    (fused qkv and output projection) at width ``d_model`` (at most MAX_WIDTH, ``attention_parameters``)
    (a whole number; a float type too narrow for the count is named as such)."""
    parts = attention_parameters(d_model)
    answer = count_answer(answer, "your answer", parts["total"])
    if answer == parts["qkv_weight"] + parts["proj_weight"]:
        yield "that counts the weight matrices only: every projection also has a bias"
    elif answer == parts["qkv_weight"] + parts["qkv_bias"]:
        yield "that is the qkv projection alone: the output projection W_O (and its bias) counts too"
    elif answer == 3 * parts["qkv_weight"] + 3 * parts["qkv_bias"] + parts["proj_weight"] + parts["proj_bias"]:
        yield "each of q, k, v is d_model wide, not 3*d_model: the fused layer as a whole has 3d² weights"
    else:
        yield from number_problems(answer, parts["total"], "the count", atol=0.5)


MAX_WEIGHTS_BYTES = 10**30   # the largest size weights_megabytes judges: far beyond any machine, within a float


@exercise("the memory of the attention weights")   # (the answer read here: a float16 one is named as such)
def weights_megabytes(answer, batch, n_heads, T):
    """``answer`` is the size in megabytes (10**6 bytes) of one layer's float32 attention
    weights for ``batch`` sequences of ``T`` tokens and ``n_heads`` heads."""
    size = attention_weights_bytes(batch, n_heads, T)   # an exact int: refused before any float meets it
    if size > MAX_WEIGHTS_BYTES:
        fail(f"the attention weights should take at most 10**30 bytes in this check, but batch={shown(batch)}, "
             f"n_heads={shown(n_heads)} and T={shown(T)} give {shown(size)}")
    reference = size / 1e6
    given, answer = answer, as_number(answer, "your answer")   # (given: as the learner gave it, with its dtype)
    if abs(answer - reference) <= 0.01 * reference:   # right first: with T = 1 (or batch = 1) a slip gives it too
        return
    if batch == 4 and abs(answer - reference / 4) < 0.01 * reference:   # the two slips give one number
        yield (f"that is a quarter of the size: either the batch of {batch} sequences or the 4 bytes of "
               "each float32 number is missing")
    elif abs(answer - reference / 4) < 0.01 * reference:
        yield "that is the count of numbers in millions: each float32 number takes 4 bytes"
    elif batch > 1 and abs(answer - reference / batch) < 0.01 * reference / batch:
        yield (f"that is one sequence's attention weights: each of the {batch} sequences of the batch "
               "has its own, so multiply by the batch")
    elif abs(answer - reference * 1e6 / 2 ** 20) < 0.001 * reference:
        yield "that is in MiB (2**20 bytes): divide the bytes by 10**6 for megabytes"
    elif abs(answer - reference / T) < 0.01 * reference / T:
        yield "the weights hold one number per (query, key) pair: T × T per head, not T"
    else:
        yield precision_problem(given, answer, reference, "the size in MB", 0.01 * reference) or \
            next(number_problems(answer, reference, "the size in MB", atol=0.01 * reference))


@exercise("an induction score")   # (the answer read here: a float16 one is named as such)
def induction(answer, weights, length):
    """``answer`` is the mean attention from each token of the second copy to the token
    after its earlier occurrence, for ``weights`` (2L+1, 2L+1) of a repeated sequence."""
    w = as_array(weights, "weights", 2)   # one head's (2L+1, 2L+1) table; induction_score checks its size
    reference = float(induction_score(w, length))
    given, answer = answer, as_number(answer, "your answer")   # (given: as the learner gave it, with its dtype)
    rounded = precision_problem(given, answer, reference, "the score", 1e-3)
    same_token = float(np.mean([w[length + j, j] for j in range(1, length + 1)]))
    previous = float(np.mean([w[t, t - 1] for t in range(1, len(w))]))
    if abs(answer - reference) <= 1e-3:
        return
    if abs(answer - same_token) <= 1e-3:
        yield ("that is the weight on the earlier occurrence of the same token; the induction head "
               "looks one further: at the token that came after it")
    elif abs(answer - previous) <= 1e-3:
        yield "that is the previous-token score: look L-1 positions back, from the second copy only"
    elif rounded:
        yield rounded
    elif not 0 <= answer <= 1:
        yield "a mean of attention weights lies between 0 and 1"
    else:
        yield from number_problems(answer, reference, "the score")
