"""The causal mask: build it, apply it, and measure what it prevents.

* ``causal_mask`` and ``apply_mask``: torch.triu and masked_fill.
* ``causal_attention``: the piece the learner writes, every head at once (a query block that
  starts later, as with a KV cache, included); ``heads_from_trace``: a layer's q, k, v, weights
  and head outputs from the model's trace, split into heads, to check it against.
* ``three_words``: the Book's "the cat sat" with hand-picked W_q, W_k, W_v.
* ``mask_after_softmax``: what goes wrong when the mask comes after the softmax.
* ``book_attention`` and ``leak``: the Book's "Seeing the leak", number for number.
* ``prefix_scores``, ``sample_sentences``, ``no_mask_runs``: how models trained with or
  without the mask behave when they have to generate.
* ``attention_maps``: every head's weights for a prompt, mask on or off.
* ``lecture_mask``: the Lecture's ``triu(ones) * -inf`` (NaN) beside an additive mask that works.
* ``three_regimes``: training, prefill and decoding with a KV cache, mask on and off.
* ``earlier_states`` and ``attention_work``: why the cache needs the mask, and what generating
  costs without it.
* ``future_reading``: where a model trained without the mask finds its answers.
* ``dropout_demo``: the Book's dropout on eight weights; ``OneHead``, ``book_one_head``: the
  Book's one-head module from nn.Linear, with its mask as a buffer.
"""
import math
import os
from pathlib import Path
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import MAX_BYTES, as_array, check_bytes, check_finite, check_mask, check_number, check_positive_int, check_seed, \
    check_seeds, check_switch, check_tensor_size, count, fail, length, plain, real_number, refuse_bools, shape_before_copy, shown, \
    to_numpy
from ..model import MAX_TOKENS, Attention, Transformer, check_heads_split, check_made, check_prompt_length, \
    longest_prompt, measure
from ..recipes import CAT_CONFIG, CAT_TRAINING
from ..reference import entries, mask_bytes
from ..explorer import check_model_and_world
from ..sampling.compute import LAYER_WORK, PASS_WORK, check_length, check_prompt, check_sampling, forward_macs, generate, \
    next_distribution, window
from ..training import check_steps, check_work, train
from ..worlds import World, check_sentences, decisions, entropy_floor, words_of   # entropy_floor: chapter 04 calls it masking.entropy_floor
from ..states import course_modes, on_the_cpu


def check_square(T, bytes_per_entry, what, name="T"):
    """T as an int, refused up front when a (T, T) table of ``bytes_per_entry`` bytes an entry (and the
    one torch.ones makes on the way) would pass 1.5 GiB; the sentence names the largest T allowed.
    name: what the caller calls T (OneHead's context_length)."""
    T = check_positive_int(T, name)
    check_bytes(2 * bytes_per_entry * T * T, f"{what} for {name}={count(T)}",
                f"ask for {name} <= {int((MAX_BYTES / (2 * bytes_per_entry)) ** 0.5):,}")
    return T


@on_the_cpu
def causal_mask(T):
    """(T, T) bool: True strictly above the diagonal, the keys a query may NOT see (T within 1.5 GiB)."""
    T = check_square(T, 1, "a causal mask")
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


# apply_mask's bytes a score beyond its float copy and masked_fill's result (4 or 8 each): check_finite's
# True/False tables (finite, == -inf, their or).
MASK_TEST_BYTES = 3


@on_the_cpu
def apply_mask(scores, mask=None):
    """scores (..., T, T) with -inf where ``mask`` (default: the causal mask) is True.

    mask: (T, T) of True/False, or of the numbers 1 (hide) and 0 (keep) only; anything else (0.5,
    an additive mask of 0 and -inf, NaN) is refused: it would be rounded to one or the other silently.
    A float64 tensor stays float64; anything else becomes float32. Memory: the copy, the result, the
    tests and the mask's tables, counted before any is made (an expanded tensor stores fewer numbers)."""
    tensor = torch.is_tensor(scores)
    given = numbers(scores, "scores") if tensor else to_numpy(scores, "scores")   # (NumPy: a float64 copy, kept)
    dtype = torch.float64 if tensor and scores.dtype == torch.float64 else torch.float32
    shape = tuple(given.shape)
    if len(shape) < 2 or shape[-1] != shape[-2]:
        fail(f"scores should end in a square (T, T) table, but have shape {shape}")
    size, width = math.prod(shape), dtype.itemsize
    check_bytes((2 * width + MASK_TEST_BYTES + (0 if tensor else 8)) * size
                + (2 * shape[-1] ** 2 if mask is None else mask_bytes(shape)),
                f"apply_mask on scores of shape {shape}", "give fewer or smaller score tables")
    scores = given.to(dtype) if tensor else torch.as_tensor(given, dtype=dtype)
    check_finite(scores.detach(), "scores", minus_inf=True)   # (-inf: a score masked already)
    mask = causal_mask(scores.shape[-1]) if mask is None else \
        torch.from_numpy(check_mask(mask, scores.shape[-2:]))   # counted and shaped before its values are read
    return scores.masked_fill(mask, float("-inf"))


