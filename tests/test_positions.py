"""Chapter 06 (positions): the compute, the exercise checks and the explorer."""

import importlib.util

import numpy as np
import pytest
import torch

from helpers import reference as ref
from helpers.errors import CourseInputError
from helpers.exercises import NOT_ANSWERED
from helpers.explorer import Blitter, png
from helpers.model import Config, Transformer, rotate_pairs
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


# The learner's pieces: right, untouched skeletons, and one small wrong implementation per diagnosis.

def table_skeleton(n, d):
    """The answer cell as the learner's copy has it."""
    # YOUR CODE HERE


def table_numpy(n, d):
    return pos.sinusoidal_positions(n, d).numpy()


def table_from(build):
    """A learner's table function whose (n, d) table is build(n, d) (a NumPy table)."""
    return lambda n, d: torch.tensor(build(n, d), dtype=torch.float32)


def per_column_frequency(n, d):
    p, j = np.arange(n)[:, None], np.arange(d)
    angle = p * 10000.0 ** (-j / d)
    return np.where(j % 2 == 0, np.sin(angle), np.cos(angle))


TABLE_SLIPS = [
    (table_from(lambda n, d: ref.sinusoidal_positions(n, d)[:, np.arange(d) ^ 1]), "sine and cosine are swapped"),
    (table_from(lambda n, d: ref.sinusoidal_positions(n, d, base=100.0)), "10000**(-i/d)"),
    (table_from(lambda n, d: ref.sinusoidal_positions(n, d, base=1e8)), "10000**(-4i/d)"),
    (table_from(per_column_frequency), "each column has its own frequency"),
    (table_from(lambda n, d: np.concatenate([ref.sinusoidal_positions(n, d)[:, 0::2],
                                             ref.sinusoidal_positions(n, d)[:, 1::2]], axis=1)), "interleave"),
    (table_from(lambda n, d: ref.sinusoidal_positions(n + 1, d)[1:]), "position 1"),
    (table_numpy, "return a torch tensor"),
    (lambda n, d: pos.sinusoidal_positions(n, d)[:-1], "shape (8, 6)"),
    (lambda n, d: pos.sinusoidal_positions(n, d) + 0.1, "differs from the expected values"),
    (lambda n, d: torch.tensor(ref.sinusoidal_positions(n, d)), "right values but is torch.float64; return float32"),
]


def test_the_course_table_is_the_cat_models(cat):
    assert torch.equal(pos.sinusoidal_positions(16, 6), cat.PE)
    with pytest.raises(CourseInputError, match="even"):
        pos.sinusoidal_positions(4, 5)
    with pytest.raises(CourseInputError, match="n"):
        pos.sinusoidal_positions(0, 6)


