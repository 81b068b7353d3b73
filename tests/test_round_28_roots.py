"""Round 28 (reader A, entries 1, 3, 11): a list or tuple subclass whose ``__len__`` or ``__iter__`` raises, and a
str subclass whose ``__hash__``, ``__eq__``, ``split`` or ``__format__`` raises, are read at the shared roots
(``errors.length``, ``items_of``, ``plain``; ``worlds.check_sentences``, ``training.check_batch``, ...) by the
built-ins' own methods: the call runs as on the plain list or text, or refuses in one sentence. ``masking.count_within``
reads its bounds with ``errors.real_number``."""
import math
from collections import abc

import numpy as np
import pytest

from helpers import worlds
from helpers.errors import CourseInputError, items_of, length, plain
from helpers.geometry import compute as geometry
from helpers.masking import compute as masking
from helpers.positions import compute as positions
from helpers.scaling import compute as scaling
from helpers.tour import compute as tour
from helpers.training import check_batch, check_seeds


class BadList(list):
    def __len__(self):
        raise RuntimeError("len")

    def __iter__(self):
        raise RuntimeError("iter")


class BadTuple(tuple):
    def __len__(self):
        raise RuntimeError("len")

    def __iter__(self):
        raise RuntimeError("iter")


class Hostile(str):
    def __hash__(self):
        raise RuntimeError("hash")

    def __eq__(self, other):
        raise RuntimeError("eq")

    def split(self, *args):
        raise RuntimeError("split")

    def __format__(self, spec):
        raise RuntimeError("format")


SENTENCES = [["<BOS>", "the", "cat", "is", "big", "<EOS>"], ["<BOS>", "the", "dog", "ran", "fast", "<EOS>"]]


def hostile(sentences):
    """The sentences as a BadList of BadTuples of Hostile words."""
    return BadList(BadTuple(Hostile(w) for w in s) for s in sentences)


# ------------------------------------------------------------------ the roots

def test_round_28_roots_read_by_the_built_ins():
    assert length(BadList([1, 2, 3])) == 3 and length(BadTuple((1,))) == 1 and length(Hostile("abc")) == 3
    assert length(range(10**20)) == 10**20
    words = items_of(BadList([Hostile("a"), 2]))
    assert words == ["a", 2] and type(words[0]) is str
    assert type(plain(Hostile("x"))) is str and plain(3) == 3


# ------------------------------------------------------------------ entry 1 and 3: sentences and batches

def test_round_28_check_sentences_reads_subclasses_as_plain_lists():
    checked = worlds.check_sentences(hostile(SENTENCES))
    assert checked == SENTENCES and all(type(s) is list and all(type(w) is str for w in s) for s in checked)


def test_round_28_check_sentences_refuses_in_one_sentence(refused):
    refused(lambda: worlds.check_sentences(BadList()), "sentences should be a non-empty list of sentences")
    refused(lambda: worlds.check_sentences(BadList([BadTuple(("a",)), 3])), "sentence 1 is 3")
    refused(lambda: worlds.check_sentences(BadList([BadList(["a", 3])])), "sentences should hold lists of words")


def test_round_28_sentence_functions_run_on_subclasses(cat, cat_world):
    assert cat_world.batch(hostile(SENTENCES))[0].equal(cat_world.batch(SENTENCES)[0])
    assert worlds.entropy_floor(hostile(SENTENCES)) == worlds.entropy_floor(SENTENCES)
    assert tour.mean_loss(cat, cat_world, hostile(SENTENCES)) == tour.mean_loss(cat, cat_world, SENTENCES)
    assert tour.followers(hostile(SENTENCES), BadList([Hostile("the")])) == ["cat", "dog"]
    assert tour.followers(SENTENCES, Hostile("the")) == ["cat", "dog"]
    assert masking.share_valid(hostile(SENTENCES), cat_world) == masking.share_valid(SENTENCES, cat_world)


def test_round_28_tokenizer_and_prompts_read_plain_text(cat, cat_world, refused):
    expected = cat_world.tokenizer.encode("<BOS> the cat")
    assert cat_world.tokenizer.encode(Hostile("<BOS> the cat")).equal(expected)
    assert cat_world.tokenizer.encode(BadList([Hostile("<BOS>"), Hostile("the"), "cat"])).equal(expected)
    probs = worlds.next_token_probs(cat, cat_world, BadList([BadTuple(("<BOS>", "the"))]))
    assert probs.equal(worlds.next_token_probs(cat, cat_world, [["<BOS>", "the"]]))
    assert worlds.dragon_next(BadList([Hostile("<BOS>"), Hostile("wizard")])) == worlds.dragon_next(["<BOS>", "wizard"])
    refused(lambda: worlds.dragon_next(BadList(["<BOS>", "cat"])), "expected a list of dragon-world words")


def test_round_28_masking_prompts_read_plain_text(cat, cat_world):
    leak = masking.model_leak(cat, cat_world, Hostile("<BOS> the cat sat on the mat"), new_last="floor")
    plain_leak = masking.model_leak(cat, cat_world, "<BOS> the cat sat on the mat", new_last="floor")
    assert all(leak[key].equal(plain_leak[key]) for key in plain_leak)
    states = masking.earlier_states(cat, cat_world, BadList(["<BOS>", "the", "cat"]), Hostile("sat"))
    assert states == masking.earlier_states(cat, cat_world, "<BOS> the cat", "sat")