@on_the_cpu
def causal_attention(q, k, v):
    """Scaled dot-product attention with the causal mask, for every head at once: the course's
    own version of the piece a learner writes in chapter 04 (the one later chapters fall back on).

    q: (B, H, T_q, d_k), the queries of the last T_q positions; k, v: (B, H, T_k, d_k), T_k >= T_q.
    Without a KV cache T_q = T_k; with one, the cache holds the first T_k - T_q keys, so query i
    sits at position T_k - T_q + i and may see key j when j <= T_k - T_q + i.
    Returns (out, weights): out (B, H, T_q, d_k) = weights @ v, weights (B, H, T_q, T_k).
    """
    given = ((q, "q"), (k, "k"), (v, "v"))
    check_bytes(sum(copy_bytes(x) * entries(x, name) for x, name in given), "q, k and v as float32 tensors",
                "give shorter sequences or fewer of them")   # before any is copied (an expanded tensor stores fewer)
    q, k, v = (_tensor(x, name) for x, name in given)
    T_q, T_k, d_k = q.shape[-2], k.shape[-2], q.shape[-1]
    if k.shape[-1] != d_k or k.shape[:-2] != q.shape[:-2] or v.shape[:-1] != k.shape[:-1] or T_q > T_k:
        fail(f"expected q (B, H, T_q, d_k) and k, v (B, H, T_k, d_k) with T_q <= T_k, but got q "
             f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if 0 in q.shape or 0 in k.shape or 0 in v.shape:   # d_k = 0 would divide by √0
        fail(f"q, k and v should hold at least one number on each axis, but got q {tuple(q.shape)}, "
             f"k {tuple(k.shape)}, v {tuple(v.shape)}")
    # q, k and v, the output; the scores, the masked scores, the mask and the weights: four (B, H, T_q, T_k)
    # tables, and check_made's test of the weights (True/False)
    check_bytes(4 * (q.numel() + k.numel() + v.numel() + q.numel()) + (4 * 4 + 1) * q[..., 0].numel() * T_k,
                f"causal attention on {count(T_q)} queries and {count(T_k)} keys",
                "give shorter sequences or fewer of them")
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)           # (B, H, T_q, T_k)
    query_at = torch.arange(T_q)[:, None] + (T_k - T_q)         # each query's position
    key_at = torch.arange(T_k)[None, :]                         # each key's position
    scores = scores.masked_fill(key_at > query_at, float("-inf"))   # the future, before the softmax
    weights = torch.softmax(scores, dim=-1)
    inputs = dict(q=q, k=k, v=v)   # finite: scores past float32 (q = k = 1e30) would make NaN weights
    return check_made(weights @ v, "causal_attention", inputs), check_made(weights, "causal_attention", inputs)


@on_the_cpu
def copy_bytes(x):
    """Bytes a number ``_tensor`` makes of x: the float32 copy and its test of finiteness, and to_numpy's
    float64 array first when x is no tensor."""
    return 5 if torch.is_tensor(x) else 13


@on_the_cpu
def numbers(x, name):
    """A tensor given where numbers are expected, as to_numpy would take it: a dense tensor of real
    numbers, not of True/False (those are a mask's); returned as it is (its graph kept)."""
    check_tensor_size(x, name)
    if x.dtype == torch.bool:
        refuse_bools(name)
    return x


def _tensor(x, name):
    """x as a float32 tensor of at least two axes (T, d), or a one-sentence error."""
    x = torch.as_tensor(to_numpy(x, name), dtype=torch.float32) if not torch.is_tensor(x) else numbers(x, name).float()
    if x.dim() < 2:
        fail(f"{name} should have at least two axes (..., T, d_k), but has shape {tuple(x.shape)}")
    if not torch.isfinite(x).all():
        fail(f"{name} should hold finite numbers, but it holds {float(x[~torch.isfinite(x)][0])}")
    return x


@on_the_cpu
@measure
@torch.no_grad()
def heads_from_trace(model, world, prompts, layer=0):
    """One layer's queries, keys and values split into heads, with the weights and head outputs
    the model made from them, for prompts of one length (a batch of B).

    prompts: a list of prompts (strings or word lists), all of one length T. Returns a dict:
    q, k, v (B, H, T, d_k) from the trace's L<layer>.q/k/v, weights (B, H, T, T) and
    out (B, H, T, d_k) from L<layer>.weights and L<layer>.head_out.
    """
    check_model_and_world(model, world)
    if model.cfg.positions == "rotary":
        fail("heads_from_trace needs one of the course's models without rotary positions (the trace keeps "
             "q and k before any rotation), but got one with rotary positions")
    if isinstance(prompts, str) or not isinstance(prompts, (list, tuple)) or not prompts:
        fail(f"prompts should be a non-empty list of prompts (strings or lists of words), but got {shown(prompts)}")
    layer = check_positive_int(layer, "layer", minimum=0)
    if layer >= model.cfg.n_layers:
        fail(f"the model has layers 0 to {model.cfg.n_layers - 1}, but layer {layer} was asked for")
    ids = [world.tokenizer.encode(prompt_words(model, p, name="each prompt")) for p in prompts]   # all checked first
    traces = [model(one, trace=True) for one in ids]
    lengths = {trace["h0"].shape[0] for trace in traces}
    if len(lengths) != 1:
        fail(f"the prompts should all have one length (a batch), but have lengths {sorted(lengths)}")
    H, d_k = model.cfg.n_heads, model.cfg.d_model // model.cfg.n_heads
    split = lambda x: x.view(x.shape[0], H, d_k).transpose(0, 1)   # (T, d_model) -> (H, T, d_k)
    found = {name: torch.stack([split(trace[f"L{layer}.{name}"]) for trace in traces]) for name in "qkv"}
    found["weights"] = torch.stack([trace[f"L{layer}.weights"] for trace in traces])
    found["out"] = torch.stack([trace[f"L{layer}.head_out"] for trace in traces])
    return found


@on_the_cpu
def three_words():
    """The Book's "the cat sat": x (3, 4), W_q, W_k, W_v (4, 2), and every step after them.

    Returns a dict: x, W_q, W_k, W_v, q, k, v, scores (q kᵀ / √2), masked, weights
    (masked, then softmax), unmasked (softmax without the mask), out (weights @ v).
    """
    f32 = dict(dtype=torch.float32)   # float32 whatever torch's default dtype (torch.set_default_dtype)
    x = torch.tensor([[1., 0., 0., 1.],    # the
                      [0., 1., 1., 0.],    # cat
                      [0., 1., 0., 1.]], **f32)   # sat
    W_q = torch.tensor([[1., 0.], [0., 1.], [0., 0.], [0., 0.]], **f32)
    W_k = torch.tensor([[0., 0.], [0., 0.], [1., 0.], [0., 1.]], **f32)
    W_v = torch.tensor([[1., 0.], [0., 0.], [0., 1.], [0., 0.]], **f32)
    q, k, v = x @ W_q, x @ W_k, x @ W_v
    scores = q @ k.T / math.sqrt(k.shape[-1])
    masked = apply_mask(scores)
    weights = torch.softmax(masked, dim=-1)
    return dict(x=x, W_q=W_q, W_k=W_k, W_v=W_v, q=q, k=k, v=v, scores=scores, masked=masked,
                weights=weights, unmasked=torch.softmax(scores, dim=-1), out=weights @ v)


