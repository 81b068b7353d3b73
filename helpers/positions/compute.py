"""Chapter 06's compute: attention is blind to order, and three ways to give it order.

* ``permutation_matrix``, ``match_permutation``: scramble rows and find how two
  orderings of the same tokens line up.
* ``random_attention``, ``attention_stack``: small NumPy attention layers with a
  residual, for the order demos.
* ``order_demo``: the Lecture's ``shutil.copy(src, dst)`` against
  ``shutil.copy(dst, src)``, with and without positions and the causal mask.
* ``sinusoidal_positions``, ``rotate``: the course's own pieces of a GPT that the learner
  writes in this chapter (the sinusoidal table in torch; the rotary turn of queries and keys).
* ``offset_rotation``: the (d, d) matrix R_k with PE[p] @ R_k = PE[p + k] for every p.
* ``rope_scores``, ``diagonal_spread``: RoPE scores depend on the offset only.
* ``score_terms``, ``term_shares``, ``spread_without``: layer 0's scores of a model with added positions, split
  into the word, position and constant parts of its queries and keys, and how much of what
  is not a function of the offset each pair of parts carries.
* ``row_moves``, ``rows_unchanged``: how far training moved each row of a learned
  position table, and which rows it never reached.
* ``scramble``, ``next_token_view``: the explorer's compute, the trained cat model's
  next-token distribution with positions on or off and the prompt reordered.
* ``model_order_demo``: two orderings of the same words through a trained model.
* ``position_task``, ``order_blind_ceiling``, ``position_probe``: a tiny model without
  positions, trained to say where each token sits, with and without the mask.
* ``shifted_logits``, ``shifted_loss``: a model's loss with its sentences moved to later positions.

Row-vector convention throughout: X is (T, d), one row per token.
"""
import itertools
import math

import numpy as np
import torch

from .. import reference as ref
from ..reference import check_angles, check_base
from ..errors import MAX_BYTES, as_array, check_bytes, check_finite, check_number, check_positive_int, \
    check_seed, check_switch, check_tensor, check_tensor_size, count, fail, length, next_seed, \
    plain, shape_before_copy, shown, to_numpy, unreadable
from ..explorer import check_model_and_world
from ..heads.compute import as_numpy
from ..model import MAX_LAYERS, MAX_TOKENS, Transformer, check_depth, check_model, longest_prompt, measure, rotate_pairs, \
    sinusoidal_table
from ..worlds import words_of
from ..states import course_modes, on_the_cpu

