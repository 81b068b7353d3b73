"""Why attention divides its scores by √d_k: the spread of dot products, softmax
saturation, and the size of softmax's gradient.

Random numbers come from torch's generator so that the Book's tables ("Scaling by √d")
can be drawn again number for number; everything after the draw is NumPy.
"""
import functools
import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from ..errors import MAX_BYTES, as_array, check_bytes, check_finite, check_index, check_number, check_positive_int, check_seed, check_switch, \
    check_tensor_size, count, fail, shown
from ..model import check_made, check_model, measure
from ..plots import ACCENT, BASE
from ..qkv.compute import check_overflow, check_widths
from ..reference import softmax, underflow_to_zero
from ..training import Adam, check_batch, check_lr, check_seeds, check_steps
from ..worlds import entropy_floor as loss_floor   # the floor under the training loss (chapter 04's entropy_floor)
from ..states import course_modes, on_the_cpu

# The Book's table: d -> (spread of raw dot products, spread after dividing by √d).
BOOK_SPREAD = {2: (1.41, 1.00), 4: (2.00, 1.00), 64: (7.99, 1.00), 768: (27.73, 1.00)}
# The Book's one query against six keys at d = 64 (seed 1), and the gradient sizes it quotes.
BOOK_SIX_SCORES = (-9.799, -4.000, -0.607, 2.800, -3.593, -0.429)
BOOK_GRADIENTS = {"raw": 0.041, "scaled": 0.173}


MAX_DIMS = 64   # values of d one call may take (the chapter uses at most 19)


MAX_D = 2**53   # the largest d: a float64 holds every whole number up to 2**53 exactly (d is plotted, fitted, rooted)


def check_dims(dims):
    """A list of 1 to MAX_DIMS whole numbers d from 1 to MAX_D (one whole number counts as a list of one)."""
    if isinstance(dims, np.ndarray) and dims.ndim == 0:   # np.array(3): one d, as 3 is
        dims = dims[()]
    if isinstance(dims, (int, np.integer)) and not isinstance(dims, bool):
        dims = [dims]
    if not isinstance(dims, (list, tuple, range, np.ndarray)) or not 1 <= len(dims[:MAX_DIMS + 1]) <= MAX_DIMS:
        fail(f"dims should be a list of 1 to {MAX_DIMS} whole numbers d >= 1, but got {shown(dims)}")
    dims = [check_positive_int(d, "each d") for d in dims]
    if max(dims) > MAX_D:   # past it d is rounded as a float (and 2**1100 is no float at all)
        fail(f"each d should be a whole number at most 2**53 (the largest a float64 holds exactly), but got "
             f"{shown(max(dims))}")
    return dims


MAX_NUMBERS = 2 * 10**9   # random numbers one call may draw (dot_spread's Book table draws 1.7e8)


def check_draws(numbers, what, largest):
    """Refuse a call that would draw more than MAX_NUMBERS random numbers (the loops run over them);
    ``largest`` says the biggest request allowed."""
    if numbers > MAX_NUMBERS:
        fail(f"{what} should draw at most {MAX_NUMBERS:,} random numbers (this course's limit), but would draw "
             f"{count(numbers)}: {largest}")


CHUNK_ENTRIES = 1_536_000   # about 6 MB of float32 per chunk of queries or keys


