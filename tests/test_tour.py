"""Chapter 00, the tour: the compute behind the explorer, the explorer itself, the checks, the read-out."""
import numpy as np
import pytest
import torch

from helpers.errors import CourseInputError
from helpers.readout import format_step, top_tokens
from helpers.tour import checks, compute, explorer

PNG = b"\x89PNG"


def test_prompt_view_gives_probs_and_causal_weights(cat, cat_world):
    view = compute.prompt_view(cat, cat_world, "<BOS> the cat is")
    assert view["tokens"] == ["<BOS>", "the", "cat", "is"]
    assert torch.isclose(view["probs"].sum(), torch.tensor(1.0))
    assert view["weights"].shape == (2, 2, 4, 4)
    assert torch.all(torch.triu(view["weights"], diagonal=1) == 0)
    off = compute.prompt_view(cat, cat_world, "<BOS> the cat is", attention=False)
    assert torch.all(off["weights"] == 0)


def test_prompt_view_rejects_unknown_words_with_a_sentence(cat, cat_world):
    with pytest.raises(CourseInputError, match="'zebra'"):
        compute.prompt_view(cat, cat_world, "<BOS> the zebra")


def test_explorer_draws_a_picture_and_redraws_when_a_control_moves(cat, cat_world, capsys):
    shown = explorer.explorer(cat, cat_world)
    assert set(shown.controls) == {"prompt", "layer", "head", "attention"}
    first = shown.picture()
    assert first.startswith(PNG)
    shown.controls["attention"].value = False
    assert shown.picture().startswith(PNG) and shown.picture() != first
    shown.controls["prompt"].value = "<BOS> the zebra"  # an unknown word: one red sentence, no crash
    assert "zebra" in shown.message.value


def test_scores_shape_check():
    assert checks.scores_shape((2, 5, 5), n_heads=2, T=5)
    assert checks.scores_shape(torch.Size([2, 5, 5]), n_heads=2, T=5)
    assert "heads" in checks.scores_shape.feedback((5, 5, 5), n_heads=2, T=5)[0]
    assert "T=5" in checks.scores_shape.feedback((2, 4, 4), n_heads=2, T=5)[0]
    assert "three axes" in checks.scores_shape.feedback((5, 5), n_heads=2, T=5)[0]
    assert "not answered" in checks.scores_shape.feedback(None, n_heads=2, T=5)[0]


def test_p_on_check_names_the_usual_mistakes():
    logits = np.array([1.0, 2.0, 3.0])
    right = np.exp(3) / np.exp(logits).sum()
    assert checks.p_on(right, logits, 2)
    assert checks.p_on(torch.tensor(right, dtype=torch.float32), torch.tensor(logits), 2)
    assert "logit itself" in checks.p_on.feedback(3.0, logits, 2)[0]
    assert "divide by the sum" in checks.p_on.feedback(np.exp(3.0), logits, 2)[0]
    assert "too small" in checks.p_on.feedback(0.5, logits, 2)[0]
    with pytest.raises(AssertionError):
        checks.p_on.grade(0.5, logits, 2)


def test_per_layer_check_names_what_was_left_out():
    assert checks.per_layer(302, d_model=6, d_ff=8)
    assert "LayerNorms" in checks.per_layer.feedback(278, d_model=6, d_ff=8)[0]
    assert "biases" in checks.per_layer.feedback(302 - 24 - 8 - 6, d_model=6, d_ff=8)[0]
    assert "not it" in checks.per_layer.feedback(300, d_model=6, d_ff=8)[0]
    assert "whole number" in checks.per_layer.feedback(302.5, d_model=6, d_ff=8)[0]
    assert "str" in checks.per_layer.feedback("many", d_model=6, d_ff=8)[0]


def test_readout_formats_shapes_and_top_tokens():
    text = format_step("L0.weights", torch.eye(3).repeat(2, 1, 1), ["a", "b", "c"])
    assert text.startswith("L0.weights  [2 × 3 × 3]") and "head 1:" in text
    rows = top_tokens(torch.tensor([0.1, 0.7, 0.2]), ["x", "y", "z"], k=2)
    assert [r[1] for r in rows] == ["y", "z"]
