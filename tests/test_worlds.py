"""The worlds' counts and the trained models' figures (issue 2 §3, §4)."""
import json

import pytest

from helpers import recipes, worlds
from helpers.weights import card, data_dir, load, load_cat, load_dragon


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


def test_shipped_cat_model_meets_every_target():
    m = worlds.cat_targets(load_cat(), worlds.cat_world())
    assert m["p_on"] >= 0.99
    assert m["copula_in_class"] == m["copula_types"] == 16 and m["copula_min_p_class"] >= 0.9
    assert abs(m["bigram_accuracy"] - m["bigram_ceiling"]) <= 0.02
    assert worlds.cat_targets_met(m)


def test_retraining_the_cat_model_rebuilds_the_shipped_weights_bit_for_bit():
    model, _, _ = recipes.train_cat(progress=False)
    shipped = load_cat().state_dict()
    assert all((shipped[k] == v).all() for k, v in model.state_dict().items())


def test_dragon_model_counts_2370_parameters_and_prefers_potion():
    model = load_dragon()
    counts = model.parameter_count()
    assert counts["total"] == 2370 and counts["positions"] == 128 * 6 and counts["embedding"] == 60
    w = worlds.dragon_world(n=1)
    p = worlds.next_token_probs(model, w, [["<BOS>", "dragon", "drinks"]])[0]
    assert int(p.argmax()) == w.tokenizer.ids["potion"] and 0.5 < p.max() < 0.75


def test_dragon_grammar_distributions_sum_to_one_everywhere():
    for sentence in worlds.dragon_sample(50, 10, seed=1):
        for t in range(1, len(sentence)):
            assert sum(worlds.dragon_next(sentence[:t]).values()) == pytest.approx(1.0)


def test_model_cards_carry_their_recipes():
    assert card(data_dir() / "cat" / "model")["recipe"] == recipes.CAT_TRAINING
    assert card(data_dir() / "cat" / "model")["targets_met"] is True
    meta = json.loads((data_dir() / "dragon" / "model.json").read_text())
    assert meta["config"]["positions"] == "learned"
    assert load(data_dir() / "dragon" / "model", expect=recipes.DRAGON_CONFIG).cfg == recipes.DRAGON_CONFIG