# mask_after_softmax's bytes an entry of scores (T, T), every table it makes: the scores as float64 (to_numpy's
# copy) and as float32, their test of finiteness, the causal mask (and the ones it is cut from), the softmax,
# zeroed, renormalised, the masked scores and before (float32 each).
AFTER_SOFTMAX_BYTES = 8 + 4 + 1 + 2 + 5 * 4


@on_the_cpu
def mask_after_softmax(scores):
    """The wrong order: softmax first, then zero the future. scores: (T, T).

    Returns a dict: zeroed (future weights set to 0 after the softmax), row_sums (T,),
    renormalised (zeroed rows divided by their sums), before (the right order: mask, then softmax).
    Memory: AFTER_SOFTMAX_BYTES an entry, counted from the shape before the scores are copied (T at most
    about 6,700).
    """
    scores, shape = shape_before_copy(scores, "scores", 2)   # an array's or a tensor's shape as it is; a list converted
    if len(shape) == 2:   # (another number of axes: as_array's sentence below)
        if shape[0] != shape[1] or not shape[0]:
            fail(f"scores should be a square (T, T) table, but have shape {tuple(shape)}")
        check_bytes(AFTER_SOFTMAX_BYTES * shape[0] ** 2, f"mask_after_softmax on scores of T={count(shape[0])}",
                    f"give T <= {int((MAX_BYTES / AFTER_SOFTMAX_BYTES) ** 0.5):,}")
    scores = as_array(scores, "scores", 2)
    T = scores.shape[0]
    scores = torch.as_tensor(scores, dtype=torch.float32)
    if not torch.isfinite(scores).all():
        fail("scores should hold finite numbers (the softmax of a NaN row is NaN), but they hold NaN or infinity")
    hidden = causal_mask(T)
    zeroed = torch.softmax(scores, dim=-1).masked_fill(hidden, 0.0)
    row_sums = zeroed.sum(dim=-1)
    return dict(zeroed=zeroed, row_sums=row_sums, renormalised=zeroed / row_sums[:, None],
                before=torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1))   # apply_mask's result


@on_the_cpu
@torch.no_grad()
def book_attention(d_model, n_heads):
    """The Book's attention layer as the course's ``model.Attention``, drawn as the Book draws it.

    The Book builds ``nn.Linear(d, 3d)`` (queries, keys, values fused) and then ``nn.Linear(d, d)``
    (the output projection) with torch's default initialisation, from torch's global generator;
    so ``torch.manual_seed(123)`` before this call gives the Book's numbers. nn.Linear computes
    x Wᵀ + b, ours x @ W + b, so each weight goes in transposed: W_Q = qkv.weight[:d].T, ...,
    W_O = proj.weight.T.
    """
    d_model, n_heads = check_positive_int(d_model, "d_model"), check_positive_int(n_heads, "n_heads")
    check_heads_split(d_model, n_heads, 0)
    check_bytes(4 * 8 * d_model * d_model, f"the Book's attention layer for d_model={count(d_model)}",
                f"ask for d_model <= {int((MAX_BYTES / 32) ** 0.5):,}")
    qkv, proj = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)   # the Book's order
    attn = Attention(d_model, n_heads)
    W_Q, W_K, W_V = qkv.weight.split(d_model)       # each (d_out, d_in), nn.Linear's layout
    b_Q, b_K, b_V = qkv.bias.split(d_model)
    for name, value in dict(W_Q=W_Q.T, W_K=W_K.T, W_V=W_V.T, W_O=proj.weight.T,
                            b_Q=b_Q, b_K=b_K, b_V=b_V, b_O=proj.bias).items():
        getattr(attn, name).copy_(value)
    return attn.eval()


@on_the_cpu
@torch.no_grad()
def leak(seed=123, d_model=4, n_heads=1, T=3):
    """The Book's experiment: change only the last of T random token vectors and measure how
    far each position's output moves (sum of absolute differences), with and without the mask.

    Draw order as the Book's: the layer (``book_attention``), then x (1, T, d_model), then
    the new last row. Returns a dict: with_mask (T,), without_mask (T,). Torch's global random
    state is put back afterwards.
    """
    seed, T = check_seed(seed), check_positive_int(T, "T")
    d_model, n_heads = check_positive_int(d_model, "d_model"), check_positive_int(n_heads, "n_heads")
    if T > MAX_TOKENS:   # (the layer's own limit: refused before it is built)
        fail(f"T should be at most {MAX_TOKENS:,} positions (what an attention layer runs at once), but got {count(T)}")
    check_bytes(4 * 8 * d_model * d_model + 4 * 4 * n_heads * T * T + 4 * 8 * T * d_model,
                f"leak with d_model={count(d_model)} and T={count(T)}", "ask for a smaller d_model or T")
    with torch.random.fork_rng(devices=[]):   # the Book seeds torch's global generator: put it back after
        torch.manual_seed(seed)
        attn = book_attention(d_model, n_heads)
        x = torch.randn(1, T, d_model)
        x2 = x.clone()
        x2[0, -1] = torch.randn(d_model)
        return {name: (attn(x, causal=causal) - attn(x2, causal=causal)).abs().sum(-1)[0]
                for name, causal in (("with_mask", True), ("without_mask", False))}


@on_the_cpu
@measure
@torch.no_grad()
def model_leak(model, world, prompt, new_last):
    """Change only the last word of ``prompt`` to ``new_last`` in a trained model and measure how
    far each position's logits move (sum of absolute differences), mask on and off.

    Returns a dict: with_mask (T,), without_mask (T,).
    """
    check_model_and_world(model, world)
    ids = world.tokenizer.encode(prompt_words(model, prompt))
    if type(new_last) is not str:
        fail(f"new_last should be one word of the {world.name} world (a string), but got {shown(new_last)}")
    ids2 = ids.clone()
    ids2[-1] = world.tokenizer.encode([new_last])[0]
    return {name: (model(ids, causal=causal) - model(ids2, causal=causal)).abs().sum(-1)
            for name, causal in (("with_mask", True), ("without_mask", False))}


