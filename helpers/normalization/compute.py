"""LayerNorm by hand, the size of the residual stream, and norm placement across depth.

* ``layer_norm_steps`` is LayerNorm on one vector with every step kept (mean, std, z);
  ``layer_norm_by_hand`` the same rounded at every step, as a hand computation is;
  ``rounding_spread`` how far rounded inputs can move the output; ``gamma_for_range`` the
  one γ that gives a normalised vector a wanted range; ``rms_norm`` LLaMA's RMSNorm.
* ``embedding_survival`` measures how much of h0 each point of the residual stream keeps.
* ``residual_norms`` measures the norm of each position's residual vector after
  every write-back of a trained model (h0, L0.h_mid, L0.h, L1.h_mid, ...).
* ``stack_config``, ``layer_gradients`` and ``train_recording`` build and train a deeper
  stack of the course's Transformer with the norm before the sub-blocks ("pre"), after
  the residual addition ("post") or nowhere ("none"), recording the loss and the
  gradient norm of the first layer at every step.
* ``train_stack`` / ``run_stack`` train one such stack (or the start of its run);
  ``prediction_spread`` says whether a trained model's output still depends on its input.
* ``build_curves`` runs the whole grid (depths x learning rates x placements) that
  ``data/normalization/build.py`` ships as JSON; ``load_curves`` reads it back;
  ``outcomes`` sorts every run of a grid into trained / frequencies / diverged / other.
* ``stack_view`` is one depth and learning rate of the grid, as the explorer shows it;
  ``chaotic`` names the runs whose numbers a rebuild on another CPU does not reproduce,
  ``final_text`` prints a final loss only where it is reproducible.
* ``LayerNorm`` and ``Block`` are the course's own readable versions of the two pieces the
  learner writes (what ``learner.use("LayerNorm" / "Block", course=...)`` falls back to).
* ``PlainBlock``, ``plain_stack`` and ``run_plain`` are the pre-LN stack with its residual
  additions taken out; ``build_plain_curves`` trains it over the same grid (shipped as
  ``data/normalization/no_residual.json``), ``load_plain_curves`` reads it back.
* ``plot_steps``, ``plot_stream``, ``plot_init``, ``plot_grid`` and ``plot_residual`` draw the
  chapter's figures.
"""
import math
import os
from collections import Counter, defaultdict
from functools import lru_cache

import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import reference as ref
from .. import worlds
from ..files import named, read_json
from ..errors import MAX_BYTES, as_array, check_bytes, check_choice, check_finite, check_ids_given, check_number, \
    check_positive_int, check_seed, check_tensor, check_text, count, fail, items_of, length, real_number, shown
from ..heads.compute import MultiHeadAttention, as_numpy
from ..mlp.compute import MLP
from ..model import Block as ModelBlock
from ..plots import check_ax
from ..model import Config, Transformer, check_depth, check_model, check_squares, check_stream, eval_mode, measuring
from ..training import check_batch as check_training_batch, check_stop_after, train
from ..weights import data_dir
from ..states import course_modes

PLACEMENTS = ("pre", "post", "none")
# The stack every placement is tried on: the cat world, wider than the cat model (d 16),
# and deeper. Only n_layers and the norm placement change between runs.
STACK = dict(vocab_size=20, d_model=16, n_heads=2, d_ff=32, n_max=16,
             positions="sinusoidal", activation="gelu")
GRID = dict(depths=(2, 4, 8, 12), lrs=(3e-2, 1e-2, 3e-3), steps=300, seed=0)
COLOURS = {"pre": "#30638e", "post": "#d1495b", "none": "#edae49"}
LABELS = {"pre": "pre-LN", "post": "post-LN", "none": "no LayerNorm"}
MAX_STACK_LAYERS = 64     # the deepest stack (the grid goes to 12)
MAX_STACK_STEPS = 10_000  # the most training steps of one stack (the grid trains 300)


class LayerNorm(nn.Module):
    """LayerNorm over the last axis, written out: the course's own version of the piece the
    learner writes in chapter 08.

    Parameters ``weight`` (γ, ones) and ``bias`` (β, zeros), both (d,): the names of
    ``torch.nn.LayerNorm``, so a shipped model's ``ln1.state_dict()`` loads into it.
    forward: x (..., d) -> (..., d), each row (the d numbers of one vector) on its own.
    """

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = check_number(eps, "eps", low=0, low_open=True)
        d = check_positive_int(d, "d")
        check_bytes(8 * d, f"LayerNorm({count(d)})", "ask for a smaller d (two float32 vectors of d numbers)")
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        check_stream(x, self.weight.shape[0], getattr(x, "dtype", None), "LayerNorm's input x", dims=None)
        check_bytes(5 * x.element_size() * x.numel(), f"LayerNorm of {count(x.numel() // x.shape[-1])} rows",
                    "give fewer rows (an expanded tensor counts every row it stands for)")
        mean = x.mean(dim=-1, keepdim=True)                          # one mean per row
        var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)           # population variance: divide by d
        z = (x - mean) / torch.sqrt(var + self.eps)                  # ε inside the root
        return z * self.weight + self.bias


class Block(nn.Module):
    """One pre-LN layer, written out: the course's own version of the block the learner writes.

    Submodules ``ln1``, ``attn``, ``ln2``, ``mlp``: the names of ``helpers.model.Block``, so
    ``Block(6, 2, 8).load_state_dict(cat.blocks[0].state_dict())`` works.
    forward: h (B, T, d_model) -> (B, T, d_model):
        h_mid = h + attn(ln1(h));   h_out = h_mid + mlp(ln2(h_mid)).
    """

    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, n_heads)
        self.ln2 = LayerNorm(d_model)
        self.mlp = MLP(d_model, d_ff)

    def forward(self, h):
        h_mid = h + self.attn(self.ln1(h))          # the attention part writes into the stream
        return h_mid + self.mlp(self.ln2(h_mid))    # the MLP part reads h_mid and writes too


def check_affine(x, gamma, beta):
    """x, gamma and beta, (d,) float arrays: one sentence for a gamma or beta of another length
    than x, or for NaN or inf in any of the three."""
    if not gamma.shape == beta.shape == x.shape:
        fail(f"gamma and beta should have d={len(x)} numbers like x, but have {len(gamma)} and {len(beta)}")
    for name, values in (("x", x), ("gamma", gamma), ("beta", beta)):
        check_finite(values, name)


def layer_norm_steps(x, gamma=None, beta=None, eps=1e-5):
    """LayerNorm of one vector x (d,), every step kept.

    Returns a dict: mean and std (numbers; the population std, dividing by d),
    z = (x - mean) / sqrt(var + eps) (d,), and out = gamma * z + beta (d,).
    gamma, beta: (d,) or None (ones and zeros); x, gamma and beta: finite numbers. eps: a finite
    number >= 0 (0 is what a hand computation does), refused when var + eps would be 0 (a constant
    x and eps=0: 0/0).
    """
    x = as_array(x, "x", 1)
    eps = check_number(eps, "eps", low=0)
    d = len(x)
    if d < 2:
        fail(f"LayerNorm needs a vector of at least 2 numbers, but x has {d}")
    gamma = np.ones(d) if gamma is None else as_array(gamma, "gamma", 1)
    beta = np.zeros(d) if beta is None else as_array(beta, "beta", 1)
    check_affine(x, gamma, beta)
    check_squares(x)
    mean, var = float(x.mean()), float(x.var())
    if var + eps <= 0:
        fail(f"eps should be > 0 for a vector whose entries are all equal (its variance is 0, so z would be 0/0), "
             f"but got eps={eps:g}")
    z = (x - mean) / math.sqrt(var + eps)
    return {"mean": mean, "std": math.sqrt(var), "z": z, "out": gamma * z + beta}


