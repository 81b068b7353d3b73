"""Checks for chapter 09 (sampling): temperature, a top-p filter, the KV-cache size, and the
learner's own generation loop (a piece of their GPT, run with the shipped cat and dragon models).

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import functools
import types
import weakref

import numpy as np
import torch

from .. import grading, worlds
from ..errors import CourseInputError, check_number, check_positive_int, check_tensor, count, fail, message_of, shown, \
    to_numpy
from ..exercises import (MAX_ANSWER_ENTRIES, NOT_ANSWERED, Function, Wrong, as_array, call, close_problems,
                         count_answer, exercise, holds_bools, model_kept, number_problems, numbers, settled, sum_shown)
from ..reference import softmax
from . import compute as sampling
from .compute import greedy_limit


def checked_logits(logits):
    """The check's own logits: one position's finite scores (V,), V >= 1, else one sentence."""
    arr = to_numpy(logits, "the check's logits")
    if arr.ndim != 1 or not arr.size or not np.isfinite(arr).all():
        fail(f"the check's logits should be one position's finite scores (V,), but got shape {arr.shape}"
             + ("" if arr.ndim != 1 or not arr.size else " with NaN or inf"))
    return arr


@exercise("the distribution at a temperature")   # (the answer read here: a bfloat16 or rounded one is named as such)
def tempered(answer, logits, temperature):
    """``answer`` (V,) is softmax(logits / temperature). Probabilities right only to their own precision (a
    bfloat16 tensor, rounded to 2 decimals: their sum is not 1 either) are named as such (``settled``), not
    given a slip's hint."""
    logits = checked_logits(logits)
    temperature = check_number(temperature, "the check's temperature", low=0, low_open=True)   # 0, NaN: no softmax
    given, answer = answer, as_array(answer, "your answer", shape=logits.shape)   # (given: with its dtype)
    reference = softmax(logits / temperature)
    done = settled(given, answer, reference, "probs", 1e-3, rtol=0)
    if done is not None:   # right first: with equal logits (or T near 1) a slip's distribution is the right one too
        yield from done
        return
    if abs(answer.sum() - 1) > 1e-3:
        yield f"your probabilities sum to {sum_shown(answer.sum())}, not 1: divide by the sum of the exponentials"
    elif temperature != 1 and np.allclose(answer, softmax(logits), atol=1e-4):
        yield "this is the distribution at temperature 1: divide the logits by the temperature first"
    elif temperature != 1 and np.allclose(answer, softmax(logits * temperature), atol=1e-4):
        yield "you multiplied the logits by the temperature: divide by it instead"
    else:
        yield from close_problems(answer, reference, "probs")


# Logits a tempered(logits, T) function is tried on, with T and what each one tests.
TEMPERED_CASES = (
    ([2.0, 1.0, 0.5, -1.0], 0.7, "logits [2, 1, 0.5, -1] at T = 0.7"),
    ([2.0, 1.0, 0.5, -1.0], 1.0, "logits [2, 1, 0.5, -1] at T = 1"),
    ([2.0, 1.0, 0.5, -1.0], 3.0, "logits [2, 1, 0.5, -1] at T = 3"),
    ([1000.0, 999.0, 990.0], 0.5, "logits [1000, 999, 990] at T = 0.5 (np.exp(2000) is inf)"),
    ([-1000.0, -1001.0, -1003.0], 1.0, "logits [-1000, -1001, -1003] at T = 1 (np.exp(-1000) is 0)"),
    ([1.0, 3.0, 2.0], 0.0, "logits [1, 3, 2] at T = 0 (greedy)"),
    ([3.0, 1.0, 3.0, 2.0], 0.0, "logits [3, 1, 3, 2] at T = 0 (two tied largest)"),
)


@exercise("your tempered(logits, T)", answer=Function("a function tempered(logits, T)",
                                                            own=("helpers.sampling.compute._tempered",
                                                                 "helpers.sampling.compute.greedy_limit",
                                                                 "helpers.sampling.compute._greedy_limit",
                                                                 "helpers.sampling.compute.with_temperature",
                                                                 "helpers.sampling.compute.next_distribution",
                                                                 "helpers.sampling.compute._distribution")))
def tempered_function(answer):
    """``answer`` is a function tempered(logits, T) -> (V,) probabilities: softmax(logits / T), computed
    without overflow, and at T = 0 its limit (the largest logits share the mass)."""
    for logits, T, what in TEMPERED_CASES:
        logits = np.array(logits)
        out = plain_call(answer, logits.copy(), T, what=f"for {what}")
        out = numbers(out, f"tempered for {what}", shape=logits.shape, allow_inf=True, allow_nan=True)
        if not np.isfinite(out).all():
            yield (f"for {what} tempered returns NaN or inf: " +
                   ("at T = 0 there is nothing to divide by; return the limit, all the mass on the largest logit"
                    if T == 0 else "subtract the largest logit before np.exp (softmax does not change), so that "
                    "no exponential overflows to inf or underflows to 0 everywhere"))
            return
        if T == 0:
            expected = greedy_limit(logits).double().numpy()
            if np.allclose(out, expected, atol=1e-6):
                continue
            one_hot = np.eye(len(logits))[int(np.argmax(logits))]
            yield (f"for {what} " + ("you put all the mass on one of the tied largest logits: as T shrinks, "
                                      "tied logits keep equal probabilities, so they share it equally"
                                      if np.allclose(out, one_hot) and expected.max() < 1 else
                                      "tempered should put all the mass on the largest logit (shared equally "
                                      "when several are largest): the limit of softmax(logits / T) as T shrinks"))
            return
        found = list(tempered.problems(out, logits, T))
        if found:
            yield f"for {what} {found[0]}"
            return


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
    if not (out[~kept] == 0).all():   # a dropped token below 0 (or NaN): not a distribution
        return False
    if kept.sum() != want.sum() or not np.allclose(np.sort(probs[kept]), np.sort(probs[want])):
        return False
    return np.allclose(out[kept], probs[kept] / probs[kept].sum(), atol=1e-6)


