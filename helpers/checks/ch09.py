"""Checks for chapter 09 (sampling): temperature, a top-p filter, the KV-cache size, a greedy loop.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import numpy as np
import torch

from . import array_problems, close_problems, exercise, number_problems
from ..sampling import compute as sampling


def softmax(x):
    """Softmax of a 1-D array (NumPy, float64)."""
    z = np.asarray(x, dtype=float)
    e = np.exp(z - z.max())
    return e / e.sum()


@exercise("the distribution at a temperature")
def tempered(answer, logits, temperature):
    """``answer`` (V,) is softmax(logits / temperature)."""
    logits = np.asarray(logits, dtype=float)
    found = list(array_problems(answer, "probs", shape=logits.shape))
    if found:
        yield from found
        return
    p = np.asarray(answer.detach() if hasattr(answer, "detach") else answer, dtype=float)
    if abs(p.sum() - 1) > 1e-3:
        yield f"your probabilities sum to {p.sum():.3f}, not 1: divide by the sum of the exponentials"
        return
    if np.allclose(p, softmax(logits), atol=1e-4) and temperature != 1:
        yield "this is the distribution at temperature 1: divide the logits by the temperature first"
        return
    if np.allclose(p, softmax(logits * temperature), atol=1e-4):
        yield "you multiplied the logits by the temperature: divide by it instead"
        return
    yield from close_problems(p, softmax(logits / temperature), "probs")


# Distributions a top-p function is tried on, with the p to use and what each one tests.
TOP_P_CASES = (
    ([0.5, 0.3, 0.15, 0.05], 0.75, "probs [0.5, 0.3, 0.15, 0.05] at p = 0.75"),
    ([0.5, 0.3, 0.15, 0.05], 0.4, "probs [0.5, 0.3, 0.15, 0.05] at p = 0.4"),
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


@exercise("a top-p (nucleus) filter")
def top_p_function(answer):
    """``answer`` is a function top_p(probs, p) -> (V,) array: the nucleus kept, renormalised."""
    if not callable(answer):
        yield f"top_p should be a function of probs and p, but it is a {type(answer).__name__}"
        return
    for probs, p, what in TOP_P_CASES:
        probs = np.array(probs)
        out = answer(probs.copy(), p)
        found = list(array_problems(out, f"top_p for {what}", shape=probs.shape))
        if found:
            yield from found
            return
        out = np.asarray(out.detach() if hasattr(out, "detach") else out, dtype=float)
        expected = reference_top_p(probs, p)
        if same_nucleus(out, expected, probs):
            continue
        kept = out > 0
        n_kept, n_expected = int(kept.sum()), int((expected > 0).sum())
        if kept.any() and (~kept).any() and probs[~kept].max() > probs[kept].min():
            yield (f"for {what} you dropped a token more probable than one you kept: "
                   f"sort by probability, highest first")
        elif n_kept == n_expected and abs(out.sum() - 1) > 1e-6:
            yield f"for {what} you kept the right tokens but did not renormalise: they sum to {out.sum():.3f}"
        elif n_kept == n_expected - 1:
            yield (f"for {what} you kept one token too few: keep the token whose probability "
                   f"makes the running total reach p")
        elif n_kept == n_expected + 1:
            yield f"for {what} you kept one token too many: stop as soon as the running total reaches p"
        else:
            yield f"for {what} you kept {n_kept} tokens, which is not the nucleus"
        return


@exercise("the size of a KV cache")
def kv_bytes(answer, n_layers, T, n_heads, d_k, bytes_per_element):
    """``answer`` is the number of bytes the cache holds for these sizes."""
    reference = sampling.kv_cache_bytes(n_layers, T, n_heads, d_k, bytes_per_element)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"the answer should be one number of bytes, but it is a {type(answer).__name__}"
        return
    slips = ((reference / 2, "K or V alone: the cache keeps both, one K and one V per layer"),
             (reference * 1.5, "Q too: queries are used once and never cached"),
             (reference / bytes_per_element, "numbers, not bytes: multiply by the bytes per element"),
             (reference / n_layers, "one layer: every layer keeps its own K and V"))
    found = [why for wrong, why in slips if abs(value - wrong) < 0.5]
    if found:
        yield "that counts " + "; or it counts ".join(found)
        return
    yield from number_problems(value, reference, "the cache size in bytes", atol=0.5)


# Prompts a greedy loop is tried on: (which model, prompt, new tokens).
GREEDY_CASES = (("dragon", "<BOS> dragon drinks", 6), ("cat", "<BOS> the", 5), ("dragon", "<BOS>", 4))


@exercise("a greedy generation loop without the cache")
def greedy_loop(answer, models, worlds):
    """``answer`` is a function greedy(model, ids, n) -> ids (T + n,): n argmax tokens appended.

    models, worlds: dicts {"cat": ..., "dragon": ...}.
    """
    if not callable(answer):
        yield f"greedy should be a function of model, ids and n, but it is a {type(answer).__name__}"
        return
    for name, prompt, n in GREEDY_CASES:
        ids = worlds[name].tokenizer.encode(prompt)
        out = answer(models[name], ids.clone(), n)
        expected = sampling.generate(models[name], ids, n, temperature=0, use_cache=False)
        out = torch.as_tensor(out).reshape(-1)
        what = f"the {name} model after '{prompt}'"
        if len(out) == n:
            yield f"for {what} you returned only the {n} new tokens: return the prompt with them appended"
            return
        if len(out) != len(expected):
            yield f"for {what} your sequence has {len(out)} tokens, but it should have {len(ids)} + {n}"
            return
        if out[:len(ids)].tolist() != ids.tolist():
            yield f"for {what} the prompt at the start of your sequence has changed"
            return
        wrong = [i for i in range(len(ids), len(out)) if out[i] != expected[i]]
        if wrong:
            yield (f"for {what} your token {wrong[0] - len(ids) + 1} is not the most probable one: "
                   f"take the argmax of the logits of the last position, then append it and run again")
            return