def rounded(v, decimals):
    """v (a number or an array) rounded to ``decimals``, as np.round, except that a number too large
    to have a fraction (2**52 or more) is kept as it is: np.round scales it by 10**decimals first,
    which would overflow to inf."""
    v = np.asarray(v, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(np.abs(v) < 2.0**52, np.round(v, decimals), v)


def layer_norm_by_hand(x, gamma, beta, decimals=3):
    """LayerNorm of one vector x (d,) as done by hand: every intermediate rounded to
    ``decimals`` before the next step uses it (and no ε, which a hand computation skips).

    Returns dict(mean, deviations (d,), squares (d,), var, std, z (d,), out (d,))."""
    x = as_array(x, "x", 1)
    gamma, beta = as_array(gamma, "gamma", 1), as_array(beta, "beta", 1)
    decimals = check_positive_int(decimals, "decimals", minimum=0)
    if decimals > 15:
        fail(f"decimals should be at most 15 (a float's precision), but got {count(decimals)}")
    check_affine(x, gamma, beta)
    check_squares(x)
    r = lambda v: rounded(v, decimals)
    mean = float(r(x.sum() / len(x)))
    deviations = r(x - mean)
    squares = r(deviations ** 2)
    var = float(r(squares.sum() / len(x)))
    std = float(r(math.sqrt(var)))
    if std == 0:
        fail(f"x should vary (LayerNorm divides by its standard deviation), but its standard deviation "
             f"rounded to {decimals} decimals is 0")
    z = r(deviations / std)
    return dict(mean=mean, deviations=deviations, squares=squares, var=var, std=std, z=z,
                out=r(r(gamma * z) + beta))


def rounding_spread(x, gamma, beta, half_width=5e-4, n=2000, seed=0):
    """How far LayerNorm's output can move when x, gamma and beta (d,) are each known only to
    within ±half_width (printed to 3 decimals: 0.0005): the largest |change| per coordinate
    over ``n`` seeded random versions of the inputs. Returns (d,). The random versions must fit
    1.5 GiB (about 8 copies of n x d float64 numbers)."""
    x, gamma, beta = (as_array(v, name, 1) for v, name in ((x, "x"), (gamma, "gamma"), (beta, "beta")))
    check_affine(x, gamma, beta)
    half_width = check_number(half_width, "half_width", low=0)
    with np.errstate(over="ignore"):   # the widest versions' squares (and their spread) must stay finite
        for name, values in (("x", x), ("gamma", gamma), ("beta", beta)):
            check_squares(np.abs(values) + half_width, f"{name} widened by half_width={half_width:g}")
    n, seed = check_positive_int(n, "n"), check_seed(seed)
    check_bytes(64 * n * len(x), f"rounding_spread with n={count(n)} versions of {len(x)} numbers",
                f"n should be at most {MAX_BYTES // (64 * len(x)):,} for vectors of {len(x)} numbers")
    rng = np.random.default_rng(seed)
    nudge = lambda v: v + rng.uniform(-half_width, half_width, size=(n, len(v)))
    xs, gs, bs = nudge(x), nudge(gamma), nudge(beta)
    exact = ref.layer_norm(x, gamma, beta)
    z = ref.layer_norm(xs)                        # row by row, γ = 1 and β = 0
    return np.abs(z * gs + bs - exact).max(axis=0)


def gamma_for_range(z, beta, target):
    """The smallest uniform γ ≥ 0 at which γ·z + β spans ``target`` (max − min).

    z, beta: (d,). The range is the largest of the lines γ (z_i − z_j) + β_i − β_j, so it first
    reaches ``target`` where the earliest of those lines does."""
    z, beta = as_array(z, "z", 1), as_array(beta, "beta", 1)
    target = check_number(target, "target", low=0, low_open=True)
    if z.shape != beta.shape:
        fail(f"z and beta should have the same length, but have {len(z)} and {len(beta)}")
    if not (np.isfinite(z).all() and np.isfinite(beta).all()):
        fail("z and beta should hold finite numbers, but they hold NaN or infinity")
    if z.size == 0 or np.ptp(z) == 0:
        fail(f"z should hold at least two different values (γ·z spans nothing when z is constant, at any γ), "
             f"but got {shown(z.tolist())}")
    check_bytes(3 * 8 * z.size ** 2, f"gamma_for_range on {count(z.size)} numbers (three d x d tables)",
                "give a shorter z")
    if np.ptp(beta) >= target:
        fail(f"β alone already spans {np.ptp(beta):.3f}, at least the target {target}")
    dz, db = z[:, None] - z[None, :], beta[:, None] - beta[None, :]
    rising = dz > 0
    with np.errstate(over="ignore"):
        gamma = float(((target - db[rising]) / dz[rising]).min())
    if not math.isfinite(gamma):
        fail(f"z should hold values far enough apart for a finite γ to stretch them to the target {target:g}, but its "
             f"values lie only {np.ptp(z):.3g} apart")
    return gamma


def rms_norm(x, gamma=None, eps=1e-5):
    """RMSNorm (LLaMA, SmolLM2) over the last axis of x (..., d): x / sqrt(mean(x²) + eps) · gamma.
    No mean is subtracted and there is no shift β. gamma: (d,) or None (ones). eps: a finite
    number > 0 (at 0 a row of zeros would give 0/0)."""
    x = as_array(x, "x")
    eps = check_number(eps, "eps", low=0, low_open=True)
    if x.ndim == 0 or x.size == 0:
        fail(f"x should have at least one axis (..., d) and at least one number, but got shape {x.shape}")
    d = x.shape[-1]
    gamma = np.ones(d) if gamma is None else as_array(gamma, "gamma", 1)
    if gamma.shape != (d,):
        fail(f"gamma should have d={d} numbers like the last axis of x, but has {len(gamma)}")
    check_finite(x, "x")
    check_finite(gamma, "gamma")
    check_squares(x)
    check_bytes(3 * 8 * x.size, f"rms_norm of {count(x.size)} numbers", "give a smaller x")
    return x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps) * gamma


def embedding_survival(model, ids):
    """How much of each position's embedding h0 is still in the residual stream, point by point.

    ids: (T,) token ids. Returns (names, cosine (len(names), T)): the cosine between h0 and
    the stream at h0, L0.h_mid, L0.h, ... (names from ``residual_names``), per position, measured in eval mode (no
    dropout; modes put back), as ``residual_norms``."""
    check_model(model)
    with eval_mode(model), torch.no_grad():   # no dropout: one answer (a NaN stream is refused below, by point)
        trace = model(ids, trace=True)
    names = residual_names(model.cfg.n_layers)
    h0 = trace["h0"]
    cosine = np.stack([as_numpy(F.cosine_similarity(trace[name], h0, dim=-1)) for name in names])
    return names, check_stream_finite(names, cosine, "cosines")


def residual_names(n_layers):
    """The trace keys of the residual stream, in order: h0, L0.h_mid, L0.h, L1.h_mid, ...
    (n_layers: 1 to MAX_LAYERS, as a model has)."""
    n_layers, names = check_depth(n_layers), ["h0"]
    for layer in range(n_layers):
        names += [f"L{layer}.h_mid", f"L{layer}.h"]
    return names


def residual_norms(model, ids):
    """Norm of each position's residual vector at every point of the stream.

    ids: (T,) token ids. Returns (names, norms) with names from ``residual_names``
    and norms a NumPy array (len(names), T), measured in eval mode (no dropout; modes put back).
    """
    check_model(model)
    with eval_mode(model), torch.no_grad():   # no dropout: one answer (a NaN stream is refused below, by point)
        trace = model(ids, trace=True)
    names = residual_names(model.cfg.n_layers)
    norms = np.stack([as_numpy(trace[name].norm(dim=-1)) for name in names])
    return names, check_stream_finite(names, norms, "norms")