def lowest_first_top_p(probs, p):
    """The slip of a top-p that sorts lowest first: it keeps the least probable tokens until
    their running total reaches p (renormalised, NumPy)."""
    order = np.argsort(probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]       # the mass of the tokens before each one
    kept = np.zeros_like(probs)
    kept[order[before < p - 1e-12]] = probs[order[before < p - 1e-12]]
    return kept / kept.sum()


SORTED_LOWEST_FIRST = ("you sorted lowest first, so you keep the least probable tokens: sort by probability, "
                       "highest first (np.argsort(-probs), or torch.sort(probs, descending=True))")


def top_p_slip(out, expected, probs):
    """One sentence naming what a wrong top-p output did."""
    order = np.argsort(-probs, kind="stable")
    if not np.allclose(expected[order], expected) and np.allclose(out, expected[order], atol=1e-6):
        return ("you kept the right probabilities but returned them in sorted order: put each back at "
                "its token's position (kept[order] = sorted_kept)")
    kept = out > 0
    n_kept, n_expected = int(kept.sum()), int((expected > 0).sum())
    if kept.any() and (~kept).any() and probs[~kept].max() > probs[kept].min():
        return "you dropped a token more probable than one you kept: sort by probability, highest first"
    if n_kept == n_expected and abs(out.sum() - 1) > 1e-6:
        return f"you kept the right tokens but did not renormalise: they sum to {sum_shown(out.sum())}"
    if n_kept == n_expected - 1:
        return "you kept one token too few: keep the token whose probability makes the running total reach p"
    if n_kept == n_expected + 1:
        return "you kept one token too many: stop as soon as the running total reaches p"
    return f"you kept {n_kept} tokens, which is not the nucleus"


@exercise("a top-p (nucleus) filter", answer=Function("a function of probs and p", own=(
    "helpers.sampling.compute.top_p_filter", "helpers.sampling.compute._top_p", "helpers.sampling.compute.nucleus",
    "helpers.sampling.compute._nucleus", "helpers.sampling.compute.next_distribution",
    "helpers.sampling.compute._distribution")))
def top_p_function(answer):
    """``answer`` is a function top_p(probs, p) -> (V,) array: the nucleus kept, renormalised."""
    for probs, p, what in TOP_P_CASES:
        probs = np.array(probs)
        out = plain_call(answer, probs, p, what=f"for {what}")   # call names a change to probs in place
        out = numbers(out, f"top_p for {what}", shape=probs.shape)
        expected = reference_top_p(probs, p)
        if (out < 0).any():
            yield (f"for {what} top_p returns {count(int((out < 0).sum()))} entries below 0, but it should return "
                   "probabilities: a dropped token's is 0, the kept ones renormalised to sum to 1")
            return
        if not same_nucleus(out, expected, probs):
            yield f"for {what} {SORTED_LOWEST_FIRST if lowest_first(answer) else top_p_slip(out, expected, probs)}"
            return


def lowest_first(answer):
    """True when ``answer`` gives the lowest-first slip's output on every case."""
    try:
        return all(same_nucleus(numbers(call(answer, np.array(probs), p), "top_p", shape=(len(probs),)),   # as judged
                                lowest_first_top_p(np.array(probs), p), np.array(probs))
                   for probs, p, _ in TOP_P_CASES)
    except Wrong:
        return False


# Models a kv_cache_bytes(cfg, T, bytes_per_number) function is tried on: (n_layers, n_heads, n_kv_heads,
# d_model), T, bytes a number, and what each one tests.
CACHE_CASES = (
    ((2, 2, 0, 6), 7, 4, "the dragon's sizes, T = 7, float32"),
    ((3, 4, 2, 8), 5, 4, "3 layers, 4 query heads sharing 2 K/V heads, width 8, T = 5, float32"),
    ((1, 2, 0, 4), 1, 4, "1 layer, 2 heads, width 4, T = 1, float32"),
    ((12, 12, 0, 768), 1024, 2, "GPT-2 small's sizes, T = 1,024, float16"),
    ((30, 9, 3, 576), 8192, 2, "SmolLM2-135M's sizes (3 K/V heads for 9 query heads), T = 8,192, float16"),
    ((30, 9, 3, 576), 2048, 1, "SmolLM2-135M's sizes, T = 2,048, 1 byte a number (int8)"),
)


def cache_config(sizes):
    """A Config of these sizes (n_layers, n_heads, n_kv_heads, d_model), vocabulary 10, context 8,192."""
    from ..model import Config
    n_layers, n_heads, n_kv_heads, d_model = sizes
    return Config(vocab_size=10, d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=4 * d_model,
                  n_max=8192, n_kv_heads=n_kv_heads)


def measured_cache_bytes(cfg, T, bytes_per_number):
    """Bytes the KV cache of a real model of ``cfg`` holds after T tokens (its float32 tensors measured,
    scaled to ``bytes_per_number``)."""
    from ..model import Transformer
    model = Transformer(cfg).eval()
    return sampling.cache_bytes(sampling.prefilled(model, torch.zeros(T, dtype=torch.long))) // 4 * bytes_per_number


@exercise("your kv_cache_bytes(cfg, T, bytes_per_number)",
          answer=Function("a function kv_cache_bytes(cfg, T, bytes_per_number)",
                          own=("helpers.sampling.compute.kv_cache_bytes", "helpers.real.compute.kv_bytes_per_token",
                               "helpers.sampling.compute.cache_bytes")))   # (cache_bytes: the check's own measure)