def test_sinusoidal_positions_check_passes_the_right_piece_and_names_each_slip(cat, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    assert checks.sinusoidal_positions.feedback(lambda n, d: pos.sinusoidal_positions(n, d), cat) == []
    assert said(checks.sinusoidal_positions, table_skeleton, cat).startswith("not answered yet")
    assert NOT_ANSWERED in said(checks.sinusoidal_positions, None, cat)
    for wrong, words in TABLE_SLIPS:
        assert words in said(checks.sinusoidal_positions, wrong, cat), words
    with pytest.raises(AssertionError, match="swapped"):
        checks.sinusoidal_positions.grade(TABLE_SLIPS[0][0], cat)


def rotate_skeleton(x, start=0):
    """The answer cell as the learner's copy has it."""
    # YOUR CODE HERE


def turn(**how):
    """A learner's rotate that turns as checks.turned(x, start, **how) does."""
    return lambda x, start=0: checks.turned(x, start, **how)


def rotate_forgets_start(x, start=0):
    return pos.rotate(x)


def rotate_from_one(x, start=0):
    return pos.rotate(x, start + 1)


def rotate_in_place(x, start=0):
    x.copy_(pos.rotate(x, start))
    return x


ROTATE_SLIPS = [
    (turn(pairs="halves"), "Llama's layout"),
    (turn(sign=-1), "turn the wrong way"),
    (turn(swap=True), "cos and sin are swapped"),
    (turn(base=100.0), "10000**(-i/d_k)"),
    (turn(base=1e8), "10000**(-4i/d_k)"),
    (rotate_forgets_start, "start is ignored"),
    (rotate_from_one, "your positions start at 1"),
    (lambda x, start=0: x, "unturned"),
    (lambda x, start=0: pos.rotate(x, start).numpy(), "return a torch tensor"),
    (lambda x, start=0: pos.rotate(x, start)[..., :-1], "should have shape"),
    (lambda x, start=0: pos.rotate(x, start) * 1.01, "differs from the model's own turn"),
    (rotate_in_place, "changed x in place"),
    (lambda x, start=0: pos.rotate(x.double(), start), "returns torch.float64 for x of torch.float32"),
]


def test_the_course_rotate_is_the_models(induction):
    x = torch.randn(2, 3, 5, 8)
    assert torch.equal(pos.rotate(x, 4), rotate_pairs(x, 4))
    with pytest.raises(CourseInputError, match=r"\(B, H, T, d_k\)"):
        pos.rotate(x[0])
    with pytest.raises(CourseInputError, match="even"):
        pos.rotate(torch.zeros(1, 1, 2, 3))
    with pytest.raises(CourseInputError, match="start"):
        pos.rotate(x, -1)


def test_rotate_check_passes_the_right_piece_and_names_each_slip(induction, tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path))
    assert checks.rotate.feedback(lambda x, start=0: pos.rotate(x, start), induction) == []
    assert said(checks.rotate, rotate_skeleton, induction).startswith("not answered yet")
    for wrong, words in ROTATE_SLIPS:
        assert words in said(checks.rotate, wrong, induction), words
    with pytest.raises(AssertionError, match="wrong way"):
        checks.rotate.grade(ROTATE_SLIPS[1][0], induction)


LEARNER_ROTATE = """
def rotate(x, start=0):
    T, d_k = x.shape[-2], x.shape[-1]
    p = torch.arange(start, start + T, dtype=torch.float32)[:, None]
    w = 10000.0 ** (-torch.arange(0, d_k, 2, dtype=torch.float32) / d_k)
    cos, sin = torch.cos(p * w), torch.sin(p * w)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out
"""


def test_a_right_piece_is_kept_for_the_chapters_ahead(induction, tmp_path, monkeypatch, capsys):
    cell = tmp_path / "cell.py"
    cell.write_text("import torch\n" + LEARNER_ROTATE)
    spec = importlib.util.spec_from_file_location("cell", cell)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    assert checks.rotate(module.rotate, induction)
    assert "kept in" in capsys.readouterr().out and (tmp_path / "my_gpt" / "rotate.py").is_file()