def check_stream_finite(names, values, what):
    """``values`` (len(names), T), one row per point of the residual stream (a check of the numbers made
    anyway), else one sentence naming the first point whose ``what`` are NaN or inf. Return values."""
    bad = ~np.isfinite(values).reshape(len(names), -1).all(-1)
    if bad.any():
        fail(f"the residual stream should hold finite numbers, but at {names[int(bad.argmax())]} its {what} are NaN "
             "or inf: the model's weights hold NaN or inf, or its numbers overflow")
    return values


MAX_TARGETS = 10_000_000   # a range of targets converted at once (about 48 bytes each on the way)


def check_target_count(size, shape):
    """At most MAX_TARGETS targets, else one sentence with their ``shape``."""
    if size > MAX_TARGETS:
        fail(f"targets should hold at most {MAX_TARGETS:,} token ids, but got shape {tuple(shape)} ({count(size)})")


def unigram_loss(targets):
    """Cross-entropy (nats) of the best predictor that ignores its input.

    targets: (B, T) ids with -100 where nothing is predicted. That predictor gives
    every position the frequency of each token among the targets, so its loss is
    their entropy.
    """
    check_ids_given(targets, "targets", MAX_TARGETS)
    if isinstance(targets, np.ndarray):   # a broadcast view stores one id for millions
        check_target_count(targets.size, targets.shape)
        targets = np.ascontiguousarray(targets)   # (a read-only view: torch would warn)
    try:
        targets = torch.as_tensor(targets)
    except Exception:   # noqa: BLE001 (a learner's entry may raise anything when read: its __index__, __len__)
        fail(f"targets should be a (B, T) table of token ids (whole numbers), but got {shown(targets)}")
    check_tensor(targets, "targets")
    check_target_count(targets.numel(), tuple(targets.shape))   # an expanded tensor too
    if targets.dim() not in (1, 2) or not targets.numel():
        fail(f"targets should be a non-empty (B, T) or (T,) table of token ids, but got shape {tuple(targets.shape)}")
    if targets.dtype.is_floating_point or targets.is_complex() or targets.dtype == torch.bool \
            or ((targets < 0) & (targets != -100)).any():
        fail(f"targets should hold token ids, whole numbers from 0 (or -100: nothing to predict), but got dtype "
             f"{targets.dtype} and values {shown(targets.unique()[:5].tolist())}")
    kept = targets[targets != -100]
    if not kept.numel():
        fail("targets hold no token to predict (every entry is -100)")
    # counted in place (a Python list of the ids would cost about 36 bytes per id)
    p = torch.unique(kept, return_counts=True)[1].double() / kept.numel()
    return float(-(p * p.log()).sum()) + 0.0   # + 0.0: one token's entropy is 0, not -0.0


MAX_BEST_WORDS = 1_000_000   # the most words best_loss reads (about 400 bytes each on the way: 0.4 GB, a few seconds)


def best_loss(sentences):
    """Cross-entropy (nats) of the best possible predictor on these sentences.

    sentences: lists of words, each counted once; at most MAX_BEST_WORDS words in all (counted
    before any is read). A prefix followed by several different words (``the cat`` -> is / was /
    ran / sat) cannot be predicted better than the frequencies of those words after it, so the
    floor is their entropy, averaged over every prediction.
    """
    expected = "a list of sentences, each a list of words (strings)"
    if not isinstance(sentences, (list, tuple)) or length(sentences) > MAX_BEST_WORDS \
            or not all(isinstance(s, (list, tuple)) for s in items_of(sentences)):
        fail(f"sentences should be {expected}, at most {MAX_BEST_WORDS:,} of them, but got {shown(sentences)}")
    words = sum(length(s) for s in items_of(sentences))   # (read by the built-ins: a subclass's __len__ may raise)
    if words > MAX_BEST_WORDS:
        fail(f"sentences should hold at most {MAX_BEST_WORDS:,} words in all (this course's limit), but hold "
             f"{count(words)}: pass fewer or shorter sentences")
    sentences = [items_of(s) for s in items_of(sentences)]   # (each word a plain str)
    if not all(isinstance(w, str) for s in sentences for w in s):
        fail(f"sentences should be {expected}, but got {shown(sentences)}")
    if not any(len(s) >= 2 for s in sentences):
        fail(f"sentences should hold at least one sentence of two words or more (a word to predict after "
             f"another), but got {shown(sentences)}")
    return prefix_entropy(sentences)


def prefix_entropy(sentences):
    """best_loss of checked sentences. Each prefix is a number (a trie's node: the prefix one word
    shorter, and its last word), so the memory grows with the words, not with the square of a length."""
    nodes, after = {}, defaultdict(Counter)   # (node of the shorter prefix, word) -> node; node -> next words
    for s in sentences:
        node = 0   # the empty prefix
        for t in range(1, len(s)):
            node = nodes.setdefault((node, s[t - 1]), len(nodes) + 1)
            after[node][s[t]] += 1
    return entropy_of_counts(after.values())


def entropy_of_counts(tables):
    """The mean cross-entropy (nats) of predicting each next word from its context's counts: ``tables``
    holds one Counter {next word: how often} per context; each word is scored by -log(its count / the
    context's total), and the mean is over all the words counted."""
    total, n = 0.0, 0
    for counts in tables:
        m = sum(counts.values())
        total -= sum(c * math.log(c / m) for c in counts.values())
        n += m
    return total / n


def stack_config(norm, n_layers):
    """The Config of the deep stack with this norm placement ("pre", "post" or "none").

    Only pre-LN keeps the final LayerNorm: a post-LN block already ends in one, and
    "none" means no LayerNorm anywhere.
    """
    check_choice(norm, "norm", PLACEMENTS)
    n_layers = check_stack_depth(n_layers)
    return Config(n_layers=n_layers, norm=norm, final_norm=(norm == "pre"), **STACK)


def check_stack_depth(n_layers, name="n_layers"):
    """A depth of the deep stack: a whole number from 1 to MAX_STACK_LAYERS; return it as an int, else one sentence."""
    n_layers = check_positive_int(n_layers, name)
    if n_layers > MAX_STACK_LAYERS:
        fail(f"{name} should be at most {MAX_STACK_LAYERS} (this course's limit for the deep stack), "
             f"but got {count(n_layers)}")
    return n_layers


def check_batch(batch, vocab_size=STACK["vocab_size"]):
    """A training batch (inputs (B, T), targets (B, T)): whole-number tensors or arrays of the same
    2-D shape, inputs in 0..vocab_size-1, targets the same or -100 (nothing to predict); None means
    the cat world's training set (for a model of at least its vocab_size words). Returns (inputs, targets) as
    LongTensors, else one sentence."""
    if batch is None:
        if vocab_size < STACK["vocab_size"]:
            fail(f"the model should have the cat world's {STACK['vocab_size']} words for the default batch (None: the "
                 f"cat world's training set), but it has {count(vocab_size)}: give a batch of its own world's "
                 "sentences, world.batch(world.train)")
        return cat_batch()
    return check_training_batch(batch, vocab_size)


def check_steps(steps):
    """A run's number of steps: a whole number from 1 to MAX_STACK_STEPS (10,000), else one sentence."""
    steps = check_positive_int(steps, "steps")
    if steps > MAX_STACK_STEPS:
        fail(f"steps should be at most {MAX_STACK_STEPS:,} (this course's limit for one run), but got {count(steps)}")
    return steps


