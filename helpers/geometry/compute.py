"""Chapter 01's compute: vectors, cosines, the shipped GloVe subset, 2-D maps, word2vec.

* ``vector_pair`` gives two 2-D vectors' dot product, cosine and angle (the explorer's
  compute); ``arrows_figure`` draws named 2-D vectors as arrows.
* ``load_glove()`` reads ``data/glove`` (the 50,000 most frequent words of GloVe
  6B, 50 numbers each) into a gensim ``KeyedVectors``.
* ``nearest`` and ``analogy`` rank words by cosine similarity; ``offset_agreement``
  measures how nearly a relation's pairs share one direction.
* ``project`` draws vectors in 2-D by PCA, t-SNE or UMAP; ``neighbourhood_kept``
  measures how many of each point's nearest neighbours a map keeps.
* ``word_map`` and ``plot_maps`` do both for groups of words and draw them;
  ``map_runs`` and ``plot_runs`` repeat the measure over seeds, because a t-SNE or
  UMAP layout depends on its seed and on the machine's floating-point details.
* ``train_word2vec`` trains a small, reproducible word2vec model.

gensim, scikit-learn, umap and matplotlib are imported inside the functions that
use them, so ``import helpers.geometry.compute`` stays fast; umap through ``import_umap``,
which leaves out pynndescent's neighbour search until something uses it.
"""
import math
import sys
import types
import warnings
import zlib
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import MAX_BYTES, as_array, check_bytes, check_choice, check_number, check_positive_int, check_seed, \
    check_finite, check_switch, check_text, count, fail, items_of, length, plain, shown, to_numpy
from ..states import random_states

METHODS = ("PCA", "t-SNE", "UMAP")

# Groups of words for the 2-D maps; every word is among the 50,000 shipped.
GROUPS = {
    "animals": "dog cat horse cow pig sheep goat lion tiger bear wolf fox rabbit mouse deer "
               "elephant monkey snake eagle duck",
    "countries": "france germany italy spain china japan india russia brazil canada mexico egypt "
                 "kenya australia sweden poland turkey iran greece portugal",
    "cities": "paris london berlin rome madrid tokyo beijing moscow cairo sydney toronto chicago "
              "boston mumbai istanbul vienna dublin lisbon athens amsterdam",
    "numbers": "one two three four five six seven eight nine ten eleven twelve twenty thirty "
               "forty fifty hundred thousand million billion",
    "digits": "0 1 2 3 4 5 6 7 8 9 10 11 12 15 20 25 50 100 1000 2000",
    "months": "january february march april june july august september october november december",
    "family": "mother father sister brother son daughter uncle aunt wife husband grandmother "
              "grandfather cousin niece nephew",
    "body": "head hand foot arm leg eye ear nose mouth finger knee shoulder neck tooth stomach",
    "food": "bread cheese rice apple banana potato tomato chicken beef soup cake coffee tea milk "
            "sugar butter egg pasta",
    "sports": "football soccer tennis golf cricket baseball basketball hockey rugby boxing "
              "swimming cycling volleyball wrestling",
    "jobs": "doctor teacher lawyer nurse engineer farmer soldier pilot driver writer artist "
            "scientist banker plumber",
    "feelings": "happy sad angry afraid proud ashamed lonely jealous anxious calm excited bored",
    "computing": "computer software internet python java code data network server keyboard "
                 "browser database linux email",
    "colours": "red blue green yellow black white orange purple pink brown grey violet",
    "punctuation": ", . ; : ! ? ( ) \" ' - -- ... / & %",
}
GROUPS = {name: words.split() for name, words in GROUPS.items()}


# ------------------------------------------------------------------ two vectors in the plane

COLOURS = ("#30638e", "#d1495b", "#00798c", "#edae49", "#66a182")


PAIR_PRODUCT = (1e-300, 1e300)   # the range of |a| |b| within which a·b and the cosine stay exact to float precision


def vector_pair(angle_a=10.0, norm_a=3.0, angle_b=60.0, norm_b=2.0):
    """Two 2-D vectors given by their directions (degrees) and norms.

    Returns a dict: a (2,), b (2,), dot = a·b, cos = a·b / (|a| |b|), and
    angle = the angle between them in degrees (0 to 180).
    """
    # a whole turn more is the same direction; reduced exactly first, so 1e30 degrees is not a rounding of π
    angle_a, angle_b = math.fmod(check_number(angle_a, "angle_a"), 360), math.fmod(check_number(angle_b, "angle_b"), 360)
    norm_a = check_number(norm_a, "norm_a", low=0, low_open=True)
    norm_b = check_number(norm_b, "norm_b", low=0, low_open=True)
    check_pair_product(norm_a, norm_b)
    a = norm_a * np.array([np.cos(np.radians(angle_a)), np.sin(np.radians(angle_a))])
    b = norm_b * np.array([np.cos(np.radians(angle_b)), np.sin(np.radians(angle_b))])
    dot = float(a @ b)
    cos = dot / (norm_a * norm_b)
    angle = float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))
    return {"a": a, "b": b, "dot": dot, "cos": cos, "angle": angle}


def check_pair_product(norm_a, norm_b):
    """Refuse, before anything is computed, positive norms whose product |a| |b| leaves PAIR_PRODUCT: a·b
    would overflow to inf (or underflow to 0). The product is named as its logarithms give it (about 1e+309),
    never as the inf or 0 a float would make of it."""
    low, high = PAIR_PRODUCT
    exponent = math.log10(norm_a) + math.log10(norm_b)   # exact enough, and never inf or -inf
    if not math.log10(low) <= exponent <= math.log10(high):
        whole = math.floor(exponent)
        leading = f"{10 ** (exponent - whole):.3g}"
        if leading == "10":   # 9.9996 rounds up: 1e+309, not 10e+308
            leading, whole = "1", whole + 1
        fail(f"norm_a × norm_b should be from {low:g} to {high:g} (beyond, a·b does not fit a float), but "
             f"norm_a={norm_a:g} times norm_b={norm_b:g} is about {leading}e{whole:+d}")


def pair_title(pair):
    """One line with a vector_pair's dot product, cosine and angle (each checked: a finite number)."""
    if not has_keys(pair, ("dot", "cos", "angle")):
        fail(f"pair should be what vector_pair returns (a dict with dot, cos and angle), but got {shown(pair)}")
    dot, cos, angle = (check_number(pair[key], f"the pair's {key}") for key in ("dot", "cos", "angle"))
    return f"a·b = {dot:.3f}    cos = {cos:.3f}    angle = {angle:.1f}°"


def arrow_label(name, v):
    """'a = [3.00, 1.00]' for a 2-D vector (rounded, and never '-0.00')."""
    x, y = np.round(v, 2) + 0.0
    return f"{name} = [{x:.2f}, {y:.2f}]"


MAX_ARROWS = 12   # named vectors one picture draws (three rounds of the colours)
MAX_COORDINATE = 1e300   # the largest coordinate or half-width drawn: matplotlib's axes overflow near 1.8e308


def check_arrows(vectors, limit):
    """(vectors, limit) for ``draw_arrows``: a dict of 1 to MAX_ARROWS names, each with 2 finite numbers
    of size at most MAX_COORDINATE, and None (room for the longest arrow, a quarter more than it) or a
    positive half-width of the axes up to as much; else one sentence."""
    if not isinstance(vectors, dict) or not 1 <= len(vectors) <= MAX_ARROWS:
        fail(f"vectors should be a dict of 1 to {MAX_ARROWS} named 2-D vectors such as {{'a': (1, 2)}}, "
             f"but got {shown(vectors)}")
    from ..plots import check_labels
    check_labels(vectors, "each vector's name")
    checked = {}
    for name, v in vectors.items():
        v = to_numpy(v, f"vector {shown(name)}")
        if v.shape != (2,) or not np.isfinite(v).all():
            fail(f"each vector should be two finite numbers (x, y), but {shown(name)} is {shown(v.tolist())}")
        if np.abs(v).max() > MAX_COORDINATE:
            fail(f"each vector should have numbers of size at most {MAX_COORDINATE:g} (larger axes cannot be drawn), "
                 f"but {shown(name)} is {shown(v.tolist())}")
        checked[name] = v
    if limit is None:
        return checked, 1.25 * max(np.abs(v).max() for v in checked.values()) or 1.0
    return checked, check_number(limit, "limit", low=0, low_open=True, high=1.25 * MAX_COORDINATE)


def draw_arrows(ax, vectors, limit=None):
    """Draw named 2-D vectors {name: (2,)} as arrows from the origin on ``ax``, the name
    at each tip and the coordinates listed under the axes (two per row).

    Returns {name: (arrow, tip, listing)}, the artists ``move_arrows`` updates.
    """
    from ..plots import check_ax, literal

    check_ax(ax, optional=False)
    vectors, limit = check_arrows(vectors, limit)
    artists = {}
    for row, ((name, v), colour) in enumerate(zip(vectors.items(), COLOURS * 3)):
        arrow = ax.annotate("", xy=v, xytext=(0, 0),
                            arrowprops=dict(arrowstyle="-|>", color=colour, lw=2,
                                            shrinkA=0, shrinkB=0))
        tip = ax.annotate(literal(name), xy=v, xytext=(4, 4), textcoords="offset points",
                          color=colour, fontsize=11, fontweight="bold")
        listing = ax.text(0.5 * (row % 2), -0.06 - 0.06 * (row // 2), literal(arrow_label(name, v)),
                          transform=ax.transAxes, color=colour, fontsize=10, va="top")
        artists[name] = (arrow, tip, listing)
    ax.axhline(0, color="#bbbbbb", lw=0.8)
    ax.axvline(0, color="#bbbbbb", lw=0.8)
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)
    return artists


