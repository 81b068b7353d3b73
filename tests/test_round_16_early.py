"""Round 16, chapters 00, 01, 03 and 04: word2vec's window, word vectors without a direction, the memory of
judging kept fractions, honest work counts for deep thin models, layer_case's world, sample_sentences'
time budget, and sentence lists counted before they are copied or scanned."""
import time
import tracemalloc
from dataclasses import replace

import numpy as np

from helpers.geometry import compute as geometry
from helpers.masking import compute as masking
from helpers.scaling import compute as scaling
from helpers.tour import compute as tour
from helpers.geometry import checks as geometry_checks
from helpers.model import Transformer
from helpers.recipes import CAT_CONFIG
from helpers.worlds import cat_world, dragon_world

WORDS = [["the", "cat", "sat"], ["the", "dog", "ran", "on", "the", "mat"]]


# ---------------------------------------------------------------- 1. word2vec's window

def test_word2vec_window_beyond_the_longest_sentence_is_refused(refused):
    refused(lambda: geometry.train_word2vec(WORDS, window=6, epochs=1), "window", "at most 5", "6")
    refused(lambda: geometry.train_word2vec_seeds(WORDS, [0, 1], window=10, epochs=1), "window", "at most 5")


def test_word2vec_window_within_the_sentences_is_honoured():
    one, two = (geometry.train_word2vec(WORDS, window=w, epochs=5).vectors for w in (1, 5))
    assert not np.array_equal(one, two)
    assert "shrink_windows" in geometry.train_word2vec.__doc__


def test_word2vec_chapter_call_unchanged():
    world = cat_world()
    kv = geometry.train_word2vec(world.train, vector_size=8, window=2, epochs=100, seed=0)
    assert len(kv) == 18 and kv.vector_size == 8


# ---------------------------------------------------------------- 2. zero word vectors

def zeroed_glove(word="cat", value=0.0):
    from gensim.models import KeyedVectors
    kv = geometry.load_glove(20_000)
    vectors = kv.vectors.copy()
    vectors[kv.key_to_index[word]] = value
    out = KeyedVectors(vector_size=vectors.shape[1])
    out.add_vectors(list(kv.index_to_key), vectors)
    return out


def test_zero_word_vector_refused_everywhere(refused):
    kv = zeroed_glove()
    refused(lambda: geometry.cosine_table(kv, ["dog", "cat"]), "'cat'", "zero vector", "direction")
    refused(lambda: geometry.nearest(kv, "cat"), "'cat'", "zero vector")
    refused(lambda: geometry.nearest(kv, "dog"), "'cat'", "zero vector")   # its NaN cosine would be ranked
    refused(lambda: geometry.analogy(kv, "king", "cat", "woman"), "'cat'", "zero vector")
    refused(lambda: geometry.offset_agreement(kv, [("dog", "cat"), ("man", "woman")]), "'cat'", "zero vector")
    refused(lambda: geometry.word_map(kv, {"a": ["cat", "dog", "man", "woman"]}, methods=["PCA"], k=2), "'cat'",
            "zero vector")


def test_nan_word_vector_refused(refused):
    kv = zeroed_glove("dog", np.nan)
    refused(lambda: geometry.cosine_table(kv, ["dog", "cat"]), "'dog'", "NaN")
    refused(lambda: geometry.nearest(kv, "cat"), "'dog'", "NaN")


def test_cosines_of_sound_vectors_unchanged():
    kv = geometry.load_glove(20_000)
    table = geometry.cosine_table(kv, ["dog", "cat", "man"])
    rows = np.stack([kv[w] for w in ("dog", "cat", "man")]).astype(float)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    assert np.array_equal(table, rows @ rows.T)
    assert np.isfinite([score for _, score in geometry.nearest(kv, "cat")]).all()


# ---------------------------------------------------------------- 3. kept_fractions' memory

def test_kept_fractions_judges_without_the_difference_table():
    rng = np.random.default_rng(0)
    high, low = rng.normal(size=(600, 200)), rng.normal(size=(600, 2))
    tracemalloc.start()
    try:
        said = geometry_checks.kept_fractions.feedback(np.zeros(600), high, low, 5)   # wrong: the slips are made
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert said and "differs" in said[0], said
    assert peak < 100 * 2**20, peak   # the (n, n, d) differences alone were 576 MB