def kv_cache_bytes_function(answer):
    """``answer`` is a function kv_cache_bytes(cfg, T, bytes_per_number) -> int: the bytes a KV cache holds after
    T tokens (every layer's K and V, for cfg.kv_heads heads of cfg.d_k numbers). On the small models the
    right count is a real cache's: one is filled and measured."""
    for sizes, T, b, what in CACHE_CASES:
        cfg = cache_config(sizes)
        expected = sampling.kv_cache_bytes(cfg.n_layers, T, cfg.kv_heads, cfg.d_k, b)
        if cfg.d_model <= 8:   # small enough to build and fill: the formula is what a real cache holds
            assert measured_cache_bytes(cfg, T, b) == expected
        out = count_answer(plain_call(answer, cfg, T, b, what=f"for {what}"), f"kv_cache_bytes for {what}", expected)
        if out == expected:
            continue
        if cfg.kv_heads != cfg.n_heads and out == expected // cfg.kv_heads * cfg.n_heads:
            yield (f"for {what} kv_cache_bytes gives {count(out)}, which counts a K and a V for every query head: only "
                   "cfg.kv_heads K/V heads are cached (grouped-query attention)")
            return
        yield f"for {what} kv_cache_bytes gives {count(out)}: " + next(iter(kv_bytes.problems(out, cfg.n_layers, T,
                                                                                       cfg.kv_heads, cfg.d_k, b)))
        return


MAX_KV_SIZE = 10**9   # the largest size kv_bytes takes: its slips are compared as floats


@exercise("the size of a KV cache")
def kv_bytes(answer, n_layers, T, n_heads, d_k, bytes_per_element):
    """``answer`` is the number of bytes the cache holds for these sizes (each at most MAX_KV_SIZE), a
    whole number (a float type too narrow for it, float32 past 16,777,216, is named as such)."""
    for name, value in (("n_layers", n_layers), ("T", T), ("n_heads", n_heads), ("d_k", d_k),
                        ("bytes_per_element", bytes_per_element)):
        if check_positive_int(value, name) > MAX_KV_SIZE:
            fail(f"{name} should be at most {MAX_KV_SIZE:,} (a size of a model), but got {count(value)}")
    reference = sampling.kv_cache_bytes(n_layers, T, n_heads, d_k, bytes_per_element)
    answer = count_answer(answer, "your answer", reference)
    if answer == reference:
        return   # right first: with n_layers or bytes_per_element 1, a slip's count is the right one too
    slips = ((reference / 2, "K or V alone: the cache keeps both, one K and one V per layer"),
             (reference * 1.5, "Q too: queries are used once and never cached"),
             (reference / bytes_per_element, "numbers, not bytes: multiply by the bytes per element"),
             (reference / n_layers, "one layer: every layer keeps its own K and V"))
    if bytes_per_element != 4:
        slips += ((reference / bytes_per_element * 4, f"4 bytes a number (float32): here each number takes "
                                                      f"{bytes_per_element} bytes"),)
    found = [why for wrong, why in slips if abs(answer - wrong) < 0.5]
    if found:
        yield "that counts " + "; or it counts ".join(found)
    else:
        yield from number_problems(answer, reference, "the cache size in bytes", atol=0.5)


# ------------------------------------------------- the learner's generate(model, ids, n_new, ...)

NOT_YET = NOT_ANSWERED.split(":")[0]
LOGITS_ATOL = 1e-4     # a cached pass's logits against a full pass over the same tokens

# What the loop is tried on, in this order: (model, prompt, new tokens, settings). Greedy first,
# then plain sampling, temperature, top-k, top-p and both filters together; with and without
# the cache. Each case's settings are what the learner's generate gets besides model, ids, n_new.
LOOP_CASES = (
    ("dragon", "<BOS> dragon drinks", 6, dict(temperature=0, cache=False)),
    ("dragon", "<BOS> dragon drinks", 6, dict(temperature=0, cache=True)),
    ("cat", "<BOS> the", 6, dict(temperature=0, cache=True)),
    ("dragon", "<BOS> dragon drinks", 10, dict(temperature=1.0, seed=0, cache=True)),
    ("dragon", "<BOS> troll", 10, dict(temperature=1.0, seed=1, cache=False)),
    ("dragon", "<BOS> wizard mixes", 10, dict(temperature=0.6, seed=2, cache=True)),
    ("cat", "<BOS>", 10, dict(temperature=2.0, seed=3, cache=False)),
    ("dragon", "<BOS> dragon", 12, dict(temperature=2.0, top_k=3, seed=0, cache=True)),
    ("dragon", "<BOS> troll", 12, dict(temperature=2.0, top_p=0.75, seed=3, cache=False)),
    ("cat", "<BOS> the", 10, dict(temperature=2.0, top_p=0.75, seed=2, cache=True)),
    ("dragon", "<BOS> troll", 10, dict(temperature=1.5, top_k=3, top_p=0.6, seed=0, cache=True)),
    ("cat", "<BOS> the", 8, dict(temperature=1.3, top_k=1, seed=8, cache=False)),
)


class LoopSlip(Exception):
    """Raised by ``Watched`` inside the learner's generate: one sentence on how it fed the model."""


class Slipped(Wrong):
    """The LoopSlip that ``Watched`` raised stopped the learner's generate: its sentence is the check's own
    (told apart from a learner's exception by the watched model's record, not by its text)."""


