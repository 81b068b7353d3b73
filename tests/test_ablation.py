"""Chapter 10, ablation: the three ways to switch attention off, single-head surgery, the tables'
rows, the explorer and the checks."""
import copy

import numpy as np
import pytest
import torch

from helpers.ablation import checks, compute, explorer
from helpers.model import Config, Transformer

PROMPTS = ("<BOS> the cat is", "<BOS> the mat was", "<BOS> the dog sat on the")
HEADS = [(layer, head) for layer in range(2) for head in range(2)]


def test_deleted_blocks_zeroed_write_back_and_the_switch_agree_to_the_last_bit(cat, cat_world):
    surgery = compute.zeroed_copy(cat)
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = cat_world.tokenizer.encode(prompt)
            method1 = compute.without_attention_blocks(cat, ids)
            method2 = surgery(ids)
            switch = cat(ids, attention=False)
            assert torch.equal(method1, method2) and torch.equal(method2, switch), prompt


def test_deleted_blocks_take_a_batch(cat, cat_world):
    ids = torch.stack([cat_world.tokenizer.encode(p) for p in ("<BOS> the cat is", "<BOS> the mat is")])
    with torch.no_grad():
        assert torch.equal(compute.without_attention_blocks(cat, ids), cat(ids, attention=False))


@pytest.mark.parametrize("choices", [dict(norm="none", activation="relu", final_norm=False),
                                     dict(norm="pre", activation="relu", bias=False)])
def test_deleted_blocks_use_the_models_own_norm_activation_and_read_out(choices):
    model = Transformer(Config(vocab_size=7, d_model=4, n_heads=2, n_layers=2, d_ff=6, **choices))
    model.reset_parameters(seed=3)
    ids = torch.tensor([1, 4, 2, 6, 0])
    with torch.no_grad():
        assert torch.equal(compute.without_attention_blocks(model, ids), model(ids, attention=False))
        assert torch.equal(compute.zeroed_copy(model)(ids), model(ids, attention=False))


def test_zeroing_one_heads_rows_equals_the_models_head_switch(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the cat is")
    with torch.no_grad():
        for pair in HEADS:
            assert torch.equal(compute.zeroed_copy(cat, {pair})(ids), cat(ids, ablate_heads={pair})), pair


def test_zeroed_copy_leaves_the_original_untouched(cat):
    before = cat.blocks[0].attn.W_O.clone()
    clone = compute.zeroed_copy(cat, {(0, 1)})
    assert torch.equal(cat.blocks[0].attn.W_O, before)
    assert torch.all(clone.blocks[0].attn.W_O[3:6] == 0) and torch.equal(clone.blocks[0].attn.W_O[:3], before[:3])
    assert torch.equal(clone.blocks[0].attn.b_O, cat.blocks[0].attn.b_O)


def test_configurations_cover_every_head_and_attention_off(cat):
    labels = [label for label, _ in compute.configurations(cat)]
    assert labels[:2] == ["none (the trained model)", "attention off"] and len(labels) == 6


def test_damage_rows_of_the_trained_model(cat, cat_world):
    r = compute.damage_row(cat, cat_world)
    assert r["held_out_rule"] == 1.0 and r["copula"] == 1.0 and r["bigram"] == pytest.approx(302 / 432)
    off = compute.damage_row(cat, cat_world, attention=False)
    assert off["copula"] <= 0.5  # a per-position model cannot know the subject's class


def test_prompt_row_reads_the_top_token_and_the_animal_adjectives(cat, cat_world):
    r = compute.prompt_row(cat, cat_world, "<BOS> the cat is")
    assert r["top"] in ("big", "small") and r["p_animal_adj"] >= r["p_top"]


def test_attention_on_subject_and_effects_have_one_entry_per_head(cat, cat_world):
    looks = compute.attention_on_subject(cat, cat_world)
    effect = compute.class_probability_drop(cat, cat_world)
    assert looks.shape == effect.shape == (2, 2)
    assert torch.all((looks >= 0) & (looks <= 1)) and torch.all(effect <= 1)


def test_ablation_view_counts_copula_types(cat, cat_world):
    on = compute.ablation_view(cat, cat_world, "<BOS> the cat is")
    assert on["in_class"] == on["types"] == 16
    off = compute.ablation_view(cat, cat_world, "<BOS> the cat is", attention=False)
    assert off["in_class"] < 16 and torch.isclose(off["probs"].sum(), torch.tensor(1.0))


def test_explorer_has_a_box_per_head_and_redraws(cat, cat_world, capsys):
    shown = explorer.explorer(cat, cat_world)
    assert set(shown.controls) == {"prompt", "attention_off", "L0H0", "L0H1", "L1H0", "L1H1"}
    first = shown.picture()
    assert first.startswith(b"\x89PNG")
    shown.controls["L0H0"].value = True
    assert shown.picture() != first


def test_write_back_check():
    concat = np.array([[1.0, 2.0, -1.0, 3.0]])
    W_O = np.arange(12.0).reshape(4, 3)
    right = concat[:, :2] @ W_O[:2]
    assert checks.write_back(right, concat, W_O, d_k=2)
    assert checks.write_back(torch.tensor(right, requires_grad=True), concat, W_O, d_k=2)
    assert "full write-back" in checks.write_back.feedback(concat @ W_O, concat, W_O, d_k=2)[0]
    assert "part removed" in checks.write_back.feedback(concat[:, 2:] @ W_O[2:], concat, W_O, d_k=2)[0]
    assert "differs" in checks.write_back.feedback(right + 1, concat, W_O, d_k=2)[0]
    assert "shape" in checks.write_back.feedback(right.T, concat, W_O, d_k=2)[0]
    assert "not answered" in checks.write_back.feedback(None, concat, W_O, d_k=2)[0]


def test_least_damage_check():
    table = {(0, 0): 0.4, (1, 0): 0.7, (1, 1): 0.3}
    assert checks.least_damage((1, 0), table)
    assert checks.least_damage([1, 0], table)
    assert "another head" in checks.least_damage.feedback((0, 0), table)[0]
    assert "not a head" in checks.least_damage.feedback((5, 5), table)[0]
    assert "(layer, head)" in checks.least_damage.feedback("L1H0", table)[0]
    assert "2 whole numbers" in checks.least_damage.feedback((1, 0, 0), table)[0]


def test_method2_check_demands_the_last_bit(cat, cat_world):
    ids = cat_world.tokenizer.encode("<BOS> the dog was")
    with torch.no_grad():
        ref = cat(ids, attention=False)
        assert checks.method2_logits(compute.zeroed_copy(cat)(ids), ref)
    assert "differ" in checks.method2_logits.feedback(ref + 1e-6, ref)[0]
    assert "shape" in checks.method2_logits.feedback(ref[:2], ref)[0]
