"""Round 17 (reader A, entries 9, 10, 11, 15, 16): chapter 01's helpers check every value of the dicts
they read (word_map's result, map_runs' runs, a ranking's cosines), and dragon_next and the neighbours
check stay linear and bounded."""
import time

import numpy as np
import pytest

from helpers import worlds
from helpers.geometry import checks
from helpers.geometry import compute as geometry

POINTS = np.array([[0.0, 0], [0, 1], [5, 5], [5, 6], [0, 2]])
GROUPED = {"points": POINTS, "labels": ["a", "a", "b", "b", "b"], "words": ["p", "q", "r", "s", "t"], "k": 2}
RUNS = [{"method": "random", "seed": 0, "kept": np.array([0.1, 0.2]), "agreement": 0.0},
        {"method": "PCA", "seed": None, "kept": np.array([0.5, 0.7]), "agreement": 0.8}]


def changed(result, **values):
    return {**result, **values}


# ------------------------------------------------------------------ entry 9: word_map's result, every value

@pytest.mark.parametrize("values, words", [
    ({"labels": ["a", "b"]}, ["the result's labels", "5 texts", "one per point"]),
    ({"labels": "aabbb"}, ["the result's labels", "list of 5 texts"]),
    ({"labels": ["a", "a", "b", "b", 3]}, ["the result's labels", "texts"]),
    ({"points": POINTS[:, :1] * np.nan}, ["the result's points", "finite"]),
    ({"points": [[1.0]] * 0}, ["the result's points"]),
    ({"k": 5}, ["the result's k should be below the number of points n=5", "k=5"]),
    ({"k": 0}, ["the result's k", "at least 1"]),
    ({"k": True}, ["the result's k", "True"]),
])
def test_own_group_share_checks_every_value_it_reads(refused, values, words):
    refused(lambda: geometry.own_group_share(changed(GROUPED, **values)), *words)


@pytest.mark.parametrize("values, words", [
    ({"labels": ["a"]}, ["the result's labels", "5 texts"]),
    ({"words": list("uvwxyz")}, ["the result's words", "5 texts"]),
    ({"words": ["p", "p", "r", "s", "t"]}, ["the result's words", "5 different words", "more than once"]),
    ({"words": ("p", "q", "r", "s", None)}, ["the result's words", "texts"]),
])
def test_neighbour_groups_checks_every_value_it_reads(refused, values, words):
    refused(lambda: geometry.neighbour_groups(changed(GROUPED, **values), "t"), *words)


def test_the_group_helpers_still_answer_on_a_well_formed_result():
    assert geometry.neighbour_groups(GROUPED, "t") == [("a", 2)]
    assert geometry.own_group_share(changed(GROUPED, k=1)).tolist() == [1, 1, 1, 1, 0]


@pytest.fixture(scope="module")
def small_map(glove):
    return geometry.word_map(glove, ["animals", "months"], methods=("PCA",), k=5)


@pytest.mark.parametrize("key, value, words", [
    ("coords", {"PCA": [[0.0, 0.0]]}, ["the result's PCA map", "NumPy array"]),
    ("coords", {"pca": None}, ["the result's coords", "PCA, t-SNE, UMAP"]),
    ("coords", {"PCA": np.zeros((3, 2))}, ["the result's PCA map", "shape", "(3, 2)"]),
    ("kept", {"PCA": np.full(31, np.nan)}, ["the result's kept['PCA']", "finite"]),
    ("kept", {"PCA": np.full(31, 1.5)}, ["the result's kept['PCA']", "from 0 to 1", "1.5"]),
    ("kept", {}, ["the result's kept", "one entry for each of its maps"]),
    ("agreement", {"PCA": float("nan")}, ["the result's agreement['PCA']", "finite", "nan"]),
    ("agreement", {"PCA": "0.5"}, ["the result's agreement['PCA']", "a number"]),
    ("seed", -1, ["the result's seed"]),
])
def test_plot_maps_checks_every_value_it_reads(refused, small_map, key, value, words):
    assert len(small_map["words"]) == 31
    refused(lambda: geometry.plot_maps(changed(small_map, **{key: value})), *words)


def test_plot_maps_refuses_a_result_without_maps_and_more_labels_than_a_panel_can_show(refused, small_map):
    refused(lambda: geometry.plot_maps(changed(small_map, coords={}, kept={}, agreement={})), "at least one map")
    refused(lambda: geometry.plot_maps(small_map, label=["dog"] * (geometry.MAX_MAP_LABELS + 1)),
            "label should be a list of words on the map, at most 40")