PASS_PARTS = ("_forward", "embed", "unembed", "_unembed", "_call_impl", "_wrapped_call_impl", "apply")
# what runs a pass (or part of one) past the watched model's own model(...), or hands a function the real
# model (apply): Transformer.forward(model, ids) and nn.Module.__call__(model, ids) reach them


class Watch:
    """What the check sees of one run of the learner's generate: the real model, the case (the
    prompt; cached: the cache setting), the passes so far, and the sentence of the last LoopSlip
    raised (see ``slipped``). Kept apart from the ``Watched`` the learner gets (``_WATCHES``), so
    that their generate reads neither the real model nor the count through it.

    cache=True: the first pass runs the whole prompt into a new KVCache (prefill), every later
    pass runs one token into that same cache, and its logits equal a full pass over the tokens
    the cache has seen; cache=False: every pass runs the whole sequence so far, without a cache.
    """

    def __init__(self, model, prompt, cached):
        self.model, self.prompt, self.cached = model, prompt.reshape(-1), cached
        self.kv, self.fed, self.passes = None, None, 0
        self.slip = None   # the sentence of the last LoopSlip raised (see loop_run)

    def watched_pass(self, ids, cache=None, **switches):
        """One pass of the model, refused with a LoopSlip when it is not fed as the case asks. Ids or a cache
        the model refuses (meta, sparse, text, not a KVCache) are refused first in the model's own sentence,
        as a pass of the model itself would."""
        from ..model import KVCache

        self.passes += 1
        flat = self.model.check_ids(ids).reshape(-1)
        if cache is not None and not isinstance(cache, KVCache):
            return self.model(ids, cache=cache, **switches)   # (the model refuses it before any work)
        if self.cached:
            self.check_cached(flat, cache)
        else:
            self.check_full(flat, cache)
        with torch.no_grad():
            out = self.model(ids, cache=cache, **switches)
            if cache is not None and out.dim() in (2, 3):
                full = self.model(cache.ids.reshape(-1))[-1]
                gap = float((out.reshape(-1, out.shape[-1])[-1] - full).abs().max())
                if not gap <= LOGITS_ATOL:
                    raise LoopSlip(f"pass {self.passes}: the logits from your cache differ from a full pass over "
                                   f"the same {len(cache)} tokens by {gap:.2g}")
        return out

    def check_cached(self, flat, cache):
        """Raise LoopSlip unless this pass feeds the prefill or one token into the one cache."""
        n, T, first = len(flat), len(self.prompt), self.passes == 1
        if cache is None:
            raise LoopSlip(f"with cache=True, pass {self.passes} ran without a KVCache: make one, "
                           "kv = KVCache(model.cfg.n_layers), before the loop and give it to every pass, "
                           "model(..., cache=kv)")
        if first:
            if len(cache):
                raise LoopSlip(f"your first pass got a KVCache that already holds {len(cache)} tokens: make a "
                               "new KVCache in each call of generate, not once outside it")
            if n != T or not torch.equal(flat, self.prompt):
                raise LoopSlip(f"your first pass ran {n} token{'s' * (n != 1)}, but the prompt has {T}: run the whole prompt "
                               "into the empty cache in one pass (the prefill)")
            self.kv = cache
            return
        if cache is not self.kv:
            raise LoopSlip(f"pass {self.passes} got another KVCache than the first pass"
                           + (" (a new, empty one)" if not len(cache) else "")
                           + ": the cache is never extended, so each step forgets the earlier tokens; make "
                             "one KVCache before the loop and give that same one to every pass")
        if n == T and torch.equal(flat, self.prompt):
            raise LoopSlip(f"pass {self.passes} fed the prompt again into a cache that already holds it: feed "
                           "only the newest token; the cache keeps the keys and values of all the others")
        if n > 1:
            again = n == len(cache) + 1 and torch.equal(flat[:-1], cache.ids.reshape(-1))
            fed = f"the whole sequence ({n} tokens) again" if again else f"{n} tokens"
            raise LoopSlip(f"pass {self.passes} fed {fed} into a cache that already holds {len(cache)}: "
                           "with the cache, feed only the newest token, ids[-1:]")

    def check_full(self, flat, cache):
        """Raise LoopSlip unless this pass runs the whole sequence so far without a cache."""
        n, T, s = len(flat), len(self.prompt), self.passes - 1
        if cache is not None:
            raise LoopSlip("with cache=False, run every pass on the whole sequence without a KVCache "
                           "(model(ids)): that is the loop the cache is compared with")
        if s and n == T and torch.equal(flat, self.prompt):
            raise LoopSlip(f"pass {self.passes} ran the prompt again: append each token you draw to the "
                           "sequence and run the longer sequence")
        if s and n == 1:
            raise LoopSlip(f"pass {self.passes} ran only the newest token, without a cache: the model then "
                           "sees none of the earlier tokens; run the whole sequence")
        grown = self.fed is None or (n == len(self.fed) + 1 and torch.equal(flat[:-1], self.fed))
        if n != T + s or not torch.equal(flat[:T], self.prompt) or not grown:
            raise LoopSlip(f"pass {self.passes} ran {n} tokens; it should run the {T + s} tokens so far: "
                           "the prompt, then every token drawn, in order")
        self.fed = flat


_WATCHES = weakref.WeakKeyDictionary()   # each Watched's Watch


def watch_of(watched):
    """The Watch of ``watched``; a copy of it (copy.copy(model)) has none: a LoopSlip."""
    watch = _WATCHES.get(watched)
    if watch is None:
        raise LoopSlip("your generate made a copy of the model it was given: run that model itself, model(ids) or "
                       "model(ids, cache=kv), so that the check sees each pass")
    return watch


