"""Chapter 01, geometry: compute (GloVe, neighbours, analogies, maps, word2vec), checks, explorer."""
import hashlib
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.geometry import checks, explorer
from helpers.geometry import compute as geometry

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------ the data

def test_shipped_files_match_each_other():
    words = geometry.read_words(ROOT / "data" / "glove" / "words.txt")
    vectors = np.load(ROOT / "data" / "glove" / "vectors.npy")
    assert vectors.shape == (50_000, 50) and vectors.dtype == np.float16
    assert len(words) == len(set(words)) == 50_000


def test_readme_lists_the_shipped_files_sha256():
    readme = (ROOT / "data" / "glove" / "README.md").read_text(encoding="utf-8")
    for name in ("vectors.npy", "words.txt"):
        digest = hashlib.sha256((ROOT / "data" / "glove" / name).read_bytes()).hexdigest()
        assert digest in readme, f"data/glove/README.md does not list the sha256 of {name}"


def test_load_glove_gives_keyed_vectors_in_frequency_order(glove):
    assert glove.vectors.shape == (50_000, 50)
    assert glove.vectors.dtype == np.float32
    assert glove.index_to_key[:3] == ["the", ",", "."]
    assert glove.key_to_index["transformer"] == 29_561
    assert glove.key_to_index["embedding"] == 43_338


def test_words_that_parsers_mangle_are_kept_as_words(glove):
    for word in ("nan", "null", "#", ","):
        assert word in glove.key_to_index


def test_read_words_keeps_every_line_as_text(tmp_path):
    path = tmp_path / "words.txt"
    path.write_text("nan\nnull\n#\n,\nNA\n", encoding="utf-8")
    assert geometry.read_words(path) == ["nan", "null", "#", ",", "NA"]


def test_load_glove_can_keep_fewer_words():
    small = geometry.load_glove(n_words=1000)
    assert len(small) == 1000 and small.index_to_key[0] == "the"
    with pytest.raises(CourseInputError):
        geometry.load_glove(n_words=60_000)


def test_every_group_word_is_in_the_vocabulary(glove):
    for members in geometry.GROUPS.values():
        geometry.check_words(glove, members)


# ------------------------------------------------------------------ similarity

def test_unknown_word_is_one_sentence_naming_it(glove):
    with pytest.raises(CourseInputError) as error:
        geometry.nearest(glove, "zzqxw")
    message = str(error.value)
    assert "'zzqxw'" in message and "\n" not in message
    with pytest.raises(CourseInputError, match="'blorft'"):
        geometry.analogy(glove, "king", "blorft", "woman")


def test_cosine_is_direction_only():
    assert geometry.cosine([3, 1], [1, 2]) == pytest.approx(np.sqrt(0.5))
    assert geometry.cosine([3, 1], [10, 20]) == pytest.approx(np.sqrt(0.5))
    assert geometry.cosine([1, 0], [0, 2]) == pytest.approx(0.0)


def test_nearest_agrees_with_gensim(glove):
    ours = geometry.nearest(glove, "ocean", topn=5)
    theirs = glove.most_similar("ocean", topn=5)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)
    assert "ocean" not in [w for w, _ in ours]


def test_analogy_with_inputs_excluded_matches_gensim(glove):
    ours = geometry.analogy(glove, "king", "man", "woman", topn=5)
    theirs = glove.most_similar(positive=["king", "woman"], negative=["man"], topn=5)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)


def test_analogy_exclusion_changes_the_winner(glove):
    excluded = geometry.analogy(glove, "king", "man", "woman", topn=3)
    kept = geometry.analogy(glove, "king", "man", "woman", topn=3, exclude_inputs=False)
    assert excluded[0][0] == "queen"
    assert kept[0][0] == "king"
    assert kept[1] == excluded[0]          # the same score: only the exclusion differs


def test_analogy_vector_has_norm_one(glove):
    direction = geometry.analogy_vector(glove, "paris", "france", "italy")
    assert np.linalg.norm(direction) == pytest.approx(1)


def test_cosine_table_is_symmetric_with_ones_on_the_diagonal(glove):
    table = geometry.cosine_table(glove, ["cat", "dog", "mat"])
    assert table.shape == (3, 3)
    assert np.allclose(table, table.T) and np.allclose(np.diag(table), 1)


# ------------------------------------------------------------------ maps

def test_knn_leaves_each_point_out():
    points = np.random.default_rng(0).normal(size=(20, 3))
    near = geometry.knn(points, 4)
    assert near.shape == (20, 4)
    assert not (near == np.arange(20)[:, None]).any()