def check_run(norm, n_layers, lr, steps, seed, batch, stop_after):
    """The arguments of one deep-stack run (``train_stack``, ``run_plain``), each checked before any
    work: (norm, n_layers, lr, steps, seed, batch, stop_after) as the run takes them. steps at most
    MAX_STACK_STEPS; the run's memory, estimated from the batch's size and the depth, at most 1.5 GiB."""
    check_choice(norm, "norm", PLACEMENTS)
    n_layers = stack_config(norm, n_layers).n_layers
    lr = check_number(lr, "lr", low=0, low_open=True)
    steps, seed = check_steps(steps), check_seed(seed)
    stop_after = check_stop_after(stop_after, steps)
    inputs, targets = check_batch(batch)
    B, T = inputs.shape
    d, d_ff, V = STACK["d_model"], STACK["d_ff"], STACK["vocab_size"]
    per_token = n_layers * (16 * d + 4 * d_ff + 4 * STACK["n_heads"] * T) + 4 * V
    check_bytes(8 * B * T * per_token, f"a run of {n_layers} layers on a batch of {count(B)} x {count(T)} tokens",
                "train on a smaller batch or a shallower stack")
    return norm, n_layers, lr, steps, seed, (inputs, targets), stop_after


def cat_batch():
    """The cat world's training set as (inputs (B, T), targets (B, T))."""
    world = worlds.cat_world()
    return world.batch(world.train)


def block_gradient_norm(block, name="block"):
    """Gradient norm of one layer's parameters (after a backward pass). A layer none of whose
    parameters has a gradient yet (no backward pass) is refused: its norm is not 0, it is not there.
    name: what a sentence calls the layer."""
    if not isinstance(block, nn.Module):
        fail(f"{name} should be one layer of a model (an nn.Module such as model.blocks[0]), but got {shown(block)}")
    if not any(True for _ in block.parameters()):
        fail(f"{name} should be one layer of a model, with parameters, but it has no parameters")
    grads = [p.grad for p in block.parameters() if p.grad is not None]
    if not grads:
        fail(f"{name} should have gradients to measure, but there are no gradients yet: run loss.backward() first")
    return math.sqrt(sum(float((g ** 2).sum()) for g in grads))


def layer_gradient_norms(model):
    """Gradient norm of each layer's parameters (after a backward pass): array (n_layers,)."""
    check_model(model)
    return np.array([block_gradient_norm(block, f"the model's layer {i}") for i, block in enumerate(model.blocks)])


def next_token_loss(logits, targets):
    """Mean next-token cross-entropy (nats) of logits (B, T, V) against targets (B, T), -100 ignored."""
    if not isinstance(logits, torch.Tensor) or check_tensor(logits, "logits").dim() != 3 \
            or not logits.is_floating_point() or logits.numel() == 0:
        fail(f"logits should be a non-empty float tensor (B, T, V), but got {shown(logits)}"
             + (f" of dtype {logits.dtype}" if isinstance(logits, torch.Tensor) else ""))
    V = logits.shape[-1]
    if not isinstance(targets, torch.Tensor) or check_tensor(targets, "targets").shape != logits.shape[:2] \
            or targets.dtype != torch.long:
        fail(f"targets should be a tensor of token ids (dtype torch.long) of shape {tuple(logits.shape[:2])} like "
             f"the logits' (B, T), but got {shown(targets)}"
             + (f" of dtype {targets.dtype}" if isinstance(targets, torch.Tensor) else ""))
    if (((targets < 0) & (targets != -100)) | (targets >= V)).any():
        fail(f"targets should hold token ids from 0 to {V - 1} (or -100: nothing to predict), but hold "
             f"{int(targets.min())} to {int(targets.max())}")
    check_bytes(3 * logits.element_size() * logits.numel(), f"the loss of {count(logits.numel() // V)} positions",
                "give fewer positions (an expanded tensor counts every row it stands for)")
    if bool((targets == -100).all()):
        fail("targets should hold at least one token to predict, but every entry is -100 (the mean of no loss is NaN)")
    check_finite(logits.detach(), "logits", minus_inf=True)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100)


@course_modes(name="layer_gradients")   # (under no_grad too: it takes gradients)
def layer_gradients(norm, n_layers, seed=0, batch=None):
    """One forward and backward pass of an untrained stack on the cat world.

    Returns a dict: loss (number), grads (n_layers,) the gradient norm of each layer,
    and h_norm (n_layers + 1,) the mean norm of the residual vectors entering
    layer 0, 1, ... and leaving the last layer (over every position of the batch,
    padding included). The pass runs block by block (embed, each block, unembed),
    exactly as the model's own forward pass does, so the stream can be measured between.
    """
    norm, n_layers, _, _, seed, (inputs, targets), _ = check_run(norm, n_layers, 1.0, 1, seed, batch, None)
    model = Transformer(stack_config(norm, n_layers), init="unit")
    model.reset_parameters(seed)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        h, sizes = model.embed(inputs), []
        for block in model.blocks:
            sizes.append(float(h.detach().norm(dim=-1).mean()))
            h = block(h)
        sizes.append(float(h.detach().norm(dim=-1).mean()))
        loss = next_token_loss(model.unembed(h), targets)
        loss.backward()
    finally:
        torch.set_num_threads(threads)
    return {"loss": loss.item(), "grads": layer_gradient_norms(model), "h_norm": np.array(sizes)}


def train_recording(model, batch, steps, lr, seed=0, stop_after=None):
    """Train ``model`` with ``helpers.training.train`` (Adam, cosine decay, weights
    redrawn from ``seed``, one thread) and record every step.

    batch: (inputs (B, T), targets (B, T)). stop_after: run only the first steps of
    the ``steps``-long schedule (the start of the same run). Returns a dict of arrays,
    one entry per step run: loss, and grad_first, the gradient norm of layer 0.
    """
    lr, seed = check_number(lr, "lr", low=0, low_open=True), check_seed(seed)
    steps = check_steps(steps)
    check_model(model)
    batch = check_batch(batch, model.cfg.vocab_size)
    grad_first = []
    losses = train(model, batch, steps=steps, lr=lr, seed=seed, progress=False, stop_after=stop_after,
                   on_step=lambda step, m, loss: grad_first.append(block_gradient_norm(m.blocks[0])))
    return {"loss": np.array(losses), "grad_first": np.array(grad_first)}


@course_modes(name="train_stack")   # (under no_grad too: it takes gradients)
def train_stack(norm, n_layers, lr, steps, seed=0, batch=None, stop_after=None):
    """Train the deep stack with this placement on the cat world: (model, train_recording's dict).

    n_layers at most MAX_STACK_LAYERS (64); steps at most MAX_STACK_STEPS (10,000); every
    argument is checked (and the run's memory estimated) before the model is built."""
    norm, n_layers, lr, steps, seed, batch, stop_after = check_run(norm, n_layers, lr, steps, seed, batch, stop_after)
    model = Transformer(stack_config(norm, n_layers), init="unit")
    record = train_recording(model, batch, steps, lr, seed, stop_after)
    return model, record


@course_modes(name="run_stack")   # (under no_grad too: it takes gradients)
def run_stack(norm, n_layers, lr, steps, seed=0, batch=None, stop_after=None):
    """Train the deep stack with this placement on the cat world: train_recording's dict."""
    return train_stack(norm, n_layers, lr, steps, seed, batch, stop_after)[1]


def prediction_spread(model, batch=None):
    """How much the model's next-token distribution changes from position to position.

    Over every predicted position of batch (inputs (B, T), targets (B, T), -100 where
    nothing is predicted; default the cat world's training set): the largest
    |p(word) - mean p(word)|. 0 means the same distribution everywhere, whatever the input.
    model: a course Transformer (its weights finite, measured in eval mode: ``measuring``) or a
    function of the ids (B, T) giving finite logits (B, T, V).
    """
    if not callable(model):
        fail(f"the model should be a helpers.model.Transformer (a function of the ids), but got {shown(model)}")
    if not isinstance(model, Transformer):
        inputs, targets = check_batch(batch, 2**62)
        with torch.no_grad():
            return spread_of(model(inputs), inputs, targets)
    inputs, targets = check_batch(batch, model.cfg.vocab_size)
    with measuring(model), torch.no_grad():
        return spread_of(model(inputs), inputs, targets)