def chunk_rows(d):
    """The rows of d numbers ``raw_scores`` draws at once by default: about CHUNK_ENTRIES numbers, a
    multiple of 16 (at least 16)."""
    return max(16, CHUNK_ENTRIES // d // 16 * 16)


def check_spread_work(dims, n, smallest, what):
    """Refuse up front drawing n pairs of d-vectors for each d in ``dims`` (``raw_scores``): more than
    MAX_NUMBERS random numbers in all, or one chunk of queries, keys and their products (float32)
    at the largest d past MAX_BYTES. The advice names n, or the dims when even n = ``smallest``
    (the least n the call takes) is too many."""
    most_n = MAX_NUMBERS // (2 * sum(dims))
    advice = (f"ask for n <= {most_n:,}" if most_n >= smallest else
              f"ask for smaller dims (they add up to {count(sum(dims))}, at most {MAX_NUMBERS // (2 * smallest):,} "
              f"allowed)")
    check_draws(2 * n * sum(dims), f"{what} with n={count(n)}", advice)
    d, rows = max(dims), min(n, chunk_rows(max(dims)))
    check_bytes(12 * rows * d, f"{what} at d={count(d)} ({count(rows)} pairs at once)",
                f"ask for d <= {MAX_BYTES // (12 * rows):,}")


@on_the_cpu
def raw_scores(d, n, generator, chunk=None):
    """(n,) dot products q·k of n pairs of standard-normal d-vectors, drawn as the Book does:
    all n queries (n, d) first, then all n keys (n, d), from one generator.

    The pairs are multiplied ``chunk`` rows at a time, so memory stays small at d = 768;
    a second generator replays the query stream. Chunks give the very numbers one big
    draw would give because torch fills normals in blocks of 16 and ``chunk`` is a
    multiple of 16. By default a chunk holds about CHUNK_ENTRIES numbers (2,000 rows at
    d = 768, more at smaller d: torch draws small blocks of normals several times slower).
    """
    if chunk is None:
        chunk = chunk_rows(d)
    if chunk % 16:
        fail(f"chunk should be a multiple of 16 to replay torch's random stream, but got {chunk}")
    query_gen = torch.Generator().set_state(generator.get_state())
    for start in range(0, n, chunk):                       # skip past the queries
        torch.randn(min(chunk, n - start), d, generator=generator)
    out = torch.empty(n)   # (one array written in place: small results kept between 6 MB chunks made the heap grow)
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        q = torch.randn(rows, d, generator=query_gen)
        k = torch.randn(rows, d, generator=generator)
        torch.sum(q * k, dim=1, out=out[start:start + rows])
    return out.numpy().astype(float)


@on_the_cpu
@underflow_to_zero
def dot_spread(dims=(2, 4, 64, 768), n=100_000, seed=123):
    """The spread (standard deviation) of q·k and of q·k / √d over n random pairs, for each d.

    q and k have independent standard-normal entries (mean 0, variance 1), drawn by
    torch.randn from one generator seeded once with ``seed``, d after d.
    Returns a list of dicts: d, raw, scaled, expected (= √d, the theory), scores (the n raw q·k).
    """
    dims = check_dims(dims)
    n, seed = check_positive_int(n, "n", minimum=2), check_seed(seed)   # one pair has no spread
    check_spread_work(dims, n, 2, "dot_spread")
    check_bytes(8 * n * (len(dims) + 3), f"dot_spread with n={count(n)}",
                f"ask for n <= {MAX_BYTES // (8 * (len(dims) + 3)):,}")
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for d in dims:
        s = raw_scores(d, n, generator)
        rows.append(dict(d=d, raw=float(s.std()), scaled=float((s / math.sqrt(d)).std()),
                         expected=math.sqrt(d), scores=s))
    return rows


@on_the_cpu
def six_keys(d=64, n_keys=6, seed=1):
    """One query's raw scores against ``n_keys`` random keys: (n_keys,).

    As in the Book: ``n_keys`` standard-normal queries (n_keys, d) are drawn, then
    ``n_keys`` keys; the first query is scored against every key.
    """
    d, n_keys, seed = check_positive_int(d, "d"), check_positive_int(n_keys, "n_keys"), check_seed(seed)
    check_draws(2 * n_keys * d, f"six_keys with d={count(d)} and n_keys={count(n_keys)}", "ask for fewer keys or a smaller d")
    check_bytes(8 * n_keys * d, f"six_keys with d={count(d)} and n_keys={count(n_keys)}", "ask for fewer keys or a smaller d")
    g = torch.Generator().manual_seed(seed)
    Q = torch.randn(n_keys, d, generator=g)
    K = torch.randn(n_keys, d, generator=g)
    return (K @ Q[0]).numpy().astype(float)


def weights_problem(w):
    """What keeps ``w`` (softmax outputs along its last axis) from being softmax outputs, or None."""
    with np.errstate(over="ignore"):   # entries near 1e308 sum to inf: not 1, as the sentence then says
        sums = np.atleast_1d(w.sum(axis=-1))
    worst = sums[np.argmax(np.abs(sums - 1))] if sums.size else 1.0   # the row furthest from summing to 1
    return ("hold NaN or inf" if not np.isfinite(w).all() else f"hold a negative entry, {w[w < 0][0]:g}"
            if np.any(w < 0) else f"sum to {worst:.6g}" if abs(worst - 1) > 1e-6 else None)


def check_weights(weights):
    """``weights`` as one softmax output (n,): finite, non-negative, summing to 1, two (n, n) float64 tables
    within 1.5 GiB (its derivative, and a check's answer of that size beside it); one sentence for anything else."""
    w = as_array(weights, "weights", 1)
    check_bytes(16 * len(w) ** 2, f"the (n, n) derivative of {len(w):,} weights", f"ask for n <= {int((MAX_BYTES / 16) ** 0.5):,} weights")
    problem = weights_problem(w)
    if problem:
        fail(f"weights should be a softmax output (non-negative, summing to 1), but they {problem}")
    return w


@underflow_to_zero   # (NumPy's underflow ignored, whatever np.seterr a cell set: tiny weights give 0)
def softmax_jacobian(weights):
    """The derivative of softmax at its output ``weights`` (n,): J[i, j] = ∂w_i/∂s_j.

    J = diag(w) - w wᵀ, with s the softmax's own input. Shape (n, n).
    """
    w = check_weights(weights)
    J = np.outer(w, w)               # the one (n, n) table made: -w wᵀ, then w added on the diagonal, in place
    np.negative(J, out=J)
    J[np.diag_indices(len(w))] += w
    return J


def jacobian_row(w, i):
    """Row ``i`` of ``softmax_jacobian(w)`` for checked softmax outputs w (n,), made without the (n, n)
    table: ∂w_i/∂s_j = w_i·(δ_ij - w_j), the very numbers of that row. (n,)"""
    row = -w[i] * w
    row[i] = w[i] - w[i] * w[i]
    return row


# The most scores weight_gradient takes (this course's limit: the chapter gives one query's 6). Its work holds
# about 32 bytes a score at its peak (measured, scores given as a list): the scores as float64, their NaN/inf and
# overflow tests, the divided scores, softmax's result and the one row of the derivative; about 32 MB in all.
MAX_SCORES = 1_000_000

MIN_DIVIDE_BY = 1 / np.finfo(float).max   # about 5.6e-309: the smallest divide_by whose 1 / divide_by is finite


@underflow_to_zero
def weight_gradient(scores, index, divide_by=1.0):
    """How strongly one attention weight reacts to the scores.

    The weights are softmax(scores / divide_by). Returns a dict with
    * ``wrt_input``: the norm of the gradient of weight ``index`` with respect to
      softmax's own input (scores / divide_by), the Book's measure;
    * ``wrt_scores``: the norm with respect to the scores before the division
      (the chain rule multiplies by 1 / divide_by).
    scores: (n,), at most MAX_SCORES (1,000,000); the one row of the derivative is made, not the (n, n) table.
    """
    s = as_array(scores, "scores", 1)
    if s.size > MAX_SCORES:
        fail(f"scores should hold at most {MAX_SCORES:,} scores (this course's limit), but got {count(s.size)}")
    if not np.isfinite(s).all():
        fail(f"scores should hold finite numbers, but they hold {shown(s[~np.isfinite(s)][0])}")
    if len(s) == 0:   # before the index, which no empty row can have
        fail("scores should hold at least one score, but it is empty")
    index = check_index(index, "index", len(s))
    divide_by = check_number(divide_by, "divide_by", low=0, low_open=True)
    if divide_by < MIN_DIVIDE_BY:   # wrt_input is at most 0.36: divided by this much or less it stays finite
        fail(f"divide_by should be at least {MIN_DIVIDE_BY:.2g} (the chain rule multiplies the gradient by "
             f"1 / divide_by, which a float64 must hold), but got {shown(divide_by)}")
    with np.errstate(over="ignore"):   # an overflow is refused next, in one sentence
        scaled = s / divide_by
    check_overflow(scaled, "scores / divide_by", f"scores up to {np.abs(s).max():.3g} and divide_by={divide_by:g}",
                   "give a larger divide_by or smaller scores")
    size = float(np.linalg.norm(jacobian_row(softmax(scaled), index)))
    return dict(wrt_input=size, wrt_scores=size / divide_by)


@underflow_to_zero
def jacobian_size(weights):
    """Size of the whole softmax derivative for each row of ``weights`` (N, n), softmax outputs: ‖J‖
    (Frobenius). (N,)"""
    w = as_array(weights, "weights", 2)
    check_bytes(24 * w.shape[0] * w.shape[1] ** 2, f"the derivatives of {w.shape[0]:,} rows of {w.shape[1]:,} weights",
                "ask for fewer or shorter rows")
    problem = weights_problem(w)
    if problem:
        fail(f"weights should be softmax outputs, one per row (non-negative, each row summing to 1), but they {problem}")
    J = w[:, :, None] * np.eye(w.shape[1]) - w[:, :, None] * w[:, None, :]
    return np.sqrt((J ** 2).sum(axis=(1, 2)))


@on_the_cpu
@underflow_to_zero
def gradient_by_dim(dims=(2, 4, 16, 64, 256, 768), n_queries=2000, n_keys=6, seed=0):
    """Median softmax-gradient size over ``n_queries`` random queries, each against ``n_keys`` keys.

    Returns a list of dicts: d; raw (softmax of q·k, derivative w.r.t. q·k); scaled
    (softmax of q·k/√d, derivative w.r.t. its input q·k/√d); scaled_wrt_raw (the same,
    w.r.t. q·k: scaled / √d); saturated_raw and saturated_scaled (the share of rows
    whose largest weight exceeds 0.99).
    """
    dims = check_dims(dims)
    n_queries, n_keys = check_positive_int(n_queries, "n_queries"), check_positive_int(n_keys, "n_keys")
    seed = check_seed(seed)
    what = f"gradient_by_dim with n_queries={count(n_queries)} and n_keys={count(n_keys)}"
    check_draws(n_queries * (n_keys + 1) * sum(dims), what, "ask for fewer queries, keys or dims")
    check_bytes(8 * n_queries * (n_keys + 1) * max(dims) + 48 * n_queries * n_keys ** 2, what,
                "ask for fewer queries, keys or a smaller d")
    g = torch.Generator().manual_seed(seed)
    rows = []
    for d in dims:
        q = torch.randn(n_queries, 1, d, generator=g)
        k = torch.randn(n_queries, n_keys, d, generator=g)
        s = (q * k).sum(-1).numpy().astype(float)           # (n_queries, n_keys)
        w_raw, w_scaled = softmax(s), softmax(s / math.sqrt(d))
        scaled = float(np.median(jacobian_size(w_scaled)))
        rows.append(dict(d=d, raw=float(np.median(jacobian_size(w_raw))), scaled=scaled,
                         scaled_wrt_raw=scaled / math.sqrt(d),
                         saturated_raw=float((w_raw.max(1) > 0.99).mean()),
                         saturated_scaled=float((w_scaled.max(1) > 0.99).mean())))
    return rows


# ----------------------------------------------------------------- the explorer's compute

POOL_D, POOL_PAIRS = 1024, 2000
_pool = {}


@on_the_cpu
def pool():
    """Fixed random draws the explorer slices (seed 7): pairs q, k (2000, 1024); a query and 6 keys."""
    if not _pool:
        g = torch.Generator().manual_seed(7)
        _pool["q"] = torch.randn(POOL_PAIRS, POOL_D, generator=g).numpy()
        _pool["k"] = torch.randn(POOL_PAIRS, POOL_D, generator=g).numpy()
        _pool["query"] = torch.randn(POOL_D, generator=g).numpy()
        _pool["keys"] = torch.randn(6, POOL_D, generator=g).numpy()
    return _pool


@underflow_to_zero
def explore(d, scaled=True):
    """What the explorer shows for one d, with or without dividing by √d.

    Uses the first d numbers of fixed random vectors, so moving d grows the same vectors.
    Returns a dict: d, scaled, scores (2000,) the scores of 2,000 random pairs (as softmax
    sees them), spread (their std), weights (6,) one query's softmax row over six keys,
    gradient (‖J‖ of that row, w.r.t. softmax's input), gradient_wrt_raw (w.r.t. q·k).
    """
    if isinstance(d, float) and d.is_integer():   # 64.0 is 64; 3.7 is refused, not rounded
        d = int(d)
    d = check_positive_int(d, "d")
    scaled = check_switch(scaled, "scaled")
    if d > POOL_D:
        fail(f"d should be at most {POOL_D} in the explorer, but got {d}")
    p = pool()
    divide = math.sqrt(d) if scaled else 1.0
    scores = np.einsum("nd,nd->n", p["q"][:, :d], p["k"][:, :d]) / divide
    row = p["keys"][:, :d] @ p["query"][:d] / divide
    weights = softmax(row.astype(float))
    gradient = float(jacobian_size(weights[None])[0])
    return dict(d=d, scaled=bool(scaled), scores=scores, spread=float(scores.std()), weights=weights,
                gradient=gradient, gradient_wrt_raw=gradient / divide)


# ----------------------------------------------------------------- figures

MAX_ROWS = 1_000   # rows (runs, dims) one figure or comparison takes (the chapter's: 6 runs, up to 19 dims)


def check_rows(rows, name, keys, source, kind="rows"):
    """``rows`` as ``source`` returns them: a list of 1 to MAX_ROWS dicts, each holding ``keys``; else one
    sentence (``kind``: what the rows are, such as "runs"). Returns it as a list."""
    if not isinstance(rows, (list, tuple)) or not 1 <= len(rows) <= MAX_ROWS or not all(
            isinstance(row, dict) and all(key in row for key in keys) for row in rows):
        fail(f"{name} should be a list of {kind} as {source} returns them (1 to {MAX_ROWS:,} dicts with "
             f"{', '.join(keys)}), but got {shown(rows)}")
    return list(rows)


LOG_AXIS = (1e-200, 1e200)   # the values a log axis here draws: matplotlib's margins around them stay within float64


def positive_values(rows, key, name, most=1):
    """Each row's ``key``, 1 to ``most`` numbers, every one from LOG_AXIS[0] to LOG_AXIS[1] (a log axis); else
    one sentence. Returns them, a float array per row."""
    out = []
    for row in rows:
        values = np.atleast_1d(as_array(row[key], f"each row's {key}", (0, 1)))
        if not 1 <= values.size <= most:   # before the values are read: one line holds at most this many
            fail(f"each row's {key} should be {'one number' if most == 1 else f'1 to {most:,} numbers'}, but it "
                 f"holds {count(values.size)}")
        good = (values >= LOG_AXIS[0]) & (values <= LOG_AXIS[1])   # NaN fails both
        if not good.all():
            fail(f"{name} should hold finite numbers from {LOG_AXIS[0]:g} to {LOG_AXIS[1]:g} for a log axis, but its "
                 f"{key} holds {shown(float(values[~good][0]))}")
        out.append(values)
    return out


MAX_DRAWN = 1e300   # the largest score spread_figure draws: its bins, -edge..edge in 120 steps, stay within float64
PANEL_BYTES = 24   # bytes a score one panel of spread_figure draws (its scores, divided by √d, and their histogram)


def given_scores(spread, dims):
    """The scores ``spread`` (rows of ``dot_spread``) holds for each of ``dims``: {d: (n,)}, at least one
    finite score each, of size at most MAX_DRAWN, their panel's tables within 1.5 GiB; else one sentence."""
    spread = check_rows(spread, "spread", ("d", "scores"), "dot_spread")
    rows = {check_positive_int(row["d"], "each row's d"): row for row in spread}
    missing = [d for d in dims if d not in rows]
    if missing:
        fail(f"spread should hold rows for d = {list(dims)}, but it has no row for d = {missing}")
    drawn = {}
    for d in dims:
        name = f"the scores of the row for d = {d}"
        s = as_array(rows[d]["scores"], name, 1)
        check_bytes(PANEL_BYTES * len(s), f"{name} ({count(len(s))} of them)", f"give at most {MAX_BYTES // PANEL_BYTES:,}")
        if len(s) == 0 or not np.isfinite(s).all():   # a histogram would leave them out without a word
            fail(f"{name} should be finite numbers, at least one, but they "
                 + (f"hold {shown(float(s[~np.isfinite(s)][0]))}" if len(s) else "are empty"))
        if np.abs(s).max() > MAX_DRAWN:   # the bins (score_bins) must have a width float64 can hold
            fail(f"{name} should be at most {MAX_DRAWN:g} in size (the histogram's bins span them all), but one is "
                 f"{float(np.abs(s).max()):.4g}")
        drawn[d] = s
    return drawn


def score_bins(drawn):
    """120 equal bins from -edge to edge that hold every score of ``drawn`` ({d: (n,) scores}): edge is 90 (the
    chapter's view), or the largest score's size rounded up to a multiple of 10 when a score lies further out.
    A histogram leaves out what falls outside its bins: here nothing does."""
    edge = max(90.0, 10.0 * math.ceil(max(float(np.abs(s).max()) for s in drawn.values()) / 10))
    return np.linspace(-edge, edge, 121)


@on_the_cpu
def spread_figure(spread=None, dims=(4, 64, 768), n=20_000, seed=123):
    """Histograms of q·k (raw) and q·k/√d (scaled) for each d, one panel per d, shared x-axis whose bins
    hold every score (``score_bins``: -90..90, wider when a score lies further out).

    spread: rows of ``dot_spread`` whose scores are drawn (no new draws), else n pairs per d
    are drawn from a generator seeded with ``seed`` (all of them first, to place the bins)."""
    dims = check_dims(dims)
    if spread is not None:
        drawn = given_scores(spread, dims)
    else:
        n, seed = check_positive_int(n, "n"), check_seed(seed)
        check_spread_work(dims, n, 1, "spread_figure")
        most = MAX_BYTES // (8 * len(dims) + PANEL_BYTES)   # every panel's scores (float64), and one panel's tables
        check_bytes((8 * len(dims) + PANEL_BYTES) * n, f"spread_figure with n={count(n)}", f"ask for n <= {most:,}")
        generator = torch.Generator().manual_seed(seed)
        drawn = {d: raw_scores(d, n, generator) for d in dims}
    fig, axes = plt.subplots(1, len(dims), figsize=(3.3 * len(dims), 2.8), sharex=True, sharey=True)
    bins = score_bins(drawn)
    for ax, d in zip(np.atleast_1d(axes), dims):
        s = drawn[d]
        ax.hist(s, bins, density=True, histtype="stepfilled", color=ACCENT, alpha=0.7, label="raw q·k")
        ax.hist(s / math.sqrt(d), bins, density=True, histtype="stepfilled", color=BASE, alpha=0.7, label="q·k / √d")
        ax.set_title(f"d = {d} ({len(s):,} pairs)")
        ax.set_xlabel("score")
        ax.set_yscale("log")
        ax.set_ylim(0.5 / (len(s) * (bins[1] - bins[0])), 1)   # below one pair alone in a bin: every bin with a pair shows
        ax.legend(fontsize=7, loc="upper left")
    np.atleast_1d(axes)[0].set_ylabel("density (log scale)")
    fig.tight_layout()
    return fig


def gradient_figure(rows):
    """Median gradient size against d (log-log) from ``gradient_by_dim`` rows: three curves."""
    rows = check_rows(rows, "rows", ("d", "raw", "scaled", "scaled_wrt_raw"), "gradient_by_dim")
    dims = check_dims([r["d"] for r in rows])
    for key in ("raw", "scaled", "scaled_wrt_raw"):
        positive_values(rows, key, "rows")
    fig, ax = plt.subplots(figsize=(5.6, 3.4))
    ax.loglog(dims, [r["scaled"] for r in rows], "o-", color=BASE,
              label="scaled, w.r.t. softmax's input q·k/√d")
    ax.loglog(dims, [r["scaled_wrt_raw"] for r in rows], "s--", color=BASE, alpha=0.6,
              label="scaled, w.r.t. the raw q·k")
    ax.loglog(dims, [r["raw"] for r in rows], "o-", color=ACCENT, label="unscaled, w.r.t. q·k")
    ax.set_xticks(dims, [str(d) for d in dims])
    ax.minorticks_off()
    ax.set_xlabel("d (dimension of q and k)")
    ax.set_ylabel("median ‖∂weights/∂scores‖")
    ax.set_title("How much a softmax row can still move")
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------- training with and without √d

SCALING_RUN = dict(d_model=32, n_heads=1, n_layers=2, d_ff=8, steps=300, lr=3e-2)


def scaling_config(d_model=32, n_heads=1, n_layers=2, d_ff=8):
    """The Config of ``scaling_model`` (checked by Config, nothing built)."""
    from dataclasses import replace

    from ..recipes import CAT_CONFIG
    return replace(CAT_CONFIG, d_model=d_model, n_heads=n_heads, n_layers=n_layers, d_ff=d_ff)


@on_the_cpu
def scaling_model(d_model=32, n_heads=1, n_layers=2, d_ff=8):
    """The cat-world model widened so one head has d_k = d_model / n_heads (32 by default)."""
    from ..model import Transformer
    return Transformer(scaling_config(d_model, n_heads, n_layers, d_ff), init="unit")


@on_the_cpu
@measure
def saturated_share(model, batch, scaled=True, above=0.99):
    """Share of layer 0's attention rows whose largest weight exceeds ``above``, over the real
    (not padding) positions of ``batch`` (inputs (B, T), targets (B, T) with -100 on pads) that
    see at least two keys (position 0 sees only itself: its one weight is always 1). above: from 0 to below 1."""
    check_model(model)
    inputs, targets = check_batch(batch, model.cfg.vocab_size)
    scaled = check_switch(scaled, "scaled")
    above = check_number(above, "above", low=0)
    if above >= 1:   # no weight exceeds 1: the share would be 0 whatever the model
        fail(f"above should be below 1 (a weight is at most 1), but got {above:g}")
    if not (targets[:, 1:] != -100).any():
        fail("batch should have a real (not padding) position after the first in some sequence, but has none")
    rows = []
    block = model.blocks[0]
    with torch.no_grad():
        block.attn(block.ln1(model.embed(inputs)), scaled=scaled,
                   keep=lambda name, x: rows.append(x) if name == "weights" else None)
    top = rows[0].max(-1).values                 # (B, H, T)
    real = (targets != -100)[:, None, :].expand_as(top).clone()
    real[..., 0] = False
    return float((top[real] > above).float().mean())


SCALING_RUNS = dict(seeds=(0, 1, 2), steps=300, lr=3e-2)   # the six runs shipped in data/scaling/


MAX_STEPS, MAX_SEEDS = 10_000, 20   # train_with_and_without_scaling's limits (the chapter: 300 steps, 3 seeds)
# The most work one train_with_and_without_scaling call may do, counted before it starts: per step of a run,
# 3 × the multiply-adds of a forward pass over the batch (forward and backward), STEP_WORK for its fixed cost
# and LAYER_STEP_WORK for each layer's (the calls and small ops of every layer, forward, backward and Adam: a
# deep thin model does few multiply-adds but many calls); per run, LAYER_BUILD_WORK a layer to build the model.
# About a minute here (a run-step of the chapter's model counts about 2.2·10^8 and takes about 10 ms; one of
# 1,000 layers of width 2 about 5·10^10 and 4 s); the chapter's shipped runs need about 4·10^11.
MAX_TRAINING_WORK = 6 * 10**11
STEP_WORK = 10**8   # a training step's fixed cost (its Python calls and small ops), counted as that many multiply-adds
LAYER_STEP_WORK = 5 * 10**7   # a training step's cost per layer beyond its multiply-adds (about 4 ms here)
LAYER_BUILD_WORK = 2 * 10**7  # building and measuring one layer of a fresh model, once a run (about 1.5 ms here)


def training_work(cfg, batch_shape, steps, runs):
    """The work ``runs`` training runs of ``steps`` steps of a model of ``cfg`` on a (B, T) batch do,
    as MAX_TRAINING_WORK counts it: multiply-adds, and the fixed costs of every step and every layer."""
    from ..sampling.compute import forward_macs

    B, T = batch_shape
    step = 3 * B * forward_macs(cfg, T) + STEP_WORK + LAYER_STEP_WORK * cfg.n_layers
    return runs * (steps * step + LAYER_BUILD_WORK * cfg.n_layers)


@on_the_cpu
@course_modes()   # inside torch.inference_mode() too: its own model and data, made outside it, take gradients
def train_with_and_without_scaling(seeds=SCALING_RUNS["seeds"], steps=SCALING_RUNS["steps"], lr=SCALING_RUNS["lr"],
                                   stop_after=None, **sizes):
    """Train the widened cat-world model (``scaling_model``, sizes go to it) on the cat world's
    training sentences twice per seed, with and without the division by √d_k, everything else
    equal (the same data, and the same initial weights for the same seed).

    Returns a list of dicts, one per run: seed, scaled, d_k, losses (steps,), final (the last loss),
    saturated_at_start (``saturated_share`` before training) and grad_W_Q_at_start
    (‖∂loss/∂W_Q‖ of layer 0 before the first step). stop_after: run only the first steps of
    the ``steps``-long schedule. Limits: steps <= MAX_STEPS (10,000), at most MAX_SEEDS (20) seeds.
    Torch's global random state is left as it was (each run seeds its own).
    """
    from .. import worlds
    from ..training import check_stop_after, train

    seeds = check_seeds(seeds, MAX_SEEDS)
    steps = check_steps(steps, MAX_STEPS)
    lr = check_lr(lr)
    run_steps = check_stop_after(stop_after, steps)
    unknown = set(sizes) - {"d_model", "n_heads", "n_layers", "d_ff"}
    if unknown:
        fail(f"the sizes should be some of d_model, n_heads, n_layers and d_ff, but got {shown(sorted(unknown)[0])}")
    cfg = scaling_config(**sizes)
    world = worlds.cat_world()
    batch = world.batch(world.train)
    work = training_work(cfg, tuple(batch[0].shape), run_steps, 2 * len(seeds))
    if work > MAX_TRAINING_WORK:
        fail(f"the training should need at most {MAX_TRAINING_WORK:.0e} units of work (this course's limit, about a "
             f"minute: multiply-adds and each step's and layer's fixed costs, counted before it starts), but "
             f"{2 * len(seeds)} runs of {run_steps:,} steps at "
             f"d_model={cfg.d_model}, n_layers={cfg.n_layers}, d_ff={cfg.d_ff} would need about {work:.1e}: "
             "ask for fewer seeds, fewer steps or a smaller model")
    runs = []
    for seed in seeds:
        for scaled in (True, False):
            start = {}

            def first_step(step, model, loss, start=start, scaled=scaled):
                if step == 0:      # after the first backward pass, before the first update
                    start["grad"] = float(model.blocks[0].attn.W_Q.grad.norm())
                    start["saturated"] = saturated_share(model, batch, scaled)

            model = scaling_model(**sizes)
            # a training loop, also when called inside torch.no_grad(); train seeds torch's global generator:
            # the learner's draws go on as before
            with torch.random.fork_rng(devices=[]), torch.enable_grad():
                losses = train(model, batch, steps=steps, lr=lr, seed=seed, progress=False,
                               on_step=first_step, scaled=scaled, stop_after=stop_after)
            runs.append(dict(seed=seed, scaled=scaled, d_k=model.cfg.d_k, losses=np.array(losses), final=losses[-1],
                             saturated_at_start=start["saturated"], grad_W_Q_at_start=start["grad"]))
    return runs


def runs_path():
    """data/scaling/runs.json: the runs of ``train_with_and_without_scaling(**SCALING_RUNS)``."""
    from ..weights import data_dir
    return data_dir() / "scaling" / "runs.json"


def shipped_runs(path=None):
    """The six runs of ``train_with_and_without_scaling(**SCALING_RUNS)`` read from
    data/scaling/runs.json (its build.py trains them again) instead of trained again: the same
    list of dicts, losses as (steps,) arrays."""
    import json
    from pathlib import Path

    import os

    if path is not None and not isinstance(path, (str, os.PathLike)):
        fail(f"path should be None (the shipped file) or a path to a runs.json, but got {shown(path)}")
    path = runs_path() if path is None else Path(path)
    if not path.is_file():
        fail(f"expected the shipped runs at {path}, but there is no file there; "
             "rebuild them with python data/scaling/build.py")
    try:
        shipped = json.loads(path.read_text())
        recipe, runs = shipped["recipe"], [{**run, "losses": np.array(run["losses"], dtype=float)} for run in shipped["runs"]]
    except (ValueError, KeyError, TypeError) as error:
        fail(f"expected {path} to hold the runs build.py writes (JSON with a recipe and runs), but it cannot be "
             f"read ({type(error).__name__}: {str(error)[:60]})")
    if recipe != {**SCALING_RUNS, "seeds": list(SCALING_RUNS["seeds"])}:
        fail(f"expected {path.name} to hold the runs of {SCALING_RUNS}, but it holds {recipe}")
    return runs


RUN_KEYS = ("seed", "scaled", "losses", "saturated_at_start", "grad_W_Q_at_start")


def check_runs(runs, name, keys):
    """``runs`` as train_with_and_without_scaling returns them, each holding ``keys``: seed a seed, scaled
    True or False, losses 1 to MAX_STEPS finite numbers above 0, and (when ``keys`` names them) d_k a
    whole number and the two measures at the start finite numbers >= 0; else one sentence. Returns a
    list of the runs, each a new dict with its losses as a float array (steps,)."""
    runs = check_rows(runs, name, keys, "train_with_and_without_scaling", "runs")
    checked = []
    for run in runs:
        run = {**run, "seed": check_seed(run["seed"], "each run's seed"),
               "scaled": check_switch(run["scaled"], "each run's scaled")}   # the checked values, not the given
        for key in ("saturated_at_start", "grad_W_Q_at_start"):
            if key in keys:
                run[key] = check_number(run[key], f"each run's {key}", low=0)
        if "d_k" in keys:
            run["d_k"] = check_positive_int(run["d_k"], "each run's d_k")
        checked.append({**run, "losses": positive_values([run], "losses", name, MAX_STEPS)[0]})
    return checked


def same_start(runs, again, rel=1e-4):
    """Whether ``again`` (a ``train_with_and_without_scaling`` with stop_after=n) is the start of
    ``runs`` (``shipped_runs``): per run the same seed, division and saturated share before the
    first update, ‖∂loss/∂W_Q‖ and each of the n losses within ``rel`` of the file's.
    (Over the first few steps rounding differences stay small; later they grow, see the chapter.)"""
    rel = check_number(rel, "rel", low=0, low_open=True)
    runs, again = (check_runs(value, name, RUN_KEYS) for name, value in (("runs", runs), ("again", again)))
    close = lambda a, b: abs(a - b) <= rel * abs(b)
    return len(runs) == len(again) and all(
        a["seed"] == b["seed"] and a["scaled"] == b["scaled"] and a["saturated_at_start"] == b["saturated_at_start"]
        and close(a["grad_W_Q_at_start"], b["grad_W_Q_at_start"])
        and len(a["losses"]) <= len(b["losses"]) and all(close(x, y) for x, y in zip(a["losses"], b["losses"]))
        for a, b in zip(again, runs))


def training_figure(runs):
    """The loss of every ``train_with_and_without_scaling`` run against the step (log scale)."""
    runs = check_runs(runs, "runs", ("seed", "scaled", "losses", "d_k"))
    fig, ax = plt.subplots(figsize=(6.4, 3.3))
    for run in runs:
        ax.plot(run["losses"], color=BASE if run["scaled"] else ACCENT, lw=1.2, alpha=0.85,
                ls="-" if run["scaled"] else "--",
                label=("with ÷√d_k" if run["scaled"] else "without ÷√d_k") if run["seed"] == runs[0]["seed"] else None)
    ax.set_yscale("log")
    ax.set_yticks([0.5, 1, 2, 5, 10, 20], ["0.5", "1", "2", "5", "10", "20"])
    ax.minorticks_off()
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (log scale)")
    ax.set_title(f"cat world, one head of d_k = {runs[0]['d_k']}: one line per run")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


@underflow_to_zero
def log_fit(dims, values):
    """Least-squares fits of ln(values) against √d and against d.

    dims, values: (n,) each (each d at most MAX_D, 2**53). Returns a dict: for "sqrt_d" and "d", (slope,
    intercept, the largest |residual| of ln(values)).
    """
    d = np.asarray(check_dims(dims), dtype=float)
    values = as_array(values, "values", 1)
    if len(values) != len(d) or len(d) < 3:
        fail(f"dims and values should have one value per d, at least 3 of each, but got {len(d)} dims and "
             f"{len(values)} values")
    if (d == d[0]).all():   # every point at one d: no line through them is defined
        fail(f"dims should hold at least two different values of d (a line needs points at two d or more), "
             f"but every d is {int(d[0]):,}")
    if not (np.isfinite(values) & (values > 0)).all():   # their logarithm is fitted
        fail(f"values should be finite numbers above 0 (their logarithm is fitted), but they hold "
             f"{shown(float(values[~(np.isfinite(values) & (values > 0))][0]))}")
    y = np.log(values)
    fits = {}
    for name, x in (("sqrt_d", np.sqrt(d)), ("d", d)):
        slope, intercept = np.polyfit(x, y, 1)
        fits[name] = (float(slope), float(intercept), float(np.abs(y - (slope * x + intercept)).max()))
    return fits


MAX_ADAM_GRADIENT = 1e150   # its square, and Adam's running mean of squares, fit a float64
MAX_ADAM_LR = 1e100         # a step of about lr, times any number of steps, fits a float64
MAX_ADAM_STEPS = 10_000     # rows (steps) one adam_trajectory call runs (the chapter: 50; 10,000 take about 0.6 s)


@on_the_cpu
@underflow_to_zero
def adam_trajectory(gradients, factor=1.0, lr=1e-2):
    """Adam (torch's defaults but ``lr``) on one parameter vector fed ``factor`` × the given
    gradients, one row per step. gradients: (steps, p). Returns the parameter after each step
    (steps, p), starting from 0."""
    g = as_array(gradients, "gradients", 2)
    steps, p = g.shape
    if steps > MAX_ADAM_STEPS or p < 1:
        fail(f"gradients should be (steps, p) with at most {MAX_ADAM_STEPS:,} steps (this course's limit) and p >= 1 "
             f"numbers each, but it has shape {g.shape}")
    # the gradients, the trajectory kept step by step and then made one array (8 bytes a number each),
    # and the parameter, its gradient, factor × a row and Adam's two running means (8 bytes × p each)
    check_bytes(24 * steps * p + 48 * p, f"Adam on gradients of shape {g.shape}", "give fewer steps or numbers")
    if not np.isfinite(g).all():
        fail(f"gradients should hold finite numbers, but they hold {shown(g[~np.isfinite(g)][0])}")
    factor = check_number(factor, "factor", low=0, low_open=True)
    lr = check_number(lr, "lr", low=0, low_open=True, high=MAX_ADAM_LR)   # each step moves about lr
    largest = float(np.abs(g).max(initial=0.0)) * factor
    if largest > MAX_ADAM_GRADIENT:   # Adam squares each gradient: beyond this the square is inf
        fail(f"factor × the largest gradient should be at most {MAX_ADAM_GRADIENT:g} (Adam squares it, and a "
             f"float64 holds up to about 1e308), but factor={factor:g} gives {largest:g}")
    w = torch.zeros(g.shape[1], dtype=torch.float64, requires_grad=True)
    opt = Adam([w], lr=lr)
    out = []
    for row in g:
        w.grad = torch.tensor(row * factor)
        opt.step()
        out.append(w.detach().clone().numpy())
    return np.array(out)


# ----------------------------------------------------------------- the division inside a trained model

def _tensor(x, name, shape):
    """``x`` as a float torch tensor of ``shape`` (None in it: any size), else one sentence."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(as_array(x, name))
    check_tensor_size(x, name)
    if x.dim() != len(shape) or any(want is not None and got != want for got, want in zip(x.shape, shape)):
        want = "(" + ", ".join("·" if n is None else str(n) for n in shape) + ")"
        fail(f"{name} should have shape {want}, but it has shape {tuple(x.shape)}")
    return x if x.is_floating_point() else x.float()


@on_the_cpu
def scaled_scores(x, W_Q, W_K, b_Q, b_K, n_heads):
    """Every head's scaled scores of one attention layer, before the causal mask: the course's own
    version of the piece the learner writes in chapter 03.

    x (T, d_model): the layer's input (after its LayerNorm; the trace's "L0.ln1"). W_Q, W_K
    (d_model, d_model) and b_Q, b_K (d_model,): the layer's parameters, used as x @ W_Q + b_Q
    (one row per token). n_heads: H; head h owns columns h*d_k:(h+1)*d_k, d_k = d_model / H.
    Each may be a tensor, a NumPy array or a list (read as float64); of several float dtypes, all are
    computed in the widest (float32 weights beside a float64 x: float64), as ``qkv.attention_head`` does.
    Returns (H, T, T): scores[h, i, j] = q_i·k_j / √d_k for head h, query i and key j.
    """
    x = _tensor(x, "x", (None, None))
    T, d_model = x.shape
    n_heads = check_positive_int(n_heads, "n_heads")
    if d_model % n_heads:
        fail(f"d_model = {d_model} should split into n_heads = {n_heads} equal heads, but it does not")
    W_Q, W_K = (_tensor(W, name, (d_model, d_model)) for W, name in ((W_Q, "W_Q"), (W_K, "W_K")))
    b_Q, b_K = (_tensor(b, name, (d_model,)) for b, name in ((b_Q, "b_Q"), (b_K, "b_K")))
    inputs = dict(x=x, W_Q=W_Q, W_K=W_K, b_Q=b_Q, b_K=b_K)
    for name, value in inputs.items():
        check_finite(value.detach(), name)
    check_widths(T, d_model // n_heads, "x (one row a token)", "each head's queries and keys (d_model / n_heads)")
    dtype = functools.reduce(torch.promote_types, (t.dtype for t in inputs.values()))
    # x and the parameters made one dtype, q, k (T x d_model each, twice: before and after the bias) and the
    # scores (H x T x T, and their division)
    check_bytes(torch.finfo(dtype).bits // 8 * (5 * T * d_model + 2 * d_model * (d_model + 1) + 2 * n_heads * T * T),
                f"scaled_scores on {count(T)} rows of x", "give fewer rows")
    x, W_Q, W_K, b_Q, b_K = (t.to(dtype) for t in (x, W_Q, W_K, b_Q, b_K))
    d_k = d_model // n_heads
    q = (x @ W_Q + b_Q).view(T, n_heads, d_k).transpose(0, 1)    # (H, T, d_k): head h's columns
    k = (x @ W_K + b_K).view(T, n_heads, d_k).transpose(0, 1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)             # (H, T, T)
    return check_made(scores, "scaled_scores", inputs)            # (x = 1e30 would overflow float32)


@on_the_cpu
@measure
def layer_case(model, words, layer=0, world=None):
    """One layer of ``model`` on one prompt, as chapter 03's exercise uses it: a dict of x (T, d_model),
    the layer's W_Q, W_K, b_Q, b_K, n_heads, and the trace's scores (H, T, T), -inf above the diagonal.
    words: a list of the world's words, read by ``world``'s tokenizer (None: the cat world's); a model
    whose vocabulary is not the world's is refused (its ids would name other words). A model without
    biases gets zero biases (its scores are those of x @ W_Q + 0); a model whose scores are not
    ``scaled_scores``' q·k/√d_k of these pieces (rotary positions, keys shared by several heads) is refused."""
    from ..explorer import check_model_and_world
    from ..worlds import cat_world
    check_model(model)
    model, world = check_model_and_world(model, cat_world() if world is None else world)
    layer = check_positive_int(layer, "layer", minimum=0)
    if layer >= len(model.blocks):
        fail(f"layer should be one of the model's {len(model.blocks)} layers (0..{len(model.blocks) - 1}), "
             f"but got {layer}")
    check_plain_scores(model)
    trace = model(world.tokenizer.encode(words), trace=True)
    attn = model.blocks[layer].attn
    b_Q, b_K = (torch.zeros(attn.W_Q.shape[1], dtype=attn.W_Q.dtype) if b is None else b.detach()
                for b in (attn.b_Q, attn.b_K))
    return dict(x=trace[f"L{layer}.ln1"], W_Q=attn.W_Q.detach(), W_K=attn.W_K.detach(), b_Q=b_Q,
                b_K=b_K, n_heads=attn.n_heads, scores=trace[f"L{layer}.scores"])


def check_plain_scores(model):
    """Refuse a model whose attention scores are not q·k/√d_k of x @ W_Q + b_Q and x @ W_K + b_K, head by
    head (what ``scaled_scores`` computes): rotary positions turn q and k first, and shared key heads
    (n_kv_heads) give W_K fewer columns than W_Q."""
    cfg = model.cfg
    if cfg.positions == "rotary":
        fail("layer_case should get a model whose scores scaled_scores computes, without rotary positions, "
             "but this one has positions='rotary'")
    if cfg.n_kv_heads not in (0, cfg.n_heads):
        fail(f"layer_case should get a model with a key head per query head (scaled_scores splits W_K as W_Q), "
             f"but this one has n_kv_heads={cfg.n_kv_heads} for n_heads={cfg.n_heads}")


@on_the_cpu
@course_modes()   # inside torch.inference_mode() too: the gradients are taken outside it (put back after)
@measure
def score_path_gradients(model, batch, layer=0):
    """Where the chain rule's 1/√d_k of one layer's division goes, measured.

    The loss of ``model`` on ``batch`` (inputs, targets with -100 ignored) is differentiated twice:
    as it is, and with the factor 1/√d_k that the division puts on the gradient of the raw q·k
    undone in layer ``layer`` (a hook multiplies the gradient arriving at its scores by √d_k; the
    forward pass, and so the loss, is the same). Returns {parameter name: dict(as_is=‖gradient‖,
    undone=‖gradient‖ with the factor undone, identical=whether the two gradients are the same
    tensor, bit for bit)} for every parameter. Inside torch.inference_mode() too (a batch made there is
    copied; a model loaded there is refused: its parameters cannot take part in a backward pass).
    """
    check_model(model)
    inputs, targets = check_batch(batch, model.cfg.vocab_size)
    layer = check_positive_int(layer, "layer", minimum=0)
    if layer >= len(model.blocks):
        fail(f"layer should be one of the model's {len(model.blocks)} layers, but got {layer}")
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
    if frozen:
        fail(f"every parameter of the model should require grad (its gradient is measured), but {frozen[0]} does not"
             f"{f' (nor {len(frozen) - 1} more)' if len(frozen) > 1 else ''}: call model.requires_grad_(True) first")
    if any(p.is_inference() for p in model.parameters()):   # autograd cannot save them for the backward pass
        fail("the model's parameters should be made outside torch.inference_mode() (score_path_gradients takes their "
             "gradients), but they were made inside it: load the model again outside it")
    inputs, targets = (t.clone() if t.is_inference() else t for t in (inputs, targets))   # a batch made inside it
    names, params = zip(*model.named_parameters())
    root = math.sqrt(model.blocks[layer].attn.d_k)

    def undo(scores):
        scores = scores * 1.0                      # a new node, so the hook sees only this layer's scores
        scores.register_hook(lambda grad: grad * root)
        return scores

    grads = []
    for replace in (None, {f"L{layer}.scores": undo}):
        with torch.enable_grad():   # (inside torch.no_grad() too) torch.autograd.grad leaves every .grad as it was
            logits = model(inputs, replace=replace)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                     ignore_index=-100)
            found = torch.autograd.grad(loss, params, allow_unused=True)
        grads.append({name: torch.zeros_like(p) if g is None else g for name, p, g in zip(names, params, found)})
    return {name: dict(as_is=float(g.norm()), undone=float(grads[1][name].norm()),
                       identical=bool(torch.equal(g, grads[1][name])))
            for name, g in grads[0].items()}