def test_neighbourhood_kept_range_and_extremes():
    rng = np.random.default_rng(0)
    high = rng.normal(size=(60, 5))
    assert np.all(geometry.neighbourhood_kept(high, high, k=5) == 1)
    kept = geometry.neighbourhood_kept(high, rng.normal(size=(60, 2)), k=5)
    assert kept.shape == (60,) and kept.min() >= 0 and kept.max() <= 1
    assert kept.mean() < 0.4                       # a random map keeps about k / (n - 1)
    with pytest.raises(CourseInputError):
        geometry.neighbourhood_kept(high, high[:10, :2])


def test_distance_agreement_is_one_for_a_scaled_copy():
    points = np.random.default_rng(1).normal(size=(30, 2))
    assert geometry.distance_agreement(points, 3 * points) == pytest.approx(1)


def test_pca_is_deterministic_and_two_dimensional():
    points = np.random.default_rng(2).normal(size=(40, 10))
    xy = geometry.project(points, "PCA")
    assert xy.shape == (40, 2)
    assert np.array_equal(xy, geometry.project(points, "PCA"))


def test_unknown_method_and_group_are_errors(glove):
    with pytest.raises(CourseInputError, match="method"):
        geometry.project(np.zeros((5, 3)), "MDS")
    with pytest.raises(CourseInputError, match="'planets'"):
        geometry.word_map(glove, ["animals", "planets"], methods=("PCA",))


def test_word_map_is_reproducible_and_keeps_more_than_chance(glove):
    groups = ["animals", "months", "digits"]
    first = geometry.word_map(glove, groups, k=5)
    second = geometry.word_map(glove, groups, k=5)
    n = len(first["words"])
    for method in geometry.METHODS:
        assert first["coords"][method].shape == (n, 2)
        assert np.array_equal(first["coords"][method], second["coords"][method]), method
        assert first["kept"][method].mean() > 5 / (n - 1)
        assert -1 <= first["agreement"][method] <= 1


def test_plot_maps_draws_one_panel_per_method(glove):
    result = geometry.word_map(glove, ["animals", "months"], methods=("PCA",), k=5)
    fig = geometry.plot_maps(result, label=["cat", "june"])
    assert "PCA" in fig.axes[0].get_title()
    written = [t.get_text() for t in fig.axes[0].texts]
    assert sorted(written) == ["cat", "june"]             # only the words asked for
    assert fig.axes[1].get_legend() is not None           # the legend has a place of its own


def test_plot_maps_refuses_a_label_that_is_not_on_the_map(glove):
    result = geometry.word_map(glove, ["animals"], methods=("PCA",), k=5)
    with pytest.raises(CourseInputError, match="'june'"):
        geometry.plot_maps(result, label=["june"])


def test_neighbour_groups_count_the_k_nearest_by_group():
    result = {"points": np.array([[0.0, 0], [0, 1], [5, 5], [5, 6], [0, 2]]),
              "labels": ["a", "a", "b", "b", "b"], "words": ["p", "q", "r", "s", "t"], "k": 2}
    assert geometry.neighbour_groups(result, "t") == [("a", 2)]
    assert geometry.neighbour_groups(result, "r") == [("b", 2)]
    with pytest.raises(CourseInputError, match="'z'"):
        geometry.neighbour_groups(result, "z")


def test_offset_agreement_is_one_for_a_fixed_direction_and_lower_otherwise(glove):
    same = geometry.offset_agreement(glove, [("king", "queen"), ("king", "queen"), ("king", "queen")])
    assert np.allclose(same["cosines"], 1) and same["step"] > 0
    capitals = geometry.offset_agreement(glove, [("france", "paris"), ("italy", "rome"), ("japan", "tokyo")])
    assert len(capitals["cosines"]) == 3 and capitals["low"] <= capitals["mean"] <= capitals["high"] < 1
    with pytest.raises(CourseInputError, match="zzzzqx"):
        geometry.offset_agreement(glove, [("france", "zzzzqx"), ("italy", "rome")])
    with pytest.raises(CourseInputError, match="two"):
        geometry.offset_agreement(glove, [("france", "paris")])


