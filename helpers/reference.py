"""NumPy reference functions for the by-hand chapters.

Pure functions on plain arrays, written to be read. Notation follows the source
texts: T tokens, d_model wide residual stream, h heads of width d_k.
"""
import functools
import math

import numpy as np

from .errors import as_array, check_bytes, check_finite, check_mask, check_number, check_positive_int, check_switch, \
    count, entries, fail, shown, to_numpy, whole

MAX_ENTRIES = 50_000_000   # the most entries a table made here may hold


def check_entries(count, what, peak):
    """Refuse, before allocating it, a table of more than MAX_ENTRIES entries; ``peak``: the bytes an entry
    takes at the call's peak (measured), so that the sentence states what the largest table would need."""
    if count > MAX_ENTRIES:
        fail(f"{what} should hold at most {MAX_ENTRIES:,} entries (about {MAX_ENTRIES * peak / 10**6:,.0f} MB at "
             f"the peak of making it), but would hold {shown(count)}")


def underflow_to_zero(function):
    """``function`` run with NumPy's underflow ignored (NumPy's default), whatever ``np.seterr`` a cell set (``all=
    "raise"``, a debugging switch): a weight or a product below about 1e-308 is 0, as it should be, not a
    FloatingPointError. A fresh ``np.errstate`` each call (NumPy 1's, used as a decorator, is one shared object)."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        with np.errstate(under="ignore"):
            return function(*args, **kwargs)
    return call


def finite(x, name):
    """x as a float array (``as_array``) of finite numbers."""
    return check_finite(as_array(x, name), name)


# Bytes softmax makes a score: x as float64 (a copy when it came as another type), the result (shifted, its exp
# and the division done in place), the True/False tables of the NaN, +inf and all -inf tests (one at a time).
SOFTMAX_BYTES = 18


@underflow_to_zero
def softmax(x, axis=-1):
    """Softmax along ``axis``; -inf entries get exactly 0.

    x: any shape. Returns the same shape, each slice along ``axis`` summing to 1.
    Memory: SOFTMAX_BYTES a score, counted before the work (at most about 89 million scores).
    """
    x = as_array(x, "x")
    check_bytes(SOFTMAX_BYTES * x.size, f"softmax of {count(x.size)} scores", "give fewer scores")
    if x.ndim == 0:   # (else the default axis=-1 would be blamed)
        fail(f"x should be at least 1-D (a row of scores to turn into weights), but got one number, {shown(float(x))}")
    if x.size == 0:
        fail(f"softmax expected at least one score, but x has shape {x.shape}")
    expected = f"an axis of x, which has {x.ndim} (use -1 for the last)"
    axis = whole(axis, "axis", expected)   # (int's own value: a subclass's comparisons may lie)
    if not -x.ndim <= axis < x.ndim:
        fail(f"axis should be {expected}, but got axis={shown(axis)}")
    if np.isnan(x).any() or np.isposinf(x).any():
        fail(f"x should hold numbers or -inf (a hidden entry), but it holds NaN or +inf in "
             f"{int((np.isnan(x) | np.isposinf(x)).sum())} of {x.size} entries, whose softmax is NaN")
    blind = np.isneginf(x).all(axis=axis)
    if blind.any():
        fail(f"x should leave each slice along axis {axis} at least one score that is not -inf, but "
             f"{count(int(blind.sum()))} of {count(blind.size)} are all -inf (hidden), whose softmax is 0/0")
    with np.errstate(over="ignore"):   # a score more than 1.8e308 below the largest: -inf, whose weight 0 is right
        e = x - np.max(x, axis=axis, keepdims=True)   # the only table made: exp and division in place
    np.exp(e, out=e)
    e /= np.sum(e, axis=axis, keepdims=True)
    return e


CAUSAL_MASK_BYTES = 3   # bytes causal_mask makes an entry at its peak (measured): the ones, triu's test and the result


def causal_mask(T):
    """Boolean (T, T) mask, True where a query must NOT look (keys after it).

    Row i is the query at position i; entries j > i are True.
    """
    T = check_positive_int(T, "T")
    check_entries(T * T, f"a causal mask of T={shown(T)}", CAUSAL_MASK_BYTES)
    return np.triu(np.ones((T, T), dtype=bool), k=1)


# Bytes check_mask makes a mask entry at most: the mask as float64 (when it came as no bool array), its
# True/False tests (!= 0, != 1, their and) and the bool mask it returns.
MASK_BYTES = 12


def mask_bytes(shape):
    """What ``check_mask`` makes of a mask for scores ending in ``shape`` (T_q, T_k), counted before it runs
    (a mask of another shape is refused there, before it is converted)."""
    return MASK_BYTES * math.prod(shape[-2:])


def apply_mask(scores, mask):
    """Put -inf where ``mask`` is True. scores: (..., T_q, T_k); mask: (T_q, T_k) of True/False, or of
    1 (hide) and 0 (keep) only (``check_mask``: 0.5, NaN or an additive mask of -inf is refused).
    Memory: the scores as float64 and the result (8 bytes a score each) and the mask's tables, counted first."""
    scores = as_array(scores, "scores")
    check_bytes(16 * scores.size + mask_bytes(scores.shape), f"apply_mask on {count(scores.size)} scores",
                "give fewer scores")
    return np.where(check_mask(mask, scores.shape[-2:]), -np.inf, scores)


