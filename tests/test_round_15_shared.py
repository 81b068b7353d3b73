"""Red team round 15, reader A, the shared helpers: ch01's analogy_direction judges the direction by its cosine;
the neighbours check and geometry's rankings use the vectors as they are now, not gensim's cached norms;
qkv.attention_steps refuses non-finite X and W_*; reference.softmax and gelu count their bytes first (gelu
without object arrays); plots.attention_heatmap refuses rows that do not sum to 1; weights.save refuses a
stem holding a lone surrogate."""
import math
import tracemalloc

import matplotlib
import numpy as np
import pytest
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers import plots, weights  # noqa: E402
from helpers import reference as ref  # noqa: E402
from helpers.geometry import checks, compute as geometry  # noqa: E402
from helpers.qkv import compute as qkv  # noqa: E402


@pytest.fixture
def scaled_glove():
    """A GloVe of its own (the session's is shared) whose norms gensim cached, then every row scaled to
    norm 1 in place, as exercise 2's hint suggests: gensim's cached norms are stale."""
    kv = geometry.load_glove()
    kv.fill_norms()
    kv.most_similar("king", topn=5)   # an earlier cell of the chapter
    kv.vectors /= np.linalg.norm(kv.vectors, axis=1, keepdims=True)
    return kv


# ---------------------------------------------------------------- A2: analogy_direction by the cosine

def direction(glove):
    """paris - france + italy, each scaled to norm 1, the sum too: what exercise 3 asks for (50,)."""
    unit = lambda v: v / np.linalg.norm(v)
    return unit(unit(glove["paris"]) - unit(glove["france"]) + unit(glove["italy"]))


def test_round_15_analogy_direction_takes_a_right_direction_of_any_norm_the_gate_lets_through(glove):
    """A2: a norm of 0.99999 (v / (|v| + 1e-5)), 4 decimals or float16 was "points elsewhere (cosine 1.000)"."""
    v = direction(glove).astype(np.float64)
    for answer in (v / (1 + 1e-5), v * (1 - 9e-4), v * (1 + 9e-4), np.round(v, 4), v.astype(np.float16)):
        assert checks.analogy_direction.feedback(answer, glove, "paris", "france", "italy") == []
    said = checks.analogy_direction.feedback(v * 0.99, glove, "paris", "france", "italy")
    assert len(said) == 1 and "norm 0.990" in said[0]


def test_round_15_analogy_direction_still_names_the_raw_vectors_and_wrong_signs(glove):
    raw = glove["paris"].astype(float) - glove["france"] + glove["italy"]
    said = checks.analogy_direction.feedback(0.9999 * raw / np.linalg.norm(raw), glove, "paris", "france", "italy")
    assert len(said) == 1 and "raw vectors" in said[0]
    unit = lambda v: v / np.linalg.norm(v)
    wrong = unit(unit(glove["paris"]) + unit(glove["france"]) - unit(glove["italy"]))
    said = checks.analogy_direction.feedback(wrong, glove, "paris", "france", "italy")
    assert len(said) == 1 and "points elsewhere" in said[0] and "1.000" not in said[0]


# ---------------------------------------------------------------- A18: no stale cached norms

def test_round_15_neighbours_judges_against_the_vectors_as_they_are_now(scaled_glove):
    """A18: after glove.vectors /= its norms in place, the right 5 neighbours of 'ocean' got ✗ "not among"."""
    kv = scaled_glove
    cosines = kv.vectors @ kv.vectors[kv.key_to_index["ocean"]]
    answer = [w for w in (kv.index_to_key[i] for i in np.argsort(-cosines)) if w != "ocean"][:5]
    assert answer == ["sea", "waters", "seas", "coast", "shores"]
    assert checks.neighbours.feedback(answer, kv, "ocean", topn=5) == []
    said = checks.neighbours.feedback(answer[::-1], kv, "ocean", topn=5)
    assert len(said) == 1 and "order" in said[0]


def test_round_15_rankings_use_the_vectors_as_they_are_now(scaled_glove):
    """A18 (W): nearest(glove, 'ocean') gave shores, horizon, anchored, ... on stale norms."""
    fresh = geometry.load_glove()
    words = lambda pairs: [w for w, _ in pairs]
    assert words(geometry.nearest(scaled_glove, "ocean", topn=5)) == ["sea", "waters", "seas", "coast", "shores"]
    for call in (lambda kv: geometry.nearest(kv, "river", topn=5),
                 lambda kv: geometry.analogy(kv, "king", "man", "woman", topn=4),
                 lambda kv: geometry.rank_by_cosine(kv, geometry.analogy_vector(kv, "paris", "france", "italy"), 5)):
        assert words(call(scaled_glove)) == words(call(fresh))
        np.testing.assert_allclose([c for _, c in call(scaled_glove)], [c for _, c in call(fresh)], atol=1e-6)