def move_arrows(artists, vectors):
    """Point the arrows of ``draw_arrows`` at new vectors {name: (2,)}."""
    from ..plots import literal

    for name, v in vectors.items():
        arrow, tip, listing = artists[name]
        arrow.xy = tip.xy = tuple(v)
        listing.set_text(literal(arrow_label(name, v)))


ARROWS_SIZE = (4.6, 5.2)      # inches; the explorer draws the same figure
ARROWS_MARGINS = dict(left=0.1, right=0.96, bottom=0.2, top=0.93)


def arrows_figure(vectors, title=None, limit=None):
    """A (pyplot) figure of named 2-D vectors {name: (2,)} drawn as arrows."""
    import matplotlib.pyplot as plt

    from ..plots import check_title, literal
    vectors, limit = check_arrows(vectors, limit)   # before a figure is made
    title = check_title(title)
    fig = plt.figure(figsize=ARROWS_SIZE)
    fig.subplots_adjust(**ARROWS_MARGINS)
    ax = fig.add_subplot()
    draw_arrows(ax, vectors, limit)
    ax.set_title(literal(title or ""), fontsize=10)
    return fig


# ------------------------------------------------------------------ loading

def read_words(path):
    """The words of a word list file, one per line, as a list of str.

    Read line by line: the vocabulary holds "nan", "null", "#" and ",", which
    table parsers would turn into missing values or separators.
    """
    text = Path(path).read_text(encoding="utf-8")
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n")


def glove_dir():
    """The folder of the shipped GloVe subset: data/glove, found as helpers.weights finds data/."""
    from ..weights import data_dir

    return data_dir() / "glove"


@lru_cache(maxsize=1)
def glove_arrays():
    """(words, vectors): the shipped list of 50,000 words and their float32 (50000, 50) vectors."""
    folder = glove_dir()
    words = read_words(folder / "words.txt")
    vectors = np.load(folder / "vectors.npy").astype(np.float32)
    if vectors.shape != (len(words), 50):
        fail(f"data/glove holds {len(words)} words but vectors of shape {vectors.shape}; "
             "rebuild it with data/glove/build.py")
    vectors.flags.writeable = False
    return tuple(words), vectors


def load_glove(n_words=None):
    """The shipped GloVe 6B 50-d subset as gensim KeyedVectors (most frequent word first).

    n_words: keep only the n_words most frequent (default: all 50,000).
    """
    from gensim.models import KeyedVectors

    words, vectors = glove_arrays()
    if n_words is not None:
        n_words = check_positive_int(n_words, "n_words")
        if n_words > len(words):
            fail(f"n_words can be at most {len(words):,}, but got {count(n_words)}")
        words, vectors = words[:n_words], vectors[:n_words]
    kv = KeyedVectors(vector_size=vectors.shape[1])
    kv.add_vectors(list(words), vectors.copy())
    return kv


def check_words(kv, words):
    """Fail with one sentence naming the first word of ``words`` (a list or tuple) that is not in kv's vocabulary;
    return them as a list of plain strs (``items_of``: a str subclass's own __hash__ or __eq__ may raise)."""
    check_vectors(kv)
    words = items_of(words)
    for word in words:
        if not isinstance(word, str):
            fail(f"each word should be a string, but got {shown(word)}")
        if word not in kv.key_to_index:
            fail(f"each word should be among the {len(kv):,} words of these vectors, but got {shown(word)}")
    return words


def check_directions(norms, words):
    """Refuse, naming the first, a word whose vector has no direction: ``norms`` (n,) the norms of the
    vectors of ``words`` (n words), 0 for a zero vector (its cosines would be 0/0, NaN), NaN or inf for one
    holding NaN or inf (or numbers too large to square)."""
    bad = np.flatnonzero(~(np.isfinite(norms) & (norms > 0)))
    if len(bad):
        word = words[bad[0]]
        fail(f"each word's vector should have a direction (finite numbers, not all 0), but the vector of "
             f"{shown(word)} {'is a zero vector' if norms[bad[0]] == 0 else 'holds NaN, inf or numbers too large to square'}")


def word_rows(kv, words):
    """The vectors of ``words`` (each among kv's, each with a direction: ``check_directions``) as a
    float64 (n, d) array."""
    words = check_words(kv, words)
    rows = np.stack([kv[w] for w in words]).astype(np.float64)
    with np.errstate(all="ignore"):
        check_directions(np.linalg.norm(rows, axis=1), words)
    return rows


# ------------------------------------------------------------------ similarity

