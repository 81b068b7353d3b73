"""Chapter 02 (QKV by hand): the worked examples against the seeds' digits, the widget's
compute, and every exercise check (right passes, wrong fails with words, None is not answered)."""
import math

import numpy as np
import pytest

from helpers import qkv, reference as ref
from helpers.checks import NOT_ANSWERED, ch02
from helpers.errors import CourseInputError
from helpers.widgets import ch02 as widget


# --- the worked examples reproduce the seeds' digits -------------------------------------------

def test_three_words_parameter_free_matches_seed_003():
    x = qkv.three_words()["x"]
    weights = ref.softmax(x @ x.T)
    assert np.allclose(x @ x.T, [[2, 0, 1], [0, 2, 1], [1, 1, 2]])
    assert np.allclose(weights, [[0.665, 0.090, 0.245], [0.090, 0.665, 0.245], [0.212, 0.212, 0.576]],
                       atol=5e-4)
    assert np.allclose((weights @ x)[2], [0.212, 0.788, 0.212, 0.788], atol=5e-4)


def test_three_words_qkv_scores_are_asymmetric_as_in_seed_003():
    ex = qkv.three_words()
    q, k, v = (ex["x"] @ ex[name] for name in ("W_q", "W_k", "W_v"))
    assert np.array_equal(q, [[1, 0], [0, 1], [0, 1]]) and np.array_equal(k, [[0, 1], [1, 0], [0, 1]])
    assert np.array_equal(v, [[1, 0], [0, 1], [0, 0]])
    scores = q @ k.T
    assert np.array_equal(scores, [[0, 1, 0], [1, 0, 1], [1, 0, 1]])
    assert scores[2, 0] == 1 and scores[0, 2] == 0


def test_seed_toy_steps_agree_with_every_printed_number():
    toy = qkv.seed_toy()
    steps = qkv.attention_steps(toy["X"], toy["W_Q"], toy["W_K"], toy["W_V"], causal=True)
    printed = qkv.SEED_TOY_PRINTED
    for name in ("Q", "K", "V", "scores", "scaled", "weights", "output"):
        assert qkv.printed_difference(steps[name], printed[name]) <= 5e-4 + 1e-12, name
    h_last = (toy["X"] + steps["output"] @ toy["W_O"])[-1]
    assert qkv.printed_difference(h_last, printed["h_last"]) <= 5e-4 + 1e-12
    assert np.isinf(steps["masked"][0, 1]) and steps["masked"][0, 1] < 0


def test_seed_toy_readout_probabilities_and_the_it_row():
    toy = qkv.seed_toy()
    p = ref.softmax(np.array(qkv.SEED_TOY_LOGITS))
    for word, seed_value in qkv.SEED_TOY_PROBS.items():
        assert abs(p[toy["vocab"].index(word)] - seed_value) < 0.005
    assert abs(qkv.softmax_share(qkv.IT_SCORES, 1, d=64) - 0.404) < 5e-4
    assert qkv.softmax_share(qkv.IT_SCORES, 1) > 0.99


def test_attention_steps_equals_reference_attention():
    rng = np.random.default_rng(0)
    X, W_Q, W_K, W_V = rng.normal(size=(4, 6)), rng.normal(size=(6, 3)), rng.normal(size=(6, 3)), rng.normal(size=(6, 2))
    for causal in (False, True):
        steps = qkv.attention_steps(X, W_Q, W_K, W_V, causal=causal)
        out, w = ref.attention(X @ W_Q, X @ W_K, X @ W_V, causal=causal)
        assert np.allclose(steps["output"], out) and np.allclose(steps["weights"], w)
    unscaled = qkv.attention_steps(X, W_Q, W_K, W_V, scale=False)
    assert np.array_equal(unscaled["scaled"], unscaled["scores"])


def test_qkv_helpers_reject_bad_input_in_one_sentence():
    with pytest.raises(CourseInputError, match="W_K has 4 rows but X has d_model=5"):
        qkv.attention_steps(np.ones((3, 5)), np.ones((5, 2)), np.ones((4, 2)), np.ones((5, 2)))
    with pytest.raises(CourseInputError, match="d_k=3 but W_Q makes queries of d_k=2"):
        qkv.attention_steps(np.ones((3, 5)), np.ones((5, 2)), np.ones((5, 3)), np.ones((5, 2)))
    with pytest.raises(CourseInputError, match="index 7 is outside"):
        qkv.softmax_share([1, 2], 7)
    with pytest.raises(CourseInputError, match="cannot compare shape"):
        qkv.printed_difference(np.ones(3), np.ones(4))


# --- the widget's compute ------------------------------------------------------------------------

