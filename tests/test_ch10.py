"""Chapter 10: ablation helpers, checks and the explorer's compute."""
import numpy as np
import pytest
import torch

from helpers import ablation, checks, worlds
from helpers.weights import load_cat
from helpers.widgets import ch10


@pytest.fixture(scope="module")
def cat():
    return load_cat(), worlds.cat_world()


def test_zeroed_copy_leaves_the_original_untouched(cat):
    model, world = cat
    before = model.blocks[0].W_O.clone()
    clone = ablation.zeroed_copy(model, {(0, 1)})
    assert torch.equal(model.blocks[0].W_O, before)
    assert torch.all(clone.blocks[0].W_O[3:6] == 0) and torch.equal(clone.blocks[0].W_O[:3], before[:3])


def test_configurations_cover_every_head_and_attention_off(cat):
    labels = [label for label, _ in ablation.configurations(cat[0])]
    assert labels[:2] == ["none (the trained model)", "attention off"] and len(labels) == 6


def test_damage_rows_of_the_trained_model(cat):
    model, world = cat
    r = ablation.damage_row(model, world)
    assert r["held_out_rule"] == 1.0 and r["copula"] == 1.0 and r["bigram"] == pytest.approx(302 / 432)
    off = ablation.damage_row(model, world, attention=False)
    assert off["copula"] <= 0.5  # a per-position model cannot know the subject's class


def test_attention_on_subject_and_effects_have_one_entry_per_head(cat):
    model, world = cat
    looks, effect = ablation.attention_on_subject(model, world), ablation.class_probability_drop(model, world)
    assert looks.shape == effect.shape == (2, 2)
    assert torch.all((looks >= 0) & (looks <= 1)) and torch.all(effect <= 1)


def test_ablation_view_counts_copula_types(cat):
    model, world = cat
    on = ch10.ablation_view(model, world, "<BOS> the cat is")
    assert on["in_class"] == on["types"] == 16
    off = ch10.ablation_view(model, world, "<BOS> the cat is", attention=False)
    assert off["in_class"] < 16 and torch.isclose(off["probs"].sum(), torch.tensor(1.0))


def test_write_back_check():
    concat = np.array([[1.0, 2.0, -1.0, 3.0]])
    W_O = np.arange(12.0).reshape(4, 3)
    right = concat[:, :2] @ W_O[:2]
    assert checks.ch10.write_back(right, concat, W_O, d_k=2)
    assert "full write-back" in checks.ch10.write_back.feedback(concat @ W_O, concat, W_O, d_k=2)[0]
    assert "part removed" in checks.ch10.write_back.feedback(concat[:, 2:] @ W_O[2:], concat, W_O, d_k=2)[0]
    assert "not answered" in checks.ch10.write_back.feedback(None, concat, W_O, d_k=2)[0]


def test_least_damage_check():
    table = {(0, 0): 0.4, (1, 0): 0.7, (1, 1): 0.3}
    assert checks.ch10.least_damage((1, 0), table)
    assert "another head" in checks.ch10.least_damage.feedback((0, 0), table)[0]
    assert "not a head" in checks.ch10.least_damage.feedback((5, 5), table)[0]
    assert "(layer, head)" in checks.ch10.least_damage.feedback("L1H0", table)[0]


def test_method2_check_demands_the_last_bit(cat):
    model, world = cat
    ids = world.tokenizer.encode("<BOS> the dog was")
    with torch.no_grad():
        ref = model(ids, attention=False)
        assert checks.ch10.method2_logits(ablation.zeroed_copy(model)(ids), ref)
        assert "differ" in checks.ch10.method2_logits.feedback(ref + 1e-6, ref)[0]
        assert "shape" in checks.ch10.method2_logits.feedback(ref[:2], ref)[0]