@on_the_cpu
@measure
@torch.no_grad()
def prefix_scores(model, world, sentences=None, causal=True):
    """Score every next-word decision the way generation meets it: the model sees only the
    prefix, and its last position must predict the next word.

    Prefixes of one length run as one batch (each row sees only itself, mask or no mask).
    Returns a dict: loss (mean cross-entropy over all decisions), correct and total (top-1
    equal to the sentence's next word, on every slot except the adjective after is/was,
    as in worlds.slot_accuracy), decisions.
    """
    check_model_and_world(model, world)
    causal = check_switch(causal, "causal")
    sentences = world.sentences if sentences is None else sentences
    found = decisions(sentences)   # their number, lengths and prefixes counted before any is copied
    world.batch(sentences)   # refuses, in one sentence, what is no list of sentences of two or more known words
    by_length = defaultdict(list)
    for prefix, nxt, copula in found:
        by_length[len(prefix)].append((prefix, nxt, copula))
    losses, correct, total = [], 0, 0
    for same in by_length.values():
        ids = torch.stack([world.tokenizer.encode(prefix) for prefix, _, _ in same])
        logits = model(ids, causal=causal)[:, -1]                  # (N, V): the last position
        targets = torch.tensor([world.tokenizer.ids[nxt] for _, nxt, _ in same])
        losses.append(F.cross_entropy(logits, targets, reduction="none"))
        right = logits.argmax(-1) == targets
        outside = torch.tensor([not copula for _, _, copula in same])
        total += int(outside.sum())
        correct += int((right & outside).sum())
    return dict(loss=float(torch.cat(losses).mean()), correct=correct, total=total, decisions=len(found))


@on_the_cpu
@measure
@torch.no_grad()
def teacher_forced_loss(model, world, sentences=None, causal=True):
    """The training objective, measured: mean cross-entropy with the whole sentence as input."""
    check_model_and_world(model, world)
    causal = check_switch(causal, "causal")
    sentences = world.train if sentences is None else sentences
    inputs, targets = world.batch(sentences)
    logits = model(inputs, causal=causal)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100).item()


MAX_SENTENCES = 10_000   # sentences one sample_sentences call may draw (chapter 04 draws 50)
# The most work one sample_sentences call may do, counted before it starts as if no sentence stopped early: per
# step, the multiply-adds of one pass over every sentence's prefix, sampling's PASS_WORK and LAYER_WORK a layer
# for the pass's fixed costs, and ROW_WORK for drawing each sentence's next word (its Python calls: about 0.1 ms).
# About a minute here (the cat model: 10,000 sentences of 12 words count about 2.3·10^11 and take 6 to 20 s).
MAX_SAMPLE_WORK = 6 * 10**11
ROW_WORK = 2 * 10**6


def sampling_work(cfg, n, steps):
    """The work ``sample_sentences`` does drawing ``n`` sentences for ``steps`` steps from a model of ``cfg``
    (step t runs the t tokens so far of every sentence), as MAX_SAMPLE_WORK counts it."""
    return sum(n * forward_macs(cfg, t) + PASS_WORK + LAYER_WORK * cfg.n_layers + ROW_WORK * n
               for t in range(1, steps + 1))


@on_the_cpu
@measure
def sample_sentences(model, world, n=20, causal=True, temperature=1.0, seed=0, max_len=12):
    """Draw ``n`` sentences from <BOS> (seeds seed .. seed+n-1), re-running the whole prefix at
    every step with the mask on or off (``causal``). Returns a list of word lists. A sentence stops at
    <EOS>; in a world without <EOS> (the dragon's) every sentence has max_len words.

    The same sentences as ``generate(model, <BOS>, max_len - 1, temperature, seed=seed + i,
    cache=False, stop_id=<EOS>, causal=causal)`` for each i: every sentence draws from its own
    generator, but the sentences still going run as one batch (they all have the same length,
    one more word each step), one forward pass per step instead of one per sentence.
    Limits: n <= MAX_SENTENCES (10,000); seed .. seed + n - 1 within 0 .. 2**32 - 1 (MAX_SEED); the work
    (``sampling_work``, as if no sentence stopped early) at most MAX_SAMPLE_WORK, about a minute.
    """
    check_model_and_world(model, world)
    n, causal = check_positive_int(n, "n"), check_switch(causal, "causal")
    max_len = check_positive_int(max_len, "max_len", minimum=2)   # before max_len - 1 is computed
    if max_len > window(model) + 1:   # <BOS> and max_len - 1 drawn words, the last never fed back
        fail(f"max_len should be at most {window(model) + 1:,} words for this model (it reads at most "
             f"{window(model):,} tokens at once), but got {count(max_len)}")
    if n > MAX_SENTENCES:
        fail(f"n should be at most {MAX_SENTENCES:,} sentences (this course's limit), but got {count(n)}")
    seed = check_seeds(seed, n, "sentence")   # after n's own bound: seed .. seed + n - 1
    if "<BOS>" not in world.tokenizer.ids:
        fail(f"the world should have a <BOS> word to start its sentences from, but the {world.name} world's words "
             f"are {shown(' '.join(world.tokenizer.vocab))}")
    start = check_prompt(model, world.tokenizer.encode(["<BOS>"]), "sample_sentences")
    check_sampling(temperature, vocab_size=model.cfg.vocab_size)
    temperature = float(temperature)   # an int such as 10**30 is a number torch cannot divide by
    steps = check_length(model, start, max_len - 1, cache=False)
    stop = world.tokenizer.ids.get("<EOS>")   # None: a world without an end word (the dragon's) runs to max_len
    check_bytes(4 * n * (steps + 1) * (model.cfg.vocab_size + 16 * model.cfg.d_model),
                f"sample_sentences with n={n:,}", "ask for fewer sentences")
    check_work(sampling_work(model.cfg, n, steps), MAX_SAMPLE_WORK,
               f"sample_sentences of {n:,} sentences of up to {max_len:,} words", "ask for fewer or shorter sentences")
    generators = [torch.Generator().manual_seed(seed + i) for i in range(n)]
    rows, going = [start] * n, list(range(n))
    for _ in range(steps):
        logits = model(torch.stack([rows[i] for i in going]), causal=causal)[:, -1]   # (going, V)
        for row, i in zip(logits, going):
            rows[i] = torch.cat([rows[i], torch.multinomial(next_distribution(row.float(), temperature), 1,
                                                            generator=generators[i])])
        going = [i for i in going if int(rows[i][-1]) != stop]
        if not going:
            break
    return [world.tokenizer.decode(ids) for ids in rows]