def test_plot_maps_refuses_more_groups_than_its_colours_tell_apart_at_once(refused):
    n = 2_000   # one group a word: minutes of drawing and a legend of 2,000 entries
    rng = np.random.default_rng(0)
    result = {"words": [f"w{i}" for i in range(n)], "labels": [f"g{i}" for i in range(n)],
              "coords": {"PCA": rng.normal(size=(n, 2))}, "kept": {"PCA": rng.random(n)},
              "agreement": {"PCA": 0.5}, "k": 10, "seed": 0}
    start = time.perf_counter()
    refused(lambda: geometry.plot_maps(result), "at most 30 groups", "2,000")
    assert time.perf_counter() - start < 1


def test_map_runs_checks_the_maps_it_reuses(refused):
    result = {"points": POINTS, "k": 1, "coords": {"PCA": np.full((5, 2), np.inf)}}
    refused(lambda: geometry.map_runs(result, seeds=[0]), "the result's PCA map", "finite")


def test_word_map_refuses_a_group_given_as_one_text(refused, glove):
    refused(lambda: geometry.word_map(glove, {"pets": "dog cat"}, methods=("PCA",)),
            "each group should be a name", "list of words", "'dog cat'")
    refused(lambda: geometry.word_map(glove, {3: ["dog", "cat"]}, methods=("PCA",)), "each group should be a name")


def test_group_words_keeps_the_first_group_of_a_word_in_order(glove):
    words, labels = geometry.group_words(glove, {"x": ["dog", "cat"], "y": ["cat", "paris", "dog", "rome"]})
    assert words == ["dog", "cat", "paris", "rome"] and labels == ["x", "x", "y", "y"]


# ------------------------------------------------------------------ entry 10: plot_runs, every value

@pytest.mark.parametrize("change, words", [
    ({"kept": [0.5, 0.2]}, ["each run's kept", "NumPy array", "[0.5, 0.2]"]),
    ({"kept": np.array([np.nan, 0.2])}, ["each run's kept", "finite"]),
    ({"kept": np.array([0.5, 2.0])}, ["each run's kept", "from 0 to 1", "2"]),
    ({"kept": np.array([0.5, 0.2, 0.3])}, ["each run's kept", "(2,)", "(3,)"]),
    ({"kept": np.ones((2, 2))}, ["each run's kept", "shape"]),
    ({"agreement": np.nan}, ["each run's agreement", "finite", "nan"]),
    ({"agreement": "x"}, ["each run's agreement", "a number", "'x'"]),
    ({"agreement": 1.5}, ["each run's agreement", "at most 1"]),
])
def test_plot_runs_checks_each_runs_kept_and_agreement(refused, change, words):
    refused(lambda: geometry.plot_runs([RUNS[0], {**RUNS[1], **change}]), *words)


def test_plot_runs_refuses_more_runs_than_map_runs_makes_and_still_draws(refused):
    import matplotlib.pyplot as plt
    refused(lambda: geometry.plot_runs(RUNS * 60), "runs should be what map_runs returns", "at most 103")
    fig = geometry.plot_runs(RUNS + [{"method": "UMAP", "seed": s, "kept": np.array([0.3, 0.4]), "agreement": 0.5}
                                     for s in range(3)])
    dots = {text.get_text() for text in fig.axes[0].get_legend().get_texts()}
    assert dots == {"random", "PCA", "UMAP (3 seeds)"}
    assert np.allclose(fig.axes[0].collections[2].get_offsets(), [[0.35, 0.5]] * 3)
    plt.close(fig)


# ------------------------------------------------------------------ entry 11: ranking_text

@pytest.mark.parametrize("score, words", [(float("nan"), ["the cosine of 'cat'", "finite", "nan"]),
                                          (float("inf"), ["the cosine of 'cat'", "finite"]),
                                          (10**400, ["the cosine of 'cat'", "a float can hold", "1,329 bits"])])   # (round 25: not "inf")
def test_ranking_text_refuses_a_cosine_that_is_no_finite_number(refused, score, words):
    refused(lambda: geometry.ranking_text([("cat", score), ("dog", 0.5)]), *words)


