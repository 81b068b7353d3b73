"""Round 13 (red team A, entries 7, 9, 10, 11, 13, 14): calls that ran for minutes without a word are refused
up front past a budget counted from the sizes; the n^2 measures and the stacked attention weights are counted
(or computed in pieces) within 1.5 GiB; helpers that draw from a global generator put it back."""
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest
import torch

from helpers import weights, worlds
from helpers.geometry import compute as geo
from helpers.heads import compute as hd
from helpers.model import Config, Transformer
from helpers.tour import compute as tour
from helpers.training import check_work


def quick(call, refused, *words, seconds=5):
    """``call`` refused with ``words`` before any long work: within ``seconds``."""
    start = time.perf_counter()
    message = refused(call, *words)
    assert time.perf_counter() - start < seconds, message
    return message


def test_check_work_says_the_budget_and_how_to_ask_for_less(refused):
    check_work(10, 10, "a call", "ask for less")   # at the budget: accepted
    refused(lambda: check_work(11, 10, "a call", "ask for fewer seeds"), "a call should need at most",
            "about a minute", "ask for fewer seeds")


# ------------------------------------------------------------------ entry 7: tour.first_losses

def test_first_losses_refuses_many_seeds_of_a_large_model_up_front(refused):
    world = worlds.cat_world()
    quick(lambda: tour.first_losses(Config(20, 1024, 8, 8, 4096), world, range(100), "small"), refused,
          "first_losses on 100 fresh models", "about a minute", "fewer seeds or a smaller cfg")
    quick(lambda: tour.first_losses(Config(20, 1024, 8, 8, 4096), world, range(10), "small"), refused,
          "about a minute")


def test_first_losses_keeps_the_tours_call():
    cat, world = weights.load_cat(), worlds.cat_world()
    assert tour.fresh_work(cat.cfg, (len(world.train), 9), 5) < tour.MAX_FRESH_WORK / 100
    first = tour.first_losses(cat.cfg, world, seeds=range(5), init="small")
    assert len(first) == 5 and all(np.isfinite(loss) for loss, _ in first)


# ------------------------------------------------------------------ entry 9: train_word2vec_seeds

def test_word2vec_seeds_count_the_runs_together(refused):
    sentences = [["the", "cat", "sat", "on", "the", "mat", f"w{i % 50}"] for i in range(1000)]   # 7,000 tokens
    quick(lambda: geo.train_word2vec_seeds(sentences, range(100), vector_size=100, epochs=1000), refused,
          "train_word2vec_seeds with 100 runs", "about a minute", "fewer seeds or fewer epochs")
    # each run alone is within one run's limits (about 20 s here): ten of them are not
    geo.check_word2vec(sentences, 8, 2, 1000, 0, 0.0)
    quick(lambda: geo.train_word2vec_seeds(sentences, range(10), epochs=1000), refused, "10 runs")


def test_word2vec_seeds_keep_a_small_call():
    sentences = [["a", "b", "c", "d"]] * 20
    runs = geo.train_word2vec_seeds(sentences, [0, 1], epochs=5)
    assert len(runs) == 2 and np.array_equal(runs[0]["a"], geo.train_word2vec(sentences, seed=0, epochs=5)["a"])


# ------------------------------------------------------------------ entry 10: map_runs and word_map

def test_map_runs_refuses_many_seeds_of_many_points_up_front(refused):
    points = geo.unit(np.random.default_rng(0).normal(size=(2500, 50)))
    quick(lambda: geo.map_runs({"points": points, "k": 10, "coords": {}}, seeds=range(100)), refused,
          "map_runs with 100 seeds on 2,500 points", "about a minute", "fewer seeds or fewer points")
    # one seed on MAX_POINTS points: its measures alone would take minutes
    many = geo.unit(np.random.default_rng(0).normal(size=(geo.MAX_POINTS, 50)))
    quick(lambda: geo.map_runs({"points": many, "k": 10, "coords": {}}, seeds=[0]), refused, "about a minute")