def test_round_15_chapter_01_prints_the_same_rankings(glove):
    """Chapter 01's saved outputs (cells 18, 23 and 35), and gensim's own normed vectors, bit for bit."""
    assert geometry.ranking_text(geometry.nearest(glove, "river", topn=5)) == \
        "rivers 0.874, creek 0.829, tributary 0.822, valley 0.821, basin 0.803"
    assert geometry.ranking_text(geometry.analogy(glove, "king", "man", "woman", topn=4)) == \
        "queen 0.852, throne 0.766, prince 0.759, daughter 0.747"
    reference = geometry.analogy_vector(glove, "paris", "france", "italy")
    assert geometry.ranking_text(geometry.rank_by_cosine(glove, reference, topn=5)) == \
        "rome 0.847, italy 0.805, paris 0.781, milan 0.777, turin 0.767"
    assert np.array_equal(geometry.normed_vectors(glove), glove.get_normed_vectors())


def test_round_15_normed_vectors_leaves_the_vectors_and_gensim_alone(scaled_glove):
    before, norms = scaled_glove.vectors.copy(), scaled_glove.norms.copy()
    geometry.normed_vectors(scaled_glove)
    assert np.array_equal(scaled_glove.vectors, before) and np.array_equal(scaled_glove.norms, norms)


# ---------------------------------------------------------------- A3: attention_steps refuses NaN and inf