def test_query_step_matches_reference_attention_row_by_row():
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 2))
    out, w = ref.attention(Q, K, V, causal=True)
    for i in range(4):
        step = widget.query_step(Q[i], K, V, visible=i + 1)
        assert np.allclose(step["weights"], w[i]) and np.allclose(step["output"], out[i])
        assert np.allclose(step["scaled"], K @ Q[i] / math.sqrt(3))


def test_three_words_query_defaults_and_overrides():
    sat = widget.three_words_query("sat")
    assert np.allclose(sat["weights"], [0.401, 0.198, 0.401], atol=5e-4)
    first = widget.three_words_query("the", causal=True)
    assert np.array_equal(first["weights"], [1, 0, 0]) and np.array_equal(first["output"], [1, 0])
    moved = widget.three_words_query("cat", query=[3.0, 0.0], scale=False)
    assert moved["weights"].argmax() == 1 and np.isclose(moved["weights"].sum(), 1)


def test_widget_compute_rejects_bad_input():
    with pytest.raises(CourseInputError, match="token should be one of"):
        widget.three_words_query("dog")
    with pytest.raises(CourseInputError, match="the query has d_k=3 but the keys have d_k=2"):
        widget.query_step(np.ones(3), np.ones((3, 2)), np.ones((3, 2)))
    with pytest.raises(CourseInputError, match="visible should be"):
        widget.query_step(np.ones(2), np.ones((3, 2)), np.ones((3, 2)), visible=0)


def test_widget_figure_renders_to_png():
    _, show = widget.query_view()
    image = show(widget.three_words_query("cat", causal=True))
    assert image[:8] == b"\x89PNG\r\n\x1a\n"


# --- the exercise checks -------------------------------------------------------------------------

def right_attention(Q, K, V, causal=False):
    return ref.attention(Q, K, V, causal=causal)


def unscaled_attention(Q, K, V, causal=False):
    return ref.attention(Q, K, V, causal=causal, scale=False)


def masked_after_softmax(Q, K, V, causal=False):
    w = ref.softmax(Q @ K.T / math.sqrt(Q.shape[-1]))
    if causal:
        w = np.where(ref.causal_mask(len(Q)), 0.0, w)
    return w @ V, w


RIGHT_AND_WRONG = [
    (ch02.weight_cat_on_the, 0.090, 1 / 3, "not 1/3"),
    (ch02.weight_cat_on_the, 0.090, 0.5, "too large"),
    (ch02.output_of_cat, [0.401, 0.198], [0.422, 0.155], "√d_k = √2"),
    (ch02.output_of_cat, [0.401, 0.198], [0.0, 1.0, 1.0, 0.0], "average the values v"),
    (ch02.toy_weight, 0.463, 0.418, "√d_k = √5"),
    (ch02.toy_weight, 0.463, 0.330, "causal mask"),
    (ch02.attention_function, right_attention, unscaled_attention, "divide the scores by √d_k"),
    (ch02.attention_function, right_attention, masked_after_softmax, "masked after the softmax"),
    (ch02.attention_function, right_attention, lambda Q, K, V, causal=False: ref.attention(Q, K, V),
     "must not see later keys"),
    (ch02.attention_function, right_attention, lambda Q, K, V, causal=False: Q, "two things"),
]


@pytest.mark.parametrize("check, right, wrong, words", RIGHT_AND_WRONG,
                         ids=[f"{c.problems.__name__}-{w}" for c, _, _, w in RIGHT_AND_WRONG])
def test_checks_pass_right_and_explain_wrong(check, right, wrong, words, capsys):
    assert check(right)
    assert "✓" in capsys.readouterr().out
    check.grade(right)
    assert not check(wrong)
    assert words in capsys.readouterr().out
    with pytest.raises(AssertionError, match=words):
        check.grade(wrong)


@pytest.mark.parametrize("check", [ch02.weight_cat_on_the, ch02.output_of_cat, ch02.toy_weight,
                                   ch02.attention_function])
def test_checks_say_not_answered_for_none(check, capsys):
    assert not check(None)
    assert NOT_ANSWERED in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not answered"):
        check.grade(None)


def test_attention_check_survives_a_crashing_function(capsys):
    def crashes(Q, K, V, causal=False):
        raise RuntimeError("oops")
    assert not ch02.attention_function(crashes)
    assert "stopped with RuntimeError: oops" in capsys.readouterr().out


def test_attention_check_accepts_torch_tensors():
    import torch

    def in_torch(Q, K, V, causal=False):
        out, w = ref.attention(Q, K, V, causal=causal)
        return torch.tensor(out), torch.tensor(w)
    ch02.attention_function.grade(in_torch)