def test_map_runs_reuses_word_map_and_measures_every_map(glove):
    result = geometry.word_map(glove, ["animals", "months", "digits"], k=5)
    runs = geometry.map_runs(result, seeds=(0, 1))
    assert [(r["method"], r["seed"]) for r in runs] == [
        ("random", 0), ("PCA", None), ("t-SNE", None), ("UMAP", 0), ("UMAP", 1)]
    assert np.array_equal(runs[1]["kept"], result["kept"]["PCA"])
    assert np.array_equal(runs[3]["kept"], result["kept"]["UMAP"])
    n = len(result["words"])
    for run in runs:
        assert run["kept"].shape == (n,) and -1 <= run["agreement"] <= 1
    assert len(geometry.plot_runs(runs, k=5).axes) == 1


def test_tsne_from_pca_ignores_the_seed():
    points = geometry.unit(np.random.default_rng(3).normal(size=(40, 8)))
    assert np.array_equal(geometry.project(points, "t-SNE", 0), geometry.project(points, "t-SNE", 7))


UMAP_SCRIPT = """
import sys
import numpy as np
from helpers.geometry import compute as geometry
points = geometry.unit(np.random.default_rng(0).normal(size=(40, 8)))
umap = geometry.import_umap()
xy = geometry.project(points, "UMAP", 0)
print("after a map:", "pynndescent" in sys.modules)
from umap import umap_
print("a metric only pynndescent has:", "dot" in umap_.pynn_named_distances, "pynndescent" in sys.modules)
import pynndescent
print("its objects:", umap_.NNDescent is pynndescent.NNDescent)
np.save(sys.argv[1], xy)
"""


def test_umap_imports_pynndescent_only_when_used(tmp_path):
    """In a fresh interpreter: a map with the neighbours handed over never imports pynndescent,
    a metric looked up imports it and puts the real objects into umap.umap_, and the map is the
    one umap imported the usual way draws."""
    run = subprocess.run([sys.executable, "-c", UMAP_SCRIPT, str(tmp_path / "xy.npy")], cwd=ROOT,
                         env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["after a map: False", "a metric only pynndescent has: True True",
                                       "its objects: True"]
    points = geometry.unit(np.random.default_rng(0).normal(size=(40, 8)))
    import pynndescent  # noqa: F401  (umap as imported everywhere else)
    assert np.array_equal(np.load(tmp_path / "xy.npy"), geometry.project(points, "UMAP", 0))


def test_own_group_share_counts_neighbours_in_the_same_group():
    result = {"points": np.array([[0.0, 0], [0, 1], [5, 5], [5, 6], [0, 2]]),
              "labels": ["a", "a", "b", "b", "b"], "k": 1}
    assert geometry.own_group_share(result).tolist() == [1, 1, 1, 1, 0]


def test_random_map_is_seeded():
    assert np.array_equal(geometry.random_map(7, 3), geometry.random_map(7, 3))
    assert geometry.random_map(7).shape == (7, 2)


# ------------------------------------------------------------------ word2vec

W2V_SCRIPT = """
import hashlib
import math
from helpers.geometry.compute import train_word2vec
from helpers.worlds import cat_world
kv = train_word2vec(cat_world().train, seed=0)
print(hashlib.sha256(kv.vectors.tobytes()).hexdigest(), " ".join(kv.index_to_key))
"""


def test_word2vec_is_identical_across_processes_and_hash_seeds():
    outputs = set()
    for hash_seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OPENBLAS_NUM_THREADS": "1"}
        run = subprocess.run([sys.executable, "-c", W2V_SCRIPT], env=env, cwd=ROOT,
                             capture_output=True, text=True, check=True)
        outputs.add(run.stdout)
    assert len(outputs) == 1


def test_word2vec_separates_animals_from_surfaces(cat_world):
    kv = geometry.train_word2vec(cat_world.train, seed=0)
    cos = lambda u, v: geometry.cosine(kv[u], kv[v])
    assert min(cos("cat", "dog"), cos("mat", "floor")) > max(cos("cat", "mat"), cos("dog", "floor"))


def test_word2vec_seeds_two_at_a_time_give_what_one_after_another_gives(cat_world):
    together = geometry.train_word2vec_seeds(cat_world.train, seeds=range(4), epochs=20)
    alone = [geometry.train_word2vec(cat_world.train, seed=seed, epochs=20) for seed in range(4)]
    assert [kv.index_to_key for kv in together] == [kv.index_to_key for kv in alone]
    assert all(np.array_equal(a.vectors, b.vectors) for a, b in zip(together, alone))
    with pytest.raises(CourseInputError, match="non-empty"):
        geometry.train_word2vec_seeds([], seeds=range(2))


def test_word2vec_rejects_an_empty_corpus():
    with pytest.raises(CourseInputError):
        geometry.train_word2vec([])


# ------------------------------------------------------------------ the exercise checks

def assert_right(check, answer, *args, **kwargs):
    assert check.feedback(answer, *args, **kwargs) == []
    check.grade(answer, *args, **kwargs)          # does not raise


def assert_wrong(check, answer, *args, says="", **kwargs):
    found = check.feedback(answer, *args, **kwargs)
    assert found and all(isinstance(s, str) and "\n" not in s for s in found)
    assert says in " ".join(found), found
    with pytest.raises(AssertionError):
        check.grade(answer, *args, **kwargs)


def test_cosine_function():
    assert_right(checks.cosine_function, lambda a, b: a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b)))
    assert_wrong(checks.cosine_function, lambda a, b: a @ b / (np.linalg.norm(a) * np.linalg.norm(b)),
                 says="whole stack")
    assert_wrong(checks.cosine_function, lambda a, b: float(np.ravel(a @ b / (np.linalg.norm(a, axis=-1)
                 * np.linalg.norm(b)))[0]), says="one cosine per row")
    assert_wrong(checks.cosine_function, lambda a, b: a @ b, says="dot product")
    assert_wrong(checks.cosine_function, lambda a, b: a @ b / np.linalg.norm(a) ** 2, says="too")