@pytest.mark.parametrize("name", ["X", "W_Q", "W_K", "W_V"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_round_15_attention_steps_refuses_non_finite_inputs(refused, name, bad):
    """A3: W_V holding NaN returned an output full of NaN without a word."""
    toy = qkv.primer_toy()
    given = {key: toy[key].copy() for key in ("X", "W_Q", "W_K", "W_V")}
    given[name][0, 0] = bad
    refused(lambda: qkv.attention_steps(**given, causal=True), name, "finite", "NaN or inf")


def test_round_15_attention_steps_refuses_products_that_overflow(refused):
    toy = qkv.primer_toy()
    refused(lambda: qkv.attention_steps(toy["X"] * 1e200, toy["W_Q"], toy["W_K"], toy["W_V"]),
            "should give finite scores", "overflow")
    W_V = toy["W_V"] * 1e300
    refused(lambda: qkv.attention_steps(toy["X"] * 1e10, np.zeros((5, 5)), np.zeros((5, 5)), W_V),
            "should give finite V", "overflow")


def test_round_15_attention_steps_still_gives_the_primer_numbers():
    toy = qkv.primer_toy()
    steps = qkv.attention_steps(toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"], causal=True)
    for key in ("Q", "K", "V", "weights", "output"):
        assert qkv.printed_difference(steps[key], qkv.PRIMER_TOY_PRINTED[key]) <= 5e-4


# ---------------------------------------------------------------- A7, A8: softmax and gelu count their bytes

def peak_bytes(call):
    """The most bytes Python and NumPy held at once during call() beyond what they held before it."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        result = call()
        peak = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    del result
    return peak


def test_round_15_softmax_makes_no_more_than_it_counts():
    """A7: the old softmax kept x - max, its exp and the result at once (24 bytes a score) besides the tests."""
    x = np.random.default_rng(0).normal(size=10**6)
    assert peak_bytes(lambda: ref.softmax(x)) <= ref.SOFTMAX_BYTES * x.size


def test_round_15_softmax_refuses_past_the_limit_before_the_work(refused):
    """A7: 1e8 scores (0.75 GiB, within to_numpy's gate) took about 2.2 GiB more."""
    assert ref.SOFTMAX_BYTES * 9 * 10**7 > 1.5 * 2**30   # (on the old code: no gate, nothing made below)
    x = np.broadcast_to(0.0, (9 * 10**7,))   # stores one number: nothing big is made before the refusal
    refused(lambda: ref.softmax(x), "softmax of 90,000,000 scores", "1.5 GiB", "give fewer scores")


def test_round_15_softmax_gives_the_same_numbers():
    x = np.array([[1.0, 2.0, 3.0], [0.0, -np.inf, 5.0]])
    shifted = x - x.max(axis=-1, keepdims=True)
    expected = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
    assert np.array_equal(ref.softmax(x), expected)
    assert np.array_equal(ref.softmax(x.T, axis=0), expected.T)


def test_round_15_gelu_makes_no_object_arrays():
    """A8: np.vectorize(math.erf) made about 100 bytes a number (object arrays); now GELU_BYTES at most."""
    x = np.random.default_rng(0).normal(size=10**6)
    assert peak_bytes(lambda: ref.gelu(x)) <= ref.GELU_BYTES * x.size


def test_round_15_gelu_refuses_past_the_limit_before_the_work(refused):
    assert ref.GELU_BYTES * 7 * 10**7 > 1.5 * 2**30   # (on the old code: no gate, nothing made below)
    x = np.broadcast_to(0.0, (7 * 10**7,))
    refused(lambda: ref.gelu(x), "gelu of 70,000,000 numbers", "1.5 GiB", "give fewer numbers")


def test_round_15_gelu_is_the_exact_gelu_to_float64_rounding():
    """math.erf's numbers, but for erf's last place (one unit of 1 + erf: |x| 2**-53 at most, times two for
    x * 0.5's rounding); a number stays a number, a tensor or a list is read."""
    x = np.concatenate([np.linspace(-40, 40, 20001), [0.0, -0.0, 1e-300, -5e-324]])
    exact = np.array([v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    assert (np.abs(ref.gelu(x) - exact) <= 2**-52 * np.abs(x)).all()
    assert np.array_equal(ref.gelu(x[x > 9]), x[x > 9]) and np.array_equal(ref.gelu(x[x < -40 + 1e-9]), [-0.0])
    assert isinstance(ref.gelu(1.0), np.float64) and f"{ref.gelu(1.0):.3f}" == "0.841"
    assert f"{ref.gelu(-1.0):.3f}" == "-0.159" and f"{ref.gelu(-3.0):.3f}" == "-0.004"
    assert ref.gelu(torch.ones(2, 3)).shape == (2, 3) and ref.gelu(np.zeros((2, 0))).shape == (2, 0)
    np.testing.assert_array_equal(ref.gelu([[0.0, 1.0]]), ref.gelu(np.array([[0.0, 1.0]])))


# ---------------------------------------------------------------- A16: attention_heatmap refuses scores

def test_round_15_attention_heatmap_refuses_rows_that_do_not_sum_to_1(refused):
    """A16: ch02's raw scores x @ x.T (rows summing to 3, 3, 4) were drawn as attention weights."""
    words = qkv.three_words()
    scores = words["x"] @ words["x"].T
    refused(lambda: plots.attention_heatmap(scores, words["tokens"]), "sum to 1", "row 2 sums to 4", "softmax")
    refused(lambda: plots.attention_heatmap(np.full((2, 2), 0.51), ["a", "b"]), "row 0 sums to 1.02")
    refused(lambda: plots.attention_heatmap(np.zeros((2, 2)), ["a", "b"]), "sums to 0")


def test_round_15_attention_heatmap_refuses_before_drawing(refused):
    plt.close("all")
    refused(lambda: plots.attention_heatmap(np.full((3, 3), 0.5), ["a", "b", "c"]), "sums to 1.5")
    assert plt.get_fignums() == []


def test_round_15_attention_heatmap_draws_what_the_chapters_give_it():
    """The ch02 (cells 29 and 84) and ch00 (cell 43) calls: a softmax of scores, masked maps whose hidden
    cells are 0, a float32 model's maps, one row of them; a bfloat16 row within its rounding."""
    words = qkv.three_words()
    plots.attention_heatmap(ref.softmax(words["x"] @ words["x"].T), words["tokens"])
    toy = qkv.primer_toy()
    masked = qkv.attention_steps(toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"], causal=True)["weights"]
    plots.attention_heatmap(masked, toy["tokens"])
    maps = torch.softmax(torch.randn(2, 7, 7, generator=torch.Generator().manual_seed(0)), dim=-1)
    plots.attention_heatmap(maps[0].numpy(), list("abcdefg"))
    plots.attention_heatmap(maps[1, -1:], ["g"], keys=list("abcdefg"))
    row = torch.tensor([[0.3, 0.3, 0.4]]).to(torch.bfloat16)   # sums to 1.0009765625 in bfloat16
    assert abs(float(row.double().sum()) - 1) > 1e-3
    plots.attention_heatmap(row, ["c"], keys=["a", "b", "c"])
    plt.close("all")


# ---------------------------------------------------------------- A19: a stem with a lone surrogate

def test_round_15_save_refuses_a_stem_holding_a_lone_surrogate(refused, tmp_path):
    """A19: weights.save(model, 'model\\ud800') raised a raw UnicodeEncodeError."""
    cat = weights.load_cat()
    for stem in (str(tmp_path / "model\ud800"), tmp_path / "a\udc80b"):
        refused(lambda: weights.save(cat, stem), "stem", "lone surrogate")
        refused(lambda: weights.load(stem), "stem", "lone surrogate")
    assert list(tmp_path.iterdir()) == []
    weights.save(cat, tmp_path / "mödel")   # any other character still goes
    assert torch.equal(weights.load(tmp_path / "mödel").E, cat.E)