def test_ranking_text_still_writes_three_decimals():
    assert geometry.ranking_text([("queen", np.float32(0.8516)), ("king", 1)]) == "queen 0.852, king 1.000"


def test_pair_title_checks_the_pair_it_reads(refused):
    refused(lambda: geometry.pair_title({"dot": 1.0}), "pair should be what vector_pair returns")
    refused(lambda: geometry.pair_title({"dot": 1.0, "cos": np.nan, "angle": 0.0}), "the pair's cos", "finite")
    assert geometry.pair_title(geometry.vector_pair(0, 1, 90, 1)) == "a·b = 0.000    cos = 0.000    angle = 90.0°"


# ------------------------------------------------------------------ entry 15: dragon_next

def test_dragon_next_refuses_a_prompt_longer_than_max_words_at_once(refused):
    words = ["<BOS>"] + ["dragon", "drinks", "potion"] * 50_000
    start = time.perf_counter()
    refused(lambda: worlds.dragon_next(words), "at most 1,000 words", "150,001")
    assert time.perf_counter() - start < 0.5


def test_dragon_next_answers_a_prompt_of_max_words_quickly():
    words = (["<BOS>"] + ["dragon", "drinks", "potion"] * 400)[:worlds.MAX_WORDS]
    start = time.perf_counter()
    assert len(words) == worlds.MAX_WORDS and words[-1] == "potion"
    assert worlds.dragon_next(words) == worlds.DRAGON_SUBJECTS
    assert time.perf_counter() - start < 0.5


def test_dragon_next_still_checks_every_word_against_the_two_before(refused):
    refused(lambda: worlds.dragon_next(["<BOS>"] + ["dragon", "drinks", "potion"] * 300 + ["troll", "mixes"]),
            "'mixes' cannot follow", "'potion troll'")


def test_dragon_sample_draws_sequences_longer_than_max_words():
    (words,) = worlds.dragon_sample(1, 3 * worlds.MAX_WORDS, seed=0)
    assert len(words) == 3 * worlds.MAX_WORDS
    for t in range(1, len(words)):   # every word one the grammar allows after the (two) words before it
        assert words[t] in worlds._dragon_after(words[max(0, t - 2):t])
    assert worlds.dragon_sample(40, 30, 7)[5] == worlds.dragon_sample(40, 30, 7)[5]


def test_cat_targets_met_checks_the_figures_it_reads(refused):
    good = {"p_on": 0.995, "copula_in_class": 8, "copula_types": 8, "copula_min_p_class": 0.95,
            "bigram_accuracy": 0.5, "bigram_ceiling": 0.51}
    assert worlds.cat_targets_met(good)
    refused(lambda: worlds.cat_targets_met({"p_on": 1.0}), "m should be what cat_targets returns")
    refused(lambda: worlds.cat_targets_met({**good, "bigram_ceiling": np.nan}), "the figure bigram_ceiling", "finite")


# ------------------------------------------------------------------ entry 16: the neighbours check, linear

def test_repeated_words_is_linear_and_in_first_seen_order():
    assert checks.repeated_words(["a", "b", "a", "c", "b", "a"]) == ["a", "b"]
    many = [f"w{i}" for i in range(200_000)] + ["w7"]
    start = time.perf_counter()
    assert checks.repeated_words(many) == ["w7"]
    assert time.perf_counter() - start < 1


def test_neighbours_check_of_a_huge_topn_is_quick_and_still_judges():
    from gensim.models import KeyedVectors
    n = 40_000
    kv = KeyedVectors(vector_size=8)
    kv.add_vectors([f"w{i}" for i in range(n)], np.random.default_rng(0).normal(size=(n, 8)).astype(np.float32))
    expected = [w for w, _ in geometry.nearest(kv, "w0", n - 1)]
    start = time.perf_counter()
    assert (checks.neighbours.feedback(expected, kv, "w0", topn=n - 1)) == []
    assert (checks.neighbours.feedback(expected[::-1], kv, "w0", topn=n - 1)) == [
        "the right words, in the wrong order: sort by cosine, the highest first"]
    repeated = [expected[0]] + expected[:-1]
    assert (checks.neighbours.feedback(repeated, kv, "w0", topn=n - 1)) == [
        f"'{expected[0]}' is in your list twice, and '{expected[-1]}' is missing: the {n - 1} nearest are {n - 1} "
        "different words (check where your slice starts and ends)"]
    assert time.perf_counter() - start < 10
