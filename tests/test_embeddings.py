"""helpers.embeddings: the shipped GloVe subset, neighbours, analogies, maps, word2vec."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import embeddings
from helpers.errors import CourseInputError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def glove():
    return embeddings.load_glove()


# ------------------------------------------------------------------ the data

def test_shipped_files_match_each_other():
    words = embeddings.read_words(ROOT / "data" / "glove" / "words.txt")
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
    assert embeddings.read_words(path) == ["nan", "null", "#", ",", "NA"]


def test_load_glove_can_keep_fewer_words():
    small = embeddings.load_glove(n_words=1000)
    assert len(small) == 1000 and small.index_to_key[0] == "the"
    with pytest.raises(CourseInputError):
        embeddings.load_glove(n_words=60_000)


def test_every_group_word_is_in_the_vocabulary(glove):
    for members in embeddings.GROUPS.values():
        embeddings.check_words(glove, members)


# ------------------------------------------------------------------ similarity

def test_unknown_word_is_one_sentence_naming_it(glove):
    with pytest.raises(CourseInputError) as error:
        embeddings.nearest(glove, "zzqxw")
    message = str(error.value)
    assert "'zzqxw'" in message and "\n" not in message
    with pytest.raises(CourseInputError, match="'blorft'"):
        embeddings.analogy(glove, "king", "blorft", "woman")


def test_cosine_is_direction_only():
    assert embeddings.cosine([3, 1], [1, 2]) == pytest.approx(np.sqrt(0.5))
    assert embeddings.cosine([3, 1], [10, 20]) == pytest.approx(np.sqrt(0.5))
    assert embeddings.cosine([1, 0], [0, 2]) == pytest.approx(0.0)


def test_nearest_agrees_with_gensim(glove):
    ours = embeddings.nearest(glove, "ocean", topn=5)
    theirs = glove.most_similar("ocean", topn=5)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)
    assert "ocean" not in [w for w, _ in ours]


def test_analogy_with_inputs_excluded_matches_gensim(glove):
    ours = embeddings.analogy(glove, "king", "man", "woman", topn=5)
    theirs = glove.most_similar(positive=["king", "woman"], negative=["man"], topn=5)
    assert [w for w, _ in ours] == [w for w, _ in theirs]
    assert np.allclose([s for _, s in ours], [s for _, s in theirs], atol=1e-5)


def test_analogy_exclusion_changes_the_winner(glove):
    excluded = embeddings.analogy(glove, "king", "man", "woman", topn=3)
    kept = embeddings.analogy(glove, "king", "man", "woman", topn=3, exclude_inputs=False)
    assert excluded[0][0] == "queen"
    assert kept[0][0] == "king"
    assert kept[1] == excluded[0]          # the same score: only the exclusion differs


def test_analogy_vector_has_length_one(glove):
    direction = embeddings.analogy_vector(glove, "paris", "france", "italy")
    assert np.linalg.norm(direction) == pytest.approx(1)


def test_cosine_table_is_symmetric_with_ones_on_the_diagonal(glove):
    table = embeddings.cosine_table(glove, ["cat", "dog", "mat"])
    assert table.shape == (3, 3)
    assert np.allclose(table, table.T) and np.allclose(np.diag(table), 1)


# ------------------------------------------------------------------ maps

def test_knn_leaves_each_point_out():
    points = np.random.default_rng(0).normal(size=(20, 3))
    near = embeddings.knn(points, 4)
    assert near.shape == (20, 4)
    assert not (near == np.arange(20)[:, None]).any()


def test_neighbourhood_kept_range_and_extremes():
    rng = np.random.default_rng(0)
    high = rng.normal(size=(60, 5))
    assert np.all(embeddings.neighbourhood_kept(high, high, k=5) == 1)
    kept = embeddings.neighbourhood_kept(high, rng.normal(size=(60, 2)), k=5)
    assert kept.shape == (60,) and kept.min() >= 0 and kept.max() <= 1
    assert kept.mean() < 0.4                       # a random map keeps about k / (n - 1)
    with pytest.raises(CourseInputError):
        embeddings.neighbourhood_kept(high, high[:10, :2])


def test_distance_agreement_is_one_for_a_scaled_copy():
    points = np.random.default_rng(1).normal(size=(30, 2))
    assert embeddings.distance_agreement(points, 3 * points) == pytest.approx(1)


def test_pca_is_deterministic_and_two_dimensional():
    points = np.random.default_rng(2).normal(size=(40, 10))
    xy = embeddings.project(points, "PCA")
    assert xy.shape == (40, 2)
    assert np.array_equal(xy, embeddings.project(points, "PCA"))


def test_unknown_method_and_group_are_errors(glove):
    with pytest.raises(CourseInputError, match="method"):
        embeddings.project(np.zeros((5, 3)), "MDS")
    with pytest.raises(CourseInputError, match="'planets'"):
        embeddings.word_map(glove, ["animals", "planets"], methods=("PCA",))


def test_word_map_is_reproducible_and_keeps_more_than_chance(glove):
    groups = ["animals", "months", "digits"]
    first = embeddings.word_map(glove, groups, k=5)
    second = embeddings.word_map(glove, groups, k=5)
    n = len(first["words"])
    for method in embeddings.METHODS:
        assert first["coords"][method].shape == (n, 2)
        assert np.array_equal(first["coords"][method], second["coords"][method]), method
        assert first["kept"][method].mean() > 5 / (n - 1)
        assert -1 <= first["agreement"][method] <= 1


def test_plot_maps_draws_one_panel_per_method(glove):
    import matplotlib
    matplotlib.use("Agg")
    result = embeddings.word_map(glove, ["animals", "months"], methods=("PCA",), k=5)
    fig = embeddings.plot_maps(result)
    assert len(fig.axes) == 1 and "PCA" in fig.axes[0].get_title()


# ------------------------------------------------------------------ word2vec

W2V_SCRIPT = """
import hashlib
from helpers import embeddings
from helpers.worlds import cat_world
kv = embeddings.train_word2vec(cat_world().train, seed=0)
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


def test_word2vec_separates_animals_from_surfaces():
    from helpers.worlds import cat_world

    kv = embeddings.train_word2vec(cat_world().train, seed=0)
    cos = lambda u, v: embeddings.cosine(kv[u], kv[v])
    assert min(cos("cat", "dog"), cos("mat", "floor")) > max(cos("cat", "mat"), cos("dog", "floor"))


def test_word2vec_rejects_an_empty_corpus():
    with pytest.raises(CourseInputError):
        embeddings.train_word2vec([])