def test_score_terms_add_up_to_the_models_scores(cat, cat_world):
    ids = torch.full((10,), cat_world.tokenizer.ids["cat"])
    terms = pos.score_terms(cat, ids)
    scores = cat(ids, trace=True)["L0.scores"].numpy()
    causal = np.isfinite(scores)
    assert len(terms) == 9 and np.abs(sum(terms.values())[causal] - scores[causal]).max() < 1e-5
    cross = [("word", "position"), ("position", "word")]
    groups = {"cross": cross, "rest": [pair for pair in terms if pair not in cross]}
    shares = pos.term_shares(terms, groups)
    assert np.allclose(shares["cross"] + shares["rest"], 1)
    assert (shares["cross"] > 0.7).all()   # the chapter's reading: the word x position terms carry most of it
    assert np.allclose(pos.spread_without(terms, []), [pos.diagonal_spread(s) for s in scores], atol=1e-5)
    assert pos.off_offset(np.add.outer(np.arange(4.0), -np.arange(4.0))).max() == 0   # a function of t - s
    # a row shift (a function of t alone) vanishes from the shift-free scores; a function of t - s stays one
    assert np.abs(pos.shift_free(np.add.outer(np.arange(4.0) ** 2, np.zeros(4)))).max() == 0
    assert pos.off_offset(pos.shift_free(np.add.outer(np.arange(4.0), -np.arange(4.0)))).max() == 0
    free = pos.term_shares(terms, groups, shift_free_scores=True)
    assert np.allclose(free["cross"] + free["rest"], 1)
    # the chapter's reading: head 0's query position x key word term is mostly a row shift
    sides = {"q word": [("word", "position")], "q position": [("position", "word")],
             "rest": groups["rest"]}
    assert pos.term_shares(terms, sides)["q position"][0] > 0.7 > pos.term_shares(terms, sides, True)["q position"][0] + 0.5
    assert pos.spread_without(terms, [], shift_free_scores=True)[0] < 0.6 * pos.spread_without(terms, [])[0]
    held = pos.score_terms(cat, ids, hold_sigma=True)
    assert np.abs(pos.spread_without(held, []) - pos.spread_without(terms, [])).max() < 0.5
    with pytest.raises(CourseInputError, match="square"):
        pos.shift_free(np.zeros((3, 4)))
    with pytest.raises(CourseInputError, match="nine"):
        pos.term_shares(terms, {"cross": groups["cross"]})
    with pytest.raises(CourseInputError, match="square"):
        pos.off_offset(np.zeros((3, 4)))
    with pytest.raises(CourseInputError, match="pairs"):
        pos.spread_without(terms, [("word", "nothing")])
    rotary = Transformer(Config(vocab_size=20, d_model=8, n_heads=2, n_layers=1, d_ff=0, positions="rotary"))
    with pytest.raises(CourseInputError, match="added positions"):
        pos.score_terms(rotary, torch.zeros(3, dtype=torch.long))


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


# ------------------------------------------------------------------- issue 31: every argument checked first

@pytest.mark.parametrize("call, words", [
    (lambda: pos.sinusoidal_positions(10**6, 10**4), "n x d should be at most"),
    (lambda: pos.rope_scores(np.ones(4), np.ones(4), 10**6), "n should be at most 14,188"),
    (lambda: pos.rope_scores(np.ones(3), np.ones(3), 4), "even width"),
    (lambda: pos.permutation_matrix(np.arange(10**6)), "n should be at most 14,188"),
    (lambda: pos.permutation_matrix([0.0, 1.0]), "rearrangement of 0..1"),
    (lambda: pos.permutation_matrix("01"), "rearrangement"),
    (lambda: pos.offset_rotation(1, 4, 0), "base should be > 1"),   # (round 25: a base below 1 refused)
    (lambda: pos.offset_rotation(1, 4, float("inf")), "base should be a finite number"),
    (lambda: pos.offset_rotation("1", 4), "k should be a number"),
    (lambda: pos.offset_rotation(1, 10**6), "d should be at most 14,188"),
    (lambda: pos.random_attention(4, "0"), "seed"),
    (lambda: pos.random_attention(10**5, 0, 10), "should need at most 1.5 GiB"),
    (lambda: pos.attention_stack(np.ones((2, 2)), [], causal="False"), "causal is a switch"),
    (lambda: pos.order_demo(["a", "b"], ["b", "a"], positions="True"), "positions is a switch"),
    (lambda: pos.order_demo(["a", 1], ["a", 1]), "first should be a list of words"),
    (lambda: pos.scramble(["<BOS>", "a", "b"], 1, keep_last="no"), "keep_last is a switch"),
    (lambda: pos.scramble(["<BOS>", "a", "b"], -1), "seed"),
    (lambda: pos.position_task(10**9), "should need at most 1.5 GiB"),
    (lambda: pos.position_probe(0, steps=10**9), "steps should be at most 10,000"),
    (lambda: pos.position_probe(0, causal="False"), "causal is a switch"),
    (lambda: pos.position_probe(0, n=10**7), "should need at most 1.5 GiB"),
    (lambda: pos.rotate(torch.zeros(1, 1, 2, 4), start=10**12), "start should be at most 1,000,000"),
])
def test_issue_31_refusals(call, words):
    with pytest.raises(CourseInputError, match=words) as error:
        call()
    assert "\n" not in str(error.value) and " but " in str(error.value)