def test_pair_table_matches_the_broadcast_distances():
    x = np.random.default_rng(1).normal(size=(40, 9))
    assert np.array_equal(geometry_checks.pair_table(x), np.linalg.norm(x[:, None, :] - x[None, :, :], axis=-1))


# ---------------------------------------------------------------- 4. deep thin models counted honestly

def test_scaling_training_counts_every_layer(refused):
    refused(lambda: scaling.train_with_and_without_scaling(seeds=[0], steps=100, n_layers=1000, d_model=2,
                                                           n_heads=1, d_ff=1), "n_layers=1000", "work")
    shallow = scaling.training_work(scaling.scaling_config(d_model=2, n_heads=1, n_layers=2, d_ff=1), (56, 9), 10, 2)
    deep = scaling.training_work(scaling.scaling_config(d_model=2, n_heads=1, n_layers=1000, d_ff=1), (56, 9), 10, 2)
    assert deep > 100 * shallow


def test_scaling_chapter_runs_still_fit():
    shape = (56, 9)
    assert scaling.training_work(scaling.scaling_config(), shape, 300, 6) < scaling.MAX_TRAINING_WORK


def test_first_losses_counts_every_layer(refused):
    world = cat_world()
    cfg = replace(CAT_CONFIG, d_model=2, n_heads=1, n_layers=1000, d_ff=1)
    refused(lambda: tour.first_losses(cfg, world, list(range(100)), "unit"), "first_losses", "work")
    assert tour.fresh_work(cfg, (56, 9), 1) > 100 * tour.fresh_work(replace(cfg, n_layers=2), (56, 9), 1)


# ---------------------------------------------------------------- 5. layer_case's world

def dragon_model():
    return Transformer(replace(CAT_CONFIG, vocab_size=len(dragon_world().tokenizer.vocab)), init="unit")


def test_layer_case_refuses_a_model_of_another_world(refused):
    # <BOS> is a word of both worlds: read by the cat world's tokenizer it gave the dragon model a silent answer
    refused(lambda: scaling.layer_case(dragon_model(), ["<BOS>"]), "cat world", "tokens")


def test_layer_case_reads_words_with_the_given_world():
    case = scaling.layer_case(dragon_model(), ["<BOS>", "wizard", "mixes"], world=dragon_world())
    assert case["scores"].shape[-1] == 3 and case["x"].shape[0] == 3


# ---------------------------------------------------------------- 6. sample_sentences' budget

def deep_model():
    return Transformer(replace(CAT_CONFIG, n_layers=200, d_model=2, n_heads=1, d_ff=1, n_max=1024), init="unit")


def test_sample_sentences_refuses_work_past_its_budget(refused):
    model, world = deep_model(), cat_world()
    start = time.time()
    refused(lambda: masking.sample_sentences(model, world, n=5000, max_len=200), "sample_sentences", "work")
    assert time.time() - start < 5


def test_sample_sentences_chapter_call_fits():
    from helpers.weights import load_cat
    assert masking.sampling_work(load_cat().cfg, 10_000, 11) < masking.MAX_SAMPLE_WORK
    assert len(masking.sample_sentences(load_cat(), cat_world(), n=3)) == 3


# ---------------------------------------------------------------- 7. sentence lists counted first

def test_prefix_scores_counts_prefixes_before_batching(refused):
    from helpers.weights import load_cat
    cat, world, batched = load_cat(), cat_world(), []
    world.batch = lambda sentences: batched.append(len(sentences))   # (the world's own, spied on)
    refused(lambda: masking.prefix_scores(cat, world, [["the"] * 1000] * 10**4), "prefixes")
    assert batched == []   # the (10,000, 1,000) batch was built first (about 9 s)


def test_followers_bounds_its_scan(refused):
    start = time.time()
    refused(lambda: tour.followers([["the"] * 1000] * 10**4, ["the"] * 20), "followers", "work")
    refused(lambda: tour.followers(WORDS, ["the"] * 1001), "context", "1,000")
    refused(lambda: tour.followers(WORDS, "x" * 20_000), "context", "characters")
    assert time.time() - start < 5


def test_followers_answers_unchanged():
    world = cat_world()
    assert tour.followers(world.sentences, "on the") == ["mat", "floor", "red", "blue"]
    assert tour.followers(WORDS, ("the",)) == ["cat", "dog", "mat"]
    assert tour.followers([["a", "b", "a", "b", "c"]], "a b") == ["a", "c"]
