"""Round 18 (issue 31) on chapters 00 and 05: the sizes a check cell gives are bounded (T = 2**53 + 1 was
misjudged through float64, d_model = 10**200 gave a misleading hint); logits that overflow a softmax are refused
and no check prints a RuntimeWarning; repeat_score refuses ids in which no token repeats (it returned NaN) and
ids outside the vocabulary; the heads explorer's view check is named for its view; half precision is widened
by one rule."""
import warnings

import numpy as np
import pytest
import torch

from helpers.heads import checks as heads_checks
from helpers.heads import compute as heads_compute
from helpers.heads import explorer as heads_explorer
from helpers.tour import checks as tour_checks


def quiet_feedback(check, *args, **kwargs):
    """check.feedback(*args, **kwargs), asserting that it printed no warning; its sentences."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = check.feedback(*args, **kwargs)
    assert not caught, [str(w.message) for w in caught]
    assert not any("check itself failed" in sentence for sentence in found), found
    return found


# ---- 1. chapter 00's sizes are bounded, read as ints

@pytest.mark.parametrize("T", [2**53 + 1, 2**20 + 1, 10**400])
def test_scores_shape_refuses_a_T_past_the_limit(T):
    found = quiet_feedback(tour_checks.scores_shape, (2, T, T), n_heads=2, T=T)
    assert len(found) == 1 and "T should be at most 1,048,576" in found[0], found


def test_scores_shape_refuses_too_many_heads():
    found = quiet_feedback(tour_checks.scores_shape, (10**6, 5, 5), n_heads=10**6, T=5)
    assert "n_heads should be at most 1,024" in found[0], found


def test_scores_shape_judges_exactly_at_the_limit():
    T = tour_checks.MAX_TOKENS
    assert quiet_feedback(tour_checks.scores_shape, (2, T, T), n_heads=2, T=T) == []
    assert quiet_feedback(tour_checks.scores_shape, (2, T + 1, T + 1), n_heads=2, T=T) != []


# ---- 2. logits that overflow a softmax: refused, and never a RuntimeWarning

def overflowing():
    return np.array([[1e308, -1e308, 0.0], [0.0, 1e308, -1e308], [1.0, 2.0, 3.0]])


def test_sentence_loss_refuses_overflowing_logits():
    found = quiet_feedback(tour_checks.sentence_loss, 1.0, overflowing(), [0, 1, 2])
    assert "should hold numbers of size at most 10,000" in found[0] and "1e+308" in found[0], found


def test_next_prob_refuses_overflowing_logits():
    found = quiet_feedback(tour_checks.next_prob, 0.5, overflowing()[0], 1)
    assert "last_logits should hold numbers of size at most 10,000" in found[0], found


def loss_of(logits, ids):
    """The sentence loss, computed here with the log-sum-exp of each row."""
    top = logits.max(axis=1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(ids) - 1), ids[1:]].mean()


def test_sentence_loss_with_large_logits_judges_without_warnings():
    logits, ids = np.array([[800.0, -800.0, 0.0], [0.0, 800.0, -800.0], [1.0, 2.0, 3.0]]), np.array([0, 1, 2])
    right = loss_of(logits, ids)
    assert quiet_feedback(tour_checks.sentence_loss, right, logits, ids) == []
    wrong = quiet_feedback(tour_checks.sentence_loss, 1.0, logits, ids)
    assert wrong and "the loss = 1 is too small" in wrong[0], wrong
    summed = quiet_feedback(tour_checks.sentence_loss, 2 * right, logits, ids)
    assert "sum over the predicted positions" in summed[0], summed


def test_next_prob_with_large_or_zero_logits_judges_without_warnings():
    assert quiet_feedback(tour_checks.next_prob, 0.0, np.array([800.0, -800.0, 0.0]), 1) == []
    assert quiet_feedback(tour_checks.next_prob, 0.5, np.array([800.0, -800.0, 0.0]), 1)
    assert quiet_feedback(tour_checks.next_prob, 0.9, np.zeros(4), 1)   # the logits sum to 0: no 0/0 warning


# ---- 3. the parameter counts' widths are bounded

def test_per_layer_refuses_an_unbounded_width():
    d = 10**200
    found = quiet_feedback(tour_checks.per_layer, 12 * d * d + 13 * d, d_model=d, d_ff=4 * d)
    assert "d_model should be at most 1,048,576" in found[0], found
    found = quiet_feedback(tour_checks.per_layer, 1, d_model=768, d_ff=10**9)
    assert "d_ff should be at most 1,048,576" in found[0], found


def test_per_layer_is_exact_at_the_limit():
    d = tour_checks.MAX_WIDTH
    expected = 4 * d * d + 4 * d + 2 * d * d + d + d + 4 * d
    assert quiet_feedback(tour_checks.per_layer, expected, d_model=d, d_ff=d) == []
    assert quiet_feedback(tour_checks.per_layer, expected + 1, d_model=d, d_ff=d) != []


def test_parameters_refuses_an_unbounded_width(refused):
    found = quiet_feedback(heads_checks.parameters, 4 * 10**400, d_model=10**200)
    assert "d_model should be at most 1,048,576" in found[0], found
    refused(lambda: heads_compute.attention_parameters(2**20 + 1), "d_model should be at most 1,048,576", "1,048,577")


def test_split_refuses_heads_of_no_column():
    found = quiet_feedback(heads_checks.split, np.zeros((1, 2, 0)), np.zeros((1, 2, 0)), 10**200)
    assert "n_heads should divide q's width 0 into equal heads of at least one column" in found[0], found


# ---- 4. repeat_score: no repeat and ids outside the vocabulary are refused

def test_repeat_score_refuses_ids_in_which_no_token_repeats(refused):
    refused(lambda: heads_compute.repeat_score(torch.eye(3), [0, 1, 2]), "ids should hold a token that repeats",
            "no token of these 3 repeats")


def test_repeat_score_refuses_negative_ids(refused):
    w = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.1, 0.7]])
    refused(lambda: heads_compute.repeat_score(w, [-1, -2, -1]), "ids should be token ids from 0", "from -2 to -1")


def test_repeat_score_refuses_ids_past_the_vocabulary(refused):
    w = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.1, 0.7]])
    refused(lambda: heads_compute.repeat_score(w, [5, 6, 5], vocab_size=6), "ids should be token ids from 0 to 5",
            "the model's vocabulary", "from 5 to 6")
    assert heads_compute.repeat_score(w, [5, 4, 5], vocab_size=6) == pytest.approx(0.1)
    refused(lambda: heads_compute.repeat_score(w, [5, 4, 5], vocab_size=0), "vocab_size should be at least 1")


def test_head_view_says_none_for_what_one_token_cannot_score():
    view = heads_compute.head_view("cat", 0, 0, "<BOS>")
    assert np.isnan(view["previous"]) and np.isnan(view["repeat"])
    assert "nan" not in view["title"] and "previous-token score none (one token)" in view["title"], view["title"]


# ---- 5. names and one rule

def test_the_heads_view_check_is_named_for_its_view(refused):
    assert not hasattr(heads_explorer, "check_view")
    refused(lambda: heads_explorer.check_heads_view({"weights": 1}), "view should be the dict head_view gives")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_as_numpy_widens_half_precision_as_widened_does(dtype):
    t = torch.tensor([0.1, 2.0, -3.5]).to(dtype)
    assert heads_compute.as_numpy(t).dtype == heads_compute.widened(t).numpy().dtype
    assert heads_compute.as_numpy(t).dtype == (np.float32 if dtype in heads_compute.HALF else t.numpy().dtype)


# ---- the same classes elsewhere in chapter 05: the card's figures divided by zero or read NaN as a number

@pytest.fixture(scope="module")
def card_and_figures():
    from helpers import weights
    card = weights.card(weights.data_dir() / "induction" / "model")
    figures = {name: value for name, value in card["figures"].items() if name != "test"}
    return card, figures


@pytest.mark.parametrize("name, value, words", [
    ("chance", 0.0, ["figures['chance'] should be > 0", "got 0"]),
    ("loss_first_copy", 0.0, ["figures['loss_first_copy'] should be > 0"]),
    ("loss_first_copy", float("nan"), ["figures['loss_first_copy'] should be a finite number"]),
    ("previous_token_score", [[float("nan"), 0.1], [0.2, 0.3]], ["should be scores from 0 to 1", "1 entries"]),
    ("induction_score", [[], []], ["should be scores from 0 to 1", "shape (2, 0)"]),
    ("induction_score", [[0.1], [0.2]], ["should have the shape of the card's figure, (2, 2)"]),
])
def test_card_problems_refuses_figures_it_cannot_divide_or_compare(refused, card_and_figures, name, value, words):
    card, figures = card_and_figures
    assert heads_compute.card_problems(figures, card) == []
    refused(lambda: heads_compute.card_problems({**figures, name: value}, card), *words)


def test_card_problems_refuses_a_card_it_cannot_read(refused, card_and_figures):
    card, figures = card_and_figures
    refused(lambda: heads_compute.card_problems(figures, dict(card, targets=dict(at_least={"nope": 1}, at_most={}))),
            "the card's targets should bound some of", "'nope'")
    refused(lambda: heads_compute.card_problems(figures, dict(card, tolerances={"chance": float("nan")})),
            "the card's tolerance for 'chance' should be a finite number")
