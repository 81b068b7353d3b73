"""Chapter 01's exercise checks: cosine, nearest neighbours, the analogy direction,
the neighbourhood a map keeps.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
from collections import Counter

import numpy as np

from ..exercises import (Function, Words, as_array, as_number, call, close_problems, exercise, number_problems, numbers,
                         precision_problem, settled, slip)
from ..errors import check_positive_int, count, fail
from .compute import BLOCK_BYTES, analogy_vector, check_maps, check_words, nearest, neighbourhood_kept, \
    normed_vectors, unit

# (a, b) pairs a cosine function is tried on, and what each one tests.
COSINE_CASES = (
    ([3.0, 1.0], [1.0, 2.0], "a=[3, 1], b=[1, 2]"),
    ([2.0, 0.0], [0.0, 5.0], "two perpendicular vectors"),
    ([1.0, 2.0], [-2.0, -4.0], "two vectors pointing in opposite directions"),
    (np.linspace(-1, 2, 50), np.cos(np.arange(50.0)), "two 50-number vectors"),
)


# A stack of rows the cosine function is tried on, with one vector b (3 rows, 2 numbers each).
STACK = (np.array([[3.0, 1.0], [2.0, 0.0], [-2.0, -4.0]]), np.array([1.0, 2.0]))
COSINE_FUNCTION_ATOL = 1e-3   # how far a cosine may be from the right one, in every case (rounding, float16)


@exercise("a cosine similarity function", answer=Function("a function of two vectors",
          own=("helpers.geometry.compute.cosine", "helpers.geometry.compute.cosine_table",
               "helpers.geometry.compute.rank_by_cosine", "helpers.geometry.compute.offset_agreement")))
def cosine_function(answer):
    """``answer`` is a function cosine(A, b) -> the cosine of b with A: a float when A is one
    vector (d,), an (n,) array of the cosines of b with each row when A is a stack (n, d)."""
    for a, b, what in COSINE_CASES:
        a, b = np.asarray(a), np.asarray(b)
        reference = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        out = call(answer, a, b, what=f"for {what}")
        value = as_number(out, f"cosine for {what}")
        problems = list(number_problems(value, reference, f"cosine for {what}", atol=COSINE_FUNCTION_ATOL))
        if problems and abs(value - a @ b) < 1e-9:
            yield f"for {what} your function returns the dot product: divide by both norms"
            return
        named = problems and slip(value, [
            (1 - reference, "1 − cosine, a distance: return the cosine itself"),
            (np.degrees(np.arccos(np.clip(reference, -1, 1))), "the angle in degrees: return its cosine, "
                                                               "a·b / (|a| |b|)"),
            (a @ b / ((a @ a) * (b @ b)), "a·b over the squared norms: a norm is the square root, "
                                          "|a| = √(a·a)"),
            (a @ b / np.linalg.norm(a), "a·b divided by |a| alone: divide by both norms"),
            (a @ b / np.linalg.norm(b), "a·b divided by |b| alone: divide by both norms"),
        ], atol=COSINE_FUNCTION_ATOL)
        if named:
            yield f"for {what} your function returns {named}"
            return
        if problems:
            yield precision_problem(out, value, reference, f"cosine for {what}", COSINE_FUNCTION_ATOL) or problems[0]
            return
    a, b = np.asarray(COSINE_CASES[0][0]), np.asarray(COSINE_CASES[0][1])
    scaled = as_number(call(answer, a, 10 * b, what="with b scaled up 10 times"), "cosine")
    if abs(scaled - as_number(call(answer, a, b), "cosine")) > COSINE_FUNCTION_ATOL:
        yield ("your cosine changes when b is scaled up 10 times; "
               "it should depend on direction only")
        return
    A, b = STACK
    out = call(answer, A, b, what="for a stack of 3 rows")
    got = numbers(out, "the cosines of a stack of 3 rows")
    reference = A @ b / (np.linalg.norm(A, axis=1) * np.linalg.norm(b))
    if got.shape != reference.shape:
        yield (f"for a stack of 3 rows your function returns shape {got.shape}: it should give one "
               "cosine per row, shape (3,)")
    elif np.allclose(got, A @ b / (np.linalg.norm(A) * np.linalg.norm(b))):
        yield ("for a stack of rows your function divides by the norm of the whole stack: "
               "each row needs its own norm (np.linalg.norm's axis argument)")
    elif not np.allclose(got, reference, atol=COSINE_FUNCTION_ATOL, rtol=0):
        yield precision_problem(out, got, reference, "the cosines of a stack of 3 rows", COSINE_FUNCTION_ATOL) or \
            "for a stack of 3 rows the cosines are wrong: each row's cosine with b, in row order"


@exercise("the nearest neighbours, computed with NumPy", answer=Words())
def neighbours(answer, kv, word, topn=5):
    """``answer`` is the list of the ``topn`` words closest in cosine to ``word``, best first."""
    check_words(kv, [word])
    if check_positive_int(topn, "topn") >= len(kv):
        fail(f"topn should be below the {len(kv):,} words of these vectors, but got {count(topn)}")
    if len(answer) != topn:
        yield f"the answer should hold {topn} words, but it holds {len(answer)}"
        return
    if word in answer:
        yield f"'{word}' itself is in your list: leave the word out (its cosine with itself is 1)"
        return
    expected = [w for w, _ in nearest(kv, word, topn)]   # from kv.vectors as they are now (no cached norms)
    among = set(expected)   # sets and counts throughout: every step linear in topn (which may be 99,999)
    wrong = [w for w in answer if w not in among]
    repeated = repeated_words(answer)
    if repeated:
        yield repeats_sentence(answer, repeated, expected)
    elif wrong and set(answer) <= set(lowest(kv, word, topn)):
        yield (f"your {topn} words have the lowest cosines with '{word}': np.argsort sorts lowest first, "
               "so sort by minus the cosine (or reverse the order) to put the highest first")
    elif wrong:
        yield (f"{len(wrong)} of your {topn} words are not among the {topn} nearest "
               f"(the first is '{wrong[0]}'); did you scale every row to norm 1?")
    elif answer != expected:
        yield "the right words, in the wrong order: sort by cosine, the highest first"


def repeated_words(words):
    """The words that appear more than once in ``words`` (a list of strings), in first-seen order."""
    counts = Counter(words)   # dicts keep first-seen order
    return [w for w, n in counts.items() if n > 1]


def repeats_sentence(answer, repeated, expected):
    """The sentence for an ``answer`` that holds a word more than once: name the first repeated word,
    and the first of the ``expected`` words it then leaves out."""
    first = repeated[0]
    times = {2: "twice", 3: "three times"}.get(answer.count(first), f"{answer.count(first)} times")
    given = set(answer)
    missing = [w for w in expected if w not in given]
    left_out = f", and '{missing[0]}' is missing" if missing else ""
    return (f"'{first}' is in your list {times}{left_out}: the {len(answer)} nearest are {len(answer)} "
            "different words (check where your slice starts and ends)")


NORM_ATOL = 1e-3     # how far from 1 the analogy direction's norm may be (rounding, float16, 4 decimals)
COSINE_ATOL = 1e-6   # how far below 1 its cosine with the expected direction may be


@exercise("the analogy direction")   # (the answer read here: a float16 one is named as such)
def analogy_direction(answer, kv, a, minus, plus):
    """``answer`` (d,) is unit(a) - unit(minus) + unit(plus), scaled to norm 1: its norm within NORM_ATOL of 1,
    its direction judged by its cosine (the answer scaled to norm 1) with the expected one."""
    check_words(kv, [a, minus, plus])
    direction = as_array(answer, "your answer", shape=(kv.vector_size,))
    expected = analogy_vector(kv, a, minus, plus)
    norm = float(np.linalg.norm(direction))
    if abs(norm - 1) <= NORM_ATOL and unit(direction) @ expected > 1 - COSINE_ATOL:
        return
    rounded = precision_problem(answer, direction, expected, "the direction", NORM_ATOL)
    if rounded:
        yield rounded
        return
    if not abs(norm - 1) <= NORM_ATOL:
        yield f"the direction has norm {norm:.3f}: scale it to norm 1 at the end"
        return
    cosine = unit(direction) @ expected
    if unit(direction) @ unit(kv[a].astype(float) - kv[minus] + kv[plus]) > 1 - COSINE_ATOL:
        yield "you combined the raw vectors: scale each of the three to norm 1 first"
    else:
        yield (f"the direction points elsewhere (its cosine with the expected one is "
               f"{cosine:.{3 if cosine < 0.9995 else 7}f}); check the signs: {a} - {minus} + {plus}")


KEPT_ATOL = 1e-6   # how far a kept fraction may be from the right one (a whole number of neighbours over k)
# The most this check judges (chapter 01: 6 points, its maps 172): a wrong answer sorts an (n, n) table of distances
# per map, made from the differences of every pair of points, n² × (d + m) numbers: at these bounds a few seconds.
MAX_JUDGED_POINTS = 2_000
MAX_DIFFERENCES = 200_000_000


@exercise("the fraction of each point's neighbours a map keeps")   # (the answer read here: a float16 one is named)
def kept_fractions(answer, high, low, k):
    """``answer`` (n,) is, for each point, the share of its k nearest neighbours in ``high``
    that are also among its k nearest in ``low``."""
    high, low, k = check_maps(high, low, k)
    check_judging_work(high, low)
    given, answer = answer, as_array(answer, "your answer", shape=(len(high),))   # (given: with its dtype)
    reference = neighbourhood_kept(high, low, k)
    done = settled(given, answer, reference, "the kept fractions", KEPT_ATOL)
    if done is not None:
        yield from done
        return
    if answer.min() < 0 or answer.max() > 1:
        yield "every entry is a fraction of k, between 0 and 1"
        return
    if not np.allclose(answer * k, np.round(answer * k), atol=KEPT_ATOL):
        yield f"every entry should be a whole number of neighbours divided by k={k}"
        return
    yield slip(answer, kept_slips(high, low, k), atol=KEPT_ATOL) or \
        next(close_problems(answer, reference, "kept", atol=KEPT_ATOL))


def check_judging_work(high, low):
    """Refuse up front maps high (n, d) and low (n, m) too large for kept_fractions to judge in a few seconds:
    more than MAX_JUDGED_POINTS points, or more than MAX_DIFFERENCES differences of pairs of points, n² × (d + m)."""
    n, d, m = len(high), high.shape[1], low.shape[1]
    if n > MAX_JUDGED_POINTS:
        fail(f"high and low should have at most {MAX_JUDGED_POINTS:,} points for this check (it sorts the distances "
             f"of every pair), but they have {count(n)}")
    if n * n * (d + m) > MAX_DIFFERENCES:
        fail(f"high and low should make at most {MAX_DIFFERENCES:,} differences of pairs of points for this check "
             f"(n² × (d + m)), but they make {count(n)}² × ({count(d)} + {count(m)}) = {count(n * n * (d + m))}: "
             "give fewer points or fewer numbers each")


def lowest(kv, word, topn):
    """The ``topn`` words with the lowest cosine with ``word``: an ascending sort kept as it came."""
    normed = normed_vectors(kv)
    order = np.argsort(normed @ normed[kv.key_to_index[word]], kind="stable")
    return [kv.index_to_key[i] for i in order[:topn]]


def pair_table(x):
    """All pairwise Euclidean distances of points (n, d): (n, n), 0 on the diagonal. Computed a block of rows at a
    time, each block's (rows, n, d) differences at most BLOCK_BYTES with their squares: never the whole (n, n, d)
    table of differences (5,000 points of 50 numbers: 10 GB)."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    rows = max(1, BLOCK_BYTES // (2 * 8 * n * max(1, x.shape[1])))
    dist = np.empty((n, n))
    for start in range(0, n, rows):
        dist[start:start + rows] = np.linalg.norm(x[start:start + rows, None, :] - x[None, :, :], axis=-1)
    return dist


