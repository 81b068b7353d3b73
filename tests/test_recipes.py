"""helpers.recipes: retraining a shipped model. On one machine two runs are bit-identical; on the
CPU paths we measured, the rebuilt model keeps the behaviour its model card records, with its
figures within stated tolerances of the card's (other CPUs pick other float kernels, so the weights
themselves differ; two paths put the weakest copula type at 0.897 and 0.865, under the course's 0.9
target, which the shipped model meets at 0.951: that margin is checked as a floor, not as a
distance from the card)."""
import pytest
import torch

from helpers import recipes, worlds
from helpers.weights import card, data_dir

# How far a rebuild's figures may sit from the card's. Measured on an AVX2 machine's native path and
# its forced generic path (ATEN_CPU_CAPABILITY=default): cat final loss 0.5734 / 0.5677 against
# 0.5691 on the card, p(on) 0.9988 / 0.9992 against 0.9994, the weakest copula type's p(class)
# 0.933 / 0.973 against 0.951; dragon loss 0.9357 / 0.9359 against 0.9357, p(potion) 0.661 / 0.662.
# On an AVX-512 machine's forced path (MKL still picks its kernels by processor): cat loss 0.5736,
# p(on) 0.9951, the weakest copula type's p(class) 0.897 (every copula type's top word still in
# class); that uses 0.0043 of p(on)'s 0.005. On another AVX-512 machine's native path (an Intel Xeon,
# model 167): p(on) 0.9988, the weakest copula type's p(class) 0.865, 0.086 from the card: a distance
# from the card is no property of the recipe, so the weakest type is checked against a floor
# (COPULA_FLOOR, every type still clearly in class) and every type's top word against its class.
CAT_TOLERANCE = dict(final_loss=0.02, p_on=0.005)
COPULA_FLOOR = recipes.REBUILD_COPULA_FLOOR
DRAGON_TOLERANCE = dict(final_loss=0.01, p_potion_after_dragon_drinks=0.02)


def same_weights(a, b):
    return all(torch.equal(a.state_dict()[name], value) for name, value in b.state_dict().items())


def test_two_trainings_on_one_machine_are_bit_identical():
    first, losses_1, _ = recipes.train_cat(progress=False, stop_after=150)
    again, losses_2, _ = recipes.train_cat(progress=False, stop_after=150)
    assert losses_1 == losses_2 and same_weights(first, again)


def test_a_rebuilt_cat_model_has_every_behaviour_of_its_card():
    model, losses, _ = recipes.train_cat(progress=False)
    shipped = card(data_dir() / "cat" / "model")
    figures = worlds.cat_targets(model, worlds.cat_world())
    assert shipped["targets_met"] and worlds.cat_targets_met(shipped["figures"])
    assert figures["p_on"] >= 0.99 and figures["copula_in_class"] == figures["copula_types"]
    assert figures["copula_in_class"] == shipped["figures"]["copula_in_class"] == 16
    assert figures["held_out_rule_accuracy"] == shipped["figures"]["held_out_rule_accuracy"] == 1.0
    assert abs(figures["bigram_accuracy"] - figures["bigram_ceiling"]) <= 0.02
    assert abs(losses[-1] - shipped["final_loss"]) <= CAT_TOLERANCE["final_loss"]
    assert abs(figures["p_on"] - shipped["figures"]["p_on"]) <= CAT_TOLERANCE["p_on"]
    assert figures["copula_min_p_class"] >= COPULA_FLOOR and recipes.cat_rebuild_kept(figures)
    assert not recipes.cat_rebuild_kept({**figures, "copula_min_p_class": COPULA_FLOOR - 0.01})


def test_a_rebuilt_dragon_model_prefers_potion_as_its_card_says():
    model, losses, _ = recipes.train_dragon(progress=False)
    shipped = card(data_dir() / "dragon" / "model")
    world = worlds.dragon_world(**recipes.DRAGON_CORPUS)
    p = worlds.next_token_probs(model, world, [["<BOS>", "dragon", "drinks"]])[0]
    assert int(p.argmax()) == world.tokenizer.ids["potion"]
    assert abs(losses[-1] - shipped["final_loss"]) <= DRAGON_TOLERANCE["final_loss"]
    assert abs(float(p[world.tokenizer.ids["potion"]]) - shipped["p_potion_after_dragon_drinks"]) \
        <= DRAGON_TOLERANCE["p_potion_after_dragon_drinks"]


def test_model_cards_carry_their_recipes():
    assert card(data_dir() / "cat" / "model")["recipe"] == recipes.CAT_TRAINING
    assert card(data_dir() / "dragon" / "model")["recipe"] == recipes.DRAGON_TRAINING


@pytest.mark.parametrize("name", ["cat", "dragon"])
def test_the_shipped_config_is_the_recipes(name):
    from helpers.weights import load
    config = {"cat": recipes.CAT_CONFIG, "dragon": recipes.DRAGON_CONFIG}[name]
    assert load(data_dir() / name / "model", expect=config).cfg == config


def test_a_training_run_or_batch_too_large_is_refused_up_front(refused):
    """train_cat(steps=10**9) trained on for ever and induction_batch(batch=10**9) asked for 200 GB
    (red team round 3): each limit is checked before any work; step -1 is no step."""
    refused(lambda: recipes.train_cat(progress=False, steps=10**9), "steps", "at most 10,000")
    refused(lambda: recipes.induction_batch(0, batch=10**9), "batch", "at most 4,096")
    refused(lambda: recipes.induction_batch(-1), "step", "-1")
    refused(lambda: recipes.induction_batch(0, T=10**6), "T", "at most 1,024")
    inputs, targets = recipes.induction_batch(3)
    assert inputs.shape == targets.shape == (64, recipes.INDUCTION_CONFIG.n_max - 1)