class Watched:
    """The model as the learner's generate sees it: ``model(ids)`` / ``model(ids, cache=kv)`` (and
    ``model.forward``) run the real model through its ``Watch``, which counts the pass and stops the
    loop with a LoopSlip at the first pass that does not feed the model as the case asks.

    Everything else (cfg, check_ids, parameters(), eval(), ...) is the model's own, but the real
    model itself is never handed out: a method that returns it (eval(), train(), modules()) gives
    this wrapper instead, and what runs a pass past it (``PASS_PARTS``: Transformer.forward(model,
    ids) reaches model._forward) stops the loop with a LoopSlip. Attributes set on it go to the model
    (``model_kept`` puts them back).
    """
    __slots__ = ("__weakref__",)

    def __init__(self, watch):
        _WATCHES[self] = watch

    @property
    def __class__(self):
        """The model's class, so that code that checks it is a Transformer (the course's own
        ``sampling.generate``, which a right answer may call) takes the watched model for one."""
        watch = _WATCHES.get(self)
        return type(watch.model) if watch is not None else type(self)

    def __getattr__(self, name):
        watch = _WATCHES.get(self)
        if watch is None or name.startswith("__"):
            raise AttributeError(name)
        if name in PASS_PARTS:
            watch.slip = (f"your generate reached model.{name}, a part of the model's forward pass: run the model "
                          "you are given as a whole, model(ids) or model(ids, cache=kv), once a step (not "
                          "Transformer.forward(model, ...) or the model's parts), so that the check sees each pass")
            raise LoopSlip(watch.slip)
        value = getattr(watch.model, name)
        if isinstance(value, types.MethodType) and value.__self__ is watch.model:
            def method(*args, **kwargs):   # (not the bound method itself: its __self__ is the real model)
                return self.in_place(value(*args, **kwargs))
            method.__name__ = method.__qualname__ = name
            return method
        return self.in_place(value)

    def __setattr__(self, name, value):
        setattr(watch_of(self).model, name, value)

    def __delattr__(self, name):
        delattr(watch_of(self).model, name)

    def in_place(self, value):
        """``value`` with this wrapper in place of the real model (model.eval() returns the model; modules()
        and named_modules() yield it first)."""
        model = watch_of(self).model
        if value is model:
            return self
        if isinstance(value, tuple):
            return tuple(self.in_place(v) for v in value)
        if isinstance(value, types.GeneratorType):
            return (self.in_place(v) for v in value)
        return value

    def forward(self, ids, cache=None, **switches):
        return self(ids, cache=cache, **switches)

    def __call__(self, ids, cache=None, **switches):
        watch = watch_of(self)
        try:
            return watch.watched_pass(ids, cache, **switches)
        except LoopSlip as slip:
            watch.slip = str(slip)
            raise


# ---- the known slips of the sampling part, as the distributions they draw from

def nucleus_size(probs, p, extra=0, crossing=True):
    """How many of the most probable tokens a top-p filter keeps: the right count (the first
    running total that reaches p included), one more (extra=1), or without the token that
    reaches p (crossing=False; at least one token)."""
    running = torch.cumsum(torch.sort(probs, descending=True).values, 0)
    size = int((running < p - 1e-7).sum()) + (1 if crossing else 0) + extra
    return max(1, min(size, len(probs)))


def keep_top(probs, size, renormalise=True):
    """probs with all but its ``size`` most probable entries zeroed (renormalised unless told not)."""
    kept = torch.zeros_like(probs)
    idx = torch.topk(probs, size).indices
    kept[idx] = probs[idx]
    return kept / kept.sum() if renormalise else kept


def slipped_distribution(logits, temperature, top_k, top_p, slip):
    """The distribution a loop with one known slip draws from (see LOOP_SLIPS)."""
    if slip == "temperature ignored":
        temperature = 1.0 if temperature else 0
    if slip == "filters ignored":
        top_k = top_p = None
    if slip == "softmax twice" and temperature:
        probs = torch.softmax(torch.softmax(logits, -1) / temperature, -1)
    elif slip == "temperature multiplied" and temperature:
        probs = torch.softmax(logits * temperature, -1)
    else:
        probs = sampling.with_temperature(logits, temperature)
    V = len(probs)
    k = None if top_k is None else max(1, min(V, top_k + {"k - 1": -1, "k + 1": 1}.get(slip, 0)))
    if k is not None:
        probs = keep_top(probs, k, renormalise=slip != "not renormalised")
    if top_p is not None and slip in ("unsorted", "lowest first"):
        order = torch.arange(V) if slip == "unsorted" else torch.sort(probs, stable=True).indices
        before = torch.cumsum(probs[order], 0) - probs[order]    # the mass of the tokens before each one
        keep = order[before < top_p - 1e-7]
        kept = torch.zeros_like(probs)
        kept[keep] = probs[keep]
        probs = kept / kept.sum()
    elif top_p is not None:
        size = nucleus_size(probs, top_p, extra=int(slip == "one too many"), crossing=slip != "crossing left out")
        probs = keep_top(probs, size)
    return probs


