"""helpers.reference, the NumPy by-hand functions: against torch, against the source texts' printed
numbers, and refusing bad input in one sentence."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers import reference as ref


def test_softmax_rows_sum_to_one_and_minus_inf_gets_zero():
    w = ref.softmax(np.array([[1.0, 2.0, -np.inf], [0.0, 0.0, 0.0]]))
    assert np.allclose(w.sum(-1), 1) and w[0, 2] == 0 and np.allclose(w[1], 1 / 3)


def test_causal_mask_is_true_strictly_above_the_diagonal():
    assert (ref.causal_mask(3) == np.array([[0, 1, 1], [0, 0, 1], [0, 0, 0]], bool)).all()


def test_attention_equals_torch_sdpa_with_and_without_mask():
    rng = np.random.default_rng(0)
    Q, K, V = rng.normal(size=(3, 2, 5, 4))
    for causal in (False, True):
        out, w = ref.attention(Q, K, V, causal=causal)
        expected = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (Q, K, V)), is_causal=causal)
        assert np.allclose(out, expected.numpy(), atol=1e-12)
        assert np.allclose(w.sum(-1), 1)


def test_split_and_merge_heads_round_trip_and_match_view_transpose():
    X = np.arange(24.0).reshape(4, 6)
    heads = ref.split_heads(X, 2)
    assert heads.shape == (2, 4, 3) and (heads[1, 0] == [3, 4, 5]).all()
    assert (ref.merge_heads(heads) == X).all()
    assert (heads == torch.tensor(X).view(4, 2, 3).transpose(0, 1).numpy()).all()


def test_layer_norm_and_gelu_equal_torch():
    rng = np.random.default_rng(1)
    x, g, b = rng.normal(size=(3, 6)), rng.normal(size=6), rng.normal(size=6)
    expected = F.layer_norm(torch.tensor(x), (6,), torch.tensor(g), torch.tensor(b)).numpy()
    assert np.allclose(ref.layer_norm(x, g, b), expected, atol=1e-12)
    assert np.allclose(ref.gelu(x), F.gelu(torch.tensor(x)).numpy(), atol=1e-12)


def test_sinusoidal_rows_match_the_seed_table_and_the_model():
    from helpers.model import sinusoidal_table
    pe = ref.sinusoidal_positions(4, 6)
    seed_rows = [[0.000, 1.000, 0.000, 1.000, 0.000, 1.000], [0.841, 0.540, 0.046, 0.999, 0.002, 1.000],
                 [0.909, -0.416, 0.093, 0.996, 0.004, 1.000], [0.141, -0.990, 0.139, 0.990, 0.006, 1.000]]
    assert np.allclose(pe, seed_rows, atol=5e-4)
    assert np.allclose(pe, sinusoidal_table(4, 6).numpy(), atol=1e-6)


def test_rotary_scores_depend_only_on_the_offset():
    rng = np.random.default_rng(2)
    q, k = rng.normal(size=(1, 8)), rng.normal(size=(1, 8))
    score = lambda p, r: (ref.rotate_pairs(q, [p]) @ ref.rotate_pairs(k, [r]).T).item()
    assert np.isclose(score(3, 1), score(10, 8)) and np.isclose(score(5, 5), (q @ k.T).item())


def test_rotary_in_numpy_equals_the_model():
    from helpers.model import rotate_pairs
    x = np.random.default_rng(3).normal(size=(5, 4))
    expected = rotate_pairs(torch.tensor(x, dtype=torch.float32)[None, None], 0)[0, 0].numpy()
    assert np.allclose(ref.rotate_pairs(x, np.arange(5)), expected, atol=1e-6)


# ---- bad input: one sentence naming what was expected and what arrived --------------------------

@pytest.mark.parametrize("call, words", [
    (lambda: ref.attention(np.ones((3, 5)), np.ones((3, 4)), np.ones((3, 4))), ["K has d_k=4", "Q has d_k=5"]),
    (lambda: ref.attention(np.ones((3, 4)), np.ones((3, 4)), np.ones((3, 4)), mask=ref.causal_mask(4)),
     ["(4, 4)", "(3, 3)"]),
    (lambda: ref.softmax([]), ["at least one score", "(0,)"]),
    (lambda: ref.softmax(np.ones((2, 3)), axis=5), ["axis=5", "2"]),
    (lambda: ref.softmax([1.0, float("nan")]), ["NaN"]),
    (lambda: ref.softmax(np.array([1 + 2j, 3])), ["real numbers", "complex"]),
    (lambda: ref.softmax("banana"), ["array of numbers", "text"]),
    (lambda: ref.causal_mask(2.5), ["T", "whole number", "2.5"]),
])
def test_bad_input_is_refused_in_one_sentence(refused, call, words):
    refused(call, *words)


def test_a_tensor_that_requires_grad_is_accepted():
    import torch
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    assert np.allclose(ref.softmax(x).sum(), 1)


def test_layer_norm_refuses_a_number_and_a_negative_eps():
    """Red team round 3: a 0-d x was an IndexError and eps=-1 was taken (a variance of 0 then gives NaN)."""
    from helpers.errors import CourseInputError
    with pytest.raises(CourseInputError, match="at least one axis"):
        ref.layer_norm(3.0)
    with pytest.raises(CourseInputError, match="eps should be > 0"):
        ref.layer_norm([1.0, 2.0], eps=-1)


def test_attention_refuses_tables_too_large_for_memory_before_making_them():
    """Red team round 4: 10**5 rows asked NumPy for 80 GB of scores."""
    from helpers.errors import CourseInputError

    rows = np.ones((10**5, 2))
    with pytest.raises(CourseInputError, match="at most 1.5 GiB") as caught:
        ref.attention(rows, rows, rows)
    assert "100,000 queries" in str(caught.value)
    with pytest.raises(CourseInputError, match="broadcast"):
        ref.attention(np.ones((2, 3, 4)), np.ones((3, 3, 4)), np.ones((3, 4)))


def test_a_query_with_every_key_hidden_and_positions_that_are_not_numbers_are_refused(refused):
    """Red team round 4: a mask hiding every key of a query gave NaN weights; NaN positions a NaN rotation."""
    Q = np.ones((3, 2))
    mask = np.zeros((3, 3), dtype=bool)
    mask[1] = True
    refused(lambda: ref.attention(Q, Q, Q, mask=mask), "every key is hidden from query 1", "undefined")
    out, weights = ref.attention(Q, Q, Q, causal=True, mask=np.triu(np.ones((3, 3), dtype=bool), 1))
    assert np.isfinite(weights).all()                                # the causal mask leaves each query itself
    refused(lambda: ref.rotate_pairs(np.ones((2, 4)), [0, np.nan]), "finite", "1 of 2")
    refused(lambda: ref.rotate_pairs(np.ones((2, 4)), ["a", "b"]), "positions", "numbers")
    refused(lambda: ref.rotate_pairs(np.ones((2, 4)), [0, 1], base=-1.0), "base", "> 1")   # (round 25: > 1)


def test_round_9_layer_norm_refuses_nan_and_rows_whose_squares_overflow(refused):
    """NaN passed through as numbers, and rows 1e200 apart gave 0 and -0 (their squares overflow)."""
    refused(lambda: ref.layer_norm([[float("nan"), 1.0], [1.0, 2.0]]), "x should hold finite numbers")
    refused(lambda: ref.layer_norm([[1e200, -1e200]]), "squares to fit a float")
    refused(lambda: ref.layer_norm([[1.0, 2.0]], gamma=[1.0, float("inf")]), "gamma should hold finite numbers")