def test_cosine_function_names_the_usual_slips():
    def right(a, b):
        return a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))

    def in_place(a, b):
        a /= np.linalg.norm(a, axis=-1, keepdims=True)
        return a @ b / np.linalg.norm(b)

    assert_wrong(checks.cosine_function, lambda a, b: 1 - right(a, b), says="1 − cosine, a distance")
    assert_wrong(checks.cosine_function, lambda a, b: np.degrees(np.arccos(right(a, b))), says="angle in degrees")
    assert_wrong(checks.cosine_function, lambda a, b: a @ b / ((a * a).sum(-1) * (b @ b)), says="squared norms")
    assert_wrong(checks.cosine_function, lambda a, b: a @ b / np.linalg.norm(a, axis=-1), says="|a| alone")
    assert_wrong(checks.cosine_function, lambda a, b: a @ b / np.linalg.norm(b), says="|b| alone")
    assert_wrong(checks.cosine_function, in_place, says="changed a in place")   # would rewrite glove.vectors
    assert_wrong(checks.cosine_function, 0.707, says="function")
    assert checks.cosine_function.feedback(None) == [NOT_ANSWERED]


def test_cosine_function_that_crashes_or_returns_junk_gets_one_sentence():
    def broken(a, b):
        raise ValueError("oops")
    assert_wrong(checks.cosine_function, broken, says="ValueError: oops")
    assert_wrong(checks.cosine_function, lambda a, b: [1.0, 2.0], says="one number")
    assert_wrong(checks.cosine_function, lambda a, b: np.nan, says="NaN")


def test_neighbours(glove):
    right = [w for w, _ in glove.most_similar("ocean", topn=5)]
    assert_right(checks.neighbours, right, glove, "ocean", 5)
    assert_wrong(checks.neighbours, ["ocean"] + right[:4], glove, "ocean", 5, says="itself")
    assert_wrong(checks.neighbours, right[::-1], glove, "ocean", 5, says="order")
    assert_wrong(checks.neighbours, right[:4] + ["desert"], glove, "ocean", 5, says="not among")
    assert_wrong(checks.neighbours, right[:3], glove, "ocean", 5, says="5 words")
    normed = glove.get_normed_vectors()
    ascending = [glove.index_to_key[i] for i in np.argsort(normed @ normed[glove.key_to_index["ocean"]])[:5]]
    assert_wrong(checks.neighbours, ascending, glove, "ocean", 5, says="lowest cosines")   # argsort kept as it came
    assert_wrong(checks.neighbours, "sea", glove, "ocean", 5, says="list of words")
    assert checks.neighbours.feedback(None, glove, "ocean", 5) == [NOT_ANSWERED]


def test_analogy_direction(glove):
    args = (glove, "paris", "france", "italy")
    right = geometry.analogy_vector(*args)
    assert_right(checks.analogy_direction, right, *args)
    assert_wrong(checks.analogy_direction, 2 * right, *args, says="norm")
    raw = glove["paris"].astype(float) - glove["france"] + glove["italy"]
    assert_wrong(checks.analogy_direction, raw / np.linalg.norm(raw), *args, says="raw vectors")
    flipped = geometry.unit(geometry.unit(glove["paris"]) + geometry.unit(glove["france"])
                            - geometry.unit(glove["italy"]))
    assert_wrong(checks.analogy_direction, flipped, *args, says="signs")
    assert_wrong(checks.analogy_direction, right[:10], *args, says="shape")
    assert checks.analogy_direction.feedback(None, *args) == [NOT_ANSWERED]