@underflow_to_zero
def attention(Q, K, V, causal=False, mask=None, scale=True):
    """Scaled dot-product attention.

    Q: (..., T_q, d_k), K: (..., T_k, d_k), V: (..., T_k, d_v).
    causal: hide keys after each query (needs T_q == T_k).
    mask: optional boolean (T_q, T_k), True = hidden (or 1 = hidden, 0 = kept; see ``apply_mask``).
    scale: divide the scores by sqrt(d_k).
    Returns (output (..., T_q, d_v), weights (..., T_q, T_k)).
    """
    causal, scale = check_switch(causal, "causal"), check_switch(scale, "scale")
    check_bytes(8 * sum(entries(X, name) for X, name in ((Q, "Q"), (K, "K"), (V, "V"))),
                "Q, K and V as float64 arrays", "give smaller arrays")   # before any is copied
    Q, K, V = as_array(Q, "Q", (2, 3, 4)), as_array(K, "K", (2, 3, 4)), as_array(V, "V", (2, 3, 4))
    for name, X in (("Q", Q), ("K", K), ("V", V)):
        check_finite(X, name)
    if K.shape[-1] != Q.shape[-1]:
        fail(f"K has d_k={K.shape[-1]} but Q has d_k={Q.shape[-1]}; they must be equal")
    if Q.shape[-1] == 0:   # no dot product to take (and 0 / sqrt(0) with scaling)
        fail(f"Q and K should have d_k of at least 1 number a row, but got d_k=0 (shapes {Q.shape} and {K.shape})")
    empty = next((name for name, X in (("Q", Q), ("K", K)) if X.shape[-2] == 0), None)
    if empty is not None:   # no query to answer, or no key to attend to (a softmax over nothing)
        fail(f"{empty} should have at least one row (a {'query' if empty == 'Q' else 'key'}), but it has none "
             f"(Q has shape {Q.shape} and K {K.shape})")
    if V.shape[-2] != K.shape[-2]:
        fail(f"V has {V.shape[-2]} rows but K has {K.shape[-2]}; each key needs one value")
    try:
        batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    except ValueError:
        fail(f"Q, K and V should have leading axes that broadcast together, but have shapes {Q.shape}, {K.shape} "
             f"and {V.shape}")
    T_q, T_k = Q.shape[-2], K.shape[-2]
    masks = (MASK_BYTES * T_q * T_k if causal else 0) \
        + (mask_bytes((T_q, T_k)) if mask is not None else 0)   # the causal mask's tables, a given mask's
    check_bytes(8 * (Q.size + K.size + V.size) + 4 * 8 * math.prod(batch) * T_q * (T_k + V.shape[-1]) + masks,
                f"attention of {count(T_q)} queries over {count(T_k)} keys (Q, K, V and four float64 (T_q, T_k) "
                "tables)", "give fewer rows")
    d_k = Q.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):   # an overflow is refused below, in one sentence
        scores = Q @ np.swapaxes(K, -1, -2)
        if scale:
            scores = scores / math.sqrt(d_k)
    if not np.isfinite(scores).all():   # finite Q and K whose products overflow float64
        fail(f"Q and K should give finite scores, but {count(int((~np.isfinite(scores)).sum()))} of their "
             f"{count(scores.size)} dot products are NaN or infinite (numbers near 1e154 or more overflow): scale them down")
    if causal:
        if Q.shape[-2] != K.shape[-2]:
            fail(f"a causal mask needs as many queries as keys, but Q has {Q.shape[-2]} "
                 f"rows and K has {K.shape[-2]}")
        scores = apply_mask(scores, causal_mask(Q.shape[-2]))
    if mask is not None:
        scores = apply_mask(scores, mask)
    blind = np.isneginf(scores).all(axis=-1)
    if blind.any():
        fail(f"every key is hidden from query {int(np.argwhere(blind)[0][-1])}, so its softmax is undefined (0/0); "
             "a mask should leave each query at least one key (the causal mask leaves it itself)")
    weights = softmax(scores, axis=-1)
    return weights @ V, weights