MAX_SQUARE = math.isqrt(MAX_BYTES // 8)   # the largest n of an (n, n) float64 table within MAX_BYTES: 14,188
MAX_SHIFT = 1_000_000     # the furthest position shifted_logits places a sequence (the notebook goes to 1,000); with
                          # its MAX_TOKENS tokens it stays within MAX_ANGLE["float32"] (2**20), the angles float32 resolves
MAX_PROBE_STEPS = 10_000  # position_probe's training steps at most (the notebook trains 150)
# position_probe's work: steps x (n x T x (T + V + 16) + PROBE_STEP_WORK), the numbers a training step moves and its
# fixed cost (its Python calls and small ops), at most MAX_PROBE_WORK: about a minute of training at the course's speed
# (masking's 6 ms a step). Measured on a machine 2.6 times slower: 5.4 ms a step and up to 0.17 microseconds a number,
# so 2.1 ms and 0.065 at the course's speed. The notebook's 150 steps of 128 x 6 x 28 count 9 million; the default n,
# T, V at 10,000 steps 615 million (about 37 s).
MAX_PROBE_WORK = 10**9
PROBE_STEP_WORK = 40_000
MAX_ID = 2**63 - 1        # the largest token id a 64-bit (torch.long) tensor holds


MAX_SCORE = 1e100   # the largest score off_offset, shift_free, term_shares and spread_without read: their sums,
                    # differences and squares then stay far inside float64 (a model's scores are below 1e3)
LARGEST = float(np.finfo(np.float64).max)


def check_size(x, name, most, why):
    """Refuse an array ``x`` (finite where it is read; -inf and NaN are left to the caller) holding a
    number larger in size than ``most``, in one sentence saying ``why``; return x."""
    seen = x[np.isfinite(x)]
    largest = float(np.abs(seen).max()) if seen.size else 0.0
    if largest > most:
        fail(f"{name} should hold numbers of size at most {most:.3g} ({why}), but one has size {largest:.3g}")
    return x


def check_square(n, what, name="n"):
    """Refuse up front an (n, n) float64 table (and a few of its size) past MAX_BYTES; ``name``: the
    argument that sets n, as the refusal names it."""
    check_bytes(8 * n * n, what, f"{name} should be at most {MAX_SQUARE:,} (a table of {name} x {name} float64 numbers)")


PROMPTS = ("<BOS> the cat sat", "<BOS> the cat is", "<BOS> the mat is",
           "<BOS> the big dog sat on the", "<BOS> the small cat ran")
DRAGON_PROMPTS = ("<BOS> wizard mixes glowing", "<BOS> dragon drinks", "<BOS> troll smashes wizard",
                  "<BOS> dragon drinks glowing potion troll", "<BOS> wizard mixes potion dragon")
MAX_MENU = 5   # the most prompts an explorer's menu offers


def prompts_for(model, world):
    """The prompts the explorer's menu offers for ``model`` and ``world`` (check_model_and_world's pair): those of
    PROMPTS (the cat world's) and DRAGON_PROMPTS whose words the world has and whose length the model can place;
    for another world, up to MAX_MENU prefixes of its sentences (<BOS> and two to four words). A tuple of texts,
    never empty: a world whose sentences give none is refused in one sentence."""
    check_model_and_world(model, world)
    vocab = set(world.tokenizer.vocab)
    longest = longest_prompt(model.cfg)
    fits = lambda words: words[0] == "<BOS>" and set(words) <= vocab and len(words) <= longest
    menu = [prompt for prompt in PROMPTS + DRAGON_PROMPTS if fits(prompt.split())]
    sentences = world.sentences if isinstance(world.sentences, list) else []   # (a World's fields may be set again later)
    for sentence in sentences[:1000]:
        for size in (3, 4, 5):
            words = sentence[:size] if isinstance(sentence, list) and all(type(w) is str for w in sentence) else []
            prompt = " ".join(words)
            if len(menu) < MAX_MENU and len(words) == size and fits(words) and prompt not in menu:
                menu.append(prompt)
    if not menu:
        fail(f"the {world.name} world should give prompts for the menu (sentences starting with <BOS>, as "
             "next_token_view takes them), but none of its sentences does")
    return tuple(menu[:MAX_MENU])


def check_perm(perm, T):
    """``perm`` as a 1-D int array if it is a rearrangement of 0..T-1 (whole numbers, each once), else one sentence.
    A tensor is counted (``check_tensor_size``) and read detached (one that requires grad cannot be read as it is);
    a range is made lazily: its length is compared with T first."""
    expected = f"perm should be a rearrangement of 0..{T - 1} (whole numbers, each once)"
    if isinstance(perm, range) and length(perm) != T:
        fail(f"{expected}, but got a range of {count(length(perm))} numbers")
    if isinstance(perm, torch.Tensor):
        perm = check_tensor_size(perm, "perm").detach().cpu()
    try:
        arr = np.asarray(perm) if not isinstance(perm, (str, bytes, dict, set)) else np.asarray(None)
    except Exception:   # noqa: BLE001 (a learner's object may raise anything from __array__ or __len__)
        arr = np.asarray(None)
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or len(arr) != T or sorted(arr.tolist()) != list(range(T)):
        kind = f" of dtype {arr.dtype}" if arr.ndim == 1 and arr.dtype.kind in "fbc" else ""
        fail(f"{expected}, but got {shown(perm)}{kind}")
    return arr


@on_the_cpu
def permutation_matrix(perm):
    """The (T, T) matrix P with (P @ X)[i] = X[perm[i]].

    perm: a rearrangement of 0..T-1. P has one 1 in every row and column, and P.T @ P = I.
    """
    if isinstance(perm, (str, bytes, dict, set)) or not hasattr(perm, "__len__") or getattr(perm, "ndim", 1) != 1:
        fail(f"perm should be a rearrangement of 0..T-1 (a list of whole numbers), but got {shown(perm)}")
    try:
        T = length(perm)
    except Exception as error:   # noqa: BLE001 (a learner's __len__ may raise anything)
        unreadable(perm, error, "perm should be a rearrangement of 0..T-1 (a list of whole numbers)")
    check_square(T, f"permutation_matrix of {count(T)} rows")
    perm = check_perm(perm, T)
    T = len(perm)
    P = np.zeros((T, T))
    P[np.arange(T), perm] = 1.0
    return P


def check_word_list(words, name):
    """A non-empty list (or tuple) of words, each a string, as a new list (read by the built-in's own
    iterator: a subclass's __iter__ or __len__ may lie); else one sentence."""
    if not isinstance(words, (list, tuple)):
        fail(f"{name} should be a list of words (strings), at least one, but got {shown(words)}")
    words = words_of(words)
    if not words or not all(type(word) is str for word in words):
        fail(f"{name} should be a list of words (strings), at least one, but got {shown(words)}")
    return words


def match_permutation(first, second):
    """perm with second[i] == first[perm[i]]: how a reordering of the same words lines up.

    first, second: lists of words holding the same words in some order. A repeated
    word is matched to its occurrences in order.
    """
    first, second = check_word_list(first, "first"), check_word_list(second, "second")
    if sorted(first) != sorted(second):
        fail(f"the two word lists should hold the same words, but got {shown(first)} and {shown(second)}")
    places = {}   # each word's positions in first, in order: a repeated word is matched in order
    for i, word in enumerate(first):
        places.setdefault(word, []).append(i)
    for positions in places.values():
        positions.reverse()   # (popped from the end: the first occurrence first)
    return np.array([places[word].pop() for word in second])


@on_the_cpu
def random_attention(d, seed, n_layers=1):
    """n_layers seeded single-head attention layers: a list of dicts W_Q, W_K, W_V, each (d, d).

    Entries are normal with standard deviation 1/sqrt(d), so scores stay moderate.
    """
    d, n_layers = check_positive_int(d, "d"), check_depth(n_layers)
    seed = check_seed(seed)
    check_bytes(24 * n_layers * d * d, f"random_attention of {count(n_layers)} layers of width {count(d)}",
                "ask for fewer or narrower layers (three d x d float64 matrices each)")
    rng = np.random.default_rng(seed)
    return [{name: rng.normal(0.0, d ** -0.5, size=(d, d)) for name in ("W_Q", "W_K", "W_V")}
            for _ in range(n_layers)]


MAX_STACK_WORK = 10**10   # attention_stack's layers x T x (T + d) x d at most: about ten seconds of NumPy


def check_layers(layers, d):
    """``layers`` as random_attention makes them, for rows of width d: a list of at most MAX_LAYERS dicts,
    each with W_Q and W_K (d, d_k) and W_V (d, d) (its output is added to the rows), all finite real
    numbers; else one sentence. Returns them as a list of dicts of float arrays."""
    if not isinstance(layers, (list, tuple)) or len(layers) > MAX_LAYERS or not all(
            isinstance(layer, dict) and {"W_Q", "W_K", "W_V"} <= set(layer) for layer in layers):
        fail(f"layers should be a list of at most {MAX_LAYERS:,} dicts with W_Q, W_K and W_V (random_attention's), "
             f"but got {shown(layers)}")
    checked = []
    for i, layer in enumerate(layers):
        W = {name: check_finite(as_array(layer[name], f"layer {i}'s {name}", 2), f"layer {i}'s {name}")
             for name in ("W_Q", "W_K", "W_V")}
        d_k = W["W_Q"].shape[1]
        for name, shape in (("W_Q", (d, d_k)), ("W_K", (d, d_k)), ("W_V", (d, d))):
            if W[name].shape != shape:
                fail(f"layer {i}'s {name} should have shape {shape} for rows of width {d} (W_Q's width {d_k}), "
                     f"but has shape {W[name].shape}")
        checked.append(W)
    return checked


def check_stack(n_layers, T, d):
    """Refuse up front attention_stack's run of n_layers layers on T rows of width d: its time, layers x T x
    (T + d) x d, past MAX_STACK_WORK, or its memory, each layer's four float64 (T, T + d) tables (as
    ``reference.attention`` counts them), past MAX_BYTES. Nothing is made here."""
    work = n_layers * T * (T + d) * max(d, 1)
    if work > MAX_STACK_WORK:
        fail(f"layers x T x (T + d) x d should be at most {MAX_STACK_WORK:,} (this course's limit: about ten "
             f"seconds), but {n_layers} layers on {count(T)} rows of width {count(d)} give {count(work)}: "
             "give fewer rows or layers")
    check_bytes(32 * T * (T + d), f"attention on {count(T)} rows of width {count(d)} (four float64 (T, T + d) tables)",
                f"give fewer rows (T x (T + d) at most {MAX_BYTES // 32:,})")


@on_the_cpu
def attention_stack(X, layers, causal=False):
    """Run X (T, d) through each layer: X <- X + Attention(X W_Q, X W_K, X W_V). Returns (T, d).

    layers: random_attention's list of dicts, W_Q and W_K (d, d_k), W_V (d, d), finite; their work,
    layers x T x (T + d) x d, at most MAX_STACK_WORK. A stack whose numbers overflow float64 is refused.
    """
    X = check_finite(as_array(X, "X", 2), "X")
    if X.shape[0] == 0:
        fail(f"X should hold at least one row (a token), but it has none (shape {X.shape})")
    causal = check_switch(causal, "causal")
    layers = check_layers(layers, X.shape[1])
    check_stack(len(layers), *X.shape)
    for i, W in enumerate(layers):
        with np.errstate(over="ignore", invalid="ignore"):   # an overflow is refused below, in one sentence
            Q, K, V = X @ W["W_Q"], X @ W["W_K"], X @ W["W_V"]
        if not all(np.isfinite(M).all() for M in (Q, K, V)):
            fail(f"X and layer {i}'s weights should give finite queries, keys and values, but their products overflow "
                 "float64 (numbers near 1e154 or more): scale them down")
        out, _ = ref.attention(Q, K, V, causal=causal)
        with np.errstate(over="ignore", invalid="ignore"):
            X = X + out
        if not np.isfinite(X).all():
            fail(f"the rows after layer {i} should be finite, but adding its output overflows float64: "
                 "scale X or the weights down")
    return X


@on_the_cpu
def order_demo(first, second, d=8, seed=0, n_layers=1, causal=False, positions=False):
    """Embed two orderings of the same words and run both through the same attention stack.

    first, second: word lists (the same words, reordered). Each word gets a seeded random
    embedding of width d; positions=True adds the sinusoidal table. Returns a dict:
    vocab, E (V, d), perm (second[i] == first[perm[i]]), out_first and out_second (T, d),
    row_diff (T,) = max |out_second[i] - out_first[perm[i]]| and max_diff, their maximum.
    row_diff is all zeros (up to round-off) exactly when the outputs are the same rows reordered.
    The attention's time and memory on T words (``check_stack``) are checked before the words are matched.
    """
    d, seed = check_positive_int(d, "d"), check_seed(seed)
    causal, positions = check_switch(causal, "causal"), check_switch(positions, "positions")
    n_layers = check_depth(n_layers)
    check_bytes(24 * n_layers * d * d, f"order_demo with {count(n_layers)} layers of width {count(d)}",
                "ask for fewer or narrower layers (three d x d float64 matrices each)")
    first, second = check_word_list(first, "first"), check_word_list(second, "second")
    check_stack(n_layers, max(len(first), len(second)), d)   # before any matching: the rows the attention can take
    perm = match_permutation(first, second)
    vocab = sorted(set(first))
    row = {word: i for i, word in enumerate(vocab)}   # each word's row of E
    E = np.random.default_rng(seed).normal(size=(len(vocab), d))
    layers = random_attention(d, next_seed(seed), n_layers)   # (the largest seed is followed by 0)

    def run(words):
        X = E[[row[w] for w in words]]
        if positions:
            X = X + ref.sinusoidal_positions(len(words), d)
        return attention_stack(X, layers, causal=causal)

    out_first, out_second = run(first), run(second)
    row_diff = np.abs(out_second - out_first[perm]).max(axis=1)
    return dict(vocab=vocab, E=E, perm=perm, out_first=out_first, out_second=out_second,
                row_diff=row_diff, max_diff=float(row_diff.max()))


@on_the_cpu
def sinusoidal_positions(n, d):
    """The (n, d) sinusoidal position table, a float32 torch tensor: row p, pair i (columns 2i
    and 2i+1) holds [sin(p·w_i), cos(p·w_i)] with w_i = 10000**(-2i/d).

    The course's own piece (the learner writes theirs in chapter 06): the table the cat model
    adds to its embeddings, ``helpers.model.sinusoidal_table``. n - 1 at most MAX_ANGLE["float32"] (2**20: the
    fastest pair's angle, p radians, resolved to 1/32 radian in float32).
    """
    n, d = check_positive_int(n, "n"), check_positive_int(d, "d")
    if d % 2:
        fail(f"sinusoidal positions pair the columns as (sin, cos), so d must be even, but got d={d}")
    check_bytes(12 * n * d, f"sinusoidal_positions({count(n)}, {count(d)})",
                f"n x d should be at most {MAX_BYTES // 12:,} numbers (the table and its sines and cosines, float32)")
    check_angles(n - 1, "the last position, n - 1", "float32")
    return sinusoidal_table(n, d)


@on_the_cpu
def rotate(x, start=0):
    """Rotary positions: x (B, H, T, d_k) with every adjacent column pair of token t turned
    through the angle (start + t)·w_i, w_i = 10000**(-2i/d_k): pair (e, o) becomes
    (e·cos - o·sin, e·sin + o·cos). Returns a new tensor of x's shape.

    The course's own piece (the learner writes theirs in chapter 06): what the induction
    model does to its queries and keys, ``helpers.model.rotate_pairs``. x: finite real floating-point
    numbers, each at most half the largest of its dtype in size (the turned ones stay finite); the call's
    memory (estimated from x's size) at most 1.5 GiB; start + T - 1 at most MAX_ANGLE["float32"] (2**20, where
    float32 still resolves the angles to 1/32 radian).
    """
    if not isinstance(x, torch.Tensor) or check_tensor(x, "x").dim() != 4:
        fail(f"rotate takes a torch tensor (B, H, T, d_k), but got "
             f"{f'a tensor of shape {tuple(x.shape)}' if isinstance(x, torch.Tensor) else type(x).__name__}")
    if not x.is_floating_point():
        fail(f"x should hold real floating-point numbers (queries or keys), but got dtype {x.dtype}")
    T, d_k = x.shape[-2:]
    if d_k % 2:
        fail(f"rotary positions turn pairs of columns, so d_k must be even, but got d_k={d_k}")
    start = check_positive_int(start, "start", minimum=0)
    if start > MAX_SHIFT:
        fail(f"start should be at most {MAX_SHIFT:,} (this course's limit), but got {count(start)}")
    check_bytes(x.numel() * x.element_size() + 3 * x.numel() * max(x.element_size(), 4) // 2 + 6 * T * d_k,
                f"rotate of x of shape {tuple(x.shape)}",   # the result, its float32 (or wider) halves, the angles
                "pass fewer or shorter sequences")
    check_angles(start + T - 1, "the last position, start + T - 1", "float32")
    # a turned entry, e·cos - o·sin, is at most |e| + |o| in size: within x's dtype when every entry is within half
    most = float(torch.finfo(x.dtype).max) / 2
    largest = float(check_finite(x.detach(), "x").abs().max()) if x.numel() else 0.0
    if largest > most:
        fail(f"x should hold numbers of size at most {most:.3g} (half the largest {str(x.dtype).replace('torch.', '')}: "
             f"a turned pair adds two of them), but one has size {largest:.3g}")
    return rotate_pairs(x, start)


@on_the_cpu
def offset_rotation(k, d, base=10000.0):
    """The (d, d) block-diagonal R_k with sinusoidal row p+k = (row p) @ R_k for every p.

    Pair i (columns 2i, 2i+1 = [sin, cos]) turns through the angle k * w_i,
    w_i = base**(-2i/d); the matrix depends on k alone, not on p. k: a finite number, every angle |k| x w_i
    at most MAX_ANGLE["float64"] (2**49, where float64 still resolves it to 1/32 radian); base: a finite number > 1.
    """
    d, base = check_positive_int(d, "d"), check_base(base)   # the base first: k's limit depends on it
    k = check_number(k, "k")
    if d % 2:
        fail(f"sinusoidal positions need an even width d, but got d={d}")
    check_square(d, f"offset_rotation of width {count(d)}", "d")
    check_angles(k, "k")
    frequencies = base ** (-np.arange(0, d, 2) / d)
    R = np.zeros((d, d))
    for i, w in enumerate(frequencies):
        c, s = np.cos(k * w), np.sin(k * w)
        R[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[c, -s], [s, c]]
    return R


@on_the_cpu
def rope_scores(q, k, n):
    """(n, n) scores S[t, s] = rotate(q, t) · rotate(k, s): one query and one key placed at
    every position 0..n-1 and rotated there (helpers.reference.rotate_pairs).

    q, k: (d,) with d even, finite, |q|·|k| at most about 4.5e307 (every score is finite).
    """
    q, k = check_finite(as_array(q, "q", 1), "q"), check_finite(as_array(k, "k", 1), "k")
    if q.shape != k.shape:
        fail(f"q and k need the same width, but q has {q.shape[0]} and k has {k.shape[0]}")
    n = check_positive_int(n, "n")
    if q.shape[0] % 2:
        fail(f"rotary positions turn pairs of columns, so q and k need an even width, but they have {q.shape[0]}")
    check_square(n, f"rope_scores for {count(n)} positions")
    check_bytes(24 * n * q.shape[0], f"rope_scores for {count(n)} positions of width {q.shape[0]}",
                "ask for fewer positions or a narrower q and k")
    # a turn keeps each pair's length, so every score is at most |q|·|k| in size (math.hypot cannot overflow)
    bound = math.hypot(*q) * math.hypot(*k)
    if bound > LARGEST / 4:
        fail(f"q and k should give scores float64 can hold (|q|·|k| at most about {LARGEST / 4:.1e}), but |q|·|k| "
             f"is {f'about {bound:.3g}' if bound < math.inf else 'more than float64 holds'}: scale them down")
    where = np.arange(n)
    Q = ref.rotate_pairs(np.tile(q, (n, 1)), where)
    K = ref.rotate_pairs(np.tile(k, (n, 1)), where)
    return Q @ K.T


# diagonal_spread's bytes an entry of S beyond S itself: the tests of its values (check_finite's three True/False
# tables, then check_size's finite entries and their sizes, 8 bytes each); SPREAD_COPY_BYTES more for its float64
# copy, unless S is float64 already
SPREAD_TEST_BYTES, SPREAD_COPY_BYTES = 16, 8


@on_the_cpu
def diagonal_spread(S):
    """For a square (n, n) matrix: the largest (max - min) along any diagonal t - s = const.

    0 means every entry depends on the offset t - s only. -inf entries (a masked score) are
    skipped; NaN and +inf are refused, and so are entries of size above about 9e307 (a spread past float64).
    Memory: SPREAD_TEST_BYTES an entry (and SPREAD_COPY_BYTES for a copy), counted from S's shape before
    it is copied (n at most about 8,000; 10,000 when S is float64 already).
    """
    S, shape = shape_before_copy(S, "S", 2)   # an array's or a tensor's shape as it is; a list converted first
    per_entry = SPREAD_TEST_BYTES + (0 if str(S.dtype) in ("float64", "torch.float64") else SPREAD_COPY_BYTES)
    most = math.isqrt(MAX_BYTES // per_entry)
    check_bytes(per_entry * math.prod(shape), f"diagonal_spread on S of shape {tuple(shape)}",
                f"give S of at most {most:,} x {most:,} numbers")
    S = check_finite(as_array(S, "S", 2), "S", minus_inf=True)
    if S.shape[0] != S.shape[1]:
        fail(f"S should be square, but has shape {S.shape}")
    check_size(S, "S", LARGEST / 2, "two of them must differ by a number float64 can hold")
    spread = 0.0
    for offset in range(-S.shape[0] + 1, S.shape[0]):
        diagonal = np.diagonal(S, offset)
        diagonal = diagonal[np.isfinite(diagonal)]
        if diagonal.size:
            spread = max(spread, float(diagonal.max() - diagonal.min()))
    return spread


PARTS = ("word", "position", "constant")


@on_the_cpu
@measure
@torch.no_grad()
def score_terms(model, ids, hold_sigma=False):
    """Layer 0's scores (H, T, T), before the mask, of a pre-LN model with added positions,
    split by what the queries and keys are made of.

    The LayerNorm turns h0 = e_t + PE_t into word_t + position_t + β, with word_t = γ·(e_t -
    mean e_t)/σ_t and position_t = γ·(PE_t - mean PE_t)/σ_t (σ_t is the standard deviation of
    all of h0_t); so q_t = word_t W_Q + position_t W_Q + (β W_Q + b_Q), and k_t alike. The score
    q_t·k_s/√d_k is the sum of nine terms, one per (query part, key part). Returns
    {(query part, key part): (H, T, T) float64 array}, parts from PARTS. hold_sigma=True
    divides every row by the mean of the σ_t instead of its own (what the scores would be
    if the LayerNorm's scale did not change with the position).
    Every Config of such a model is split: an RMSNorm (norm_kind="rmsnorm") neither centres nor adds β
    (σ_t is then the root mean square of h0_t); without biases (bias=False) b_Q and b_K are 0; keys shared
    by several query heads (n_kv_heads) are split per key/value head and given to each head of its group.
    Memory: about 18 (H, T, T) float64 tables, within 1.5 GiB.
    """
    hold_sigma = check_switch(hold_sigma, "hold_sigma")
    if not isinstance(model, Transformer):
        fail(f"score_terms takes a helpers.model.Transformer, but got {shown(model)}")
    if model.cfg.positions not in ("sinusoidal", "learned") or model.cfg.norm != "pre":
        fail(f"score_terms splits the input of a pre-LN model with added positions, but this one has "
             f"positions={model.cfg.positions!r}, norm={model.cfg.norm!r}")
    ids = model.check_ids(ids)
    if ids.dim() != 1:
        fail(f"ids should be one sequence (T,) for score_terms, but got shape {tuple(ids.shape)}")
    ln, attn = model.blocks[0].ln1, model.blocks[0].attn
    H, d_k, T = attn.n_heads, attn.d_k, len(ids)
    # the nine (H, T, T) terms and as many again while they are made, the parts (3 x 2 x (T, H·d_k)), float64
    check_bytes(8 * (18 * H * T * T + 6 * T * H * d_k), f"score_terms on {count(T)} tokens of a model with {H} heads",
                "give fewer tokens")
    e = model.E[ids].double()
    where = model.embed(ids[None])[0].double() - e                # the rows the model adds: (T, d)
    h0 = e + where
    centred = model.cfg.norm_kind == "layernorm"   # an RMSNorm neither centres nor adds a bias β
    if centred:
        sigma = torch.sqrt(h0.var(-1, unbiased=False, keepdim=True) + ln.eps)
    else:
        sigma = torch.sqrt(h0.pow(2).mean(-1, keepdim=True) + ln.eps)
    if hold_sigma:
        sigma = sigma.mean().expand_as(sigma)
    gamma = ln.weight.double()
    beta = ln.bias.double() if centred and ln.bias is not None else torch.zeros_like(gamma)
    centre = (lambda v: v - v.mean(-1, keepdim=True)) if centred else (lambda v: v)
    x = {"word": gamma * centre(e) / sigma, "position": gamma * centre(where) / sigma}

    def split(W, b):   # each part of x through one projection, as (H, T, d_k)
        W = W.double()
        parts = {name: part @ W for name, part in x.items()}
        parts["constant"] = (beta @ W + (0.0 if b is None else b.double())).expand(T, -1)
        heads = W.shape[1] // d_k   # n_kv_heads for keys shared by several query heads
        return {name: part.view(T, heads, d_k).transpose(0, 1).repeat_interleave(H // heads, dim=0)
                for name, part in parts.items()}

    q, k = split(attn.W_Q, attn.b_Q), split(attn.W_K, attn.b_K)
    return {(a, b): (q[a] @ k[b].transpose(-2, -1) / d_k ** 0.5).numpy() for a in PARTS for b in PARTS}


def causal_scores(S, owner):
    """Causal scores S (..., T, T) for ``owner`` (off_offset, shift_free) as a float64 array: real numbers, square
    in the last two axes, finite and at most MAX_SCORE (1e100) in size on and below the diagonal (above it, where a
    mask puts -inf, nothing is read), and the memory the call needs (about three arrays of S's size and three
    (T, T) tables) within MAX_BYTES;
    else one sentence."""
    S = to_numpy(S, "S")   # counts a broadcast view's numbers before they are made
    if S.ndim < 2 or S.shape[-1] != S.shape[-2]:
        fail(f"S should be square scores (..., T, T) for {owner}, but it has shape {S.shape}")
    T = S.shape[-1]
    check_bytes(25 * S.size + 24 * T * T, f"{owner} on scores of shape {S.shape}", "give fewer or shorter rows of scores")
    seen = np.isfinite(S) | np.triu(np.ones((T, T), dtype=bool), k=1)
    if not seen.all():
        fail(f"S should hold finite numbers on and below the diagonal (the scores {owner} reads), but it holds NaN or "
             f"inf in {count(int((~seen).sum()))} of them")
    return check_size(S, "S", MAX_SCORE, f"the scores {owner} reads: its sums and differences stay finite")


def off_offset(S):
    """The part of the causal scores S (..., T, T) that is not a function of the offset t - s:
    S minus the mean of its diagonal, on and below the diagonal (0 above it)."""
    S = causal_scores(S, "off_offset")
    T = S.shape[-1]
    t, s = np.indices((T, T))
    out = np.zeros_like(S)
    for offset in range(T):
        on = t - s == offset
        out[..., on] = S[..., on] - S[..., on].mean(-1, keepdims=True)
    return out


def shift_free(S):
    """Causal scores S (..., T, T) with each row's own diagonal score taken away: S[t, s] - S[t, t]
    on and below the diagonal, 0 above it. A number that depends on the query's position t only
    is added to every score of row t, and the softmax ignores it; this removes it and keeps
    everything the attention weights depend on (a function of t - s stays one)."""
    S = causal_scores(S, "shift_free")
    T = S.shape[-1]
    own = np.diagonal(S, axis1=-2, axis2=-1)[..., :, None]
    with np.errstate(invalid="ignore"):   # -inf above the diagonal (a mask's) is not read
        return np.where(np.tril(np.ones((T, T), dtype=bool)), S - own, 0.0)


def check_terms(terms):
    """``terms`` as score_terms returns them: a dict {(query part, key part): (H, T, T) array} of all nine
    pairs of PARTS, every array of one shape, finite and at most MAX_SCORE (1e100) in size; else one sentence.
    Returns it (its values as float arrays)."""
    pairs = {(a, b) for a in PARTS for b in PARTS}
    if not isinstance(terms, dict) or set(terms) != pairs:
        fail(f"terms should be the dict score_terms returns (one (H, T, T) array for each of the nine "
             f"(query part, key part) pairs), but got {shown(terms)}")
    arrays = {pair: check_size(check_finite(as_array(value, f"the term {pair}", 3), f"the term {pair}"),
                               f"the term {pair}", MAX_SCORE, "their sums and squares stay finite")
              for pair, value in terms.items()}
    shapes = {value.shape for value in arrays.values()}
    if len(shapes) != 1 or any(shape[-1] != shape[-2] for shape in shapes):
        fail(f"terms should hold nine arrays of one shape (H, T, T), but got shapes {sorted(shapes)}")
    return arrays


def term_shares(terms, groups, shift_free_scores=False):
    """Per head, the share of the scores' off-offset part that each group of terms carries.

    terms: from ``score_terms``; groups: {name: [(query part, key part), ...]} covering all
    nine. The share of a group G is <off(G), off(S)> / |off(S)|² (off = ``off_offset``,
    S = the sum of all terms), so the shares add up to 1 in every head; a negative share
    cancels part of the others. shift_free_scores=True measures the same on ``shift_free``
    scores (each row's shift taken away first). Returns {name: (H,) array}.
    """
    shift_free_scores = check_switch(shift_free_scores, "shift_free_scores")
    terms = check_terms(terms)
    if not isinstance(groups, dict) or not all(isinstance(pairs, (list, tuple)) for pairs in groups.values()):
        fail(f"groups should be a dict {{name: [(query part, key part), ...]}}, but got {shown(groups)}")
    groups = {name: [as_pair(pair, "each of the pairs a group names") for pair in pairs]
              for name, pairs in groups.items()}
    named = [pair for pairs in groups.values() for pair in pairs]
    if sorted(named) != sorted(terms):
        fail(f"the groups should name each of the nine (query part, key part) pairs once, but name {shown(named)}")
    part = (lambda S: off_offset(shift_free(S))) if shift_free_scores else off_offset
    total = part(sum(terms.values()))
    norm = (total ** 2).sum(axis=(-2, -1))
    if not norm.all():   # 0/0: no part of the scores to share (a function of the offset only, or one token)
        no_share(int(np.flatnonzero(norm == 0)[0]), total.shape[-1], shift_free_scores)
    zero = np.zeros_like(total)   # (the sum over a group that names no pair)
    return {name: (part(sum((terms[p] for p in pairs), zero)) * total).sum(axis=(-2, -1)) / norm
            for name, pairs in groups.items()}


def no_share(head, T, shift_free_scores):
    """The sentence for scores whose off-offset part (of ``T`` tokens) is 0 in ``head``: one token, or scores
    that are a function of the offset alone (all equal, say, when W_Q is zeroed)."""
    off = "the offset and each row's shift" if shift_free_scores else "the offset"
    why = ("one token's scores have no other part, so give scores of more than one token" if T < 2 else
           f"every score of that head is a function of {off} alone (all equal, say), so there is nothing to share")
    fail(f"the scores should have a part that is not a function of {off} (the shares divide by its size), "
         f"but in head {head} it is 0: {why}")


def as_pair(pair, name):
    """A (query part, key part) pair, a list or tuple of two texts of PARTS, as a tuple; else one sentence."""
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(type(p) is str and p in PARTS for p in pair):
        fail(f"{name} should be a (query part, key part) pair of {', '.join(PARTS)}, such as ('position', 'position'), "
             f"but got {shown(pair)}")
    return tuple(pair)


def spread_without(terms, pairs, shift_free_scores=False):
    """(H,) the largest spread along a diagonal (``diagonal_spread``) of each head's causal
    scores, rebuilt from ``terms`` (``score_terms``) with the terms ``pairs`` left out
    (of the ``shift_free`` scores when shift_free_scores)."""
    shift_free_scores = check_switch(shift_free_scores, "shift_free_scores")
    terms = check_terms(terms)
    if not isinstance(pairs, (list, tuple, set)):
        fail(f"pairs should be a list of some of the nine (query part, key part) pairs of score_terms, such as "
             f"[('position', 'position')], but got {shown(pairs)}")
    left_out = {as_pair(pair, "each of the pairs to leave out") for pair in pairs}
    if len(left_out) == len(terms):
        fail(f"pairs should leave at least one of the {len(terms)} terms in, but it names every one")
    kept = sum(value for pair, value in terms.items() if pair not in left_out)
    if shift_free_scores:
        kept = shift_free(kept)
    T = kept.shape[-1]
    causal = np.where(np.tril(np.ones((T, T), dtype=bool)), kept, -np.inf)
    return np.array([diagonal_spread(head) for head in causal])


@on_the_cpu
@measure
def row_moves(model, seed):
    """(n_max,) how far training moved each row of a learned position table: the largest
    |P[p] - P_start[p]|, with P_start the model's Config re-initialised with ``seed``."""
    seed = check_seed(seed)
    if check_model(model).P is None:
        fail(f"expected a model with learned positions, but this one has positions={model.cfg.positions!r}")
    start = Transformer(model.cfg, init=model.init)
    start.reset_parameters(seed)
    return as_numpy((model.P.detach() - start.P.detach()).abs().amax(dim=1))


@on_the_cpu
def rows_unchanged(model, seed, atol=1e-4):
    """(n_max,) booleans: which rows of a learned position table are still at their
    initial values (``row_moves`` below ``atol``).

    Adam leaves a row exactly where it started when no training sequence reached its
    position (its gradient is 0 at every step). The fresh start is drawn again here, and
    torch's random-number kernels differ between CPU kinds in the last bits (by about
    1e-6), so "still there" means within ``atol``, far below what one training step moves.
    """
    atol = check_number(atol, "atol", low=0, low_open=True)
    return row_moves(model, seed) < atol


def scramble(words, seed, keep_last=True):
    """The prompt (a list of words) with its words rearranged: seed 0 keeps it as it is,
    every other seed picks one of the other distinct orders (seeded). <BOS> stays first,
    and the last word stays last when keep_last. At most 8 words are rearranged.
    """
    words = check_word_list(words, "words")
    seed, keep_last = check_seed(seed), check_switch(keep_last, "keep_last")
    end = len(words) - 1 if keep_last else len(words)
    middle = tuple(words[1:end])
    if len(middle) > 8:
        fail(f"scramble rearranges at most 8 words, but this prompt has {len(middle)} to rearrange")
    others = sorted(set(itertools.permutations(middle)) - {middle})
    if seed == 0 or not others:
        return words
    pick = others[int(np.random.default_rng(seed).integers(len(others)))]
    return words[:1] + list(pick) + words[end:]


@on_the_cpu
@measure
def next_token_view(model, world, prompt, positions=True, seed=0, keep_last=True):
    """The next-token distribution after ``prompt``, maybe scrambled, with positions on or off.

    prompt: a string or list of words starting with <BOS>. Returns a dict: words (the
    prompt as fed), probs (V,), top (word), p_top, original (V,) the distribution for
    the prompt as given with positions on, change = max |probs - original|, and
    scramble_change = max |probs - the prompt as given with the same positions setting|.
    """
    check_model_and_world(model, world)
    positions, keep_last = check_switch(positions, "positions"), check_switch(keep_last, "keep_last")
    seed = check_seed(seed)
    if not isinstance(prompt, (str, list, tuple)):
        fail(f"the prompt should be a string or a list of words, but got {shown(prompt)}")
    words = plain(prompt).split() if isinstance(prompt, str) else words_of(prompt)   # (a subclass's own may raise)
    if not words or words[0] != "<BOS>":
        fail(f"a {world.name}-world prompt should start with <BOS>, but got {shown(words[:1])}")
    fed = scramble(words, seed, keep_last)

    def next_probs(words, positions):
        with torch.no_grad():
            return as_numpy(torch.softmax(model(world.tokenizer.encode(words), positions=positions)[-1], -1))

    probs, original, unscrambled = next_probs(fed, positions), next_probs(words, True), next_probs(words, positions)
    top = int(probs.argmax())
    return dict(words=fed, probs=probs, top=world.tokenizer.vocab[top], p_top=float(probs[top]),
                original=original, change=float(np.abs(probs - original).max()),
                scramble_change=float(np.abs(probs - unscrambled).max()))


@on_the_cpu
@measure
@torch.no_grad()
def model_order_demo(model, world, first, second, causal=True, positions=True):
    """Two orderings of the same words through a trained model, compared row by row.

    first, second: word lists (the same words, reordered). Returns a dict: perm
    (second[i] == first[perm[i]]), row_diff (T,) = max |p_second[i] - p_first[perm[i]]|
    over the next-word distributions, and max_diff. All zeros (up to round-off) means the
    model saw two identical bags.
    """
    check_model_and_world(model, world)
    causal, positions = check_switch(causal, "causal"), check_switch(positions, "positions")
    perm = match_permutation(first, second)

    def probs(words):
        return as_numpy(torch.softmax(model(world.tokenizer.encode(words), causal=causal, positions=positions), -1))

    row_diff = np.abs(probs(second) - probs(first)[perm]).max(axis=1)
    return dict(perm=perm, row_diff=row_diff, max_diff=float(row_diff.max()))


@on_the_cpu
def position_task(n, T=6, V=6, seed=0):
    """n sequences of T tokens that ask a model where each token sits.

    Token 0 starts every sequence; the rest are drawn from 1..V-1 (seeded). The target at
    position t is t itself. Returns (x, y), both (n, T) LongTensors.
    """
    n, T, V = (check_positive_int(v, name) for v, name in ((n, "n"), (T, "T"), (V, "V")))
    seed = check_seed(seed)
    if V > MAX_ID + 1:   # torch draws ids as 64-bit integers
        fail(f"V should be at most 2**63 (the token ids 0..V-1 are 64-bit integers), but got {count(V)}")
    if T > V:
        fail(f"the targets 0..T-1 must be tokens, so T={T} cannot exceed the vocabulary V={V}")
    check_bytes(24 * n * T, f"position_task of {count(n)} sequences of {count(T)} tokens",
                "ask for fewer or shorter sequences (three (n, T) tables of 8-byte ids)")
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, V, (n, T), generator=g)
    x[:, 0] = 0
    return x, torch.arange(T).expand(n, T).clone()


def order_blind_ceiling(T):
    """The best expected accuracy on ``position_task`` for a model blind to order: 2 / T.

    Without positions and without a mask every position of a sequence sees the same bag of
    tokens, so its output depends only on that bag and its own token. The start token gives
    position 0 away; any other token is, by symmetry, equally likely to sit at each of the
    T - 1 other positions, so a guess is right 1 time in T - 1: (1 + 1) / T in all.
    """
    T = check_positive_int(T, "T", minimum=2)
    if T > MAX_TOKENS:
        fail(f"T should be at most {MAX_TOKENS:,} tokens (the longest sequence position_probe trains on), "
             f"but got {count(T)}")
    return (1 + (T - 1) * (1 / (T - 1))) / T


@on_the_cpu
@course_modes()   # inside torch.inference_mode() too: its own model and data, made outside it, take gradients
def position_probe(seed, causal=True, steps=150, T=6, V=6, n=128):
    """Train a tiny Transformer without positions (1 layer, 1 head, d_model 8, d_ff 16) on
    ``position_task`` and return its accuracy on 1,000 fresh sequences (seed 100).

    With ``causal=True`` the mask is its only source of order. steps: at most MAX_PROBE_STEPS
    (10,000); T at most 1,024 tokens; the training's memory (estimated from n, T and V) at
    most 1.5 GiB; its time, steps x (n x T x (T + V + 16) + PROBE_STEP_WORK), at most MAX_PROBE_WORK (1 billion,
    about a minute). Torch's global random state is put back afterwards.
    """
    from ..model import Config

    seed, causal = check_seed(seed), check_switch(causal, "causal")
    steps = check_positive_int(steps, "steps")
    if steps > MAX_PROBE_STEPS:
        fail(f"steps should be at most {MAX_PROBE_STEPS:,} (this course's limit for the probe), but got {count(steps)}")
    n, T, V = (check_positive_int(v, name) for v, name in ((n, "n"), (T, "T"), (V, "V")))
    if T > MAX_TOKENS:
        fail(f"T should be at most {MAX_TOKENS:,} tokens (this course's limit), but got {count(T)}")
    if T > V:
        fail(f"the targets 0..T-1 must be tokens, so T={T} cannot exceed the vocabulary V={V}")
    check_bytes(64 * max(n, 1000) * T * (T + V + 16), f"position_probe on {count(n)} sequences of {T} tokens "
                f"(vocabulary {count(V)})", "ask for fewer or shorter sequences or a smaller vocabulary")
    work = steps * (n * T * (T + V + 16) + PROBE_STEP_WORK)   # the numbers each step moves and its fixed cost
    if work > MAX_PROBE_WORK:
        fail(f"steps x (n x T x (T + V + 16) + {PROBE_STEP_WORK:,}) should be at most {MAX_PROBE_WORK:,} (this course's "
             f"limit: about a minute of training), but n={count(n)}, T={T}, V={count(V)} and steps={count(steps)} give "
             f"{count(work)}: ask for fewer sequences or fewer steps")
    from ..training import train

    model = Transformer(Config(vocab_size=V, d_model=8, n_heads=1, n_layers=1, d_ff=16, n_max=T, positions="none"), init="unit")
    with torch.random.fork_rng(devices=[]):   # train seeds torch's global generator: the learner's draws go on as before
        with torch.enable_grad():   # a training loop, also when called inside torch.no_grad()
            train(model, position_task(n, T, V, seed), steps=steps, lr=3e-2, seed=seed, progress=False, causal=causal)
        x, y = position_task(1000, T, V, seed=100)
        with torch.no_grad():
            return float((model(x, causal=causal).argmax(-1) == y).float().mean())


@on_the_cpu
@measure
@torch.no_grad()
def shifted_logits(model, inputs, shift):
    """Logits (B, T, V), mask on, with every sequence of ``inputs`` (B, T) placed at positions
    shift .. shift+T-1 instead of 0 .. T-1.

    Sinusoidal positions are computed for any position (shift at most MAX_SHIFT: the last position stays
    within MAX_ANGLE["float32"], 2**20, where float32 angles still resolve a turn); a learned table has rows
    only up to n_max (refused past it); rotary positions turn q and k by their positions.
    """
    shift = check_positive_int(shift, "shift", minimum=0)
    if shift > MAX_SHIFT:
        fail(f"shift should be at most {MAX_SHIFT:,} (this course's limit), but got {count(shift)}")
    check_model(model, "model")   # (its sentence names a nested tensor as such: it has no one shape to show)
    ids = model.check_ids(inputs)
    T, n_max = ids.shape[-1], model.cfg.n_max
    if model.cfg.positions == "sinusoidal":
        check_bytes(12 * (shift + T) * model.cfg.d_model, f"the sinusoidal table up to position {count(shift + T - 1)}",
                    "ask for a smaller shift")
    if model.cfg.positions == "learned" and shift + T > n_max:
        fail(f"shift {shift} puts the last of {T} tokens at position {shift + T - 1}, but this model's "
             f"learned table has rows 0..{n_max - 1} only (n_max={n_max})")
    h = model.embed(ids, start=shift)
    for block in model.blocks:
        h = block(h, causal=True, start=shift)
    return model.unembed(h)


@on_the_cpu
@torch.no_grad()
def shifted_loss(model, inputs, targets, shift):
    """Teacher-forced loss of ``shifted_logits``: inputs, targets (B, T) as a world's ``batch``
    makes them (targets of -100 are ignored)."""
    import torch.nn.functional as F

    from ..training import check_batch

    check_model(model, "model")   # (its sentence names a nested tensor as such: it has no one shape to show)
    inputs, targets = check_batch((inputs, targets), model.cfg.vocab_size)   # same (B, T) shape, ids in range
    if not (targets != -100).any():   # a mean over no tokens: 0/0
        fail(f"targets should hold at least one token to predict (an id, not -100), but all {targets.numel():,} are -100")
    logits = shifted_logits(model, inputs, shift)
    return float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-100))
