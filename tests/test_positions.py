"""Chapter 06 (positions): the compute, the exercise checks and the explorer."""

import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.explorer import Blitter, png
from helpers.model import Config, Transformer
from helpers.positions import checks
from helpers.positions import compute as pos
from helpers.positions import explorer as explore

FIRST = "shutil . copy ( src , dst )".split()
SECOND = "shutil . copy ( dst , src )".split()


def test_permutation_matrix_moves_rows_and_is_orthogonal():
    perm = [2, 0, 1]
    P = pos.permutation_matrix(perm)
    X = np.arange(6.0).reshape(3, 2)
    assert np.array_equal(P @ X, X[perm])
    assert np.array_equal(P.T @ P, np.eye(3))
    with pytest.raises(CourseInputError, match="rearrangement"):
        pos.permutation_matrix([0, 0, 1])


def test_match_permutation_handles_repeated_words():
    perm = pos.match_permutation(FIRST, SECOND)
    assert [FIRST[i] for i in perm] == SECOND
    assert list(pos.match_permutation(["a", "b", "a"], ["a", "a", "b"])) == [0, 2, 1]
    with pytest.raises(CourseInputError, match="same words"):
        pos.match_permutation(["a"], ["b"])


def test_attention_is_permutation_equivariant_without_positions_only():
    assert pos.order_demo(FIRST, SECOND)["max_diff"] < 1e-12
    assert pos.order_demo(FIRST, SECOND, n_layers=2)["max_diff"] < 1e-12
    assert pos.order_demo(FIRST, SECOND, positions=True)["max_diff"] > 0.1


def test_causal_mask_keeps_the_last_row_in_one_layer_only():
    one = pos.order_demo(FIRST, SECOND, causal=True)
    assert one["row_diff"][:4].max() == 0 and one["row_diff"][-1] < 1e-12
    assert one["row_diff"][4:7].min() > 0.01
    two = pos.order_demo(FIRST, SECOND, causal=True, n_layers=2)
    assert two["row_diff"][-1] > 1e-3


def test_offset_rotation_moves_the_table_and_is_a_rotation():
    PE = ref.sinusoidal_positions(40, 8)
    for k in (1, 3, 10):
        R = pos.offset_rotation(k, 8)
        assert np.allclose(PE[:-k] @ R, PE[k:], atol=1e-12)
        assert np.allclose(R @ R.T, np.eye(8))
    with pytest.raises(CourseInputError, match="even"):
        pos.offset_rotation(1, 5)


def test_rope_scores_depend_on_the_offset_only():
    rng = np.random.default_rng(0)
    S = pos.rope_scores(rng.normal(size=6), rng.normal(size=6), 12)
    assert S.shape == (12, 12) and pos.diagonal_spread(S) < 1e-12
    assert pos.diagonal_spread(np.arange(9.0).reshape(3, 3)) == 8.0  # the main diagonal 0, 4, 8
    with pytest.raises(CourseInputError, match="same width"):
        pos.rope_scores(np.ones(4), np.ones(6), 3)


def test_rotary_model_scores_depend_on_the_offset_only():
    model = Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=0, positions="rotary"))
    scores = model(torch.full((10,), 5), trace=True)["L0.scores"].numpy()
    assert all(pos.diagonal_spread(s) < 1e-5 for s in scores)


def test_dragon_positions_past_the_training_length_never_moved(dragon, cat):
    unchanged = pos.rows_unchanged(dragon, seed=0)
    assert unchanged.shape == (128,)
    assert not unchanged[:9].any() and unchanged[9:].all()
    moves = pos.row_moves(dragon, seed=0)
    assert moves[:9].min() > 0.1 and moves[9:].max() < 1e-5
    with pytest.raises(CourseInputError, match="learned positions"):
        pos.rows_unchanged(cat, seed=0)