def test_round_28_next_token_view_reads_plain_text(cat, cat_world):
    expected = positions.next_token_view(cat, cat_world, "<BOS> the cat is")
    for prompt in (Hostile("<BOS> the cat is"), BadList([Hostile(w) for w in "<BOS> the cat is".split()])):
        view = positions.next_token_view(cat, cat_world, prompt)
        assert view["words"] == expected["words"] and np.array_equal(view["probs"], expected["probs"])


def test_round_28_check_batch_and_seeds(cat, cat_world, refused):
    inputs, targets = cat_world.batch(SENTENCES)
    for batch in (BadList([inputs, targets]), BadTuple((inputs, targets))):
        got = check_batch(batch, cat.cfg.vocab_size)
        assert got[0].equal(inputs) and got[1].equal(targets)
    refused(lambda: check_batch(BadList([inputs, targets, targets]), 20), "batch should be (inputs, targets)")
    assert check_seeds(BadList([3, 4]), 5) == [3, 4] and check_seeds(range(2), 5) == [0, 1]
    refused(lambda: check_seeds(BadList(range(6)), 5), "seeds should be a list of 1 to 5 seeds")
    as_is = scaling.score_path_gradients(cat, (inputs, targets))
    assert scaling.score_path_gradients(cat, BadList([inputs, targets])) == as_is


def test_round_28_ablate_heads_read_by_the_built_ins(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat")
    expected = cat(ids, ablate_heads={(0, 0)})
    assert cat(ids, ablate_heads=BadList([BadTuple((0, 0))])).equal(expected)
    assert cat(ids, ablate_heads=type("BadSet", (set,), {"__iter__": BadList.__iter__, "__len__": BadList.__len__})(
        {(0, 0)})).equal(expected)

    class Lying(abc.Sequence):   # no built-in underneath: refused, naming what raised
        def __len__(self):
            raise RuntimeError("len")

        def __getitem__(self, i):
            raise IndexError

    with pytest.raises(CourseInputError, match="ablate_heads should be a set of .* but got a Lying that raised "
                                               "RuntimeError when it was read"):
        cat(ids, ablate_heads=Lying())


# ------------------------------------------------------------------ entry 1 and 3: geometry's words

def test_round_28_geometry_words_read_plain_text(glove):
    assert geometry.nearest(glove, Hostile("king"), 3) == geometry.nearest(glove, "king", 3)
    assert geometry.analogy(glove, Hostile("king"), Hostile("man"), Hostile("woman")) == \
        geometry.analogy(glove, "king", "man", "woman")
    table = geometry.cosine_table(glove, BadList([Hostile("cat"), "dog"]))
    assert np.array_equal(table, geometry.cosine_table(glove, ["cat", "dog"]))
    pairs = [("france", "paris"), ("italy", "rome"), ("spain", "madrid")]
    hostile_pairs = BadList(BadTuple(Hostile(w) for w in pair) for pair in pairs)
    assert np.array_equal(geometry.offset_agreement(glove, hostile_pairs)["cosines"],
                          geometry.offset_agreement(glove, pairs)["cosines"])
    assert geometry.ranking_text(BadList([BadTuple((Hostile("a"), 0.5))])) == "a 0.500"
    with pytest.raises(CourseInputError, match="pairs should be a list of at most"):
        geometry.ranking_text(BadList([BadTuple(("a", 0.5, 1))]))


def test_round_28_word_map_results_read_plain_text(glove):
    groups = {"a": BadList([Hostile("cat"), "dog", "horse"]), "b": ["paris", "rome", "london"]}
    result = geometry.word_map(glove, groups, methods=["PCA"], k=2)
    assert result["words"] == ["cat", "dog", "horse", "paris", "rome", "london"]
    assert geometry.neighbour_groups(result, Hostile("cat")) == geometry.neighbour_groups(result, "cat")
    tampered = {**result, "words": BadList(result["words"]), "labels": BadTuple(result["labels"])}
    assert geometry.neighbour_groups(tampered, "cat") == geometry.neighbour_groups(result, "cat")
    import matplotlib.pyplot as plt
    plt.close(geometry.plot_maps(tampered, BadList([Hostile("cat")])))


# ------------------------------------------------------------------ entry 11: count_within's bounds

class HostileFloat(float):
    def __float__(self):
        raise RuntimeError("float")


def test_round_28_count_within_reads_bounds_with_real_number(refused):
    refused(lambda: masking.count_within([0.1, 0.5], HostileFloat(0.0), 1.0),
            "low should be a number (math.inf for no end), but got a HostileFloat that cannot be read as a number")
    refused(lambda: masking.count_within([0.1, 0.5], 0.0, HostileFloat(1.0)), "high should be a number")
    refused(lambda: masking.count_within([0.1], math.nan, 1.0), "low should be a number", "nan")
    refused(lambda: masking.count_within([0.1], 0, 2**1100), "high should be a number")
    refused(lambda: masking.count_within([1, 2], 2, 1), "low should be at most high", "low 2 and high 1")
    assert masking.count_within([0.1, 0.5, 0.9], np.float32(0.0), 0.5) == 2
    assert masking.count_within([1, 2, math.inf], 1, math.inf) == 3