HIGH = np.array([[-0.7, -0.2, 1.7], [0.7, -1.6, 0.0], [-0.6, 0.1, -1.6],
                 [0.2, 0.2, 1.6], [0.3, 0.5, -1.5], [2.3, -1.9, 1.1]])
LOW = HIGH[:, :2]


def test_kept_fractions():
    right = geometry.neighbourhood_kept(HIGH, LOW, 2)
    assert_right(checks.kept_fractions, right, HIGH, LOW, 2)
    assert_wrong(checks.kept_fractions, checks.counting_itself(HIGH, LOW, 2), HIGH, LOW, 2, says="own")
    assert_wrong(checks.kept_fractions, np.ones(6), HIGH, LOW, 2, says="differs")
    assert_wrong(checks.kept_fractions, checks.farthest_kept(HIGH, LOW, 2), HIGH, LOW, 2, says="farthest")
    near = [np.argsort(np.linalg.norm(x[:, None] - x[None], axis=-1) + np.diag(np.full(6, np.inf)), axis=1)[:, :2]
            for x in (HIGH, LOW)]
    assert_wrong(checks.kept_fractions, (near[0] == near[1]).mean(axis=1), HIGH, LOW, 2, says="place by place")
    assert_wrong(checks.kept_fractions, right * 2, HIGH, LOW, 2, says="between 0 and 1")
    assert_wrong(checks.kept_fractions, np.full(6, 0.3), HIGH, LOW, 2, says="whole number")
    assert_wrong(checks.kept_fractions, right[:5], HIGH, LOW, 2, says="shape")
    assert checks.kept_fractions.feedback(None, HIGH, LOW, 2) == [NOT_ANSWERED]


# ------------------------------------------------------------------ two vectors and the explorer

def test_vector_pair_by_hand_numbers():
    pair = geometry.vector_pair(angle_a=0, norm_a=3, angle_b=60, norm_b=2)
    assert np.allclose(pair["a"], [3, 0]) and np.allclose(pair["b"], [1, np.sqrt(3)])
    assert pair["dot"] == pytest.approx(3.0)
    assert pair["cos"] == pytest.approx(0.5)
    assert pair["angle"] == pytest.approx(60.0)


def test_vector_pair_perpendicular_and_opposite():
    assert geometry.vector_pair(30, 2, 120, 5)["dot"] == pytest.approx(0, abs=1e-12)
    opposite = geometry.vector_pair(10, 1, -170, 4)
    assert opposite["cos"] == pytest.approx(-1) and opposite["angle"] == pytest.approx(180)


def test_stretching_changes_dot_not_cosine():
    short, long = geometry.vector_pair(0, 1, 45, 1), geometry.vector_pair(0, 1, 45, 4)
    assert long["dot"] == pytest.approx(4 * short["dot"])
    assert long["cos"] == pytest.approx(short["cos"])


def test_vector_pair_rejects_a_non_positive_norm():
    with pytest.raises(CourseInputError, match="norm_b"):
        geometry.vector_pair(0, 1, 45, 0)


def test_arrow_labels_never_show_minus_zero():
    assert geometry.arrow_label("a", [-1e-17, 2.0]) == "a = [0.00, 2.00]"


def test_arrows_figure_draws_every_vector():
    fig = geometry.arrows_figure({"a": (3, 1), "b": (1, 2)}, title="two")
    assert fig.axes[0].get_title() == "two"
    assert len(fig.axes[0].texts) == 6        # per vector: the arrow, its name, its coordinates


def test_pair_view_redraws_the_same_figure():
    from helpers.explorer import png

    fig, draw = explorer.pair_view()
    first = png(draw(geometry.vector_pair(0, 1, 90, 1)))
    second = png(draw(geometry.vector_pair(0, 3, 45, 2)))
    assert first[:8] == second[:8] == b"\x89PNG\r\n\x1a\n" and first != second
    assert draw(geometry.vector_pair()) is fig and "cos = 0.643" in fig.axes[0].get_title()


def test_explorer_redraws_when_a_slider_moves():
    shown = explorer.explorer()
    assert set(shown.controls) == {"angle_a", "norm_a", "angle_b", "norm_b"}
    before = shown.picture()
    shown.controls["angle_b"].value = 100.0
    after = shown.picture()
    assert before[:8] == b"\x89PNG\r\n\x1a\n" and before != after