def spread_of(logits, inputs, targets):
    """``prediction_spread`` of the logits (B, T, V) a model gave for inputs (B, T), else one sentence."""
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point() \
            or logits.dim() != 3 or logits.shape[:2] != inputs.shape or not logits.shape[2]:
        fail(f"the model should give float logits of shape ({inputs.shape[0]}, {inputs.shape[1]}, V) for ids of shape "
             f"{tuple(inputs.shape)}, "
             f"but gave {shown(logits)}" + (f" of dtype {logits.dtype}" if isinstance(logits, torch.Tensor) else ""))
    check_finite(check_tensor(logits, "the model's logits"), "the model's logits")
    probs = torch.softmax(logits, dim=-1)[targets != -100]
    return float((probs - probs.mean(dim=0)).abs().max())


class PlainBlock(ModelBlock):
    """A pre-LN block of the course's Transformer with its two residual additions taken out:
    h_mid = attn(ln1(h)), h_out = mlp(ln2(h_mid)). Same parameters, same names, same order."""

    def forward(self, h, keep=None, attention=True, **switches):
        h_mid = self.attn(self.ln1(h), **switches)
        return self.mlp(self.ln2(h_mid))


def plain_stack(n_layers):
    """The pre-LN deep stack (``stack_config("pre", n_layers)``) without residual connections.
    Its parameters are named and ordered as the pre-LN stack's, so the same seed draws the
    same starting weights."""
    cfg = stack_config("pre", n_layers)
    model = Transformer(cfg, init="unit")
    model.blocks = nn.ModuleList(PlainBlock(cfg) for _ in range(cfg.n_layers))
    return model


def run_plain(n_layers, lr, steps, seed=0, batch=None, stop_after=None):
    """Train the pre-LN stack without residual connections on the cat world: train_recording's dict
    (its arguments checked as ``train_stack``'s, before the model is built)."""
    _, n_layers, lr, steps, seed, batch, stop_after = check_run("pre", n_layers, lr, steps, seed, batch, stop_after)
    return train_recording(plain_stack(n_layers), batch, steps, lr, seed, stop_after)


def build_plain_curves(depths=GRID["depths"], lrs=GRID["lrs"], steps=GRID["steps"], seed=GRID["seed"],
                       digits=6):
    """Train the stack without residual connections at every depth and learning rate of the grid
    (pre-LN, same seed, steps and data as ``build_curves``). Returns the JSON-ready dict, its runs
    keyed like build_curves' (placement "pre")."""
    batch = cat_batch()
    depths, lrs = check_grid(depths, lrs, steps, seed, batch, digits, ("pre",))
    runs = {}
    for n_layers in depths:
        for lr in lrs:
            record = run_plain(n_layers, lr, steps, seed, batch)
            runs[run_key("pre", n_layers, lr)] = {
                name: [float(f"{v:.{digits}g}") for v in values] for name, values in record.items()}
    return {"stack": STACK, "depths": list(depths), "lrs": list(lrs), "steps": steps, "seed": seed,
            "placements": ["pre"], "residual": False, "runs": runs}


def check_grid(depths, lrs, steps, seed, batch, digits, placements):
    """Refuse a grid with a run ``check_run`` refuses (or digits outside 1..17), before any run trains; return
    (depths, lrs) as lists (``check_values``)."""
    depths, lrs = check_values(depths, "depths"), check_values(lrs, "lrs")
    digits = check_positive_int(digits, "digits")
    if digits > 17:
        fail(f"digits should be at most 17 (a float's precision), but got {count(digits)}")
    for norm in placements:
        for n_layers in depths:
            for lr in lrs:
                check_run(norm, n_layers, lr, steps, seed, batch, None)
    return depths, lrs


def check_values(values, name):
    """A grid's depths, learning rates or placements: a list or tuple of 1 to 100 values (each checked by
    its user); return them as a list, else one sentence."""
    if not isinstance(values, (list, tuple)) or not 1 <= length(values) <= 100:   # (read by the built-ins: a
        fail(f"{name} should be a list of 1 to 100 values, but got {shown(values)}")   # subclass's __len__ may raise)
    return items_of(values)


def check_curves(curves):
    """The dict of ``build_curves`` / ``load_curves``, else one sentence: depths (whole numbers >= 1),
    lrs (numbers > 0), placements (of PLACEMENTS), steps (a whole number >= 1: each run read, ``curves_run``,
    holds that many numbers) and runs (a dict). Return curves."""
    if not isinstance(curves, dict) or not {"depths", "lrs", "placements", "steps", "runs"} <= set(curves):
        fail(f"curves should be the dict of nz.load_curves() (depths, lrs, placements, steps, runs), but got {shown(curves)}")
    for n_layers in check_values(curves["depths"], "curves' depths"):
        check_stack_depth(n_layers, "each of curves' depths")
    for lr in check_values(curves["lrs"], "curves' lrs"):
        check_number(lr, "each of curves' lrs", low=0, low_open=True)
    for norm in check_values(curves["placements"], "curves' placements"):
        check_choice(norm, "each of curves' placements", PLACEMENTS)
    check_positive_int(curves["steps"], "curves' steps")
    if not isinstance(curves["runs"], dict):
        fail(f"curves' runs should be a dict (a run key such as 'pre/8/0.03': that run's loss and grad_first), "
             f"but got {shown(curves['runs'])}")
    return curves


def curves_run(curves, key, names=("loss",), full=True):
    """Run ``key`` of ``curves`` (already checked): a dict holding ``names``, each of its entries a non-empty
    1-D list of numbers (NaN, a diverged step, counts), of curves' steps numbers if ``full`` (False: a run may
    stop early); return its entries as (S,) float arrays (``check_loss``: a tensor is detached), else one sentence."""
    runs = curves["runs"]
    if key not in runs:
        fail(f"curves' runs should hold a run for each depth, learning rate and placement, but "
             f"{'it is empty' if not runs else f'it has no run {key}'}")
    run = runs[key]
    if not isinstance(run, dict) or not all(name in run for name in names):
        fail(f"curves' run {key} should be a dict with {' and '.join(names)}, but got {shown(run)}")
    read = {name: check_loss(values, f"curves' run {key}'s {name}") for name, values in run.items()}
    for name, values in read.items():
        if full and len(values) != curves["steps"]:
            fail(f"curves' run {key}'s {name} should hold curves' steps={count(curves['steps'])} numbers, "
                 f"but holds {len(values):,}")
    return read


def check_runs(curves, placements=None, names=("loss",), full=True):
    """``check_curves``, then a run for each of ``placements`` (None: the curves' own) at each depth and
    learning rate, and every run of curves read by ``curves_run``; return curves, else one sentence."""
    check_curves(curves)
    for norm in curves["placements"] if placements is None else placements:
        for n_layers in curves["depths"]:
            for lr in curves["lrs"]:
                curves_run(curves, run_key(norm, n_layers, lr), names, full)
    for key in curves["runs"]:
        curves_run(curves, key, names, full)
    return curves


def run_key(norm, n_layers, lr):
    """The JSON key of one run, e.g. 'pre/8/0.03': norm one of PLACEMENTS, n_layers a whole number from 1 to
    MAX_STACK_LAYERS (``check_stack_depth``), lr a number > 0 (else one sentence)."""
    check_choice(norm, "norm", PLACEMENTS)
    n_layers, lr = check_stack_depth(n_layers), check_number(lr, "lr", low=0, low_open=True)
    return f"{norm}/{n_layers}/{lr:g}"


def build_curves(depths=GRID["depths"], lrs=GRID["lrs"], steps=GRID["steps"], seed=GRID["seed"],
                 digits=6):
    """Train every (placement, depth, learning rate) of the grid. Returns the JSON-ready dict:
    the settings and, under runs[run_key], each run's loss and grad_first lists
    (rounded to ``digits`` significant digits). Every run's arguments are checked before the first trains."""
    batch = cat_batch()
    depths, lrs = check_grid(depths, lrs, steps, seed, batch, digits, PLACEMENTS)
    runs = {}
    for n_layers in depths:
        for lr in lrs:
            for norm in PLACEMENTS:
                record = run_stack(norm, n_layers, lr, steps, seed, batch)
                runs[run_key(norm, n_layers, lr)] = {
                    name: [float(f"{v:.{digits}g}") for v in values] for name, values in record.items()}
    return {"stack": STACK, "depths": list(depths), "lrs": list(lrs), "steps": steps, "seed": seed,
            "placements": list(PLACEMENTS), "runs": runs}


