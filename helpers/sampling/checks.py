"""Checks for chapter 09 (sampling): temperature, a top-p filter, the KV-cache size, a greedy loop.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import numpy as np
import torch

from ..exercises import (Array, Function, Whole, as_array, call, close_problems, exercise,
                         number_problems)
from ..reference import softmax
from . import compute as sampling


@exercise("the distribution at a temperature", answer=Array(shape=lambda logits: np.shape(logits)))
def tempered(answer, logits, temperature):
    """``answer`` (V,) is softmax(logits / temperature)."""
    logits = np.asarray(logits, dtype=float)
    if abs(answer.sum() - 1) > 1e-3:
        yield f"your probabilities sum to {answer.sum():.3f}, not 1: divide by the sum of the exponentials"
    elif temperature != 1 and np.allclose(answer, softmax(logits), atol=1e-4):
        yield "this is the distribution at temperature 1: divide the logits by the temperature first"
    elif temperature != 1 and np.allclose(answer, softmax(logits * temperature), atol=1e-4):
        yield "you multiplied the logits by the temperature: divide by it instead"
    else:
        yield from close_problems(answer, softmax(logits / temperature), "probs")


# Distributions a top-p function is tried on, with the p to use and what each one tests.
TOP_P_CASES = (
    ([0.5, 0.3, 0.15, 0.05], 0.75, "probs [0.5, 0.3, 0.15, 0.05] at p = 0.75"),
    ([0.5, 0.3, 0.15, 0.05], 0.4, "probs [0.5, 0.3, 0.15, 0.05] at p = 0.4"),
    ([0.5, 0.3, 0.15, 0.05], 0.8, "probs [0.5, 0.3, 0.15, 0.05] at p = 0.8 (a running total equals p)"),
    ([0.05, 0.5, 0.15, 0.3], 0.6, "probs [0.05, 0.5, 0.15, 0.3] (not sorted) at p = 0.6"),
    ([0.1] * 10, 0.55, "ten tokens of 0.1 each at p = 0.55"),
    ([0.6, 0.25, 0.1, 0.04, 0.01], 0.98, "probs [0.6, 0.25, 0.1, 0.04, 0.01] at p = 0.98"),
)


def reference_top_p(probs, p):
    """The smallest most-probable set whose mass reaches p, kept and renormalised (NumPy)."""
    return sampling.top_p_filter(torch.tensor(probs, dtype=torch.float64), p).numpy()


def same_nucleus(out, expected, probs):
    """True when out keeps as many tokens as expected, of the same probabilities (ties may
    be broken either way), renormalised, and zero elsewhere."""
    kept, want = out > 0, expected > 0
    if kept.sum() != want.sum() or not np.allclose(np.sort(probs[kept]), np.sort(probs[want])):
        return False
    return np.allclose(out[kept], probs[kept] / probs[kept].sum(), atol=1e-6)


def top_p_slip(out, expected, probs):
    """One sentence naming what a wrong top-p output did."""
    kept = out > 0
    n_kept, n_expected = int(kept.sum()), int((expected > 0).sum())
    if kept.any() and (~kept).any() and probs[~kept].max() > probs[kept].min():
        return "you dropped a token more probable than one you kept: sort by probability, highest first"
    if n_kept == n_expected and abs(out.sum() - 1) > 1e-6:
        return f"you kept the right tokens but did not renormalise: they sum to {out.sum():.3f}"
    if n_kept == n_expected - 1:
        return "you kept one token too few: keep the token whose probability makes the running total reach p"
    if n_kept == n_expected + 1:
        return "you kept one token too many: stop as soon as the running total reaches p"
    return f"you kept {n_kept} tokens, which is not the nucleus"


@exercise("a top-p (nucleus) filter", answer=Function("a function of probs and p"))
def top_p_function(answer):
    """``answer`` is a function top_p(probs, p) -> (V,) array: the nucleus kept, renormalised."""
    for probs, p, what in TOP_P_CASES:
        probs = np.array(probs)
        out = as_array(call(answer, probs.copy(), p, what=f"for {what}"), f"top_p for {what}",
                       shape=probs.shape)
        expected = reference_top_p(probs, p)
        if not same_nucleus(out, expected, probs):
            yield f"for {what} {top_p_slip(out, expected, probs)}"
            return


@exercise("the size of a KV cache", answer=Whole())
def kv_bytes(answer, n_layers, T, n_heads, d_k, bytes_per_element):
    """``answer`` is the number of bytes the cache holds for these sizes."""
    reference = sampling.kv_cache_bytes(n_layers, T, n_heads, d_k, bytes_per_element)
    slips = ((reference / 2, "K or V alone: the cache keeps both, one K and one V per layer"),
             (reference * 1.5, "Q too: queries are used once and never cached"),
             (reference / bytes_per_element, "numbers, not bytes: multiply by the bytes per element"),
             (reference / n_layers, "one layer: every layer keeps its own K and V"))
    found = [why for wrong, why in slips if abs(answer - wrong) < 0.5]
    if found:
        yield "that counts " + "; or it counts ".join(found)
    else:
        yield from number_problems(answer, reference, "the cache size in bytes", atol=0.5)


# Prompts a greedy loop is tried on: (which model, prompt, new tokens).
GREEDY_CASES = (("dragon", "<BOS> dragon drinks", 6), ("cat", "<BOS> the", 5), ("dragon", "<BOS>", 4))


def greedy_slip(out, expected, ids, n, what):
    """One sentence naming what is wrong with a greedy loop's output ``out`` (or None if right)."""
    if len(out) == n:
        return f"for {what} you returned only the {n} new tokens: return the prompt with them appended"
    if len(out) != len(expected):
        return f"for {what} your sequence has {len(out)} tokens, but it should have {len(ids)} + {n}"
    if out[:len(ids)].tolist() != ids.tolist():
        return f"for {what} the prompt at the start of your sequence has changed"
    wrong = [i for i in range(len(ids), len(out)) if out[i] != expected[i]]
    if wrong:
        return (f"for {what} your token {wrong[0] - len(ids) + 1} is not the most probable one: "
                f"take the argmax of the logits of the last position, then append it and run again")
    return None


@exercise("a greedy generation loop without the cache", answer=Function("a function of model, ids and n"))
def greedy_loop(answer, models, worlds):
    """``answer`` is a function greedy(model, ids, n) -> ids (T + n,): n argmax tokens appended.

    models, worlds: dicts {"cat": ..., "dragon": ...}.
    """
    for name, prompt, n in GREEDY_CASES:
        ids = worlds[name].tokenizer.encode(prompt)
        what = f"the {name} model after '{prompt}'"
        out = as_array(call(answer, models[name], ids.clone(), n, what=f"for {what}"), f"the sequence for {what}")
        expected = sampling.generate(models[name], ids, n, temperature=0, use_cache=False)
        hint = greedy_slip(torch.as_tensor(out).reshape(-1).long(), expected, ids, n, what)
        if hint:
            yield hint
            return