@pytest.mark.parametrize("k, words", [(-1, ["k", "at least 1", "-1"]), (2.5, ["k", "whole number", "2.5"]),
                                      (5, ["more than k=5 points", "(5, 3)"])])
def test_knn_refuses_a_bad_k_in_one_sentence(refused, k, words):
    refused(lambda: geometry.knn(np.random.default_rng(0).random((5, 3)), k), *words)


def test_explorer_refuses_values_off_its_sliders_issue_31():
    pytest.importorskip("ipywidgets")
    for bad in (dict(angle_a=float("nan")), dict(norm_a=-3), dict(norm_a=1e308), dict(angle_a="10"),
                dict(norm_a=0, norm_b=0), dict(angle_b=True), dict(angle_b=181)):
        with pytest.raises(CourseInputError, match="angle|norm"):
            explorer.explorer(**bad)


# ------------------------------------------------------------------ issue 31: every argument checked first

def test_cosine_refuses_vectors_of_different_lengths_and_zero_vectors(refused):
    refused(lambda: geometry.cosine([1, 2], [1, 2, 3]), "same length", "2 numbers", "3")
    refused(lambda: geometry.cosine([0, 0], [1, 2]), "a should have a direction")
    refused(lambda: geometry.cosine([1, float("nan")], [1, 2]), "finite")
    assert geometry.cosine([3, 1], [1, 2]) == pytest.approx(5 / np.sqrt(50))


def test_vector_pair_refuses_an_angle_given_as_text(refused):
    refused(lambda: geometry.vector_pair("10"), "angle_a should be a number", "'10'")
    refused(lambda: geometry.vector_pair(10, 3, float("inf")), "angle_b should be a finite number")


def test_word2vec_refuses_seeds_sizes_and_epochs_before_training(refused):
    corpus = [["a", "b", "c"]]
    refused(lambda: geometry.train_word2vec(corpus, seed=2**64), "seed", "2**32 - 1")
    refused(lambda: geometry.train_word2vec(corpus, seed=2**40), "gensim's largest seed")
    refused(lambda: geometry.train_word2vec(corpus, vector_size=10**12), "1.5 GiB", "vector_size <=")
    refused(lambda: geometry.train_word2vec(corpus, epochs=10**6), "epochs should be at most 10,000")
    refused(lambda: geometry.train_word2vec(corpus, sample="0"), "sample should be a number")
    refused(lambda: geometry.train_word2vec([["a", 1]]), "lists of words")
    refused(lambda: geometry.train_word2vec_seeds(corpus, range(10**30)), "1 to 100 seeds")
    refused(lambda: geometry.train_word2vec_seeds(corpus, [0, -1]), "seed should be at least 0")
    refused(lambda: geometry.train_word2vec_seeds(corpus, [0], seed=3), "not seed")


def test_maps_refuse_bad_seeds_methods_and_switches(glove, refused):
    points = np.random.default_rng(0).normal(size=(10, 3))
    refused(lambda: geometry.project(points, "PCA", seed=2**33), "2**32 - 1")
    refused(lambda: geometry.project(points, "pca"), "method should be one of")
    refused(lambda: geometry.random_map(10**12), "1.5 GiB", "n <=")
    refused(lambda: geometry.map_runs({"points": points, "k": 2, "coords": {}}, seeds=[-1]), "each seed")
    refused(lambda: geometry.analogy(glove, "king", "man", "woman", exclude_inputs="False"),
            "exclude_inputs is a switch")
    refused(lambda: geometry.neighbourhood_kept(points, points[:, :2], k=10), "k should be below")


def test_checks_refuse_their_own_bad_arguments_in_one_sentence(glove):
    """A bad argument in a check cell is the cell's, not the check's bug: no 'please report it'."""
    rng = np.random.default_rng(0)
    high, low = rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    cases = [(checks.neighbours, ["dog"] * 5, dict(kv=glove, word="cat", topn=5), ("kv", "word", "topn")),
             (checks.analogy_direction, np.ones(50) / np.sqrt(50), dict(kv=glove, a="king", minus="man", plus="woman"),
              ("kv", "a", "minus", "plus")),
             (checks.kept_fractions, np.ones(6), dict(high=high, low=low, k=2), ("high", "low", "k"))]
    for check, answer, given, names in cases:
        for name in names:
            for bad in (None, "False", 10**9, [1, 2], np.zeros((2, 3, 4))):
                found = check.feedback(answer, **{**given, name: bad})
                assert len(found) == 1 and found[0].startswith("the check cannot use what the check cell gives it"), \
                    (check.title, name, bad, found)