def test_map_runs_refuses_a_k_it_cannot_measure_before_any_map(refused):
    points = geo.unit(np.random.default_rng(0).normal(size=(30, 5)))
    quick(lambda: geo.map_runs({"points": points, "k": 30, "coords": {}}, seeds=[0]), refused,
          "k should be below the number of points n=30")


def test_word_map_refuses_many_words_on_every_method_up_front(refused):
    kv = geo.load_glove(n_words=6000)
    groups = {"first": list(kv.index_to_key[:3000]), "second": list(kv.index_to_key[3000:6000])}
    quick(lambda: geo.word_map(kv, groups), refused, "word_map on 6,000 points", "about a minute")


def test_the_chapters_maps_are_within_the_budget():
    n = 172   # chapter 01's words
    work = 6 * geo.MAP_POINT_WORK * n + 8 * n * n   # map_runs with 5 seeds: 6 maps made, 8 measured
    assert work < geo.MAX_MAPS_WORK / 10


# ------------------------------------------------------------------ entry 13: the n^2 measures' memory

def old_distance_agreement(high, low):
    """The measure as it was (every pair's difference at full width): the numbers must not change."""
    rows, cols = np.triu_indices(len(high), k=1)
    ranks = [np.argsort(np.argsort(np.linalg.norm(x[rows] - x[cols], axis=1))) for x in (high, low)]
    return float(np.corrcoef(ranks[0], ranks[1])[0, 1])


def old_knn(points, k):
    squared = (points ** 2).sum(axis=1)
    dist = squared[:, None] + squared[None, :] - 2 * points @ points.T
    np.fill_diagonal(dist, np.inf)
    return np.argsort(dist, axis=1, kind="stable")[:, :k]


