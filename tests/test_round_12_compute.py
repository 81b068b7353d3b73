"""Round 12 (tester J, 04-09 and 14-16): argument checks of chapters 00, 02, 04, 09, 10 and 11's compute
helpers. Each bad input is refused in one sentence that names what was wrong; the good calls the notebooks
make still answer as before."""
import math

import numpy as np
import pytest
import torch

from helpers import patching, worlds
from helpers.masking import compute as masking
from helpers.qkv import compute as qkv
from helpers.real import circuit
from helpers.real import compute as real
from helpers.tour import compute as tour

GOOD = ["<BOS>", "the", "cat", "is", "big", "<EOS>"]


# 04
@pytest.mark.parametrize("values, low, high", [([1.0, math.nan], 5, math.inf), ([1.0, math.nan], 0, 2)])
def test_round_12_count_within_refuses_nan_values(refused, values, low, high):
    refused(lambda: masking.count_within(values, low, high), "values should be numbers, not NaN", "value 1")


def test_round_12_count_within_refuses_low_above_high(refused):
    refused(lambda: masking.count_within([1, 2], 2, 1), "low should be at most high", "low 2", "high 1")
    assert masking.count_within([1, 2, math.inf], 1, math.inf) == 3 and masking.count_within([0, 1], 0, 0) == 1


# 05
@pytest.mark.parametrize("call", [worlds.best_possible_accuracy, tour.current_token_accuracy])
@pytest.mark.parametrize("sentences", [[["the"]], [[]]])
def test_round_12_accuracy_ceilings_refuse_sentences_without_a_decision(refused, call, sentences):
    refused(lambda: call(sentences), "sentences should hold at least one sentence of two or more words")


def test_round_12_accuracy_ceilings_refuse_only_copula_slots_and_still_count_the_world(refused, cat_world):
    for call in (worlds.best_possible_accuracy, tour.current_token_accuracy):
        refused(lambda: call([["is", "big"]]), "does not follow a copula")
    best, total = worlds.best_possible_accuracy(cat_world.sentences)
    assert 0 < best <= total
    current, same_total = tour.current_token_accuracy(cat_world.sentences)
    assert same_total == total and current <= best


# 06
@pytest.mark.parametrize("words, bad", [(["<BOS>", "dragon", "wizard"], "'wizard'"), (["<BOS>", "<BOS>"], "'<BOS>'"),
                                        (["<BOS>", "glowing", "glowing"], "'glowing'"),
                                        (["<BOS>", "fire", "fire"], "'fire'"),
                                        (["<BOS>", "troll", "mixes"], "'mixes'")])
def test_round_12_dragon_next_refuses_a_prefix_the_grammar_cannot_make(refused, words, bad):
    refused(lambda: worlds.dragon_next(words), "the dragon grammar can make", bad, "cannot follow")


def test_round_12_dragon_next_answers_every_prefix_the_grammar_makes_and_no_other(refused):
    refused(lambda: worlds.dragon_next(["<BOS>", "wizard", "smashes", "troll", "potion"]), "'potion'", "cannot follow")
    assert worlds.dragon_next(["<BOS>", "dragon", "drinks"]) == worlds.DRAGON_OBJECTS[("dragon", "drinks")]
    assert worlds.dragon_next(["<BOS>", "wizard", "smashes", "troll"]) == worlds.DRAGON_VERBS["troll"]
    for sentence in worlds.dragon_sample(30, 12, seed=3):
        for t in range(1, len(sentence) + 1):
            assert sum(worlds.dragon_next(sentence[:t]).values()) == pytest.approx(1.0)


# 07
def test_round_12_slot_accuracy_names_a_one_word_sentence(refused, cat, cat_world):
    message = refused(lambda: worlds.slot_accuracy(cat, cat_world, [GOOD, ["zebra"]]),
                      "two or more words", "sentence 1", "'zebra'")
    assert "empty" not in message


def test_round_12_copula_report_and_slot_accuracy_name_an_unknown_word(refused, cat, cat_world):
    refused(lambda: worlds.copula_report(cat, cat_world, [["<BOS>", "zebra", "cat"]]),
            "vocabulary", "sentence 0", "'zebra'")
    refused(lambda: worlds.slot_accuracy(cat, cat_world, [GOOD, ["<BOS>", "the", "zebra"]]),
            "vocabulary", "sentence 1", "'zebra'")
    assert len(worlds.copula_report(cat, cat_world, [GOOD])) == 1


# 08, 09
def test_round_12_printed_difference_refuses_empty_arrays(refused):
    refused(lambda: qkv.printed_difference(np.array([]), []), "should hold at least one number")
    assert qkv.printed_difference([1.0, 2.0], [1.0004, 2.0]) == pytest.approx(0.0004)


def test_round_12_softmax_share_refuses_empty_scores(refused):
    message = refused(lambda: qkv.softmax_share([], 0), "scores should hold at least one score")
    assert "index" not in message
    assert qkv.softmax_share([0.0, 0.0], 1) == pytest.approx(0.5)


# 14
def test_round_12_a_metric_error_is_told_in_its_own_words(refused, cat, cat_world):
    from helpers.ablation import compute as ablation
    clean, corrupt, _ = ablation.class_pairs(cat_world)

    def metric(out):
        return (out["logits"][:, -1] - torch.zeros(4)).sum(-1)

    message = refused(lambda: patching.metric_ends(cat, clean, corrupt, metric),
                      "it raised RuntimeError", "must match the size of tensor b")
    assert "a str of length" not in message

    def long(out):
        raise ValueError("x" * 500)

    message = refused(lambda: patching.metric_ends(cat, clean, corrupt, long), "ValueError", "xxx...")
    assert len(message) < 400


# 15
@pytest.mark.parametrize("bounds", ["ab", [None], (0.1, math.nan), (0.1, math.inf), (0.01, 0.001), (), (0, 0.1),
                                    (True, 2), 0.5])
def test_round_12_within_checks_its_bounds(refused, bounds):
    refused(lambda: circuit.within(0.5, bounds), "bounds should be a list of finite positive numbers in ascending order")


def test_round_12_within_still_phrases_a_gap_with_good_bounds(refused):
    refused(lambda: circuit.within(0.02, [0.1, 0.01]), "ascending order")
    assert circuit.within(0.0005) == "within 0.001"
    assert circuit.within(0.5) == "apart by up to 0.50"
    assert circuit.within(0.02, [0.01, 0.1]) == "within 0.1"


# 16
@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
def test_round_12_best_heads_refuses_an_empty_table(refused, shape):
    message = refused(lambda: real.best_heads(torch.rand(*shape)), "scores should hold at least one head",
                      str(shape))
    assert "k should" not in message
    assert real.best_heads(torch.tensor([[0.1, 0.9], [0.5, 0.2]]), 2) == [(0, 1), (1, 0)]