def neighbour_lists(x, k):
    """For points x (n, d) and k < n: (with_itself, nearest, farthest), (n, k) indices each: every point's k nearest
    counting itself (distance 0), its k nearest other points (nearest first) and its k farthest other points
    (farthest first). One table of distances (pair_table) and one stable sort: equal distances in index order (the
    farthest in reverse index order)."""
    n = len(x)
    order = np.argsort(pair_table(x), axis=1, kind="stable")   # (n, n): nearest first, each point among them
    others = order[order != np.arange(n)[:, None]].reshape(n, n - 1)   # (n, n - 1): the point itself left out
    return order[:, :k], others[:, :k], others[:, ::-1][:, :k]


def shares(a, b):
    """For each row i, the share of the indices a[i] that are also in b[i]: (n,). a, b: (n, k) indices of n points,
    each row without repeats (the k neighbours of a point). Counted in an (n, n) table of booleans."""
    rows = np.arange(len(a))[:, None]
    among = np.zeros((len(a), len(a)), dtype=bool)
    among[rows, a] = True
    return among[rows, b].sum(axis=1) / a.shape[1]


def kept_slips(high, low, k):
    """[(the kept fractions (n,) a known slip gives, the sentence that names it), ...] for maps high (n, d) and
    low (n, m): counting each point as its own neighbour, keeping the k farthest, matching the lists place by
    place. One sort per map (neighbour_lists), shared by the three."""
    (itself_h, near_h, far_h), (itself_l, near_l, far_l) = neighbour_lists(high, k), neighbour_lists(low, k)
    return [(shares(itself_h, itself_l), "you counted each point as one of its own neighbours: leave the point "
                                         "itself out"),
            (shares(far_h, far_l), "that keeps each point's k farthest points: np.argsort sorts distances lowest "
                                   "first, so the nearest are its first k"),
            ((near_h == near_l).mean(axis=1), "that compares the neighbours place by place: count the ones the two "
                                              "lists share, in any order (a set intersection)")]


def counting_itself(high, low, k):
    """The common slip: each point's k nearest *including itself*, shares kept. Shape (n,)."""
    return kept_slips(high, low, k)[0][0]


def farthest_kept(high, low, k):
    """The slip of taking each point's k farthest other points: the shares kept. Shape (n,)."""
    return kept_slips(high, low, k)[1][0]