def test_issue_31_shifted_logits_refuses_a_far_shift_before_any_pass():
    from helpers import weights
    cat = weights.load_cat()
    ids = torch.zeros(1, 4, dtype=torch.long)
    with pytest.raises(CourseInputError, match="shift should be at most 1,000,000"):
        pos.shifted_logits(cat, ids, 10**12)
    with pytest.raises(CourseInputError, match="Transformer"):
        pos.shifted_logits(None, ids, 0)
    assert pos.shifted_logits(cat, ids, 1000).shape == (1, 4, cat.cfg.vocab_size)


@pytest.mark.parametrize("check, answer, args", [
    ("offset_rotation", np.eye(6), dict(k="2", d=6)),
    ("offset_rotation", np.eye(6), dict(k=2, d=5)),
    ("offset_rotation", np.eye(6), dict(k=10**9, d=6)),
    ("offset_rotation", np.eye(6), dict(k=2, d=None)),
    ("unscrambled", np.zeros((3, 2)), dict(Y=np.ones((3, 2)), perm=[0, 0, 1])),
    ("unscrambled", np.zeros((3, 2)), dict(Y=[[1, 2], [3]], perm=[2, 0, 1])),
    ("sinusoidal_positions", lambda n, d: None, dict(cat="cat")),
    ("rotate", lambda x, start=0: x, dict(induction=None)),
])
def test_issue_31_checks_refuse_their_own_bad_arguments(check, answer, args):
    said = getattr(checks, check).feedback(answer, **args)
    assert len(said) == 1 and said[0].startswith("the check cannot use what the check cell gives it"), said


def test_next_token_view_and_model_order_demo_refuse_a_bad_world_or_model(cat, cat_world):
    for bad in (None, "cat", cat_world.tokenizer):
        with pytest.raises(CourseInputError, match="expected a helpers.worlds.World"):
            pos.next_token_view(cat, bad, "<BOS> the cat sat")
        with pytest.raises(CourseInputError, match="expected a helpers.worlds.World"):
            pos.model_order_demo(cat, bad, ["the", "cat"], ["cat", "the"])
    with pytest.raises(CourseInputError, match="expected a helpers.model.Transformer"):
        pos.next_token_view(None, cat_world, "<BOS> the cat sat")
    with pytest.raises(CourseInputError, match="should start with <BOS>"):
        pos.next_token_view(cat, cat_world, ["the", "cat"])