def split_heads(X, h):
    """(T, h*d_k) -> (h, T, d_k): columns [i*d_k, (i+1)*d_k) become head i."""
    X = as_array(X, "X", 2)
    h = check_positive_int(h, "h")
    T, width = X.shape
    if width % h:
        fail(f"h should divide X's width {width} into equal heads, but got h={count(h)}")
    return X.reshape(T, h, width // h).transpose(1, 0, 2)


def merge_heads(X):
    """(h, T, d_k) -> (T, h*d_k): the heads side by side again."""
    X = as_array(X, "X", 3)
    check_bytes(16 * X.size, f"merge_heads of {count(X.size)} numbers (X as float64 and its copy)", "give a smaller X")
    h, T, d_k = X.shape
    return X.transpose(1, 0, 2).reshape(T, h * d_k)


MAX_NORMED = 1e145   # the largest |x| layer_norm takes: d <= 1e8 squares of differences up to 2e145 sum below 1e308

# Bytes layer_norm makes a number of x at its peak: x as float64 (a copy when it came as another type), the result
# (x - mean, then divided, scaled and shifted in place; var's own x - mean is gone before it is made) and the
# True/False test of finiteness.
LAYER_NORM_BYTES = 17


@underflow_to_zero
def layer_norm(x, gamma=None, beta=None, eps=1e-5):
    """Normalise each row to mean 0, variance 1, then scale by gamma and shift by beta.

    x: (..., d). gamma, beta: (d,) or None (1 and 0). The variance is the
    population variance (divide by d), as in torch.nn.LayerNorm.
    Memory: LAYER_NORM_BYTES a number and gamma and beta as float64, counted before the work. Every |x| at
    most MAX_NORMED (1e145: the variance squares them), every output |gamma| × √d + |beta| within float64.
    """
    x = finite(x, "x")
    if x.ndim == 0 or x.shape[-1] == 0:
        fail(f"x should have at least one axis of d >= 1 numbers to normalise, but has shape {x.shape}")
    largest = max(float(x.max(initial=0.0)), -float(x.min(initial=0.0)))   # (no new table; x may have no rows)
    if largest > MAX_NORMED:   # the mean's sum, or the variance's squares, would overflow float64
        fail(f"x should hold numbers of size at most {MAX_NORMED:g}, for layer_norm's sums of their squares to fit a "
             f"float (at most about 1.8e308), but its largest is {largest:.4g}: scale x down")
    eps = check_number(eps, "eps", low=0, low_open=True)   # a negative eps can make the variance negative
    d = x.shape[-1]
    given = sum(d if v is None else entries(v, name) for v, name in ((gamma, "gamma"), (beta, "beta")))
    check_bytes(LAYER_NORM_BYTES * x.size + 8 * given, f"layer_norm of {count(x.size)} numbers", "give a smaller x")
    gamma = np.ones(d) if gamma is None else check_finite(as_array(gamma, "gamma", 1), "gamma")
    beta = np.zeros(d) if beta is None else check_finite(as_array(beta, "beta", 1), "beta")
    if gamma.shape != (d,) or beta.shape != (d,):
        fail(f"gamma and beta need length d={d}, but have {gamma.shape[0]} and {beta.shape[0]}")
    # a normalised entry is at most √d in size, so each output at most |gamma| × √d + |beta| (a Python float: inf,
    # not a warning, when it overflows)
    bound = float(np.abs(gamma).max()) * math.sqrt(d) + float(np.abs(beta).max())
    if bound > np.finfo(float).max:
        fail(f"gamma and beta should keep the output within what a float holds (|gamma| × √d + |beta| at most about "
             f"1.8e308), but their largest entries are {float(np.abs(gamma).max()):.4g} and "
             f"{float(np.abs(beta).max()):.4g}")
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    out = x - mean   # then in place: (x - mean) / sqrt(var + eps) * gamma + beta, one table
    out /= np.sqrt(var + eps)
    out *= gamma
    out += beta
    return out


# Bytes gelu makes a number: x as float64 (a copy when it came as another type), the test of finiteness
# (True/False), 1 + erf(x / √2) (made in place) and x * 0.5, which becomes the result.
GELU_BYTES = 25


@underflow_to_zero
def gelu(x):
    """Exact GELU: x * Phi(x), with Phi the standard normal CDF (Phi(x) = (1 + erf(x / √2)) / 2).

    x: any shape; returns the same shape (a number for a number). Memory: GELU_BYTES a number, counted
    before the work (at most about 64 million numbers).
    """
    x = finite(x, "x")
    check_bytes(GELU_BYTES * x.size, f"gelu of {count(x.size)} numbers", "give fewer numbers")
    import torch

    phi = np.asarray(x / math.sqrt(2.0))   # a new table (0-d for a number), then erf and + 1 in place:
    torch.from_numpy(phi).erf_()           # torch's erf, vectorised (math.erf's rounding or closer: 1 ulp at most)
    phi += 1.0
    out = x * 0.5
    out *= phi
    return out


def relu(x):
    """max(x, 0). Memory: x as float64, its test of finiteness and the result (17 bytes a number), counted first."""
    x = as_array(x, "x")
    check_bytes(17 * x.size, f"relu of {count(x.size)} numbers", "give fewer numbers")
    return np.maximum(check_finite(x, "x"), 0.0)


# The largest angle (a position times a frequency, in radians) a float resolves: float numbers from 2**k on lie
# 2**(k - 52) apart (float64) or 2**(k - 23) (float32), so up to 2**49 (about 5.6e14) a float64 angle, and up to
# 2**20 (1,048,576) a float32 one, is rounded by at most 1/32 of a radian, while positions k and k + 1 turn the
# fastest pair (w_0 = 1) by angles 1 radian apart. Past it the rounding grows, and past 2**53 (float64, about 9e15)
# or 2**24 (float32) position k + 1 gets the very angle of position k.
MAX_ANGLE = {"float64": 2.0 ** 49, "float32": 2.0 ** 20}


def check_angles(largest, name, kind="float64"):
    """Refuse positions whose largest angle, |``largest``| (the furthest position, a finite number) times the
    fastest frequency (1 radian a position: the base is > 1, ``check_base``), passes MAX_ANGLE[kind], in one
    sentence naming ``name``."""
    limit = MAX_ANGLE[kind]
    if abs(largest) > limit:
        fail(f"{name} should be at most {plain(limit)} in size ({kind} angles past 2**{math.log2(limit):.0f} "
             f"radians are rounded by more than 1/32 radian, so nearby positions would turn alike), but got "
             f"{plain(largest)}")


def plain(x):
    """A number as a sentence shows it: whole ones below 1e15 with thousands separators, others in 4 digits."""
    return f"{x:,.0f}" if float(x).is_integer() and abs(x) < 1e15 else f"{x:.4g}"


# Bytes sinusoidal_positions makes an entry at its peak (measured): the table (8) and, for half its columns at a
# time, the angles and their sines or cosines (4 + 4).
SINUSOIDAL_BYTES = 16


# The base of the sinusoidal and rotary frequencies base**(-2i/d), one rule for the reference and the model
# (model.RANGES: Config.rotary_base, Attention's rotary, rotate_pairs), as check_number's (low, high, low_open).
# Above 1, so the fastest pair turns 1 radian a position and every other one slower: at exactly 1 every pair would
# turn alike (one signal d/2 times over, no slow pair to tell far positions apart), below 1 ever faster, past
# float64's range. At most 1e12: past any real model's (Llama 3: 500,000), and far inside float32's range, in
# which the model computes base**(-2i/d) (past about 3.4e38 the base itself would read inf).
BASE_RANGE = (1.0, 1e12, True)


def check_base(base, name="base"):
    """The base of the sinusoidal and rotary frequencies base**(-2i/d): a finite number > 1 and at most 1e12
    (``BASE_RANGE``); return it as float. Checked before anything about the positions, whose limit depends on it."""
    return check_number(base, name, *BASE_RANGE)


@underflow_to_zero
def sinusoidal_positions(n, d, base=10000.0):
    """The fixed (n, d) table of Vaswani et al., columns interleaved sin, cos.

    Row p, pair i: [sin(p * w_i), cos(p * w_i)] with w_i = base**(-2i/d).
    Row 0 is position 0 (the Primer's "pos 1"). Memory: SINUSOIDAL_BYTES (16) an entry at the peak, for at most
    MAX_ENTRIES entries (about 800 MB). n - 1 at most MAX_ANGLE["float64"] (2**49: the angles of
    the fastest pair, p radians, resolved to 1/32 radian).
    """
    n, d = check_positive_int(n, "n"), check_positive_int(d, "d")
    base = check_base(base)
    if d % 2:
        fail(f"sinusoidal positions need an even width d, but got d={d}")
    check_entries(n * d, f"a table of n={shown(n)} positions by d={shown(d)}", SINUSOIDAL_BYTES)
    check_angles(n - 1, "the last position, n - 1")
    p = np.arange(n)[:, None]
    w = base ** (-np.arange(0, d, 2) / d)
    table = np.zeros((n, d))
    table[:, 0::2] = np.sin(p * w)
    table[:, 1::2] = np.cos(p * w)
    return table


# Bytes rotate_pairs makes a number of x: x as float64, the angles, their cos and sin (half a row each: 4 bytes
# a number each), the result, and the products even * cos, odd * sin and their sum or difference (4 each), the
# True/False tests of finiteness.
ROTATE_BYTES = 8 + 3 * 4 + 8 + 3 * 4 + 1


@underflow_to_zero
def rotate_pairs(x, positions, base=10000.0):
    """Rotary position embedding (RoPE): turn each column pair of row t by positions[t] * w_i.

    x: (T, d) with d even; positions: (T,) integers. Pair i is columns (2i, 2i+1),
    w_i = base**(-2i/d), the same frequencies as the sinusoidal table. Every angle, |position| x w_i, at most
    MAX_ANGLE["float64"] (2**49, where float64 still resolves it to 1/32 radian); base: > 1 and at most 1e12
    (``BASE_RANGE``).
    """
    base = check_base(base)   # first: the positions' limit depends on it
    x = as_array(x, "x", 2)
    T, d = x.shape
    if d % 2:
        fail(f"rotary positions need an even width d, but got d={d}")
    check_bytes(ROTATE_BYTES * x.size + 8 * entries(positions, "positions"),
                f"rotate_pairs of {count(x.size)} numbers", "give a smaller x")   # before positions are copied
    positions = to_numpy(positions, "positions")
    if positions.shape != (T,):
        fail(f"positions should have one entry per row of x ({T}), but has shape {positions.shape}")
    if not np.isfinite(positions).all():
        fail(f"positions should be finite numbers, but {int((~np.isfinite(positions)).sum())} of {T} are NaN or infinite")
    check_finite(x, "x")
    if T and d:
        check_angles(float(np.abs(positions).max()), "each position")
    frequencies = base ** (-np.arange(0, d, 2) / d)
    angle = positions[:, None] * frequencies
    cos, sin = np.cos(angle), np.sin(angle)
    even, odd = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2] = even * cos - odd * sin
    out[:, 1::2] = even * sin + odd * cos
    return check_finite(out, "the rotated x (numbers near 1e308 overflow)")