@torch.no_grad()
def slipped_generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, seed=0, cache=True, slip=None):
    """The course's loop with one known slip (cache and no cache give the same tokens)."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(n_new):
        if slip == "reseeded":
            g = torch.Generator().manual_seed(seed)
        if slip == "softmax over positions":
            logits = torch.log_softmax(model(ids), dim=0)[-1]
        else:
            logits = model(ids)[0 if slip == "first position" else -1]
        if slip == "argmax" and temperature:
            token = logits.argmax().reshape(1)
        else:
            probs = (torch.softmax(logits, dim=-1) if slip == "plain softmax drawn" else
                     slipped_distribution(logits, temperature, top_k, top_p, slip))
            token = torch.multinomial(probs, 1, generator=g)
        ids = torch.cat([ids, token])
    return ids


# (slip, the settings it can show in, the sentence that names it)
LOOP_SLIPS = (
    ("softmax over positions", lambda s: True,
     "you took the softmax over the positions (dim=0 of the (T, V) logits): take it over the vocabulary, "
     "the last axis (dim=-1), of the last position's logits"),
    ("first position", lambda s: True,
     "you drew from the logits of the first position: the next token's logits are the last row, logits[-1]"),
    ("argmax", lambda s: s["temperature"] > 0,
     "you took the most probable token at every step; with a temperature above 0, draw it: "
     "torch.multinomial(probs, 1, generator=g)"),
    ("reseeded", lambda s: s["temperature"] > 0,
     "you made (or seeded) the generator inside the loop, so every step draws with the same random "
     "numbers: make g = torch.Generator().manual_seed(seed) once, before the loop"),
    ("temperature ignored", lambda s: s["temperature"] not in (0, 1),
     "your tokens are those of temperature 1: divide the logits by the temperature before the softmax "
     "(dividing the probabilities by it changes nothing once they are renormalised)"),
    ("softmax twice", lambda s: s["temperature"] > 0,
     "you divided the probabilities by the temperature and took a softmax again: divide the logits, "
     "then take one softmax"),
    ("temperature multiplied", lambda s: s["temperature"] not in (0, 1),
     "you multiplied the logits by the temperature: divide them by it"),
    ("plain softmax drawn", lambda s: s["temperature"] != 1 or s.get("top_k") or s.get("top_p"),
     "you drew from softmax(logits) itself, at temperature 1 and unfiltered: draw from the distribution "
     "next_distribution returns, with the temperature, top-k and top-p applied"),
    ("filters ignored", lambda s: s.get("top_k") or s.get("top_p"),
     "your tokens are those of sampling without top-k and top-p: apply the filters to the distribution"),
    ("k - 1", lambda s: s.get("top_k"), "your top-k keeps k - 1 tokens: keep exactly the k most probable"),
    ("k + 1", lambda s: s.get("top_k"), "your top-k keeps k + 1 tokens: keep exactly the k most probable"),
    ("unsorted", lambda s: s.get("top_p"),
     "your top-p adds up the probabilities in vocabulary order: sort by probability first, highest first, "
     "then keep tokens until the running total reaches p"),
    ("lowest first", lambda s: s.get("top_p"),
     "your top-p sorts lowest first, so it keeps the least probable tokens: sort by probability, highest "
     "first (torch.sort(probs, descending=True))"),
    ("crossing left out", lambda s: s.get("top_p"),
     "your top-p leaves out the token whose probability makes the running total reach p: keep it, "
     "it is the last token of the nucleus"),
    ("one too many", lambda s: s.get("top_p"),
     "your top-p keeps one token too many: stop at the first token where the running total reaches p"),
    ("not renormalised", lambda s: s.get("top_k") and s.get("top_p"),
     "your top-p ran on the top-k probabilities before they were renormalised (or before top-k, which "
     "keeps the same tokens): after top-k divide by the kept sum, then run top-p, so that its running "
     "total reaches p at the right token"),
)


def loop_slip(out, case, passed, ahead=()):
    """The sentence of the first known slip that gives the tokens ``out`` on ``case``, the right
    tokens on every case already ``passed`` and the learner's tokens on the cases ``ahead`` (so
    that it explains them all), else None. A case: (model, ids, n_new, settings)."""
    def tokens(case, slip):
        model, ids, n_new, settings = case
        return slipped_generate(model, ids, n_new, slip=slip, **settings)

    settings = {"temperature": 1.0, **case[3]}
    for slip, shows, sentence in LOOP_SLIPS:
        if shows(settings) and torch.equal(out, tokens(case, slip)) and all(
                torch.equal(right, tokens(earlier, slip)) for earlier, right in passed) and all(
                torch.equal(theirs, tokens(later, slip)) for later, theirs in ahead
                if shows({"temperature": 1.0, **later[3]})):
            return sentence
    return None


def loop_output(out, ids, n_new, what, vocab):
    """The learner's returned sequence as a (T + n_new,) LongTensor of ids below ``vocab``, or Wrong
    naming what is wrong with it."""
    if isinstance(out, (tuple, list)) and len(out) != len(ids) + n_new:
        raise Wrong(f"generate returned a {type(out).__name__} of {len(out)} items: return the "
                    f"sequence, one (T + n_new,) tensor of {len(ids) + n_new} token ids")
    if holds_bools(out):   # exercises.as_array would read them as ids 1 and 0
        raise Wrong("generate returned True/False values, not token ids: return the sequence of ids itself, "
                    f"one (T + n_new,) LongTensor of {len(ids) + n_new} ids")
    arr = numbers(out, f"the sequence for {what}")
    if arr.ndim == 2 and arr.shape[0] == 1:
        raise Wrong(f"generate returned shape {arr.shape}: return a flat (T + n_new,) "
                    "tensor, like the ids it was given")
    if arr.ndim != 1:
        raise Wrong(f"generate returned shape {arr.shape}; it should be ({len(ids) + n_new},)")
    if len(arr) == n_new:
        raise Wrong(f"you returned only the {n_new} new tokens: return the prompt with them appended")
    if len(arr) != len(ids) + n_new:
        raise Wrong(f"your sequence has {len(arr)} tokens, but it should have {len(ids)} + {n_new}")
    if (arr != np.round(arr)).any():
        raise Wrong(f"your sequence holds {arr[arr != np.round(arr)][0]:g}, not a token id")
    outside = (arr < 0) | (arr >= vocab)
    if outside.any():
        raise Wrong(f"your sequence holds {arr[outside][0]:g}, which is not a token id: the model's vocabulary "
                    f"has the ids 0 to {vocab - 1}")
    out = torch.as_tensor(arr).long()
    if not torch.equal(out[:len(ids)], ids):
        raise Wrong("the prompt at the start of your sequence has changed")
    return out


def stopped(wrong, settings):
    """A Wrong raised while the learner's generate ran, as the sentence to show."""
    text = str(wrong)
    if isinstance(wrong, Slipped):   # the check's own sentence; a learner's exception keeps "your function stopped"
        return text
    if "invalid multinomial distribution" in text or "probability tensor contains" in text:
        hint = ("at temperature 0, logits / temperature divides by zero (inf and NaN): handle temperature 0 "
                "on its own, all the mass on the largest logit" if settings.get("temperature", 1.0) == 0 else
                "your top-p may keep no token at all when the first one alone reaches p: it keeps the token "
                "that makes the running total reach p" if settings.get("top_p") else
                "the probabilities you drew from were not a distribution (all zero, negative, NaN or inf)")
        return f"{text}; {hint}"
    return text