def peak_bytes(call):
    """The most bytes ``call`` holds at once (NumPy's allocations are traced)."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_distance_agreement_needs_no_table_of_differences():
    rng = np.random.default_rng(0)
    high, low = rng.normal(size=(400, 100)), rng.normal(size=(400, 2))
    # before: x[rows] - x[cols] at full width, about 190 MB; now 32 bytes a pair (2.6 MB) and a row at a time
    assert peak_bytes(lambda: geo.distance_agreement(high, low)) < 16 * 2**20


def test_distance_agreement_and_knn_give_the_same_numbers_as_before():
    rng = np.random.default_rng(1)
    for n, d in ((3, 1), (17, 5), (172, 50), (301, 3)):
        high, low = rng.normal(size=(n, d)), np.round(rng.normal(size=(n, 2)), 1)   # ties in the map
        assert geo.distance_agreement(high, low) == old_distance_agreement(high, low)
        assert np.array_equal(geo.knn(high, min(10, n - 1)), old_knn(high, min(10, n - 1)))


def test_knn_works_in_blocks_of_rows():
    points = np.random.default_rng(2).normal(size=(3000, 2))
    # before: the (n, n) table and two temporaries of its size and its argsort, about 290 MB
    assert peak_bytes(lambda: geo.knn(points, 10)) < 100 * 2**20
    near = geo.knn(points, 3)   # several blocks: each point's own row still leaves the point out
    assert near.shape == (3000, 3) and not (near == np.arange(3000)[:, None]).any()
    nearest = np.linalg.norm(points[near[:, 0]] - points, axis=1)
    others = np.linalg.norm(points[:, None] - points[None], axis=-1) + np.diag(np.full(3000, np.inf))
    assert np.allclose(nearest, others.min(axis=1))


def test_agreement_tables_are_counted(refused):
    refused(lambda: geo.check_agreement_bytes(20_000), "distance_agreement on 20,000 points", "give at most")
    geo.check_agreement_bytes(geo.MAX_POINTS)   # the most check_points lets through fits


def test_pca_of_very_wide_points_is_refused_before_the_svd(refused):
    wide = np.broadcast_to(np.arange(4.0)[:, None], (4, 20_000_000))   # 0.6 GiB read, its SVD about 2.4 GiB more
    quick(lambda: geo.project(wide, "PCA"), refused, "PCA of 4 points of 20,000,000 numbers", "1.5 GiB")


def test_neighbourhood_kept_counts_its_neighbour_tables(refused):
    # check_maps allowed k up to n - 1 of 10,000 points: two (n, k) int64 tables of 10,000 x 9,999 are 1.5 GiB;
    # now at most MAX_POINTS points (whose tables are counted too), refused before any table is made
    high = np.broadcast_to(np.arange(10_000.0)[:, None], (10_000, 2))
    quick(lambda: geo.neighbourhood_kept(high, high, 9_999), refused, f"at most {geo.MAX_POINTS:,}")
    assert 2 * 8 * geo.MAX_POINTS ** 2 + geo.BLOCK_BYTES < 2**30


# ------------------------------------------------------------------ entry 14: layer_weights

def test_layer_weights_counts_every_layer_up_front(refused):
    induction = weights.load_induction()   # 2 layers: 58 x 1,024 passes the model's one-layer check
    quick(lambda: hd.layer_weights(induction, torch.zeros(58, 1024, dtype=torch.long)), refused,
          "the attention weights of 2 layers on 58 sequences of 1,024 tokens", "give at most")
    model = Transformer(Config(16, 64, 2, 4, 0, n_max=25, positions="rotary"), seed=0).eval()
    quick(lambda: hd.layer_weights(model, torch.zeros(56, 1024, dtype=torch.long)), refused, "4 layers")


def test_layer_weights_are_the_traces_weights():
    induction = weights.load_induction()
    ids = torch.randint(0, induction.cfg.vocab_size, (3, 21), generator=torch.Generator().manual_seed(0))
    w = hd.layer_weights(induction, ids)
    for b in range(3):
        trace = induction(ids[b], trace=True)
        for layer in range(induction.cfg.n_layers):
            assert torch.allclose(w[b, layer], trace[f"L{layer}.weights"], atol=1e-6)
    assert hd.layer_weights(induction.double(), ids).dtype == torch.float64


# ------------------------------------------------------------------ entry 11: global random states

def test_torch_differences_leaves_torchs_generator_as_it_was():
    attn, x = hd.book_attention(8, 2), torch.randn(1, 5, 8)
    torch.randn(3)
    before = torch.get_rng_state().clone()
    hd.torch_differences(attn, x)
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize("method", ["t-SNE", "UMAP"])
def test_maps_leave_pythons_and_numpys_random_as_they_were(method):
    code = f"""
import random, numpy as np
import helpers; helpers.setup_notebook()
from helpers.geometry import compute as geo
random.random(); np.random.random()
before = (random.getstate(), np.random.get_state()[1].tobytes())
geo.project(np.random.default_rng(1).normal(size=(20, 5)), {method!r}, 0)   # the first: its imports too
assert before == (random.getstate(), np.random.get_state()[1].tobytes()), "moved"
print("kept")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().endswith("kept"), done.stderr[-2000:]


def test_round_13_training_without_the_mask_leaves_the_global_generator_alone():
    """Red team round 13: masking.train_without_mask reseeded torch's global generator and left it so."""
    import torch

    from helpers import worlds
    from helpers.masking import compute as masking
    world = worlds.cat_world()
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    masking.train_without_mask(world, seed=0, steps=2)
    assert torch.equal(torch.rand(3), expected)


def test_round_13_silent_trainings_are_bounded_to_about_a_minute(refused):
    from helpers import worlds
    from helpers.masking import compute as masking
    from helpers.scaling import compute as scaling
    refused(lambda: scaling.train_with_and_without_scaling(seeds=range(20), steps=1000), "about a minute", "40 runs")
    refused(lambda: masking.train_without_mask(worlds.cat_world(), steps=10_000), "at most 5,000")
    refused(lambda: masking.no_mask_runs(worlds.cat_world(), seeds=range(10), steps=1000), "at most 8,000",
            "about a minute")