def test_arrows_and_pca_check_their_points_before_drawing_or_computing(refused):
    """Red team round 3: {} and a NaN vector were tracebacks from max() and matplotlib, limit=-1 was
    drawn; pca_2d of NaN points failed in the SVD and of one point returned (1, 1)."""
    refused(lambda: geometry.arrows_figure({}), "vectors", "dict of 1 to 12")
    refused(lambda: geometry.arrows_figure({"a": (1.0, float("nan"))}), "two finite numbers", "'a'")
    refused(lambda: geometry.arrows_figure({"a": (1, 2, 3)}), "two finite numbers")
    refused(lambda: geometry.arrows_figure([(1, 2)]), "vectors", "dict")
    refused(lambda: geometry.arrows_figure({"a": (1, 2)}, limit=-1), "limit", "> 0")
    refused(lambda: geometry.pca_2d(np.full((4, 3), np.nan)), "finite numbers", "nan")
    refused(lambda: geometry.pca_2d(np.ones((1, 3))), "2 to 5,000 rows", "1")
    assert geometry.pca_2d(np.eye(3)).shape == (3, 2)


def test_cosine_of_vectors_with_huge_or_tiny_entries_is_their_direction_s():
    """Red team round 4: entries of 1e200 overflowed a·b to inf/inf = nan; 1e-200 was called a zero vector."""
    assert geometry.cosine(np.full(3, 1e200), np.full(3, 1e200)) == pytest.approx(1.0)
    assert geometry.cosine(np.full(3, 1e-200), -np.full(3, 1e-200)) == pytest.approx(-1.0)
    assert geometry.cosine([1e300, 0.0], [1e300, 1e300]) == pytest.approx(2 ** -0.5)
    with pytest.raises(CourseInputError, match="zero vector"):
        geometry.cosine([0.0, 0.0], [1.0, 0.0])


def test_angles_are_taken_modulo_a_turn_and_words_must_be_writable(refused):
    """Red team round 4: angle_a=1e30 degrees went through a rounded π (a wrong direction, silently);
    a word with a lone surrogate reached gensim's hash as a UnicodeEncodeError."""
    assert np.allclose(geometry.vector_pair(angle_a=370, angle_b=10)["a"] / 3, geometry.vector_pair(angle_a=10)["a"] / 3)
    far = geometry.vector_pair(angle_a=1e30, norm_a=1, angle_b=math.fmod(1e30, 360), norm_b=1)
    assert far["angle"] < 1e-3 and np.allclose(far["a"], far["b"])
    refused(lambda: geometry.train_word2vec([["a", "b\ud800"]]), "lone surrogate", "each word")


# ------------------------------------------------------------------ red team round 8

def test_round_8_figure_titles_and_names_are_checked_texts(refused):
    import time
    start = time.monotonic()
    for title in ("x" * 10**6, "a\ud800", 5):
        refused(lambda: geometry.arrows_figure({"a": (1, 2)}, title=title), "title")
        refused(lambda: geometry.plot_cosines(np.eye(2), ["a", "b"], title=title), "title")
    refused(lambda: geometry.arrows_figure({"a\ud800": (1, 2)}), "name", "lone surrogate")
    refused(lambda: geometry.plot_cosines(np.eye(2), ["a", "b" * 1000]), "word", "at most 100 characters")
    assert time.monotonic() - start < 5


def test_round_8_plot_cosines_checks_its_table(refused):
    refused(lambda: geometry.plot_cosines(np.eye(3), ["a", "b"]), "table should be (2, 2)")
    refused(lambda: geometry.plot_cosines(np.array([[1, np.nan], [0, 1]]), ["a", "b"]), "NaN")
    refused(lambda: geometry.plot_cosines(np.eye(50), [f"w{i}" for i in range(50)]), "1 to 40 words")
    refused(lambda: geometry.plot_cosines(None, ["a"]), "table")


# ------------------------------------------------------------------ red team round 9

