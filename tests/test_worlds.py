"""helpers.worlds: the worlds' counts, the grammar, the evaluation of the shipped models."""
import numpy as np
import pytest
import torch

from helpers import worlds
from helpers.errors import CourseInputError


def test_cat_world_counts_match_the_design():
    w = worlds.cat_world()
    assert w.tokenizer.vocab[:6] == ["<PAD>", "<BOS>", "<EOS>", "<SEP>", "the", "cat"] and len(w.tokenizer) == 20
    assert len(w.sentences) == 64 and len({tuple(s) for s in w.sentences}) == 64
    copula = [s for s in w.sentences if s[3] in worlds.COPULAS]
    assert len(copula) == 16
    assert len(w.held_out) == 8 and sum(s[3] in worlds.COPULAS for s in w.held_out) == 5
    assert all(s in w.sentences for s in w.held_out)
    train_prefixes = {tuple(s[2:4]) for s in w.train if s[3] in worlds.COPULAS}
    assert train_prefixes == {(n, c) for n in worlds.ANIMALS + worlds.SURFACES for c in worlds.COPULAS}
    d = worlds.decisions(w.sentences)
    assert len(d) == 448 and sum(c for *_, c in d) == 16
    assert worlds.best_possible_accuracy(w.sentences) == (302, 432)


def test_shipped_cat_model_meets_every_target(cat, cat_world):
    m = worlds.cat_targets(cat, cat_world)
    assert m["p_on"] >= 0.99
    assert m["copula_in_class"] == m["copula_types"] == 16 and m["copula_min_p_class"] >= 0.9
    assert abs(m["bigram_accuracy"] - m["bigram_ceiling"]) <= 0.02
    assert worlds.cat_targets_met(m)


def test_dragon_model_counts_2370_parameters_and_prefers_potion(dragon):
    model = dragon
    counts = model.parameter_count()
    assert counts["total"] == 2370 and counts["positions"] == 128 * 6 and counts["embedding"] == 60
    w = worlds.dragon_world(n=1)
    p = worlds.next_token_probs(model, w, [["<BOS>", "dragon", "drinks"]])[0]
    assert int(p.argmax()) == w.tokenizer.ids["potion"] and 0.5 < p.max() < 0.75


def test_dragon_grammar_distributions_sum_to_one_everywhere():
    for sentence in worlds.dragon_sample(50, 10, seed=1):
        for t in range(1, len(sentence)):
            assert sum(worlds.dragon_next(sentence[:t]).values()) == pytest.approx(1.0)


def test_a_word_outside_the_vocabulary(cat_world):
    with pytest.raises(CourseInputError, match="'zebra'.*<PAD>.*slow"):
        cat_world.tokenizer.encode("<BOS> the zebra sat")


def test_induction_labels_name_every_symbol_and_refuse_an_unknown_id():
    assert worlds.induction_labels(torch.tensor([0, 1, 26])) == ["<BOS>", "a", "z"]
    with pytest.raises(CourseInputError, match="no name"):
        worlds.induction_labels([99])


def test_dragon_sample_draws_what_rng_choice_draws():
    """dragon_sample places one uniform number in cached cumulative probabilities: the very
    words rng.choice(words, p=...) gives at every step."""
    for n, length, seed in ((300, 12, 0), (40, 30, 7)):
        rng, expected = np.random.default_rng(seed), []
        for _ in range(n):
            sentence = ["<BOS>"]
            while len(sentence) < length:
                dist = worlds.dragon_next(sentence)
                p = np.array(list(dist.values())) / sum(dist.values())
                sentence.append(str(rng.choice(list(dist), p=p)))
            expected.append(sentence)
        assert worlds.dragon_sample(n, length, seed) == expected


@pytest.mark.parametrize("prompts, words", [
    ("", ["non-empty list of prompts", "''"]),
    ([], ["non-empty list of prompts", "[]"]),
    ([[]], ["at least one word"]),
    ([["<BOS>"], ["unicorn"]], ["'unicorn'"]),
])
def test_next_token_probs_refuses_prompts_before_any_pass(refused, prompts, words):
    passes = []
    w = worlds.cat_world()
    model = torch.nn.Module()
    model.forward = lambda ids, **switches: passes.append(ids)
    refused(lambda: worlds.next_token_probs(model, w, prompts), *words)
    assert not passes


def test_next_token_probs_refuses_a_model_or_world_of_another_kind(refused):
    w = worlds.cat_world()
    refused(lambda: worlds.next_token_probs(print, w, [["<BOS>"]]), "course model")
    refused(lambda: worlds.next_token_probs(torch.nn.Identity(), "cat", [["<BOS>"]]), "World", "'cat'")