def test_scramble_is_seeded_and_keeps_bos_and_last_word():
    words = "<BOS> the big dog sat on the".split()
    assert pos.scramble(words, 0) == words
    once = pos.scramble(words, 3)
    assert once == pos.scramble(words, 3) and once != words
    assert once[0] == "<BOS>" and once[-1] == "the" and sorted(once) == sorted(words)
    free = pos.scramble(words, 3, keep_last=False)
    assert sorted(free) == sorted(words) and free[0] == "<BOS>"


def test_next_token_view_on_the_cat_model(cat, cat_world):
    model, world = cat, cat_world
    view = pos.next_token_view(model, world, "<BOS> the cat sat")
    assert view["top"] == "on" and view["change"] == 0.0
    assert abs(view["probs"].sum() - 1) < 1e-5
    off = pos.next_token_view(model, world, "<BOS> the cat sat", positions=False)
    assert off["change"] > 0.1 and off["scramble_change"] == 0.0
    scrambled = pos.next_token_view(model, world, "<BOS> the big dog sat on the", positions=False, seed=1)
    assert scrambled["scramble_change"] > 0.01
    with pytest.raises(CourseInputError, match="<BOS>"):
        pos.next_token_view(model, world, "the cat")


def test_view_figure_draws(cat, cat_world):
    view = pos.next_token_view(cat, cat_world, pos.PROMPTS[1], positions=False, seed=1)
    fig = explore.view_figure(view, cat_world.tokenizer.vocab, positions=False)
    assert "positions off" in fig.get_suptitle()
    assert png(fig)[:4] == b"\x89PNG"


def test_explorer_redraws_when_a_control_moves(cat, cat_world):
    shown = explore.explorer(cat, cat_world)
    assert set(shown.controls) == {"prompt", "positions", "seed", "keep_last"}
    first = shown.picture()
    assert first[:4] == b"\x89PNG"
    shown.controls["positions"].value = False
    assert shown.controls["positions"].description == "positions off"
    assert shown.picture() != first


# ------------------------------------------------------------------ checks

def said(check, answer, *args):
    return " ".join(check.feedback(answer, *args))


def test_sinusoidal_table_check():
    right = ref.sinusoidal_positions(8, 4)
    assert checks.sinusoidal_table.feedback(right, 8, 4) == []
    assert checks.sinusoidal_table.feedback(torch.tensor(right), 8, 4) == []
    assert NOT_ANSWERED in said(checks.sinusoidal_table, None, 8, 4)
    assert "swapped" in said(checks.sinusoidal_table, right[:, [1, 0, 3, 2]], 8, 4)
    assert "shape (8, 4)" in said(checks.sinusoidal_table, right[:4], 8, 4)
    assert "frequencies" in said(checks.sinusoidal_table, ref.sinusoidal_positions(8, 4, base=100.0), 8, 4)
    assert "interleave" in said(checks.sinusoidal_table, right[:, [0, 2, 1, 3]], 8, 4)
    assert "position 1" in said(checks.sinusoidal_table, ref.sinusoidal_positions(9, 4)[1:], 8, 4)
    noise = said(checks.sinusoidal_table, right + 0.1, 8, 4)
    assert "differs" in noise and "frequencies" not in noise
    with pytest.raises(AssertionError, match="swapped"):
        checks.sinusoidal_table.grade(right[:, [1, 0, 3, 2]], 8, 4)


def test_offset_rotation_check():
    right = pos.offset_rotation(2, 6)
    assert checks.offset_rotation.feedback(right, 2, 6) == []
    assert "back" in said(checks.offset_rotation, right.T, 2, 6)
    assert "1 step" in said(checks.offset_rotation, pos.offset_rotation(1, 6), 2, 6)
    assert "block-diagonal" in said(checks.offset_rotation, np.ones((6, 6)), 2, 6)
    assert "each block is a rotation" in said(checks.offset_rotation, pos.offset_rotation(5, 6), 2, 6)
    assert "[[cos, -sin], [sin, cos]]" in said(checks.offset_rotation, 2 * right, 2, 6)
    assert NOT_ANSWERED in said(checks.offset_rotation, None, 2, 6)
    with pytest.raises(AssertionError, match="rotation"):
        checks.offset_rotation.grade(np.eye(6), 2, 6)