def test_round_9_maps_refuse_points_that_coincide_before_scikit_learn_sees_them(refused):
    same = np.ones((30, 5))
    for call in (lambda p: geometry.project(p, "t-SNE"), lambda p: geometry.project(p, "UMAP"), geometry.tsne_2d,
                 geometry.umap_2d):
        refused(lambda: call(same), "points should differ from each other", "all the same point")
        refused(lambda: call(same + 1e-300 * np.arange(150).reshape(30, 5)), "all the same point")
        refused(lambda: call(1e-300 * np.arange(150.0).reshape(30, 5)), "differ by at most")
        refused(lambda: call(1e200 * np.arange(150.0).reshape(30, 5)), "entries of at most 1e+100")
    refused(lambda: geometry.tsne_2d([[1.0, 2.0]]), "points should have 3 to")
    assert geometry.project(same, "PCA").shape == (30, 2)   # PCA has no division by the spread


def test_round_9_word2vec_bounds_vector_size_and_the_work(refused):
    corpus = [["a", "b", "c"]]
    refused(lambda: geometry.train_word2vec(corpus, vector_size=10**6, epochs=1), "vector_size should be at most 10,000")
    refused(lambda: geometry.train_word2vec(corpus * 5000, vector_size=10_000, epochs=100),
            "epochs × tokens × vector_size should be at most")


def test_round_9_ranking_helpers_check_their_query_skip_topn_and_pairs(glove, refused):
    refused(lambda: geometry.rank_by_cosine(glove, np.ones(49), 3), "query should have 50 numbers")
    refused(lambda: geometry.rank_by_cosine(glove, glove["cat"], 3, skip=None), "skip should be a set")
    refused(lambda: geometry.rank_by_cosine(glove, np.zeros(50), 3), "query should have a direction")
    refused(lambda: geometry.rank_by_cosine(glove, np.ones(50, bool), 3), "True/False")
    refused(lambda: geometry.rank_by_cosine(glove, np.full(50, np.nan), 3), "query should hold finite numbers")
    huge = geometry.rank_by_cosine(glove, np.full(50, 1e308), 3)
    assert huge == geometry.rank_by_cosine(glove, np.ones(50), 3)
    refused(lambda: geometry.nearest(glove, "cat", topn=10**9), "topn should be at most the 49,999 words")
    assert len(geometry.rank_by_cosine(glove, glove["cat"], 2, skip=list(glove.index_to_key[:-2]))) == 2
    refused(lambda: geometry.cosine_table(glove, []), "words should be a non-empty list")
    refused(lambda: geometry.word_map(glove, [], methods=("PCA",)), "groups should be a non-empty list")
    refused(lambda: geometry.ranking_text("x"), "pairs should be a list")
    assert geometry.ranking_text([("queen", 0.8516)]) == "queen 0.852"
    refused(lambda: geometry.offset_agreement(glove, [("a", "a"), ("b", "b")]), "pair 0 ('a', 'a') has none")
    refused(lambda: geometry.offset_agreement(glove, [("france", "paris")] * 100_000), "100,000 pairs", "1.5 GiB")
    refused(lambda: geometry.offset_agreement(glove, "france paris"), "pairs should be at least two")
    refused(lambda: geometry.cosine([1.0, np.nan], [1.0, 2.0]), "a should hold finite numbers")


def test_round_9_vector_pair_refuses_norms_whose_product_does_not_fit_a_float(refused):
    refused(lambda: geometry.vector_pair(10, 1e308, 60, 2), "norm_a × norm_b should be from")
    refused(lambda: geometry.vector_pair(10, 1e-200, 60, 1e-200), "norm_a × norm_b should be from")
    assert geometry.vector_pair(10, 1e150, 60, 1e150)["angle"] == pytest.approx(50)


def test_one_map_or_measure_of_the_most_points_allowed_stays_near_a_minute(refused):
    """t-SNE of 5,000 points took 28-85 s and the measures on 10,000 points 45 s and more, each allowed and
    silent: a map takes at most MAX_MAP_POINTS points and a measure MAX_POINTS, each refused past them."""
    points = np.random.default_rng(0).standard_normal((geometry.MAX_MAP_POINTS + 1, 5))
    for method in ("t-SNE", "UMAP"):
        refused(lambda: geometry.project(points, method), f"at most {geometry.MAX_MAP_POINTS:,} rows for {method}",
                f"{len(points):,}")
    refused(lambda: geometry.tsne_2d(points), "rows for t-SNE")
    many = np.random.default_rng(0).standard_normal((geometry.MAX_POINTS + 1, 2))
    refused(lambda: geometry.neighbourhood_kept(many, many), f"at most {geometry.MAX_POINTS:,}")
    refused(lambda: geometry.distance_agreement(many, many), f"to {geometry.MAX_POINTS:,} rows")
    assert geometry.project(points[:50], "PCA").shape == (50, 2)