def curves_path(name="curves.json"):
    """Where the shipped curves live: data/normalization/curves.json (or no_residual.json)."""
    return data_dir() / "normalization" / name


def load_plain_curves():
    """The shipped curves of the stack without residual connections (``build_plain_curves``)."""
    return load_curves(curves_path("no_residual.json"))


MAX_CURVES_BYTES = 16 * 2**20   # what load_curves reads at most (the shipped grid: 0.2 MB)


def load_curves(path=None):
    """The shipped grid of training curves (the dict ``build_curves`` returns)."""
    path = curves_path() if path is None else path
    if isinstance(path, (str, os.PathLike)) and not os.path.lexists(path):
        fail(f"expected the shipped curves at {named(path)}, but there is no file there; "
             "rebuild them with python data/normalization/build.py")
    return read_json(path, "the shipped curves", MAX_CURVES_BYTES)


def get_run(curves, norm, n_layers, lr):
    """One run of the shipped grid: dict of arrays loss (steps,) and grad_first (steps,)."""
    check_curves(curves)
    key = run_key(norm, n_layers, lr)
    if key not in curves["runs"]:
        fail(f"the run should be one of the curves' (depths {curves['depths']}, learning rates "
             f"{curves['lrs']}, placements {curves['placements']}), but got {key}")
    return curves_run(curves, key)


# ------------------------------------------------------------------ figures


MAX_STEP_BARS = 64   # the most numbers plot_steps draws a bar for (the chapter's vector has 6)


def plot_steps(x, steps, printed=None, labels=None):
    """Three bar panels: x (d,), z = (x - mean) / std, and out = gamma * z + beta.

    steps: the dict of ``layer_norm_steps`` for this x. printed (d,): values printed by a source text,
    drawn as black ticks on the last panel. labels: d texts under the bars (None: x0, x1, ...).
    Returns the figure.
    """
    x = as_array(x, "x", 1)
    d = len(x)
    if not 1 <= d <= MAX_STEP_BARS:
        fail(f"x should hold 1 to {MAX_STEP_BARS} numbers (a bar each, labelled), but holds {count(d)}")
    if not isinstance(steps, dict) or not {"mean", "std", "z", "out"} <= set(steps):
        fail(f"steps should be the dict of nz.layer_norm_steps(x) (mean, std, z, out), but got {shown(steps)}")
    mean, std = check_number(steps["mean"], "steps['mean']"), check_number(steps["std"], "steps['std']", low=0)
    z, out = (as_array(steps[name], f"steps['{name}']", 1) for name in ("z", "out"))   # read as NumPy arrays
    for name, values in (("z", z), ("out", out)):
        if len(values) != d:
            fail(f"steps should be nz.layer_norm_steps(x) for this x of d={d} numbers, but its {name} has "
                 f"{len(values)}")
    for name, values in (("x", x), ("steps['z']", z), ("steps['out']", out)):
        check_finite(values, name)   # (a bar of NaN is drawn as nothing, one of inf breaks the axes)
    centred = x - x.mean()   # z is (x - mean) / sqrt(var + eps), eps >= 0 (out: gamma and beta, unknown here)
    scale = float(centred @ z) / float(centred @ centred) if centred.any() else 0.0
    if not (math.isclose(mean, float(x.mean()), rel_tol=1e-6, abs_tol=1e-9 * (1 + float(np.abs(x).max())))
            and math.isclose(std, float(x.std()), rel_tol=1e-6, abs_tol=1e-9 * (1 + float(np.abs(x).max())))
            and scale >= 0 and np.allclose(z, scale * centred, rtol=1e-6, atol=1e-9 * (1 + float(np.abs(z).max())))):
        fail(f"steps should be nz.layer_norm_steps(x) for this x (mean {float(x.mean()):.4g}, std "
             f"{float(x.std()):.4g}), but its mean is {mean:.4g}, its std {std:.4g} and its z not (x - mean) scaled")
    printed = None if printed is None else as_array(printed, "printed", 1)
    if printed is not None and len(printed) != d:
        fail(f"printed should be None or d={d} numbers like x, but has {len(printed)}")
    if labels is not None and (not isinstance(labels, (list, tuple)) or length(labels) != d   # (read by the
                               or not all(isinstance(label, str) for label in items_of(labels))):   # built-ins)
        fail(f"labels should be None or a list of d={d} texts like x, but got {shown(labels)}")
    labels = [f"x{i}" for i in range(len(x))] if labels is None else items_of(labels)
    from ..plots import literal

    fig, axes = plt.subplots(1, 3, figsize=(10, 2.8), sharex=True)
    panels = [(x, f"input: mean {mean:.3f}, std {std:.3f}"), (z, "z = (x − mean) / std"), (out, "γ·z + β")]
    for ax, (values, title) in zip(axes, panels):
        ax.bar(range(len(values)), values, color=["#d1495b" if v < 0 else "#30638e" for v in values])
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(title)
        ax.set_xticks(range(len(values)), [literal(label) for label in labels])   # a "$" as typed, not math
    if printed is not None:
        axes[2].scatter(range(len(x)), printed, marker="_", s=300, color="black", zorder=3,
                        label="the Primer's printed values")
        axes[2].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


MAX_STREAM_POINTS = 2 * MAX_STACK_LAYERS + 1   # the points of the deepest stack's stream: h0, then h_mid and h a layer
MAX_STREAM_LINES = 32                          # lines (positions) plot_stream draws at most, each in the legend