def test_unscrambled_check():
    rng = np.random.default_rng(1)
    X, perm = rng.normal(size=(5, 3)), np.array([3, 0, 4, 1, 2])
    Y, _ = ref.attention(X[perm], X[perm], X[perm])
    assert checks.unscrambled.feedback(Y[np.argsort(perm)], Y, perm) == []
    assert "scrambled order" in said(checks.unscrambled, Y, Y, perm)
    assert "second time" in said(checks.unscrambled, Y[perm], Y, perm)
    assert "another order" in said(checks.unscrambled, Y[::-1], Y, perm)
    assert "not Y's rows" in said(checks.unscrambled, Y + 1, Y, perm)
    assert NOT_ANSWERED in said(checks.unscrambled, None, Y, perm)
    with pytest.raises(AssertionError, match="second time"):
        checks.unscrambled.grade(Y[perm], Y, perm)


def test_blitter_draws_what_a_full_draw_draws(cat, cat_world, pixels):
    fig, draw, changing = explore.view_panel(cat_world.tokenizer.vocab)
    fast = Blitter(fig, changing)
    draw(pos.next_token_view(cat, cat_world, pos.PROMPTS[3], positions=False, seed=2), False)
    quick = pixels(fast.png()).astype(float)
    for artist in changing:
        artist.set_animated(False)
    full = pixels(png(fig)).astype(float)
    assert quick.shape == full.shape
    assert np.abs(quick - full).mean() < 1.0


def test_model_order_demo_sees_one_bag_only_without_mask_and_positions(cat, cat_world):
    a, b = "<BOS> the cat sat on the mat".split(), "<BOS> the cat mat on the sat".split()
    blind = pos.model_order_demo(cat, cat_world, a, b, causal=False, positions=False)
    assert blind["max_diff"] < 1e-5
    masked = pos.model_order_demo(cat, cat_world, a, b, causal=True, positions=False)
    assert masked["row_diff"][:3].max() < 1e-5 and masked["max_diff"] > 0.1
    assert pos.model_order_demo(cat, cat_world, a, b, causal=False, positions=True)["max_diff"] > 0.1


def test_position_task_and_the_order_blind_ceiling():
    x, y = pos.position_task(50, T=6, V=6, seed=3)
    assert x.shape == y.shape == (50, 6) and (x[:, 0] == 0).all() and (x[:, 1:] > 0).all()
    assert torch.equal(y[7], torch.arange(6))
    assert pos.order_blind_ceiling(6) == pytest.approx(1 / 3)
    assert pos.order_blind_ceiling(2) == pytest.approx(1.0)
    with pytest.raises(CourseInputError, match="cannot exceed"):
        pos.position_task(5, T=7, V=6)


def test_position_probe_learns_order_from_the_mask_alone():
    assert pos.position_probe(0, causal=True) > pos.order_blind_ceiling(6) + 0.1
    assert pos.position_probe(0, causal=False, steps=100) < pos.order_blind_ceiling(6) + 0.03


def test_shifted_positions(cat, cat_world, dragon):
    inputs, targets = cat_world.batch(cat_world.train)
    assert torch.equal(pos.shifted_logits(cat, inputs, 0), cat(inputs))
    assert pos.shifted_loss(cat, inputs, targets, 9) > pos.shifted_loss(cat, inputs, targets, 0) + 1
    rotary = Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=0, positions="rotary"))
    assert (pos.shifted_logits(rotary, inputs, 1000) - rotary(inputs)).abs().max() < 1e-4
    with pytest.raises(CourseInputError, match=r"shift 120 puts the last of 9 tokens at position 128.*rows 0\.\.127"):
        pos.shifted_logits(dragon, torch.zeros(1, 9, dtype=torch.long), 120)