def share_valid(sentences, world):
    """The share of ``sentences`` (word lists) that are sentence types of ``world``."""
    sentences = check_sentences(sentences)
    if not isinstance(world, World):
        fail(f"world should be a helpers.worlds.World such as worlds.cat_world(), but got {shown(world)}")
    return sum(s in world.sentences for s in sentences) / len(sentences)


NO_MASK_SEEDS, NO_MASK_STEPS = (0, 1, 2, 3, 4), 300   # the five runs shipped in data/no_mask/


MAX_STEPS = 5_000   # train_without_mask's steps (the shipped runs take 300; about 6 ms a step here: half a minute)
MAX_RUN_STEPS = 8_000   # no_mask_runs' work at most, in training steps: about a minute (the default: 5 x 300 steps + measuring)
SEED_WORK = 50   # building and measuring one model (prefix_scores twice), in training steps (0.05 s on a free core,
                 # more on a loaded one: counted with room to spare)
SAMPLE_WORK = 0.1   # sampling one sentence, in training steps (10,000 sentences: about 6 s)


def no_mask_work(n_seeds, steps, n_samples):
    """What ``no_mask_runs`` does, counted in training steps (about 6 ms each on one core): per seed,
    ``steps`` steps, SEED_WORK to build and measure the model and SAMPLE_WORK per sampled sentence."""
    return n_seeds * (steps + SEED_WORK + SAMPLE_WORK * n_samples)


@on_the_cpu
@course_modes()   # inside torch.inference_mode() too: its own model and data, made outside it, take gradients
def train_without_mask(world, seed=0, steps=CAT_TRAINING["steps"], stop_after=None):
    """The cat model trained by the shipped model's recipe (Adam, cosine decay over ``steps``,
    full batch) from ``seed``, but with the mask off on every step (only the first
    ``stop_after`` steps of that schedule, if given). Returns (model, losses). steps <= MAX_STEPS (5,000). The
    global random generators are left as they were (the training seeds its own)."""
    seed, steps = check_seed(seed), check_steps(steps, MAX_STEPS)
    model = Transformer(CAT_CONFIG, init="unit")
    settings = {**CAT_TRAINING, "seed": seed, "steps": steps}
    with torch.random.fork_rng(devices=[]), torch.enable_grad():   # a training loop, also inside torch.no_grad();
        losses = train(model, world.batch(world.train), progress=False, causal=False,   # its seeding leaves
                       stop_after=stop_after, **settings)                                # the learner's draws alone
    return model.eval(), losses


@on_the_cpu
def measure_without_mask(model, losses, seed, world, n_samples=50):
    """One unmasked run measured: a dict of seed, model, losses, final_loss, without
    (``prefix_scores`` run without the mask), with_mask (run with it) and valid (how many of
    ``n_samples`` samples at temperature 1 are sentences of the world)."""
    check_model_and_world(model, world)
    if isinstance(losses, (str, bytes)) or not hasattr(losses, "__len__") or not len(losses):
        fail(f"losses should be the training loss of every step (a non-empty list), but got {str(losses)[:60]}")
    n_samples = check_positive_int(n_samples, "n_samples")
    samples = sample_sentences(model, world, n=n_samples, causal=False)
    return dict(seed=seed, model=model, losses=[float(x) for x in losses], final_loss=float(losses[-1]),
                without=prefix_scores(model, world, causal=False),
                with_mask=prefix_scores(model, world, causal=True),
                valid=sum(list(s) in world.sentences for s in samples))


@on_the_cpu
def no_mask_runs(world, seeds=NO_MASK_SEEDS, steps=NO_MASK_STEPS, n_samples=50):
    """Train one model per seed without the mask (``train_without_mask``) and measure it
    (``measure_without_mask``): a list of dicts, one per seed.

    A run's numbers depend on float rounding (other CPUs, other runs), so claims are made
    about all the seeds together. seeds: a list of distinct seeds; steps <= MAX_STEPS; n_samples <=
    MAX_SENTENCES; the whole work (``no_mask_work``: every seed's training, building, measuring and
    sampling) at most MAX_RUN_STEPS (8,000) training steps' worth, all checked before the first run.
    """
    if not isinstance(world, World):
        fail(f"world should be a helpers.worlds.World such as worlds.cat_world(), but got {shown(world)}")
    if not isinstance(seeds, (list, tuple, range)) or not length(seeds):
        fail(f"seeds should be a non-empty list of seeds (whole numbers >= 0, such as [0, 1, 2]), but got {shown(seeds)}")
    if length(seeds) > MAX_RUN_STEPS:   # (each seed trains at least one step)
        fail(f"seeds should hold at most {MAX_RUN_STEPS:,} seeds, but holds {count(length(seeds))}")
    seeds = list(seeds) if isinstance(seeds, range) else words_of(seeds)   # (a subclass's __len__ or __iter__ may lie)
    seeds = [check_seed(seed, f"seeds[{i}]") for i, seed in enumerate(seeds)]
    steps, n_samples = check_steps(steps, MAX_STEPS), check_positive_int(n_samples, "n_samples")
    if n_samples > MAX_SENTENCES:   # (sample_sentences would refuse it only after the first run)
        fail(f"n_samples should be at most {MAX_SENTENCES:,} sentences (this course's limit), but got {count(n_samples)}")
    check_no_mask_work(len(seeds), steps, n_samples)
    return [measure_without_mask(*train_without_mask(world, seed, steps), seed, world, n_samples)
            for seed in seeds]