def plot_stream(ax, names, norms, tokens, title):
    """One line per position: the norm of its residual vector at each point of the stream.

    ax: a matplotlib Axes. names (P,), norms (P, T) from ``residual_norms``: finite numbers >= 0 (the norms
    of a diverged model, NaN or inf, have no height to draw); tokens (T,) label the lines; names and tokens
    lists of texts, at most MAX_STREAM_POINTS points and MAX_STREAM_LINES tokens (a figure of more takes
    minutes to draw and cannot be read); title a text.
    """
    check_ax(ax, optional=False)
    for labels, what, most in ((names, "names", MAX_STREAM_POINTS), (tokens, "tokens", MAX_STREAM_LINES)):
        if not isinstance(labels, (list, tuple)) or not 1 <= length(labels) <= most \
                or not all(isinstance(x, str) for x in items_of(labels)):   # (read by the built-ins: a subclass's
            fail(f"{what} should be a non-empty list of at most {most} texts (from nz.residual_norms and the prompt's "
                 f"words), but got {shown(labels)}")                          # __len__ or __iter__ may lie or raise)
    names, tokens = items_of(names), items_of(tokens)
    check_text(title, "title", empty=True, max_chars=200)
    norms = as_array(norms, "norms", 2)
    if norms.shape != (len(names), len(tokens)):
        fail(f"norms should be {len(names)} points × {len(tokens)} tokens, but has shape {norms.shape}")
    check_finite(norms, "norms")
    if (norms < 0).any():
        fail(f"norms should hold numbers >= 0 (a norm is never negative), but got {norms.min():g}")
    from ..plots import literal   # every text as typed: a token "$$" is not math

    labels = [literal(token) for token in tokens]
    lines = [ax.plot(range(len(names)), norms[:, t], marker="o", label=label)[0] for t, label in enumerate(labels)]
    ax.set_xticks(range(len(names)), [literal(name) for name in names], rotation=45, ha="right")
    ax.set_ylim(0, norms.max() * 1.15)
    ax.set_ylabel("norm ‖h‖ of the residual vector")
    ax.set_title(literal(title))
    # lines and labels given: a token starting with "_" (which legend() alone skips) is listed too
    ax.legend(lines, labels, fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    return ax


def plot_init(results):
    """Two panels for untrained stacks: the residual size entering each layer, and each
    layer's gradient norm. results: {placement: ``layer_gradients`` dict}."""
    if not isinstance(results, dict) or not results:
        fail(f"results should be a dict {{placement: nz.layer_gradients(placement, ...)}}, but got {shown(results)}")
    read = {}   # {placement: {h_norm, grads}} as NumPy arrays (errors.to_numpy: a tensor is detached)
    for norm, r in results.items():
        check_choice(norm, "each key of results", PLACEMENTS)
        if not isinstance(r, dict) or not {"h_norm", "grads"} <= set(r):
            fail(f"results[{norm!r}] should be the dict of nz.layer_gradients({norm!r}, ...) (loss, grads, h_norm), "
                 f"but got {shown(r)}")
        for name in ("h_norm", "grads"):
            values = as_array(r[name], f"results[{norm!r}]['{name}']", 1)
            if not 1 <= len(values) <= MAX_STACK_LAYERS + 1:
                fail(f"results[{norm!r}]['{name}'] should hold 1 to {MAX_STACK_LAYERS + 1} numbers, one per layer "
                     f"(nz.layer_gradients), but holds {count(len(values))}")
            read.setdefault(norm, {})[name] = check_finite(values, f"results[{norm!r}]['{name}']")
    fig, (ax_h, ax_g) = plt.subplots(1, 2, figsize=(10, 3.2))
    for norm, r in read.items():
        ax_h.plot(range(len(r["h_norm"])), r["h_norm"], marker="o", ms=3, color=COLOURS[norm], label=LABELS[norm])
        ax_g.plot(range(len(r["grads"])), r["grads"], marker="o", ms=3, color=COLOURS[norm], label=LABELS[norm])
    ax_h.set(yscale="log", xlabel="residual stream entering layer (last point: after the last layer)",
             ylabel="mean norm ‖h‖", title="how large the residual vectors' norms get")
    ax_g.set(yscale="log", xlabel="layer", ylabel="gradient norm", title="gradient reaching each layer")
    for ax in (ax_h, ax_g):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def final_losses(curves):
    """{lr: {placement: (len(depths),) final losses}} over the shipped grid (every run of it checked first)."""
    check_runs(curves)
    return {lr: {norm: np.array([curves_run(curves, run_key(norm, n, lr))["loss"][-1]
                                 for n in curves["depths"]]) for norm in curves["placements"]}
            for lr in curves["lrs"]}


def chaotic(norm, n_layers):
    """True for the runs whose final loss a rebuild on other CPU kernels does not reproduce:
    without LayerNorm at 8 layers and more. Measured by rebuilding the whole grid on two other
    CPU paths (data/normalization/README.md): there these runs ended at losses up to two
    orders of magnitude apart, while every other run's final loss agreed within 0.01; the
    outcome (``run_outcome``) of every run agreed. The rule was measured on the grid's depths
    (GRID: 2, 4, 8 and 12); for a grid of other depths (``build_curves(depths=...)``) it is the
    same rule, applied, not measured."""
    check_choice(norm, "norm", PLACEMENTS)
    n_layers = check_positive_int(n_layers, "n_layers")
    return norm == "none" and n_layers >= 8


def check_loss(loss, name="loss"):
    """A run's losses (or another of its per-step records, called ``name``: a gradient norm): a non-empty
    1-D list or array of numbers >= 0 (a cross-entropy or a norm is never negative; NaN and inf, a diverged
    step, count); return it as a (S,) float array."""
    loss = as_array(loss, name, 1)   # to_numpy: a tensor is detached, True/False refused
    if not len(loss):
        fail(f"{name} should hold at least one step's value, but it is empty")
    below = np.flatnonzero(loss < 0)   # NaN is not below 0; -inf is
    if below.size:
        fail(f"{name} should hold numbers >= 0 (a cross-entropy or a norm is never negative), but step "
             f"{below[0]:,} holds {loss[below[0]]:g}")
    return loss


def diverged(loss):
    """Whether a run whose losses (S,) ``check_loss`` took has diverged: NaN, or a loss that overflowed
    to inf, at any step. The one rule of ``run_outcome``, ``learning_state``, ``final_text`` and ``plot_grid``."""
    return not np.isfinite(loss).all()


def diverged_text(loss):
    """How a diverged run's final loss is printed: "NaN" (or "inf" for a run that only overflowed)."""
    return "NaN" if np.isnan(loss).any() else "inf"


def check_references(unigram, best, missing=False):
    """The losses of a predictor that ignores its input and of the best possible one: finite, >= 0
    (or None, not drawn, with ``missing``), best at most unigram (the best predictor is never worse than
    one that ignores its input). Returns (unigram, best)."""
    unigram, best = (None if missing and value is None else check_number(value, name, low=0)
                     for value, name in ((unigram, "unigram"), (best, "best")))
    if unigram is not None and best is not None and best > unigram:
        fail(f"best (the lowest possible loss) should be at most unigram (the loss of a predictor that ignores its "
             f"input), but got best={best:g} above unigram={unigram:g} (the two swapped?)")
    return unigram, best


def final_text(loss, norm, n_layers, unigram, best):
    """A run's final loss as printed: 3 decimals where a rebuild reproduces it, else the
    outcome in a word ("other", "NaN") marked with an asterisk."""
    loss = check_loss(loss)
    unigram, best = check_references(unigram, best)
    if chaotic(norm, n_layers):
        outcome = run_outcome(loss, unigram, best)
        return (diverged_text(loss) if outcome == "diverged" else outcome) + "*"
    if diverged(loss):   # a diverged run, by the rule run_outcome uses
        return diverged_text(loss)
    return f"{loss[-1]:.3f}"


def run_outcome(loss, unigram, best, near=0.05):
    """One word for how a run ended: "trained" (final loss within ``near`` of the best
    possible), "frequencies" (within 0.01 of the loss of a predictor that ignores its
    input), "diverged" (NaN or inf at any step: ``diverged``) or "other". best at most unigram."""
    loss = check_loss(loss)
    unigram, best = check_references(unigram, best)
    near = check_number(near, "near", low=0)
    if diverged(loss):
        return "diverged"
    if loss[-1] - best <= near:
        return "trained"
    if abs(loss[-1] - unigram) <= 0.01:
        return "frequencies"
    return "other"


def learning_state(loss, unigram):
    """Where a (possibly unfinished) run stands at its last step, in words:
    "learns from the context" (loss at least 0.5 below ``unigram``, the loss of a predictor
    that ignores its input), "is stuck at the frequencies" (within 0.01 of it),
    "has diverged" (NaN or inf: ``diverged``) or "is in between"."""
    loss = check_loss(loss)
    unigram = check_number(unigram, "unigram", low=0)
    if diverged(loss):
        return "has diverged"
    if loss[-1] <= unigram - 0.5:
        return "learns from the context"
    if abs(loss[-1] - unigram) <= 0.01:
        return "is stuck at the frequencies"
    return "is in between"


def significant(value, digits=3):
    """``value`` as text with ``digits`` significant digits and no exponent: 12,800, 17.0, 4.00.

    For numbers that float32 rounding moves in the 4th digit or later (a gradient norm of
    12,832 on one CPU and 12,820 on another), so that what is printed is the same on every CPU.
    value: a number (NaN and inf are printed as such); digits: 1 to 17."""
    if isinstance(value, (np.ndarray, torch.Tensor)) and tuple(value.shape) in ((), (1,)):
        value = value.item()   # a tensor or array of one number (a bool, a text or a complex one is refused below)
    value = real_number(value, "value")   # a whole number past float range, or a __float__ that raises: refused
    digits = check_positive_int(digits, "digits")
    if digits > 17:
        fail(f"digits should be at most 17 (a float's precision), but got {count(digits)}")
    if value == 0:
        return "0"   # -0.0 too
    if not math.isfinite(value):
        return f"{value:g}"
    rounded = float(f"{value:.{digits}g}")
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(rounded)))))
    return f"{rounded:,.{decimals}f}"


