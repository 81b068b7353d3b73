"""The shipped induction-head model: it loads, its card tells the truth, it has the two
heads the chapter shows, and the recipe rebuilds it."""
import os

import pytest
import torch

from helpers import heads, weights, worlds

STEM = weights.data_dir() / "induction" / "model"


@pytest.fixture(scope="module")
def model():
    return heads.load_induction()


@pytest.fixture(scope="module")
def test_ids(model):
    test = weights.card(STEM)["figures"]["test"]
    return worlds.repeated_tokens(test["n"], test["length"], model.cfg.vocab_size, test["seed"]), test["length"]


def test_the_shipped_model_is_attention_only_with_the_recipe_config(model):
    assert model.cfg == heads.INDUCTION_CONFIG
    assert model.cfg.d_ff == 0 and model.cfg.n_layers == 2
    assert all(not hasattr(block, "W_1") for block in model.blocks)


def test_the_card_matches_a_fresh_measurement(model, test_ids):
    ids, L = test_ids
    figures = weights.card(STEM)["figures"]
    previous, induction = heads.head_scores(model, ids, L)
    losses = heads.copy_losses(model, ids, L)
    assert torch.allclose(previous, torch.tensor(figures["previous_token_score"]), atol=1e-5)
    assert torch.allclose(induction, torch.tensor(figures["induction_score"]), atol=1e-5)
    assert losses["first"] == pytest.approx(figures["loss_first_copy"], abs=1e-5)
    assert losses["second"] == pytest.approx(figures["loss_second_copy"], abs=1e-5)


def test_a_previous_token_head_in_layer_0_and_an_induction_head_in_layer_1(model, test_ids):
    ids, L = test_ids
    previous, induction = heads.head_scores(model, ids, L)
    assert previous[0].max() > 0.35 and previous[0].max() > 2 * previous[1].max()
    assert induction[1].max() > 0.8 and induction[0].max() < 0.1
    losses = heads.copy_losses(model, ids, L)
    assert losses["first"] > 0.9 * losses["chance"]
    assert losses["second"] < losses["first"] / 3


def test_switching_off_either_head_hurts_the_second_copy(model, test_ids):
    ids, L = test_ids
    previous, induction = heads.head_scores(model, ids, L)
    base = heads.copy_losses(model, ids, L)["second"]
    for pair in ((0, int(previous[0].argmax())), (1, int(induction[1].argmax()))):
        assert heads.copy_losses(model, ids, L, ablate_heads=[pair])["second"] > base + 0.4


def test_the_wrong_weights_file_is_refused(tmp_path):
    weights.save(weights.load_cat(), tmp_path / "model")
    with pytest.raises(ValueError, match="different model"):
        weights.load(tmp_path / "model", expect=heads.INDUCTION_CONFIG)


@pytest.mark.skipif(os.environ.get("COURSE_SKIP_RETRAIN") == "1", reason="COURSE_SKIP_RETRAIN=1")
def test_the_recipe_rebuilds_the_shipped_weights(model):
    rebuilt, losses, _ = heads.train_induction(progress=False)
    for (name, shipped), (_, again) in zip(model.state_dict().items(), rebuilt.state_dict().items()):
        assert torch.allclose(shipped, again, atol=1e-5), name
    card = weights.card(STEM)
    assert sum(losses[-50:]) / 50 == pytest.approx(card["mean_loss_last_50_steps"], abs=1e-4)