def check_no_mask_work(n_seeds, steps, n_samples):
    """Refuse, in one sentence saying how to ask for less, a ``no_mask_runs`` whose whole work
    (``no_mask_work``: training, building, measuring and sampling, every seed) passes MAX_RUN_STEPS."""
    work = no_mask_work(n_seeds, steps, n_samples)
    if work > MAX_RUN_STEPS:
        most = int(MAX_RUN_STEPS // no_mask_work(1, steps, n_samples))
        few = f"at most {most:,} seed{'s' * (most != 1)} with these steps and n_samples, or " if most else ""
        fail(f"the work of no_mask_runs should be at most {MAX_RUN_STEPS:,} training steps' worth (this course's "
             f"limit: about a minute), but {count(n_seeds)} seeds x ({count(steps)} step{'s' * (steps != 1)} + "
             f"{SEED_WORK} to build and measure each model + {SAMPLE_WORK} x {count(n_samples)} sentence"
             f"{'s' * (n_samples != 1)} sampled) are about {work:,.0f}: ask for {few}fewer steps or a smaller n_samples")


def no_mask_stem(seed, folder=None):
    """Where the unmasked model of ``seed`` is shipped: data/no_mask/seed<seed> (.json, .safetensors),
    or ``folder``/seed<seed>."""
    from ..weights import data_dir
    seed = check_seed(seed)
    if folder is not None and not isinstance(folder, (str, os.PathLike)):
        fail(f"folder should be a path (a str), but got {shown(folder)}")
    return (data_dir() / "no_mask" if folder is None else Path(folder)) / f"seed{seed}"


def shipped_no_mask_runs(world, n_samples=50):
    """The runs of ``no_mask_runs`` with their default seeds and steps, read from data/no_mask/
    (trained there by build.py) instead of trained again, and measured here."""
    from ..weights import card, load
    runs = []
    for seed in NO_MASK_SEEDS:
        model = load(no_mask_stem(seed), expect=CAT_CONFIG)   # refuses a missing or damaged file in one sentence
        shipped = card(no_mask_stem(seed))
        recipe, losses = shipped.get("recipe"), shipped.get("losses", [])
        if recipe != {**CAT_TRAINING, "seed": seed, "steps": NO_MASK_STEPS, "causal": False} or len(losses) != NO_MASK_STEPS:
            fail(f"expected data/no_mask/seed{seed} to be trained by the cat recipe without the mask for "
                 f"{NO_MASK_STEPS} steps from seed {seed}, with a loss per step, but its card says {recipe} "
                 f"with {len(losses)} losses")
        runs.append(measure_without_mask(model, losses, seed, world, n_samples))
    return runs


def count_within(values, low, high):
    """How many of ``values`` lie in [low, high] (a claim about every run is a count of runs)."""
    values = as_array(values, "values", 1)
    bounds = []
    for bound, name in ((low, "low"), (high, "high")):   # math.inf is a bound (no upper end), NaN none
        bounds.append(real_number(bound, name, "a number (math.inf for no end)"))   # (its __float__ may raise)
        if math.isnan(bounds[-1]):
            fail(f"{name} should be a number (math.inf for no end), but got {shown(bound)}")
    if bounds[0] > bounds[1]:
        fail(f"low should be at most high, but got low {shown(low)} and high {shown(high)}")
    if np.isnan(values).any():   # a diverged run's NaN loss lies in no range: it would go uncounted
        fail(f"values should be numbers, not NaN, but value {int(np.flatnonzero(np.isnan(values))[0])} is NaN")
    return int(((bounds[0] <= values) & (values <= bounds[1])).sum())


def prompt_words(model, prompt, extra=0, name="the prompt"):
    """``prompt`` (a string, or a list or tuple of words) as a list of words, refused in one sentence
    when it is empty or longer than the model reads (model.longest_prompt) less ``extra``. name: what the
    sentence calls it. A list's words are read by the built-in list's own iterator (a subclass's
    ``__len__`` or ``__iter__`` may lie)."""
    if not isinstance(prompt, (str, list, tuple)):
        fail(f"{name} should be a string or a list of words, such as '<BOS> the cat', but got "
             f"{type(prompt).__name__} {shown(prompt)}")
    words = plain(prompt).split() if isinstance(prompt, str) else words_of(prompt)   # (plain strs: a subclass's may raise)
    if not words:
        fail(f"{name} should hold at least one word (such as '<BOS> the cat'), but it is empty")
    check_prompt_length(model.cfg, len(words), name, "words", extra)
    return words


@on_the_cpu
@measure
@torch.no_grad()
def attention_maps(model, world, prompt, causal=True):
    """Every head's attention weights for ``prompt`` (a string or list of words).

    Returns a dict: words (T,), weights (n_layers, n_heads, T, T), next (the most likely next
    word), p_next (its probability) and causal.
    """
    check_model_and_world(model, world)
    causal = check_switch(causal, "causal")
    words = prompt_words(model, prompt)
    trace = model(world.tokenizer.encode(words), trace=True, causal=causal)
    weights = torch.stack([trace[f"L{layer}.weights"] for layer in range(model.cfg.n_layers)])
    probs = trace["probs"][-1]
    return dict(words=words, weights=weights, next=world.tokenizer.vocab[int(probs.argmax())],
                p_next=float(probs.max()), causal=causal)


@on_the_cpu
def lecture_mask(T):
    """The Lecture's spelling ``torch.triu(ones, diagonal=1) * -inf`` next to a working one.

    Returns a dict: lecture (T, T), which holds NaN on and below the diagonal because
    0 * -inf is NaN, and additive (T, T), 0 on and below the diagonal and -inf above it
    (``torch.full(-inf).triu(1)``), the mask that is added to the scores.
    """
    T = check_square(T, 8, "the Lecture's mask and an additive one")
    ones = torch.ones(T, T)
    return dict(lecture=torch.triu(ones, diagonal=1) * float("-inf"),
                additive=torch.full((T, T), float("-inf")).triu(diagonal=1))


@on_the_cpu
@measure
@torch.no_grad()
def three_regimes(model, world, prompt, n_prompt):
    """The Lecture's three regimes on one sentence: training, prefill, decoding.

    prompt: the whole sentence (string or word list); its first ``n_prompt`` words are the
    prompt. Training runs every position at once with the mask; prefill runs the prompt at
    once into a KV cache (with the mask, and once without it); decoding then feeds the
    remaining words one query at a time against the cache, with the mask and without it.
    Returns a dict of largest |logit differences|: prefill (masked prefill vs the training
    rows), prefill_no_mask (T_prompt,) per position, decode (masked decoding vs the
    training rows), and decode_same (True when decoding with and without the mask gives
    bit-identical logits at every step).
    """
    from ..model import KVCache

    check_model_and_world(model, world)
    ids = world.tokenizer.encode(prompt_words(model, prompt))
    n_prompt = check_positive_int(n_prompt, "n_prompt")
    if n_prompt >= len(ids):
        fail(f"n_prompt should leave at least one word to decode, but is {n_prompt} for {len(ids)} words")
    training = model(ids, causal=True)
    caches = {causal: KVCache(model.cfg.n_layers) for causal in (True, False)}
    prefill = {causal: model(ids[:n_prompt], cache=caches[causal], causal=True) for causal in (True, False)}
    unmasked = model(ids[:n_prompt], cache=KVCache(model.cfg.n_layers), causal=False)
    decoded, same = [], True
    for t in range(n_prompt, len(ids)):
        on, off = (model(ids[t:t + 1], cache=caches[causal], causal=causal) for causal in (True, False))
        same = same and torch.equal(on, off)
        decoded.append(on)
    return dict(prefill=float((prefill[True] - training[:n_prompt]).abs().max()),
                prefill_no_mask=(unmasked - training[:n_prompt]).abs().amax(-1),
                decode=float((torch.cat(decoded) - training[n_prompt:]).abs().max()),
                decode_same=same)


@on_the_cpu
@measure
@torch.no_grad()
def earlier_states(model, world, prompt, next_word):
    """How far appending ``next_word`` to ``prompt`` moves the keys and values of the positions
    before it, in every layer, with the mask and without it.

    Returns a dict: with_mask and without_mask, each a list over layers of the largest |change|
    of L<layer>.k and L<layer>.v at the prompt's positions. With the mask they stay as they were
    (a cache may keep them); without it they move from layer 1 on.
    """
    check_model_and_world(model, world)
    words = prompt_words(model, prompt, extra=1)   # room for next_word
    ids = world.tokenizer.encode(words)
    longer = world.tokenizer.encode(words + [next_word])
    T, found = len(words), {}
    for name, causal in (("with_mask", True), ("without_mask", False)):
        short, long = model(ids, trace=True, causal=causal), model(longer, trace=True, causal=causal)
        found[name] = [max(float((long[f"L{layer}.{x}"][:T] - short[f"L{layer}.{x}"]).abs().max()) for x in "kv")
                       for layer in range(model.cfg.n_layers)]
    return found


@on_the_cpu
@measure
@torch.no_grad()
def attention_work(model, world, prompt, n_new):
    """The attention work of generating ``n_new`` tokens after ``prompt`` (greedy, no stop), two ways:
    with the mask and a KV cache (each step runs the newest token's query only), and without the
    mask (no cache can be kept, so each step runs every position again).

    Counted in layer 0 by a hook on its attention: query rows (T_q per call) and scores
    (T_q x T_k per call, T_k counting the cached keys). Returns a dict: cached and recomputed,
    each a dict of rows and scores.
    """
    check_model_and_world(model, world)
    n_new = check_positive_int(n_new, "n_new")
    ids = world.tokenizer.encode(prompt_words(model, prompt))
    longest = longest_prompt(model.cfg)
    if len(ids) + n_new - 1 > longest:   # the last new token is never fed back
        fail(f"n_new should be at most {longest - len(ids) + 1:,} after a prompt of {len(ids)} tokens (the model "
             f"reads at most {longest:,} positions), but got {n_new:,}")
    counts = {}

    def count(module, args, kwargs):
        T_q = args[0].shape[1]
        cache = kwargs.get("cache")
        T_k = T_q + (len(cache) if cache is not None else 0)
        counts["rows"] += T_q
        counts["scores"] += T_q * T_k

    found = {}
    hook = model.blocks[0].attn.register_forward_pre_hook(count, with_kwargs=True)
    try:
        for name, settings in (("cached", dict(use_cache=True)), ("recomputed", dict(use_cache=False, causal=False))):
            counts.update(rows=0, scores=0)
            generate(model, ids, n_new, temperature=0, **settings)
            found[name] = dict(counts)
    finally:
        hook.remove()
    return found


@on_the_cpu
@measure
@torch.no_grad()
def future_reading(model, world, sentences=None, causal=False):
    """Where a model finds its answers on teacher-forced sentences, run as a model trained
    without the mask was trained (one padded batch, no mask; ``causal=True``: with it).

    Returns a dict: next_word (share of scored positions whose top-1 word is the sentence's
    next word), own_word (share whose top-1 is the word at the position itself: the
    identity), future (n_layers, n_heads) the mean weight each head puts on keys after the
    query (j > i), and next_key (n_layers, n_heads) the mean weight on key i + 1 alone, both
    over the positions whose next input is a word.
    """
    check_model_and_world(model, world)
    causal = check_switch(causal, "causal")
    sentences = world.train if sentences is None else sentences
    inputs, targets = world.batch(sentences)
    # (B, T-1): a word at i + 1, i.e. one to predict at i (read from the targets: a world without <PAD>, the
    # dragon's, pads with another word's id)
    rows = (targets[:, :-1] != -100).float()
    if not rows.sum() > 0:   # no query has a key after it: every mean below would be 0/0
        fail(f"sentences should have a sentence of three or more words (a query with a word after it to weigh), "
             f"but the longest has {inputs.shape[1] + 1}")
    weights = {}
    h = model.embed(inputs)
    for layer, block in enumerate(model.blocks):
        h = block(h, causal=causal, keep=lambda name, x, layer=layer:
                  weights.__setitem__(layer, x) if name == "weights" else None)
    top = model.unembed(h).argmax(-1)
    scored = targets != -100
    W = torch.stack([weights[layer][:, :, :-1] for layer in range(len(model.blocks))])  # (L, B, H, T-1, T)
    per_row = {"future": W.triu(diagonal=1).sum(-1), "next_key": W.diagonal(offset=1, dim1=-2, dim2=-1)}
    n = int(scored.sum())
    return dict(next_word=int((top == targets)[scored].sum()) / n, own_word=int((top == inputs)[scored].sum()) / n,
                **{name: (x * rows[None, :, None]).sum(dim=(1, 3)) / rows.sum() for name, x in per_row.items()})


FLOAT32_MAX = float(np.finfo(np.float32).max)   # the largest number a float32 weight holds
FLOAT32_TINY = float(np.finfo(np.float32).tiny)   # the smallest normal float32: below it a weight loses digits, then is 0
# dropout_demo's bytes a number at its peak: the row and what training mode returns (float32 each), the
# random mask nn.Dropout draws on the way (float32) and its True/False copy (1 byte). (count_nonzero counts
# the zeros without a table of its own: ``(train == 0).sum()`` would make a bool and an int64 table, 9 more.)
DROPOUT_BYTES = 13


@on_the_cpu
def dropout_demo(p=0.5, n=8, value=0.125, seed=123):
    """The Book's dropout: ``nn.Dropout(p)`` on n equal weights, right after torch.manual_seed(seed).

    Returns a dict: row (n,), train (the module in training mode: each weight zeroed with
    probability p, the rest scaled by 1/(1-p)), eval (after ``.eval()``: the row unchanged),
    zeroed (how many weights training mode set to 0). Torch's global random state is put back afterwards.
    """
    p = check_number(p, "a dropout rate p", low=0)
    if not p < 1:
        fail(f"a dropout rate p should be in [0, 1), but got {p:g}")
    n, value, seed = check_positive_int(n, "n"), check_number(value, "value"), check_seed(seed)
    if abs(value) / (1 - p) > FLOAT32_MAX:   # training mode scales the kept weights by 1/(1-p)
        fail(f"value / (1 - p) should fit a float32 (at most {FLOAT32_MAX:.4g} in size), but value={value:g} "
             f"and p={p:g} give {abs(value) / (1 - p):.4g}")
    if value != 0 and abs(value) < FLOAT32_TINY:   # a float32 row would round it to 0 or a few bits
        fail(f"value should be 0 or at least {FLOAT32_TINY:.4g} in size (a float32 keeps nothing smaller whole), "
             f"but got {value:g}")
    check_bytes(DROPOUT_BYTES * n, f"dropout_demo with n={count(n)}", f"ask for n <= {MAX_BYTES // DROPOUT_BYTES:,}")
    drop, row = nn.Dropout(p), torch.full((n,), float(value))
    with torch.random.fork_rng(devices=[]):   # the Book seeds torch's global generator: put it back after
        torch.manual_seed(seed)
        train_out = drop(row)
    drop.eval()   # (in eval mode the module hands back row itself: no copy)
    return dict(row=row, train=train_out, eval=drop(row), zeroed=n - int(torch.count_nonzero(train_out)))


class OneHead(nn.Module):
    """The Book's one-head module: three ``nn.Linear(d_in, d_head)`` and a causal mask.

    The mask is built once for ``context_length`` tokens and kept with ``register_buffer``
    (it moves with the module but is not a parameter; ``persistent=False`` keeps it out of
    the state_dict); a call on T tokens uses its corner ``mask[:T, :T]``, as the Book's full
    module does. x (B, T, d_in) -> (B, T, d_head).
    """

    def __init__(self, d_in, d_head, context_length=8, bias=False):
        super().__init__()
        d_in, d_head = check_positive_int(d_in, "d_in"), check_positive_int(d_head, "d_head")
        bias = check_switch(bias, "bias")
        check_bytes(3 * 4 * (d_in + 1) * d_head, f"OneHead({count(d_in)}, {count(d_head)})",
                    "give a smaller d_in or d_head (three d_in x d_head float32 matrices)")
        mask = causal_mask(check_square(context_length, 1, "the module's causal mask", "context_length"))
        self.W_q, self.W_k, self.W_v = (nn.Linear(d_in, d_head, bias=bias) for _ in range(3))
        self.register_buffer("mask", mask, persistent=False)

    @on_the_cpu
    def forward(self, x):
        if not torch.is_tensor(x):
            fail(f"x should be a float tensor of shape (B, T, {self.W_q.in_features}), but got "
                 f"{type(x).__name__} {shown(x)}")
        numbers(x, "x")
        if x.dim() != 3 or x.shape[-1] != self.W_q.in_features or x.dtype != self.W_q.weight.dtype:
            fail(f"x should have shape (B, T, {self.W_q.in_features}) and dtype {self.W_q.weight.dtype}, "
                 f"but it has shape {tuple(x.shape)} and dtype {x.dtype}")
        B, T = x.shape[:2]
        if T > self.mask.shape[0]:
            fail(f"the module's mask covers {self.mask.shape[0]} tokens, but x has T={T}")
        # q, k, v and the output (B, T, d_head); the scores, scaled, masked and their softmax (B, T, T) with
        # apply_mask's tests and the mask's tables: float32 each (an expanded x stores fewer numbers)
        check_bytes(4 * 4 * B * T * self.W_q.out_features + (4 * 4 + MASK_TEST_BYTES) * B * T * T
                    + mask_bytes((T, T)), f"OneHead on x of shape {tuple(x.shape)}",
                    "give fewer or shorter sequences")
        q, k, v = self.W_q(x), self.W_k(x), self.W_v(x)
        scores = apply_mask(q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1]), self.mask[:T, :T])
        return torch.softmax(scores, dim=-1) @ v


@course_modes(grad=False)   # the CPU, no autocast; the module in the cell's default dtype, as OneHead(4, 2) makes it
@torch.no_grad()
def book_one_head(context_length=8):
    """``OneHead(4, 2)`` holding the Book's hand-picked W_q, W_k, W_v from ``three_words``.

    nn.Linear stores its weight as (out × in) and computes x Wᵀ, so each (4, 2) matrix goes
    in transposed: ``W_q.weight.copy_(W_q.T)``. Returns (module, three_words() dict). Torch's global
    random state is left as it was.
    """
    ex = three_words()
    with torch.random.fork_rng(devices=[]):   # nn.Linear draws weights (replaced below) from torch's global
        module = OneHead(4, 2, context_length)   # generator: the learner's draws go on as before
    for name in ("W_q", "W_k", "W_v"):
        getattr(module, name).weight.copy_(ex[name].T)
    return module, ex