def unit(vectors):
    """Each vector (the last axis) scaled to norm 1. Shape (..., d) -> (..., d)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    return vectors / np.linalg.norm(vectors, axis=-1, keepdims=True)


def direction(v, name, d=None):
    """A vector ``v`` (d numbers, if d is given) that has a direction: a float64 1-D array of finite numbers,
    not all 0; one sentence otherwise. Entries so large (or small) that its norm overflows (or underflows)
    are scaled to about 1 first: the same direction, and the norm of what is returned is a normal float."""
    v = as_array(v, name, 1)
    if d is not None and len(v) != d:
        fail(f"{name} should have {d} numbers (the vectors' size), but it has {len(v):,}")
    check_finite(v, name)
    if not np.abs(v).max(initial=0) > 0:
        fail(f"{name} should have a direction (norm > 0), but it is a zero vector")
    with np.errstate(all="ignore"):
        norm = np.linalg.norm(v)
    return v if 1e-150 < norm < 1e150 else v / np.abs(v).max()


def cosine(a, b):
    """Cosine similarity of two vectors of the same dimension d: a·b / (|a| |b|).
    Vectors of different lengths, a non-finite number or a zero vector (no direction) are refused."""
    a, b = as_array(a, "a", 1), as_array(b, "b", 1)
    if a.shape != b.shape:
        fail(f"a and b should be vectors of the same length, but a has {len(a)} numbers and b has {len(b)}")
    a, b = direction(a, "a"), direction(b, "b")
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def check_skip(skip):
    """Words to leave out of a ranking: a set, list or tuple of words (strings), as a set; else one sentence."""
    if not isinstance(skip, (set, frozenset, list, tuple)) or not all(type(w) is str for w in skip):
        fail(f"skip should be a set (or list) of words to leave out, such as {{'king'}}, but got {shown(skip)}")
    return set(skip)


def rank_by_cosine(kv, query, topn, skip=()):
    """The topn words whose vectors have the highest cosine with ``query`` (d,), skipping ``skip``.

    Returns a list of (word, cosine), best first. topn: at most the words left after ``skip``.
    """
    check_vectors(kv)
    query = direction(query, "query", kv.vector_size)
    skip = check_skip(skip)
    topn = check_positive_int(topn, "topn")
    left = len(kv) - sum(word in kv.key_to_index for word in skip)
    if topn > left:
        fail(f"topn should be at most the {left:,} words there are to rank, but got {count(topn)}")
    scores = normed_vectors(kv) @ unit(query).astype(np.float32)
    order = np.argsort(-scores, kind="stable")
    best = [i for i in order[:topn + len(skip)] if kv.index_to_key[i] not in skip]
    return [(kv.index_to_key[i], float(scores[i])) for i in best[:topn]]


def normed_vectors(kv):
    """Every word's vector scaled to norm 1, (n, d) in kv's dtype, from ``kv.vectors`` as they are now:
    gensim's ``get_normed_vectors`` divides by the norms it cached on first use, stale once the vectors were
    changed in place since (``glove.vectors /= ...``). The same operations as gensim's, so the same floats
    while nothing changed. Memory: the (n, d) table and the n norms, counted first."""
    vectors = np.asarray(check_vectors(kv).vectors)
    check_bytes(vectors.nbytes + 8 * len(vectors), f"the unit vectors of {count(len(vectors))} words",
                "give fewer words")
    with np.errstate(all="ignore"):
        norms = np.linalg.norm(vectors, axis=1)
    check_directions(norms, kv.index_to_key)   # a zero vector's cosines would be NaN, ranked silently
    return vectors / norms[..., np.newaxis]


MAX_RANKING = 10_000   # pairs one ranking_text writes (the chapter writes 4 or 5)


def ranking_text(pairs):
    """[(word, cosine), ...] -> 'queen 0.852, throne 0.766, ...'."""
    given = isinstance(pairs, (list, tuple)) and length(pairs) <= MAX_RANKING   # (read by the built-ins: a
    rows = [items_of(pair) if isinstance(pair, (list, tuple)) and length(pair) == 2 else None   # subclass's may
            for pair in items_of(pairs)] if given else []                                       # lie or raise)
    if not given or not all(
            row is not None and isinstance(row[0], str)
            and not isinstance(row[1], bool) and isinstance(row[1], (int, float, np.integer, np.floating))
            for row in rows):
        fail(f"pairs should be a list of at most {MAX_RANKING:,} (word, cosine) pairs, as nearest returns, "
             f"but got {shown(pairs)}")
    scores = [check_number(score, f"the cosine of {shown(word)}") for word, score in rows]   # never 'nan' written
    return ", ".join(f"{word} {score:.3f}" for (word, _), score in zip(rows, scores))


def cosine_table(kv, words):
    """Cosine of every pair of ``words``: (n, n), 1 on the diagonal."""
    if isinstance(words, str) or not isinstance(words, (list, tuple)) or not length(words):
        fail(f"words should be a non-empty list of words, such as ['cat', 'dog'], but got {shown(words)}")
    words = items_of(words)   # (a subclass's __len__ or __iter__ may lie or raise)
    check_bytes(8 * (len(words) ** 2 + 2 * len(words) * check_vectors(kv).vector_size),
                f"a cosine table of {len(words):,} words", "give fewer words")
    rows = unit(word_rows(kv, words))
    return rows @ rows.T


MAX_COSINE_WORDS = 40   # plot_cosines writes every cosine in its cell: 1,600 numbers at most
COSINE_SLACK = 1e-6     # a cosine computed in float32 or float64 may pass ±1 by its rounding


def plot_cosines(table, words, title=None, ax=None):
    """Heatmap of a cosine table (n, n) with the values written in, on ``ax`` (one matplotlib Axes, or None:
    a new figure); returns the Axes."""
    import matplotlib.pyplot as plt

    from ..plots import check_ax, check_labels, check_title, literal
    table = as_array(table, "table", 2)
    ax = check_ax(ax)
    if not isinstance(words, (list, tuple)) or not 1 <= len(words) <= MAX_COSINE_WORDS:
        fail(f"words should be a list of 1 to {MAX_COSINE_WORDS} words (one per row of the table), but got "
             f"{shown(words)}")
    if table.shape != (len(words), len(words)) or not np.isfinite(table).all():
        fail(f"table should be ({len(words)}, {len(words)}) finite cosines, one per pair of words, but it has "
             f"shape {table.shape}{'' if np.isfinite(table).all() else ' and holds NaN or inf'}")
    if np.abs(table).max() > 1 + COSINE_SLACK:
        fail(f"table should hold cosines, from -1 to 1, but it holds {table.flat[np.abs(table).argmax()]:g}")
    check_labels(words, "each word")
    title = check_title(title)
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * len(words) + 1.8, 0.5 * len(words) + 1.0))
    image = ax.imshow(table, cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_xticks(range(len(words)), [literal(word) for word in words], rotation=45, ha="right")
    ax.set_yticks(range(len(words)), [literal(word) for word in words])
    ax.spines[:].set_visible(False)
    for (i, j), value in np.ndenumerate(table):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                color="white" if abs(value) > 0.6 else "black")
    ax.figure.colorbar(image, ax=ax, shrink=0.8, label="cosine")
    if title:
        ax.set_title(literal(title))
    return ax


def nearest(kv, word, topn=10):
    """The topn words closest in cosine to ``word`` (the word itself left out): [(word, cosine)]."""
    (word,) = check_words(kv, [word])   # a plain str (a subclass's __hash__ may raise)
    word_rows(kv, [word])   # a word among kv's, with a direction
    return rank_by_cosine(kv, kv[word], topn, skip={word})


def analogy_vector(kv, a, minus, plus):
    """The direction unit(a) - unit(minus) + unit(plus), as a unit vector (d,).

    The same direction gensim's ``most_similar(positive=[a, plus], negative=[minus])`` uses.
    """
    a, minus, plus = word_rows(kv, [a, minus, plus])
    return unit(unit(a) - unit(minus) + unit(plus))


def analogy(kv, a, minus, plus, topn=5, exclude_inputs=True):
    """Words nearest to a - minus + plus (e.g. king - man + woman): [(word, cosine)], best first.

    exclude_inputs=True leaves a, minus and plus out of the ranking, as gensim's
    ``most_similar`` does; False ranks every word, inputs included.
    """
    topn = check_positive_int(topn, "topn")
    exclude_inputs = check_switch(exclude_inputs, "exclude_inputs")
    a, minus, plus = check_words(kv, [a, minus, plus])   # plain strs (a subclass's __hash__ may raise)
    query = analogy_vector(kv, a, minus, plus)
    skip = {a, minus, plus} if exclude_inputs else set()
    return rank_by_cosine(kv, query, topn, skip=skip)


def offsets(kv, pairs):
    """The offsets unit(b) - unit(a) of word pairs [(a, b), ...] (e.g. (france, paris)): (n, d)."""
    if not isinstance(pairs, (list, tuple)) or length(pairs) < 2 or \
            any(not isinstance(pair, (list, tuple)) or length(pair) != 2 for pair in items_of(pairs)):
        fail(f"pairs should be at least two (a, b) word pairs, but got {shown(pairs)}")
    rows = unit(word_rows(kv, [w for pair in items_of(pairs) for w in items_of(pair)]))   # (the built-ins' own)
    return rows[1::2] - rows[::2]


def offset_agreement(kv, pairs):
    """How nearly one fixed direction a relation is: the cosines of every two of its pairs'
    offsets (unit(b) - unit(a)). Returns dict(cosines (n(n-1)/2,), mean, low, high, step:
    the mean norm of an offset). 1 everywhere would be one fixed direction."""
    if isinstance(pairs, (list, tuple)):   # the (n(n-1)/2, d) tables of pairs of offsets, counted first
        check_vectors(kv)
        n = length(pairs)
        check_bytes(8 * n * (n - 1) // 2 * (2 * kv.vector_size + 3), f"offset_agreement on {n:,} pairs",
                    f"give at most {math.isqrt(MAX_BYTES // (4 * kv.vector_size + 6)):,} pairs")
    vectors = offsets(kv, pairs)
    zero = np.flatnonzero(~(np.abs(vectors).max(axis=1) > 0))
    if len(zero):
        a, b = items_of(items_of(pairs)[zero[0]])   # (offsets read them so)
        fail(f"each pair's two words should have different vectors (an offset with a direction), but pair "
             f"{zero[0]} ({shown(a)}, {shown(b)}) has none")
    rows, cols = np.triu_indices(len(vectors), k=1)
    normed = unit(vectors)
    cosines = (normed[rows] * normed[cols]).sum(axis=1)
    return {"cosines": cosines, "mean": float(cosines.mean()), "low": float(cosines.min()),
            "high": float(cosines.max()), "step": float(np.linalg.norm(vectors, axis=1).mean())}


# ------------------------------------------------------------------ 2-D maps

def check_points(points, least=1, name="points"):
    """points as a finite (n, d) float array with least <= n <= MAX_POINTS (the measures compare every
    pair, and count their tables' bytes first); else one sentence (``name``: what they are called)."""
    points = as_array(points, name, 2)
    if not least <= len(points) <= MAX_POINTS:
        fail(f"{name} should have {least} to {MAX_POINTS:,} rows, but has {len(points):,}")
    if not np.isfinite(points).all():
        fail(f"{name} should hold finite numbers, but they hold {shown(points[~np.isfinite(points)][0])}")
    return points


def knn(points, k):
    """Indices (n, k) of each point's k nearest other points (Euclidean), nearest first.

    points: (n, d) with n > k. Computed a block of rows at a time: at most BLOCK_BYTES of the (n, n)
    distances at once, besides the (n, k) answer (counted first).
    """
    points = check_points(points)
    k = check_positive_int(k, "k")
    if len(points) <= k:
        fail(f"need more than k={k} points in an (n, d) array, but got shape {points.shape}")
    n = len(points)
    check_bytes(8 * n * k + BLOCK_BYTES, f"the {count(k)} nearest neighbours of {count(n)} points",
                "ask for a smaller k")
    squared = (points ** 2).sum(axis=1)
    rows = max(1, BLOCK_BYTES // (4 * 8 * n))   # a block's distances, its two temporaries and its argsort
    near = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, rows):   # one block of rows at a time (chapter 01's 172 points: one block)
        block = slice(start, min(n, start + rows))
        dist = squared[block, None] + squared[None, :] - 2 * points[block] @ points.T
        dist[np.arange(len(dist)), np.arange(block.start, block.stop)] = np.inf
        near[block] = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return near


MAX_POINTS = 5_000   # points a neighbourhood measure may compare (chapter 01: 172): about 7 s here
MAX_MAP_POINTS = 3_000   # points t-SNE or UMAP may map in one call: about 12 s here (5,000: 28 s)
BLOCK_BYTES = 64 * 2**20   # the most a block of knn's (n, n) distances takes at once, with its temporaries


def check_maps(high, low, k):
    """(high, low, k) for the neighbourhood measures: high (n, d) and low (n, m) finite arrays with the
    same n (at most MAX_POINTS), k a whole number below n; one sentence for the first that is not."""
    high, low = as_array(high, "high", 2), as_array(low, "low", 2)
    if len(high) != len(low) or len(high) > MAX_POINTS:
        fail(f"high and low should be (n, d) arrays with the same n (at most {MAX_POINTS:,}), but got shapes "
             f"{high.shape} and {low.shape}")
    for name, x in (("high", high), ("low", low)):
        if not np.isfinite(x).all():
            fail(f"{name} should hold finite numbers, but it holds {shown(x[~np.isfinite(x)][0])}")
    k = check_positive_int(k, "k")
    if k >= len(high):
        fail(f"k should be below the number of points n={len(high)}, but got k={count(k)}")
    return high, low, k


def check_vectors(kv):
    """``kv`` as word vectors (gensim KeyedVectors, as load_glove gives them), or one sentence."""
    if not all(hasattr(kv, name) for name in ("key_to_index", "index_to_key", "vectors", "vector_size")):
        fail(f"kv should be word vectors (gensim KeyedVectors, from load_glove), but got {shown(kv)}")
    return kv


def neighbourhood_kept(high, low, k=10):
    """For each point, the fraction of its k nearest neighbours in ``high`` that are also
    among its k nearest in ``low``.

    high: (n, d) the original vectors; low: (n, 2) their map. Returns (n,) values in [0, 1].
    A map that kept every neighbourhood scores 1; a random map about k / (n - 1).
    """
    high, low, k = check_maps(high, low, k)
    check_bytes(2 * 8 * len(high) * k + BLOCK_BYTES, f"the {count(k)} nearest neighbours of {count(len(high))} points "
                "in both maps", "ask for a smaller k")
    near_high, near_low = knn(high, k), knn(low, k)
    return np.array([len(set(h) & set(l)) / k for h, l in zip(near_high, near_low)])


def check_agreement_bytes(n):
    """Refuse up front a distance_agreement on ``n`` points whose tables pass MAX_BYTES: the n(n-1)/2 pairs'
    ranks in both maps (float64), with one map's distances and their order beside them: 32 bytes a pair."""
    pairs = n * (n - 1) // 2
    check_bytes(32 * pairs, f"distance_agreement on {count(n)} points ({count(pairs)} pairs)",
                f"give at most {math.isqrt(MAX_BYTES // 16):,} points")


def pair_distances(x):
    """The distance of every pair i < j of the rows of x (n, d), in np.triu_indices(n, 1)'s order:
    (n(n-1)/2,), computed a row at a time (never the (n(n-1)/2, d) table of differences)."""
    n = len(x)
    out = np.empty(n * (n - 1) // 2)
    start = 0
    for i in range(n - 1):
        out[start:start + n - 1 - i] = np.linalg.norm(x[i] - x[i + 1:], axis=1)
        start += n - 1 - i
    return out


def rank_correlation(ranks):
    """``np.corrcoef(ranks)[0, 1]`` for a (2, N) float64 table, computed in place (np.corrcoef copies it):
    the same operations in the same order, so the same float."""
    ranks -= ranks.mean(axis=1)[:, None]
    c = np.dot(ranks, ranks.T)
    c *= np.true_divide(1, ranks.shape[1] - 1)
    stddev = np.sqrt(np.diag(c))
    c /= stddev[:, None]
    c /= stddev[None, :]
    return float(np.clip(c[0, 1], -1, 1))


def distance_agreement(high, low):
    """Spearman rank correlation between all pairwise distances in ``high`` (n, d) and in
    ``low`` (n, 2): 1 when the map orders every distance as the original does.
    Memory: 32 bytes a pair of points, counted first (``check_agreement_bytes``)."""
    high, low = check_points(high, least=3, name="high"), check_points(low, least=3, name="low")
    if len(high) != len(low):
        fail(f"high and low should be (n, d) arrays with the same n >= 3, but got shapes "
             f"{high.shape} and {low.shape}")
    check_agreement_bytes(len(high))
    ranks = np.empty((2, len(high) * (len(high) - 1) // 2))
    for row, x in zip(ranks, (high, low)):
        order = np.argsort(pair_distances(x))
        row[order] = np.arange(len(order), dtype=float)   # each pair's rank: argsort(order), without a second sort
    return rank_correlation(ranks)


def pca_2d(points):
    """The first two principal components of points (n, d) -> (n, 2), signs fixed. points: finite,
    n >= 2 and d >= 2 (two components to find), at most MAX_POINTS rows."""
    points = check_points(points, least=2)
    if points.shape[1] < 2:
        fail(f"points should have at least 2 columns (two components to find), but has shape {points.shape}")
    # the centred copy, the SVD's own copy, its (n, d) factor and its workspace: about 4 x the points, counted at 5
    check_bytes(5 * 8 * points.size, f"PCA of {count(len(points))} points of {count(points.shape[1])} numbers",
                "give fewer points or fewer numbers each")
    centred = points - points.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    axes = vt[:2] * np.sign(vt[:2, :1] + 1e-12)   # make each axis' first entry positive
    return centred @ axes.T


# t-SNE's iterations. scikit-learn's default is 1000; on chapter 01's 172 words the map has
# settled by 500 (its KL divergence 0.2225 against 0.2221 at 1000, the share of neighbours kept
# 0.7715 at both, the distance-rank correlation 0.699 against 0.698), at half the time.
TSNE_ITERATIONS = 500


# The scale t-SNE and UMAP can work with: they square distances (1e-160 squared is 0 in float64, 1e160 squared
# is inf), and t-SNE's start divides by the spread of the points' first principal component.
SPREAD_RANGE = (1e-100, 1e100)
SPREAD_RELATIVE = 1e-9   # points that differ by less than this share of their size are, to float64, one point


def check_spread(points, method):
    """Refuse, before scikit-learn or UMAP sees them, points (finite, (n, d)) that (nearly) coincide, or
    whose distances float64 cannot square: t-SNE's start divides by their spread (NaN, and a segfault in
    its compiled code); and more than MAX_MAP_POINTS points (minutes of work)."""
    if len(points) > MAX_MAP_POINTS:
        fail(f"points should have at most {MAX_MAP_POINTS:,} rows for {method} (a map of more takes minutes), but "
             f"has {len(points):,}: map a sample of them")
    size = float(np.abs(points).max(initial=0))
    spread = float(np.abs(points - points.mean(axis=0)).max(initial=0))
    low, high = SPREAD_RANGE
    if not spread > max(low, SPREAD_RELATIVE * size):
        fail(f"points should differ from each other for {method} (it spreads them by their differences), but "
             f"they {'are all the same point' if spread == 0 else f'differ by at most {spread:.3g}'}"
             f"{'' if spread == 0 else f' (entries up to {size:.3g})'}: give points that differ")
    if size > high:
        fail(f"points should have entries of at most {high:g} for {method} (it squares their distances), but "
             f"they reach {size:.3g}: scale them down first")
    return points


@contextmanager
def map_states_kept():
    """Python's and NumPy's global random states and the thread counts put back after the block, however it ends:
    the first t-SNE's imports draw from Python's ``random``, and the learner's draws should go on as before; UMAP's
    numba, started after scikit-learn's OpenMP, sets OpenMP's thread count to the machine's cores, torch's among
    them (torch.get_num_threads() 2 after ``setup_notebook``'s 1): torch's count and each native pool's
    (threadpoolctl's: OpenMP, OpenBLAS, MKL) are put back."""
    from threadpoolctl import ThreadpoolController

    put_back = random_states()
    torch = sys.modules.get("torch")   # (chapter 01 needs no torch: none imported, none kept)
    threads = torch.get_num_threads() if torch is not None else None
    pools = [(pool, pool.num_threads) for pool in ThreadpoolController().lib_controllers]
    try:
        yield
    finally:
        put_back()
        for pool, n in pools:
            if pool.num_threads != n:   # (read again: a property)
                pool.set_num_threads(n)
        if torch is not None and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def tsne_2d(points, seed=0):
    """t-SNE map of points (n, d) -> (n, 2), one thread, seeded, TSNE_ITERATIONS iterations.
    points: finite, 3 to MAX_POINTS rows that do not all coincide."""
    seed = check_small_seed(seed, "t-SNE")
    points = check_spread(check_points(points, least=3), "t-SNE")
    return tsne_fit(points, seed)   # (which keeps the random states and thread counts)


def tsne_fit(points, seed):
    """tsne_2d's map, one thread. Its name is public, so it checks points and seed as tsne_2d does (an (n, d) array
    or tensor of finite numbers, read as float64, True/False refused; 3 to MAX_MAP_POINTS rows that do not all
    coincide: a uint16 tensor of equal rows crashed scikit-learn's compiled code) and keeps Python's and NumPy's
    random states and the thread counts (``map_states_kept``)."""
    seed = check_small_seed(seed, "t-SNE")
    points = check_spread(check_points(points, least=3), "t-SNE")
    with map_states_kept():   # scikit-learn's first import draws from Python's random
        from sklearn.manifold import TSNE
        from threadpoolctl import threadpool_limits

        perplexity = min(30.0, (len(points) - 1) / 3)
        with threadpool_limits(limits=1):
            tsne = TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed,
                        max_iter=TSNE_ITERATIONS)
            return tsne.fit_transform(points)


# ------------------------------------------------------------------ UMAP without pynndescent

# umap.umap_ imports pynndescent (its neighbour search) at its top, and pynndescent loads about
# 45 compiled functions as it is imported (0.5-0.7 s here). umap_2d hands UMAP the exact
# neighbours, so it never searches: import_umap imports umap with stand-ins for the three names
# umap.umap_ takes from pynndescent, and the real pynndescent is imported the first time any of
# them is used (a UMAP that searches for its own neighbours, a metric looked up), so every other
# use of umap in the process works as before.
PYNNDESCENT_NAMES = {"pynndescent": ("NNDescent", "NNDescent"),
                     "pynndescent.distances": ("named_distances", "pynn_named_distances"),
                     "pynndescent.sparse": ("sparse_named_distances", "pynn_sparse_named_distances")}


def real_pynndescent():
    """Import pynndescent and put its objects where umap.umap_ looks for them; returns umap.umap_."""
    import importlib

    from umap import umap_

    for module, (name, alias) in PYNNDESCENT_NAMES.items():
        setattr(umap_, alias, getattr(importlib.import_module(module), name))
    return umap_


class PendingDistances(dict):
    """Stands in for one of pynndescent's dicts of distance functions in umap.umap_ until it is
    read. Inside ``neighbours_given()`` a membership test answers False without importing
    pynndescent: UMAP asks it only to name the metric of a neighbour search it will not run."""

    given = False   # True inside neighbours_given()

    def __init__(self, alias):
        super().__init__()
        self.alias = alias

    def real(self):
        return getattr(real_pynndescent(), self.alias)

    def __contains__(self, key):
        return False if PendingDistances.given else key in self.real()

    def __getitem__(self, key):
        return self.real()[key]

    def __iter__(self):
        return iter(self.real())

    def __len__(self):
        return len(self.real())

    def get(self, key, default=None):
        return self.real().get(key, default)

    def keys(self):
        return self.real().keys()


class PendingType(type):
    def __instancecheck__(cls, obj):
        real = sys.modules.get("pynndescent")
        return real is not None and isinstance(obj, real.NNDescent)


class PendingNNDescent(metaclass=PendingType):
    """Stands in for pynndescent.NNDescent in umap.umap_: building one imports the real class."""

    def __new__(cls, *args, **kwargs):
        return real_pynndescent().NNDescent(*args, **kwargs)


@contextmanager
def neighbours_given():
    """While UMAP is handed its neighbours: its metric lookups need not import pynndescent."""
    PendingDistances.given = True
    try:
        yield
    finally:
        PendingDistances.given = False


def import_umap():
    """``import umap``, with pynndescent imported only when something uses it (see above)."""
    if "umap.umap_" not in sys.modules and "pynndescent" not in sys.modules:
        stand_ins = {module: types.ModuleType(module) for module in PYNNDESCENT_NAMES}
        stand_ins["pynndescent"].NNDescent = PendingNNDescent
        for module, (name, alias) in PYNNDESCENT_NAMES.items():
            if module != "pynndescent":
                setattr(stand_ins[module], name, PendingDistances(alias))
        sys.modules.update(stand_ins)
        import numba

        njit = numba.njit
        numba.njit = _disk_cached(njit)
        try:
            import umap   # noqa: F401
        finally:
            numba.njit = njit
            for module, stand_in in stand_ins.items():
                if sys.modules.get(module) is stand_in:
                    del sys.modules[module]
    import umap
    return umap


def _disk_cached(njit):
    """numba's ``njit`` as umap.utils calls it while it is imported: its functions compiled at import (given a
    signature: tau_rand_int, tau_rand) compiled with numba's disk cache (``cache=True``: the same machine code,
    kept beside UMAP's source or in numba's cache folder, as ``serial_umap`` keeps others), so a later kernel loads
    them instead of compiling them at every ``import umap`` (numba's first compilation in a process: about 1 s
    here). Any other call, and a function numba finds no folder to cache in, as ``njit`` itself compiles it."""
    def cached(*args, **options):
        if not (args and isinstance(args[0], str) and "cache" not in options
                and sys._getframe(1).f_globals.get("__name__") == "umap.utils"):
            return njit(*args, **options)

        def decorate(function):
            try:
                return njit(*args, cache=True, **options)(function)
            except RuntimeError:   # (no folder numba may write its cache to)
                return njit(*args, **options)(function)
        return decorate
    return cached


def serial_umap():
    """Swap two of UMAP's functions for single-threaded compilations of the same code.

    numba compiles UMAP's smooth_knn_dist and compute_membership_strengths for
    parallel threads the first time they run in a process: about 8 s on a 2-core
    machine, most of this notebook's budget, for a seeded UMAP that uses one thread
    anyway. Compiled serially they take about 1 s. The maps stay seeded and
    reproducible, but differ slightly from stock UMAP's, because the parallel
    compilation sums a mean in a different order. Affects UMAP in this process only.

    These two and UMAP's serial layout step are compiled with numba's disk cache
    (``cache=True``: the same machine code, kept beside UMAP's source or in numba's cache
    folder), so a later run loads them instead of compiling them again (about 3 s).
    """
    import numba

    import_umap()
    from umap import layouts, umap_

    for name in ("smooth_knn_dist", "compute_membership_strengths"):
        function = getattr(umap_, name)
        if getattr(function, "targetoptions", {}).get("parallel"):
            setattr(umap_, name, numba.njit(locals=function.locals, cache=True)(function.py_func))
    step = layouts._nb_optimize_layout_euclidean_single_epoch
    if not step.targetoptions.get("parallel") and type(getattr(step, "_cache", None)).__name__ == "NullCache":
        options = {k: v for k, v in step.targetoptions.items() if k != "nopython"}
        layouts._nb_optimize_layout_euclidean_single_epoch = numba.njit(cache=True, **options)(step.py_func)


UMAP_NEIGHBOURS = 15   # the neighbours of each point every UMAP map of the course's functions uses (UMAP's default)


def check_umap_points(n, what, advice):
    """Refuse up front a UMAP map of ``n`` points, fewer than UMAP_NEIGHBOURS: ``what`` names n in the
    caller's own terms (its words, its rows), ``advice`` what to give instead."""
    if n < UMAP_NEIGHBOURS:
        fail(f"{what} should be at least {UMAP_NEIGHBOURS} for a UMAP map (UMAP uses each point's "
             f"{UMAP_NEIGHBOURS} nearest neighbours), but got {count(n)}: {advice}")


def umap_2d(points, seed=0, n_neighbors=UMAP_NEIGHBOURS):
    """UMAP map of points (n, d) -> (n, 2), seeded (hence single-threaded).

    The exact nearest neighbours are computed here and handed to UMAP, which
    saves compiling UMAP's own neighbour search (seconds on a small machine).
    """
    seed = check_small_seed(seed, "UMAP")
    n_neighbors = check_positive_int(n_neighbors, "n_neighbors", minimum=2)
    points = check_spread(check_points(points, least=3), "UMAP")
    if n_neighbors > len(points):
        fail(f"n_neighbors should be at most the number of points ({len(points):,}), but got {count(n_neighbors)}")
    return umap_fit(points, seed, n_neighbors)


def umap_fit(points, seed, n_neighbors):
    """umap_2d's map of checked points, UMAP handed their exact neighbours; Python's and NumPy's random states and
    the thread counts kept (``map_states_kept``: UMAP's numba sets torch's)."""
    with map_states_kept():   # (as t-SNE's: the learner's draws go on as before)
        umap = import_umap()
        serial_umap()
        near = knn(points, n_neighbors - 1)
        near = np.hstack([np.arange(len(points))[:, None], near])   # UMAP counts the point itself
        dist = np.linalg.norm(points[near] - points[:, None, :], axis=-1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # "n_jobs overridden by random_state", "no search index"
            reducer = umap.UMAP(n_neighbors=n_neighbors, random_state=seed,
                                precomputed_knn=(near, dist.astype(np.float32), None))
            with neighbours_given():
                return reducer.fit_transform(points)


def project(points, method, seed=0):
    """Map points (n, d) to (n, 2) by method "PCA", "t-SNE" or "UMAP" (seed: 0 .. 2**32 - 1)."""
    method = check_choice(method, "method", METHODS)
    seed = check_small_seed(seed, method)
    points = as_array(points, "points", 2)
    if not np.isfinite(points).all() or len(points) < 3:
        fail(f"points should be at least 3 rows of finite numbers, but got shape {points.shape}"
             + ("" if np.isfinite(points).all() else " holding NaN or inf"))
    if method == "PCA":
        return pca_2d(points)
    if method == "UMAP":
        check_umap_points(len(points), "the number of points (rows)", "give more points or another method")
    check_spread(points, method)
    if method == "t-SNE":
        return tsne_2d(points, seed)
    if method == "UMAP":
        return umap_2d(points, seed)
    fail(f"method should be one of {', '.join(METHODS)}, but got {method!r}")


def group_words(kv, groups):
    """(words, labels) from a dict {group name: [words]} or a list of names of GROUPS."""
    if not isinstance(groups, (dict, list, tuple)) or not length(groups):
        fail(f"groups should be a non-empty list of group names (such as ['animals', 'cities']) or a dict "
             f"{{name: [words]}}, but got {shown(groups)}")
    if not isinstance(groups, dict):
        groups = items_of(groups)   # plain strs (a subclass's __len__, __iter__ or __hash__ may lie or raise)
        for g in groups:   # a string first: a list or dict in the list cannot be looked up in GROUPS
            if not isinstance(g, str) or g not in GROUPS:
                fail(f"each group should be one of {', '.join(GROUPS)}, but got {shown(g)}")
        groups = {g: GROUPS[g] for g in groups}
    first = {}   # each word -> its first group, in order (a dict: a list's `in` would be quadratic)
    for name, members in groups.items():
        if type(name) is not str or isinstance(members, str) or not isinstance(members, (list, tuple)):
            fail(f"each group should be a name (a string) with a list of words, such as 'pets': ['cat', 'dog'], "
                 f"but got {shown(name)}: {shown(members)}")
        for word in check_words(kv, members):   # (plain strs)
            first.setdefault(word, name)
    return list(first), list(first.values())


def word_map(kv, groups, methods=METHODS, k=10, seed=0):
    """Map the words of ``groups`` to 2-D by each method and measure what each map keeps.

    Vectors are scaled to norm 1 first, so the 50-d neighbours are the cosine neighbours.
    Returns a dict: words (n,), labels (n,), points (n, d) the unit vectors,
    coords {method: (n, 2)}, kept {method: (n,) fraction of the k nearest neighbours kept},
    agreement {method: rank correlation of all pairwise distances}, k, seed.
    """
    if isinstance(methods, str) or not isinstance(methods, (list, tuple)) or not methods:
        fail(f"methods should be a list of some of {', '.join(METHODS)}, but got {shown(methods)}")
    methods = [check_choice(m, "each method", METHODS) for m in methods]
    k, seed = check_positive_int(k, "k"), check_small_seed(seed, "t-SNE and UMAP")
    words, labels = group_words(kv, groups)
    if "UMAP" in methods:   # (before any map is made)
        check_umap_points(len(words), "the number of words in groups", "add words or leave UMAP out of methods")
    points = unit(word_rows(kv, words))
    check_maps_work(len(points), k, sum(m != "PCA" for m in methods), len(methods), "word_map",
                    "ask for fewer groups or fewer methods")
    coords = {m: project(points, m, seed) for m in methods}
    kept = {m: neighbourhood_kept(points, xy, k) for m, xy in coords.items()}
    agreement = {m: distance_agreement(points, xy) for m, xy in coords.items()}
    return {"words": words, "labels": labels, "points": points, "coords": coords,
            "kept": kept, "agreement": agreement, "k": k, "seed": seed}


# ------------------------------------------------------------------ many maps

MAX_RUNS = 100   # seeds one map_runs or train_word2vec_seeds call may run (chapter 01 uses 5 and 10)
# The work one word_map or map_runs call may do, counted before it starts (about a minute here): MAP_POINT_WORK a
# point for each t-SNE or UMAP map made, and 1 for each (point, point) of every map measured (neighbours kept
# and the distance-rank correlation). Here 2,500 points take about 7 s a UMAP (8·10^6) and 6 s a measure
# (6·10^6); chapter 01's 172 words on 8 maps need about 4·10^6.
MAX_MAPS_WORK = 6 * 10**7
MAP_POINT_WORK = 3_000


def check_maps_work(n, k, made, measured, what, advice):
    """Refuse up front maps of ``n`` points (``made`` of them by t-SNE or UMAP, ``measured`` measured with
    ``k`` neighbours) whose time passes MAX_MAPS_WORK, or whose measures' tables pass the memory limit."""
    from ..training import check_work   # here: training imports torch, which chapter 01 does not need

    if k >= n:
        fail(f"k should be below the number of points n={n}, but got k={count(k)}")
    check_agreement_bytes(n)
    check_bytes(2 * 8 * n * k + BLOCK_BYTES, f"the {count(k)} nearest neighbours of {count(n)} points in both maps",
                "ask for a smaller k")
    check_work(made * MAP_POINT_WORK * n + measured * n * n, MAX_MAPS_WORK,
               f"{what} on {count(n)} points ({made} t-SNE or UMAP maps, {measured} measured)", advice)


def check_seeds(seeds, owner):
    """A list (or range) of 1 to MAX_RUNS seeds, each 0 .. 2**32 - 1 (``owner``'s largest); return them as a list."""
    if not isinstance(seeds, (list, tuple, range)) or not 1 <= len(seeds[:MAX_RUNS + 1]) <= MAX_RUNS:
        fail(f"seeds should be a list (or range) of 1 to {MAX_RUNS} seeds, but got {shown(seeds)}")
    return [check_small_seed(seed, owner, "each seed") for seed in seeds]


def random_map(n, seed=0):
    """n points thrown down at random in the plane: (n, 2), standard normal, seeded."""
    n, seed = check_positive_int(n, "n"), check_seed(seed)
    check_bytes(16 * n, f"a random map of n={count(n)} points", f"ask for n <= {3 * 2**25:,}")
    return np.random.default_rng(seed).normal(size=(n, 2))


def has_keys(value, keys):
    """Whether ``value`` is a dict holding every one of ``keys``."""
    return isinstance(value, dict) and set(keys) <= set(value)


def check_result(result, keys):
    """Refuse anything but word_map's dict (one holding ``keys``, the ones the caller reads) in one sentence;
    return it. Every value read is checked, one entry per point: points (n, d) finite, words and labels n
    texts (the words all different), k from 1 to n - 1, coords {method: (n, 2)} and the kept (n,) shares and
    agreement of the same methods, seed."""
    if not has_keys(result, keys):
        fail(f"result should be what word_map returns (a dict with {', '.join(keys[:-1])} and {keys[-1]}), "
             f"but got {shown(result)}")
    n = len(check_points(result["points"], name="the result's points")) if "points" in keys else None
    for key in ("words", "labels"):
        if key in keys:
            n = check_texts(result[key], n, f"the result's {key}", distinct=key == "words")
    if "k" in keys:
        k = check_positive_int(result["k"], "the result's k")
        if k >= n:
            fail(f"the result's k should be below the number of points n={n}, but got k={count(k)}")
    if "coords" in keys:
        check_result_maps(result, keys, n)
    if "seed" in keys:
        check_small_seed(result["seed"], "t-SNE and UMAP", "the result's seed")
    # a new dict, its words and labels as plain lists (a subclass's __len__, __iter__ or index may lie or raise)
    return {**result, **{key: items_of(result[key]) for key in ("words", "labels") if key in keys}}


def check_texts(values, n, name, distinct=False):
    """A result's words or labels: a list (or tuple) of texts, one per point (n of them; n None: 1 to
    MAX_POINTS), all different if ``distinct``; return their number."""
    size = length(values) if isinstance(values, (list, tuple)) else None   # (the built-ins' own: a subclass's may raise)
    if size is None or not (size == n if n is not None else 1 <= size <= MAX_POINTS) or \
            not all(type(v) is str for v in items_of(values)):
        expected = f"{n:,}" if n is not None else f"1 to {MAX_POINTS:,}"
        fail(f"{name} should be a list of {expected} texts (one per point), but got {shown(values)}")
    if distinct and len(set(items_of(values))) < size:
        fail(f"{name} should be {size:,} different words, but some of them appear more than once")
    return size


def check_result_maps(result, keys, n):
    """word_map's coords {method: (n, 2) finite}, and (those ``keys`` read) its kept {method: (n,) shares}
    and agreement {method: a correlation from -1 to 1}, each for the methods of coords."""
    coords = result["coords"]
    if not isinstance(coords, dict) or not all(type(m) is str and m in METHODS for m in coords):
        fail(f"the result's coords should be a dict {{method: (n, 2) map}} with methods among {', '.join(METHODS)}, "
             f"but got {shown(coords)}")
    for method, xy in coords.items():
        check_array(xy, (n, 2), f"the result's {method} map")
    for key in ("kept", "agreement"):
        if key in keys and (not isinstance(result[key], dict) or set(result[key]) != set(coords)):
            fail(f"the result's {key} should be a dict with one entry for each of its maps ({', '.join(coords)}), "
                 f"but got {shown(result[key])}")
    for method in coords:
        if "kept" in keys:
            check_shares(result["kept"][method], n, f"the result's kept[{method!r}]")
        if "agreement" in keys:
            check_number(result["agreement"][method], f"the result's agreement[{method!r}]", low=-1, high=1)


def check_array(x, shape, name):
    """``x`` a NumPy array (as word_map and map_runs give) of finite numbers of ``shape`` (None: an axis of
    1 to MAX_POINTS entries); return it as floats."""
    wanted = "(" + ", ".join("n" if size is None else str(size) for size in shape) + ("," if len(shape) == 1 else "") + ")"
    if not isinstance(x, np.ndarray):
        fail(f"{name} should be a NumPy array of shape {wanted} (as word_map and map_runs give), but got {shown(x)}")
    x = to_numpy(x, name)
    if x.ndim != len(shape) or any(got != size if size is not None else not 1 <= got <= MAX_POINTS
                                   for got, size in zip(x.shape, shape)):
        fail(f"{name} should have shape {wanted}, one entry per point (at most {MAX_POINTS:,}), but it has shape {x.shape}")
    return check_finite(x, name)


def check_shares(shares, n, name):
    """A map's kept shares: a NumPy array (n,) (n None: any length from 1 to MAX_POINTS) of numbers from 0 to 1;
    return it as floats."""
    shares = check_array(shares, (n,), name)
    if not ((shares >= 0) & (shares <= 1)).all():
        fail(f"{name} should hold shares from 0 to 1, but it holds {shares[(shares < 0) | (shares > 1)][0]:g}")
    return shares


MAX_MAP_LABELS = 40   # words plot_maps may write on each panel (chapter 01 names a handful)


def check_on_map(result, words):
    """Refuse a word that is not on word_map's ``result`` (words: a list of them); return them as plain strs
    (``items_of``: a str subclass's own __hash__ or __eq__ may raise)."""
    on_map, words = set(result["words"]), items_of(words)   # (result: check_result's, plain lists)
    for word in words:   # a string first: a list or dict cannot be looked up in the map's set
        if not isinstance(word, str):
            fail(f"each word should be a string, a word of this map, but got {shown(word)}")
        if word not in on_map:
            fail(f"each word should be one of the {len(result['words'])} words of this map, but got {shown(word)}")
    return words


def map_runs(result, seeds=range(5)):
    """Measure word_map's words on several maps: a random map, PCA, t-SNE once and UMAP
    once per seed (t-SNE started from the PCA layout draws no random numbers: every seed
    gives it the same map). Maps word_map already made are reused.

    Returns a list of dicts: method, seed (None for PCA and t-SNE), kept (n,) the share
    of each word's k nearest neighbours kept, agreement (the distance-rank correlation).
    The time and memory are counted first and refused above about a minute (``check_maps_work``).
    """
    check_result(result, ("points", "k", "coords"))
    seeds = check_seeds(seeds, "UMAP")
    points, k = check_points(result["points"], least=3), check_positive_int(result["k"], "the result's k")
    check_umap_points(len(points), "the number of the result's words (map_runs makes UMAP maps)",
                      "make it with word_map from more words")
    check_maps_work(len(points), k, len(seeds) + 1, len(seeds) + 3, f"map_runs with {len(seeds)} seeds",
                    "ask for fewer seeds or fewer points")
    plans = [("random", 0), ("PCA", None), ("t-SNE", None)] + [("UMAP", s) for s in seeds]
    runs = []
    for method, seed in plans:
        if method == "random":
            xy = random_map(len(points), seed)
        elif method in result["coords"] and seed in (None, result.get("seed", 0)):
            xy = result["coords"][method]
        else:
            xy = project(points, method, seed or 0)
        runs.append({"method": method, "seed": seed, "kept": neighbourhood_kept(points, xy, k),
                     "agreement": distance_agreement(points, xy)})
    return runs


def plot_runs(runs, k=10):
    """One dot per map_runs entry: share of neighbours kept (x) against the
    distance-rank correlation (y). Returns the figure."""
    import matplotlib.pyplot as plt

    colours = {"random": "#7f7f7f", "PCA": "#1f77b4", "t-SNE": "#d62728", "UMAP": "#2ca02c"}
    given = isinstance(runs, (list, tuple)) and 1 <= length(runs) <= MAX_RUNS + 3   # (the built-ins' own reading:
    if not given or not all(                                                           # a subclass's may raise)
            has_keys(run, ("method", "kept", "agreement")) and isinstance(run["method"], str)
            and plain(run["method"]) in colours for run in items_of(runs)):
        fail(f"runs should be what map_runs returns (a non-empty list of at most {MAX_RUNS + 3} dicts with method, "
             f"kept and agreement, each method one of {', '.join(colours)}), but got {shown(runs)}")
    runs = items_of(runs)
    n = len(check_shares(runs[0]["kept"], None, "each run's kept"))   # every map of the same n points
    points = [(check_shares(run["kept"], n, "each run's kept").mean(),
               check_number(run["agreement"], "each run's agreement", low=-1, high=1)) for run in runs]
    k = check_positive_int(k, "k")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for method, colour in colours.items():
        mine = [point for point, run in zip(points, runs) if plain(run["method"]) == method]
        if not mine:
            continue
        x, y = zip(*mine)
        ax.scatter(x, y, s=36, color=colour, label=method + (f" ({len(mine)} seeds)" if len(mine) > 1 else ""))
    ax.set_xlim(0, 1)
    ax.set_xlabel(f"share of each word's {k} nearest neighbours the map keeps")
    ax.set_ylabel("distance-rank correlation")
    ax.legend(loc="lower right", frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def own_group_share(result):
    """For each word of word_map's result, the share of its k nearest neighbours in 50-D
    that belong to its own group. Shape (n,), values in [0, 1]."""
    labels = np.asarray(check_result(result, ("points", "labels", "k"))["labels"])
    near = knn(result["points"], result["k"])
    return (labels[near] == labels[:, None]).mean(axis=1)


def neighbour_groups(result, word):
    """The groups of ``word``'s k nearest 50-D neighbours in word_map's result, most common
    first: [(group, count)], counts summing to k."""
    result = check_result(result, ("points", "labels", "words", "k"))
    (word,) = check_on_map(result, [word])
    near = knn(result["points"], result["k"])[result["words"].index(word)]
    counts = {}
    for i in near:
        counts[result["labels"][i]] = counts.get(result["labels"][i], 0) + 1
    return sorted(counts.items(), key=lambda item: -item[1])


# one colour per group, fixed by the group's place in GROUPS (then any new group)
PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#008b8b", "#6b8e23", "#000000", "#b8860b", "#4b0082", "#17becf"]
MAX_MAP_GROUPS = 2 * len(PALETTE)   # groups plot_maps may draw (chapter 01 draws at most the 15 of GROUPS)


def group_colours(names):
    """{group name: colour}, stable: a group of GROUPS always gets the same colour."""
    order = {n: i for i, n in enumerate(dict.fromkeys([*GROUPS, *names]))}   # a dict: linear in the names
    return {n: PALETTE[order[n] % len(PALETTE)] for n in names}


def label_offset(xy, i, n):
    """Where the n-th label of point i goes, in points from its dot: towards the middle of
    the panel (so it stays inside), each further label a little further out (so labels of
    neighbouring dots part)."""
    low, high = xy.min(axis=0), xy.max(axis=0)
    rel = (xy[i] - low) / np.where(high > low, high - low, 1)
    sx, sy = (-1 if rel[0] > 0.5 else 1), (-1 if rel[1] > 0.5 else 1)
    return (sx * (30 + 14 * n), sy * (24 + 10 * n))


def plot_maps(result, label=()):
    """Draw word_map's result: one panel per method (a 2 × 2 grid, the legend in the fourth
    place), coloured by group. ``label``: the words to write on every panel, each in a box
    set off from its dot with a line to it, so labels do not cover each other or the dots.
    Returns the figure."""
    import matplotlib.pyplot as plt

    from ..plots import literal
    result = check_result(result, ("words", "labels", "coords", "kept", "agreement", "k", "seed"))
    if not result["coords"]:
        fail("result should be what word_map returns, with at least one map in its coords, but its coords are {}")
    if not isinstance(label, (list, tuple)) or length(label) > MAX_MAP_LABELS or \
            not all(isinstance(w, str) for w in items_of(label)):
        fail(f"label should be a list of words on the map, at most {MAX_MAP_LABELS} (such as ['dog', 'paris']), "
             f"but got {shown(label)}")
    label = items_of(label)   # plain strs (a subclass's __len__, __iter__ or __hash__ may lie or raise)
    check_on_map(result, label)
    names = list(dict.fromkeys(result["labels"]))
    if len(names) > MAX_MAP_GROUPS:   # each group drawn on every panel and named in the legend: minutes for thousands
        fail(f"result should be a map of at most {MAX_MAP_GROUPS} groups (two rounds of the colours), but it has "
             f"{len(names):,}")
    colours = group_colours(names)
    methods = list(result["coords"])
    n_rows = (len(methods) + 2) // 2
    fig, axes = plt.subplots(n_rows, 2, figsize=(11, 5.0 * n_rows), squeeze=False)
    panels = axes.ravel()
    for ax, method in zip(panels, methods):
        xy = result["coords"][method]
        for name in names:
            rows = [i for i, lab in enumerate(result["labels"]) if lab == name]
            ax.scatter(xy[rows, 0], xy[rows, 1], s=14, color=colours[name], label=literal(name))
        ax.margins(0.06)
        ax.autoscale_view()
        placed = []   # label centres in display points, to keep labels apart
        for n, word in enumerate(label):
            i = result["words"].index(word)
            dot = ax.transData.transform(xy[i]) * 72 / fig.dpi
            offset = np.array(label_offset(xy, i, n), dtype=float)
            for _ in range(6):   # push the label further out while it lands on an earlier one
                if all(np.abs(dot + offset - other).max() > 0 and
                       (abs(dot[0] + offset[0] - other[0]) > 60 or abs(dot[1] + offset[1] - other[1]) > 18)
                       for other in placed):
                    break
                offset *= 1.5
            placed.append(dot + offset)
            ax.annotate(literal(word), xy[i], xytext=tuple(offset), textcoords="offset points",
                        fontsize=10, fontweight="bold", color=colours[result["labels"][i]],
                        ha="center", va="center",
                        bbox=dict(boxstyle="round,pad=0.2", fc="white", ec=colours[result["labels"][i]], lw=0.8),
                        arrowprops=dict(arrowstyle="-", color="#333333", lw=0.8))
            ax.scatter(*xy[i], s=60, facecolors="none", edgecolors="#333333", linewidths=1.0)
        name = f"{method} (seed {result['seed']})" if method == "UMAP" else method
        ax.set_title(literal(f"{name}: keeps {result['kept'][method].mean():.0%} of {result['k']} "
                             f"neighbours; distance order r = {result['agreement'][method]:.2f}"), fontsize=10)
        ax.set_xticks([])
        ax.set_yticks([])
    handles, labels = panels[0].get_legend_handles_labels()
    for ax in panels[len(methods):]:
        ax.axis("off")
    legend_ax = panels[len(methods)] if len(methods) < len(panels) else None
    if legend_ax is not None:
        legend_ax.legend(handles, labels, loc="center", frameon=False, fontsize=11, markerscale=2,
                         title="group (circled: the words named in the text)" if label else "group")
    else:
        fig.legend(handles, labels, loc="lower center", ncol=(len(names) + 1) // 2, frameon=False)
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------ word2vec

def stable_hash(text):
    """A string hash that does not depend on PYTHONHASHSEED (for gensim's ``hashfxn``)."""
    return zlib.crc32(text.encode("utf-8"))


MAX_EPOCHS = 10_000              # train_word2vec's epochs (chapter 01 uses 100)
# The time one train_word2vec call may take, bounded two ways (here about 370,000 tokens a second at vector_size 8,
# and about 2e8 token-numbers a second at vector_size 10,000; slower still beyond it): chapter 01 works through
# 45,600 tokens of 8 numbers.
MAX_WORD2VEC_TOKENS = 2 * 10**7  # epochs × tokens (about a minute)
MAX_VECTOR_SIZE = 10_000         # numbers per word (GloVe's shipped vectors have 50, large models' a few thousand)
MAX_WORD2VEC_WORK = 2 * 10**9    # epochs × tokens × vector_size (about 10 s)
# train_word2vec_seeds' runs together may do what one run may (two at a time, on a machine that may have one core
# free): each run counted as epochs × tokens × max(vector_size, WORD2VEC_TOKEN_WORK), the two limits above in one
WORD2VEC_TOKEN_WORK = MAX_WORD2VEC_WORK // MAX_WORD2VEC_TOKENS


MAX_WINDOW = 10**6   # words either side: far more than any sentence, far below a C int


def check_word2vec(sentences, vector_size, window, epochs, seed, sample):
    """train_word2vec's arguments, each checked before any training: one sentence for the first
    that cannot be used. Returns (vector_size, window, epochs, seed, sample)."""
    if isinstance(sentences, (str, bytes)) or not isinstance(sentences, (list, tuple)) or not sentences:
        fail(f"sentences should be a non-empty list of non-empty lists of words, but got {shown(sentences)}")
    vocab, tokens = set(), 0
    for sentence in sentences:
        if not isinstance(sentence, (list, tuple)) or not sentence or not all(type(w) is str for w in sentence):
            fail(f"sentences should be a non-empty list of non-empty lists of words (strings), "
                 f"but one of them is {shown(sentence)}")
        vocab.update(sentence)
        tokens += len(sentence)
    for word in vocab:   # gensim hashes each word's UTF-8 bytes
        check_text(word, "each word", empty=True)
    longest = max(len(sentence) for sentence in sentences)
    if longest < 2:   # a word learns from its neighbours: no window, however small, finds one
        fail("sentences should hold at least one sentence of two or more words (a word learns from the words "
             "around it), but every sentence has one word")
    vector_size = check_positive_int(vector_size, "vector_size")
    window = check_positive_int(window, "window")
    if window > MAX_WINDOW:   # gensim's C loop takes a C int: 2**64 crashes its worker and the training waits forever
        fail(f"window should be at most {MAX_WINDOW:,} words (this course's limit; no sentence is that long), "
             f"but got {count(window)}")
    if window >= longest:   # no word has that many neighbours on either side: a wider window reaches no more words
        fail(f"window should be at most {longest - 1:,} (words either side of a word, and the longest sentence has "
             f"{longest:,} words), but got {count(window)}")
    epochs = check_positive_int(epochs, "epochs")
    if epochs > MAX_EPOCHS:
        fail(f"epochs should be at most {MAX_EPOCHS:,} (this course's limit), but got {count(epochs)}")
    if epochs * tokens > MAX_WORD2VEC_TOKENS:
        fail(f"epochs × tokens should be at most {MAX_WORD2VEC_TOKENS:,} (this course's limit), but {epochs:,} "
             f"epochs over {tokens:,} tokens make {epochs * tokens:,}")
    seed = check_small_seed(seed, "gensim")
    sample = check_number(sample, "sample", low=0, high=1)
    # gensim keeps two float32 tables of len(vocab) × vector_size (the vectors and the output weights)
    check_bytes(2 * 4 * len(vocab) * vector_size, f"word2vec with vector_size={count(vector_size)}",
                f"for {len(vocab):,} words ask for vector_size <= {max(1, 3 * 2**26 // max(1, len(vocab))):,}")
    if vector_size > MAX_VECTOR_SIZE:
        fail(f"vector_size should be at most {MAX_VECTOR_SIZE:,} numbers per word (this course's limit), "
             f"but got {count(vector_size)}")
    if epochs * tokens * vector_size > MAX_WORD2VEC_WORK:
        fail(f"epochs × tokens × vector_size should be at most {MAX_WORD2VEC_WORK:,} (this course's limit), but "
             f"{epochs:,} epochs over {tokens:,} tokens of {vector_size:,} numbers make {epochs * tokens * vector_size:,}")
    return vector_size, window, epochs, seed, sample


def check_small_seed(seed, owner, name="seed"):
    """A seed for a library that takes at most 2**32 - 1 (gensim, scikit-learn's t-SNE, UMAP); return it as int."""
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool) and seed > 2**32 - 1:
        fail(f"{name} should be a whole number from 0 to 2**32 - 1 ({owner}'s largest seed), but got {shown(seed)}")
    return check_seed(seed, name)


def train_word2vec(sentences, vector_size=8, window=2, epochs=100, seed=0, sample=0.0):
    """Skip-gram word2vec on a list of tokenised sentences, one thread, seeded.

    window: the most words on either side of a word that it learns from, below the longest sentence's
    length. As in gensim (its ``shrink_windows``, on here), each time a word is trained its own window is
    drawn from 1 to ``window``, so nearer neighbours count more: with window=2 the next word always counts,
    the one after it half of the time.
    sample: gensim's down-sampling of frequent words. Its default, 0.001, is meant
    for big corpora; on a toy corpus every word counts as frequent and most of the
    text is thrown away, so the default here is 0 (keep every token).
    Returns gensim KeyedVectors (vector_size numbers per word). Identical on every run.
    Limits: epochs <= MAX_EPOCHS (10,000), window below the longest sentence's length and at most MAX_WINDOW
    (10**6), vector_size <= MAX_VECTOR_SIZE (10,000),
    epochs × tokens <= 2e7, epochs × tokens × vector_size <= 2e9,
    seed 0 .. 2**32 - 1 (gensim's), the two tables of vectors within 1.5 GiB.
    """
    from gensim.models import Word2Vec

    vector_size, window, epochs, seed, sample = check_word2vec(sentences, vector_size, window, epochs, seed, sample)
    model = Word2Vec(sentences, vector_size=vector_size, window=window, min_count=1, sg=1,
                     negative=5, sample=sample, epochs=epochs, seed=seed, workers=1,
                     hashfxn=stable_hash)
    return model.wv


def train_word2vec_seeds(sentences, seeds, **options):
    """``train_word2vec(sentences, seed=seed, **options)`` for each of ``seeds``: a list of KeyedVectors,
    the same as one call after another, bit for bit (each run is seeded and single-threaded), two
    runs at a time (gensim trains without holding Python's lock, so two cores share the work).
    seeds: at most MAX_RUNS (100), every one checked (with the options) before any training; the runs
    together within one run's limits (epochs × tokens × max(vector_size, 100) summed over the runs at most
    MAX_WORD2VEC_WORK, about a minute)."""
    import concurrent.futures
    import inspect

    from ..training import check_work

    seeds = check_seeds(seeds, "gensim")
    try:
        given = inspect.signature(train_word2vec).bind(sentences, seed=0, **options)
    except TypeError as error:
        fail(f"train_word2vec_seeds should get train_word2vec's options (not seed), but {error}")
    given.apply_defaults()
    for seed in seeds:
        vector_size, _, epochs, _, _ = check_word2vec(**{**given.arguments, "seed": seed})
    tokens = sum(len(sentence) for sentence in sentences)
    check_work(len(seeds) * epochs * tokens * max(vector_size, WORD2VEC_TOKEN_WORK), MAX_WORD2VEC_WORK,
               f"train_word2vec_seeds with {len(seeds)} runs of {epochs:,} epochs over {tokens:,} tokens",
               "ask for fewer seeds or fewer epochs")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return list(pool.map(lambda seed: train_word2vec(sentences, seed=seed, **options), seeds))