def loop_run(fn, model, ids, n_new, settings, what=""):
    """What the learner's generate ``fn`` returns on one case (``watched_run``)."""
    return watched_run(fn, model, ids, n_new, settings, what)[0]


def watched_run(fn, model, ids, n_new, settings, what=""):
    """(what the learner's generate ``fn`` returns on one case, the ``Watch`` of its passes): run on the
    model ``Watched`` and kept as it was (``model_kept``: a loop that changes a weight, or stops half-way,
    changes nothing)."""
    watch = Watch(model, ids, settings["cache"])
    watched = grading.counted(Watched(watch), lambda: watch.passes, lambda n: setattr(watch, "passes", n))
    with model_kept(model):
        try:
            return plain_call(fn, watched, ids.clone(), n_new, **settings, what=what), watch
        except Wrong as wrong:
            raise slipped(wrong, fn, watch, what) from None


def slipped(wrong, fn, watch, what):
    """``wrong`` (what stopped the learner's generate) as Slipped when it was the watched model's own
    LoopSlip: raised in this run (``watch``), or, for a record replayed in the judge (whose run raised
    it in the student's kernel), recorded as a LoopSlip. A learner's own exception, ValueError("LoopSlip:
    ...") too, stays as call says it, "your function stopped with ValueError: ..."."""
    text, said = str(wrong), f"your function stopped{' ' + what if what else ''} with LoopSlip: "
    if text.startswith(said) and (text[len(said):] == watch.slip or isinstance(fn, grading.Replay)):
        return Slipped(text[len(said):])
    return wrong


def too_few_passes(watch, n_new):
    """The sentence for a generate that ran the model it was given fewer times than it drew tokens (it ran
    another model, or the real one past the wrapper), or None. In the judge the record's count of passes
    is put back (``grading.counted``)."""
    if watch.passes >= n_new:
        return None
    return (f"your generate drew {n_new} tokens but ran the model it was given {watch.passes} "
            f"time{'' if watch.passes == 1 else 's'}: each new token needs one pass of that model, model(ids) or "
            "model(ids, cache=kv) (the check watches those passes; not Transformer.forward, a copy or another model)")


def plain_call(fn, *args, what="", **kwargs):
    """``call(fn, ...)``, its result made ``plain`` within a time limit too (a tensor subclass's own
    methods are the learner's code). What ``plain`` could not copy (a tensor on the meta device, or one
    too large) is refused first, in a sentence about what the function returned (``copyable``): it is no
    stop of the learner's function."""
    out = call(fn, *args, what=what, **kwargs)
    copyable(out, f"what your function returned{' ' + what if what else ''}")
    return call(functools.partial(plain, out), what=what)


def copyable(out, name):
    """Raise Wrong in one sentence unless ``plain`` can copy ``out``: every tensor in it one the converters
    can read (``errors.check_tensor``: not meta, sparse, nested, quantized or complex), and its tensors and
    arrays together at most MAX_ANSWER_ENTRIES numbers, counted without copying any (an expanded view
    stands for more numbers than it stores). Reads only sizes and flags of plain types: runs no code of
    the learner's."""
    size = entries_in(out, name)
    if size > MAX_ANSWER_ENTRIES:
        raise Wrong(f"{name} should be small (at most {MAX_ANSWER_ENTRIES:,} numbers), but it holds {count(size)}")


def entries_in(out, name):
    """How many numbers the tensors and arrays in ``out`` (a list or tuple of them, nested) stand for;
    a tensor the converters cannot read raises Wrong with ``check_tensor``'s sentence."""
    if isinstance(out, torch.Tensor):
        try:
            return check_tensor(out, name).numel()
        except CourseInputError as error:
            raise Wrong(message_of(error)) from None
    if isinstance(out, (np.ndarray, np.generic)):
        return np.size(out)
    if isinstance(out, (list, tuple)):
        return sum(entries_in(v, name) for v in out)
    return 0


def plain(out):
    """What a learner's function returned as plain data, copied, so that judging it runs none of their
    code (``call`` has already refused any type but the plain ones, a tensor subclass among them; and
    ``copyable`` what cannot be copied): a tensor as a detached copy (a dtype NumPy lacks, bfloat16, is
    for the converters to read, not a stop of the learner's function), an array as a copy, a list or tuple
    as a list of those, anything else (a number: a huge int is the converters' to name) as it is. Run it
    through ``call``."""
    if isinstance(out, torch.Tensor):
        return out.detach().cpu().clone()
    if isinstance(out, (np.ndarray, np.generic)):
        return np.array(out)
    if isinstance(out, (list, tuple)):
        return [plain(v) for v in out]
    return out