def test_score_terms_refuses_a_batch_of_ids_with_one_sentence(cat):
    with pytest.raises(CourseInputError, match=r"ids should be one sequence \(T,\)"):
        pos.score_terms(cat, torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(CourseInputError, match="integer"):
        pos.score_terms(cat, [0.5, 1.0])


def test_shifted_loss_refuses_targets_that_do_not_fit_the_inputs_before_any_pass(cat, refused):
    """Red team round 4: targets of another length stopped inside cross_entropy."""
    inputs = torch.arange(4)[None]
    refused(lambda: pos.shifted_loss(cat, inputs, torch.arange(3)[None], 0), "same (B, T) shape", "(1, 3)")
    refused(lambda: pos.shifted_loss(cat, inputs, torch.full((1, 4), 0.5), 0), "targets", "token ids")
    refused(lambda: pos.shifted_loss(cat, inputs, torch.full((1, 4), 20), 0), "token ids 0..19")
    refused(lambda: pos.shifted_loss("cat", inputs, inputs, 0), "Transformer")
    assert pos.shifted_loss(cat, inputs, torch.tensor([[1, 2, -100, 3]]), 2) > 0


def test_rotate_takes_real_floating_point_input_only_and_checks_its_memory_first(refused):
    """Red team round 6: whole numbers came back truncated, True/False all True, complex numbers were
    turned; a (1, 1, 6e7, 2) view of one number took 1.8 GB and 11 s before anything was said."""
    for dtype in (torch.long, torch.bool):
        refused(lambda: pos.rotate(torch.ones(1, 1, 3, 2, dtype=dtype)), "x should hold real floating-point",
                str(dtype))
    refused(lambda: pos.rotate(torch.ones(1, 1, 3, 2, dtype=torch.complex64)), "real numbers", "complex")
    refused(lambda: pos.rotate(torch.zeros(1, 1, 3, 2, device="meta")), "meta device")
    refused(lambda: pos.rotate(torch.zeros(1).expand(1, 1, 6 * 10**7, 2)), "at most 1.5 GiB", "about 1.8 GiB")


def test_nan_is_refused_not_passed_on_as_a_result(refused):
    """Red team round 6: diagonal_spread gave 0.0 and rope_scores a table of NaN."""
    refused(lambda: pos.diagonal_spread([[np.nan, 1], [1, 2]]), "S should hold finite numbers (or -inf)", "NaN")
    refused(lambda: pos.diagonal_spread([[np.inf, 1], [1, 2]]), "S should hold finite numbers", "+inf")
    assert pos.diagonal_spread([[0, -np.inf], [1, 3]]) == 3.0    # -inf (a masked score) is skipped
    refused(lambda: pos.rope_scores([np.nan, 1.0], [1.0, 1.0], 3), "q should hold finite numbers")


# ------------------------------------------------------------------ red team round 8

def test_round_8_permutation_matrix_refuses_a_tensor_or_array_that_is_not_one_list(refused):
    for bad in (torch.tensor(1.0), np.int64(3), np.zeros((2, 2), dtype=int), torch.zeros(2, 2, dtype=torch.long)):
        refused(lambda: pos.permutation_matrix(bad), "perm should be a rearrangement")
    assert (pos.permutation_matrix(torch.tensor([1, 0])) == [[0, 1], [1, 0]]).all()


# ------------------------------------------------------------------ red team round 9

def test_round_9_shift_free_and_off_offset_check_their_scores(refused):
    for call in (pos.shift_free, pos.off_offset):
        refused(lambda: call(np.ones((3, 3)) * (1 + 1j)), "complex")
        refused(lambda: call(np.full((3, 3), np.nan)), "finite numbers on and below the diagonal")
        refused(lambda: call([["a", "b"], ["c", "d"]]), "text")
        refused(lambda: call(np.ones((3, 3), bool)), "True/False")
        refused(lambda: call(np.ones((3, 4))), "S should be square scores")
        refused(lambda: call(np.broadcast_to(0.0, (50000, 50000))), "1.5 GiB")
        refused(lambda: call(torch.zeros(1, 1).expand(40000, 40000)), "1.5 GiB")
        masked = np.triu(np.full((3, 3), -np.inf), 1) + np.tril(np.ones((3, 3)))
        assert np.isfinite(call(masked)).all()
        assert call(torch.ones(3, 3, requires_grad=True)).shape == (3, 3)


def test_round_9_position_probe_trains_inside_no_grad():
    with torch.no_grad():
        assert 0 <= pos.position_probe(0, steps=2) <= 1


def test_round_9_shifted_loss_refuses_targets_with_nothing_to_predict(cat, cat_world, refused):
    inputs, targets = cat_world.batch(cat_world.train)
    refused(lambda: pos.shifted_loss(cat, inputs, torch.full_like(targets, -100), 0), "to predict", "-100")


def test_round_9_positions_helpers_refuse_what_is_no_model_terms_words_or_size(cat, refused):
    refused(lambda: pos.row_moves(None, 0), "helpers.model.Transformer")
    refused(lambda: pos.spread_without({}, []), "terms should be the dict score_terms returns")
    terms = pos.score_terms(cat, torch.full((5,), 5))
    refused(lambda: pos.spread_without(terms, None), "pairs should be a list of some of the nine")
    refused(lambda: pos.spread_without(terms, list(terms)), "leave at least one of the 9 terms in")
    refused(lambda: pos.term_shares(terms, None), "groups should be a dict")
    assert pos.spread_without(terms, []).shape == (cat.cfg.n_heads,)
    refused(lambda: pos.scramble([[1, 2], [3]], 0), "words should be a list of words (strings), at least one")
    refused(lambda: pos.match_permutation([], []), "first should be a list of words (strings), at least one")
    refused(lambda: pos.order_blind_ceiling(10**400), "T should be at most 1,024")
    refused(lambda: pos.position_task(n=2, T=2, V=2**70), "V should be at most 2**63")
    assert pos.order_blind_ceiling(6) == pytest.approx(1 / 3)