@lru_cache(maxsize=1)
def reference_losses():
    """(unigram, best): the loss of a model that ignores its input, and the lowest possible
    (computed once per process: the explorer's every redraw asks for them)."""
    return unigram_loss(cat_batch()[1]), best_loss(worlds.cat_world().train)


def outcomes(curves, unigram, best):
    """{run_key: run_outcome} for every run of a grid (the dict ``build_curves`` returns)."""
    check_curves(curves)
    unigram, best = check_references(unigram, best)
    for key in curves["runs"]:
        curves_run(curves, key)
    return {key: run_outcome(run["loss"], unigram, best) for key, run in curves["runs"].items()}


def outcome_counts(found, norm):
    """How many runs of this placement ended each way: {trained, frequencies, diverged, other: count}.

    found: the dict ``outcomes`` returns."""
    check_choice(norm, "norm", PLACEMENTS)
    if not isinstance(found, dict) or not all(isinstance(key, str) and isinstance(outcome, str) and outcome in
                                              ("trained", "frequencies", "diverged", "other")
                                              for key, outcome in found.items()):
        fail(f"found should be the dict of nz.outcomes(...) (run key: outcome), but got {shown(found)}")
    mine = [outcome for key, outcome in found.items() if key.split("/")[0] == norm]
    return {o: mine.count(o) for o in ("trained", "frequencies", "diverged", "other")}


def stack_view(curves, n_layers=8, lr=3e-2):
    """The three placements trained at one depth and learning rate.

    Returns a dict: steps (S,), loss {placement: (S,)}, grad_first {placement: (S,)},
    final {placement: last loss}, and text, one line with the final losses.
    """
    check_curves(curves)
    n_layers, lr = check_positive_int(n_layers, "n_layers"), check_number(lr, "lr", low=0, low_open=True)
    if n_layers not in curves["depths"]:
        fail(f"n_layers should be one of the trained depths {', '.join(map(str, curves['depths']))}, "
             f"but got {count(n_layers)}")
    if not any(np.isclose(lr, x) for x in curves["lrs"]):
        fail(f"lr should be one of the trained learning rates {curves['lrs']}, but got {lr:g}")
    lr = min(curves["lrs"], key=lambda x: abs(x - lr))
    runs = {norm: curves_run(curves, run_key(norm, n_layers, lr), ("loss", "grad_first")) for norm in PLACEMENTS}
    final = {norm: float(run["loss"][-1]) for norm, run in runs.items()}
    unigram, best = reference_losses()
    text = f"{n_layers} layers, lr {lr:g}, final loss: " + ", ".join(
        f"{LABELS[norm]} {final_text(runs[norm]['loss'], norm, n_layers, unigram, best)}" for norm in PLACEMENTS)
    if any(chaotic(norm, n_layers) for norm in PLACEMENTS):
        text += " (* a chaotic run: a re-run ends at another loss, with the same outcome)"
    return {"steps": np.arange(1, curves["steps"] + 1),   # as many as each run's numbers (curves_run)
            "loss": {norm: run["loss"] for norm, run in runs.items()},
            "grad_first": {norm: run["grad_first"] for norm, run in runs.items()},
            "final": final, "text": text}


def plot_residual(curves, plain, lr=3e-2, depths=(2, 4, 8, 12), unigram=None, best=None):
    """The pre-LN stack's training loss with its residual connections (``curves``) and without
    them (``plain``), one panel per depth, at one learning rate. depths: a non-empty list of depths both
    were trained at; unigram, best: None or the reference losses drawn as lines. Every run drawn is
    checked before the figure is made."""
    unigram, best = check_references(unigram, best, missing=True)
    if isinstance(depths, np.ndarray) and depths.ndim == 1:
        depths = depths.tolist()
    depths = check_values(depths, "depths")
    for n in depths:
        for source in (curves, plain):
            get_run(source, "pre", n, lr)
    fig, axes = plt.subplots(1, len(depths), figsize=(10, 3.0), sharey=True)
    for ax, n in zip(np.atleast_1d(axes), depths):
        for source, colour, style, label in ((curves, COLOURS["pre"], "-", "pre-LN, with residuals"),
                                             (plain, "#6a994e", "--", "pre-LN, without residuals")):
            ax.plot(get_run(source, "pre", n, lr)["loss"], color=colour, ls=style, lw=1.6, label=label)
        for level, style, text in ((unigram, "--", "ignores its input"), (best, ":", "best possible")):
            if level is not None:
                ax.axhline(level, color="grey", ls=style, lw=0.8, label=text)
        ax.set(yscale="log", title=f"{n} layers", xlabel="step")
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel(f"training loss (lr {lr:g})")
    handles, labels = np.atleast_1d(axes)[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="upper center", ncol=4, bbox_to_anchor=(0.5, 1.08), frameon=False)
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.17, top=0.86, wspace=0.08)
    return fig


def plot_grid(curves, unigram=None, best=None):
    """Final training loss against depth, one panel per learning rate, one line per placement.

    Chaotic runs (``chaotic``) are drawn hollow: their value is one draw, not a
    reproducible result. A diverged run (NaN or inf) has no loss to draw on the numeric axis; it is
    marked in a separate strip above it. unigram, best: None or the reference losses drawn as lines."""
    unigram, best = check_references(unigram, best, missing=True)
    table = final_losses(curves)
    depths = np.array(curves["depths"])
    fig, grid = plt.subplots(2, len(table), figsize=(10, 3.8), sharex=True, sharey="row",
                             gridspec_kw=dict(height_ratios=(1, 7), hspace=0.08))
    for column, (lr, rows) in enumerate(table.items()):
        strip, ax = grid[0, column], grid[1, column]
        for norm, values in rows.items():
            wild = np.array([chaotic(norm, n) for n in depths])
            ax.plot(depths, values, color=COLOURS[norm], label=LABELS[norm])
            ax.plot(depths[~wild], values[~wild], "o", color=COLOURS[norm])
            if wild.any():
                ax.plot(depths[wild], values[wild], "o", mfc="white", color=COLOURS[norm],
                        label=f"{LABELS[norm]}: chaotic run (one draw)")
            lost = ~np.isfinite(values)   # a diverged run (``diverged``: NaN or inf) has no point on the axis
            if lost.any():
                strip.plot(depths[lost], np.zeros(int(lost.sum())), "x", ms=8, mew=2, color=COLOURS[norm],
                           label=f"{LABELS[norm]}: diverged (NaN)")
        for level, style, text in ((unigram, "--", "ignores its input"), (best, ":", "best possible")):
            if level is not None:
                ax.axhline(level, color="grey", ls=style, lw=0.8, label=text)
        ax.set(yscale="log", xticks=depths, xlabel="layers")
        ax.grid(alpha=0.3)
        strip.set_title(f"lr {lr:g}")
        strip.set(yticks=[], ylim=(-1, 1))
        strip.set_facecolor("#f2f2f2")
    grid[0, 0].set_ylabel("NaN", rotation=0, ha="right", va="center")
    grid[1, 0].set_ylabel(f"loss after {count(curves['steps'])} steps")
    handles = {h_label: h for ax in [*grid[1], *grid[0]] for h, h_label in zip(*ax.get_legend_handles_labels())}
    fig.legend(handles.values(), handles.keys(), fontsize=8, loc="upper center", ncol=3,
               bbox_to_anchor=(0.5, 1.16), frameon=False)
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.13, top=0.9, wspace=0.08)
    return fig