def same_twice(fn, model, ids, n_new, settings, out):
    """True if ``fn`` gives ``out`` again on the same case (False: its draws do not follow the seed)."""
    try:
        again = loop_output(loop_run(fn, model, ids, n_new, settings), ids, n_new, "", model.cfg.vocab_size)
    except Wrong:
        return True
    return torch.equal(again, out)


def top_p_cases_ahead(fn, models, failed):
    """When the case that ``failed`` uses top-p: the later top-p cases of LOOP_CASES, each with the
    tokens ``fn`` gives on it (two top-p slips can give the same tokens on one case)."""
    if not failed.get("top_p"):
        return []
    ahead = []
    for name, prompt, n_new, settings in LOOP_CASES[next(i for i, c in enumerate(LOOP_CASES) if c[3] is failed) + 1:]:
        model, world = models[name]
        ids = world.tokenizer.encode(prompt)
        if settings.get("top_p"):
            try:
                out = loop_output(loop_run(fn, model, ids, n_new, settings), ids, n_new, "", model.cfg.vocab_size)
            except Wrong:
                continue
            ahead.append(((model, ids, n_new, settings), out))
    return ahead


# The course's pieces of a generation loop besides sampling.generate itself: the distribution a step draws from
# (Exercise 1's next_distribution, with its parts: temperature, top-k, top-p), the draw, and every other function
# that runs the whole loop (a sampler of several sequences, the real model's, chapter 12's, chapter 03's).
COURSES_SAMPLING = tuple(f"helpers.{name}" for name in (
    "sampling.compute.next_distribution", "sampling.compute._distribution", "sampling.compute.with_temperature",
    "sampling.compute._tempered", "sampling.compute.top_k_filter", "sampling.compute._top_k",
    "sampling.compute.top_p_filter", "sampling.compute._top_p", "sampling.compute.nucleus",
    "sampling.compute._nucleus", "sampling.compute.draw", "sampling.compute.samples",
    "sampling.compute.continuations", "sampling.compute.drawn_rows", "sampling.compute.slide",
    "real.compute.continuations", "gpt.compute.sample_text", "gpt.compute.samples_at",
    "masking.compute.sample_sentences"))


def shipped_model(model, name, world):
    """The check's own ``name`` model: a course Transformer over ``world``'s vocabulary, else one sentence."""
    from ..model import Transformer

    if not isinstance(model, Transformer) or model.cfg.vocab_size != len(world.tokenizer.vocab):
        fail(f"{name} should be the shipped {name} model (a Transformer over the {len(world.tokenizer.vocab)} words "
             f"of the {name} world), but got {shown(model) if not isinstance(model, Transformer) else 'another model'}")


@exercise("your generate(model, ids, n_new, temperature, top_k, top_p, seed, cache)",
          answer=Function("a function generate(model, ids, n_new, temperature=1.0, top_k=None, top_p=None, "
                          "seed=0, cache=True)", own=("helpers.sampling.compute.generate", *COURSES_SAMPLING)),
          keeps="09")
def generate_loop(fn, cat, dragon):
    """``fn`` extends ids (T,) by n_new tokens as ``sampling.generate`` does, token for token,
    on the shipped cat and dragon models (LOOP_CASES), and feeds the model as its cache setting
    says (``Watched``), one pass of the model it is given for each new token at least."""
    models = {"cat": (cat, worlds.cat_world()), "dragon": (dragon, worlds.dragon_world(n=1))}
    for name, (model, world) in models.items():
        shipped_model(model, name, world)
    passed = []
    for name, prompt, n_new, settings in LOOP_CASES:
        model, world = models[name]
        ids = world.tokenizer.encode(prompt)
        given = ", ".join(f"{k}={v}" for k, v in settings.items())
        what = f"the {name} model after '{prompt}', n_new={n_new}, {given}"
        try:
            out, watch = watched_run(fn, model, ids, n_new, settings)
            if out is None:
                yield f"{NOT_YET}: generate returns None; write the loop and return the longer sequence"
                return
            out = loop_output(out, ids, n_new, what, model.cfg.vocab_size)
        except Wrong as wrong:
            yield f"for {what}: {stopped(wrong, settings)}"
            return
        if too_few_passes(watch, n_new):
            yield f"for {what}: {too_few_passes(watch, n_new)}"
            return
        right = sampling.generate(model, ids, n_new, **settings)
        if torch.equal(out, right):
            passed.append(((model, ids, n_new, settings), right))
            continue
        first = next(i for i in range(len(ids), len(out)) if out[i] != right[i]) - len(ids) + 1
        hint = loop_slip(out, (model, ids, n_new, settings), passed, ahead=top_p_cases_ahead(fn, models, settings))
        if hint is None and (settings["temperature"] == 0 or settings.get("top_k") == 1):
            hint = (f"your token {first} is not the most probable one: with temperature 0 (or top_k=1) each "
                    "step takes the largest logit of the last position")
        elif hint is None and not same_twice(fn, model, ids, n_new, settings, out):
            hint = ("the same call with the same seed gave other tokens the second time, so the draws do not "
                    "follow the seed: draw with torch.multinomial(probs, 1, generator=g), g one torch.Generator "
                    "seeded once with seed, not from the global random state")
        elif hint is None:
            hint = (f"your tokens differ from the course's from token {first} on: each step draws from "
                    "softmax(logits[-1] / temperature), then top-k, then top-p, renormalised, with "
                    "torch.multinomial(probs, 1, generator=g), g one torch.Generator seeded once with seed")
        yield f"for {what}: {hint}"
        return
