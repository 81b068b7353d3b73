"""Red team round 17, chapters 02 (QKV by hand) and 03 (scaling): a division or product that would overflow
is refused in the learner's own terms (never softmax's "x", never a RuntimeWarning, never inf as an answer);
what a figure draws is finite; the tables a call makes are counted before it makes them."""
import warnings

import matplotlib
import numpy as np
import pytest
import torch

from helpers.qkv import compute as qkv
from helpers.scaling import compute as scaling
from helpers.scaling import explorer as scaling_explorer

matplotlib.use("Agg")


@pytest.fixture
def no_warnings():
    """Every warning raised as an error: a refusal must come without a RuntimeWarning printed first."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def test_weight_gradient_refuses_a_divide_by_whose_quotient_overflows(refused, no_warnings):
    refused(lambda: scaling.weight_gradient([0.0, 0.0], 1, divide_by=1e-310), "divide_by", "1 / divide_by")
    refused(lambda: scaling.weight_gradient([1.0, 2.0, 3.0], 1, divide_by=1e-320), "divide_by", "1e-320")
    refused(lambda: scaling.weight_gradient([1e300, 2.0], 1, divide_by=1e-10), "scores / divide_by", "overflow",
            "larger divide_by")
    refused(lambda: scaling.weight_gradient([], 0), "at least one score")
    sizes = scaling.weight_gradient([0.0, 0.0], 1, divide_by=1e-300)   # the smallest quotients still answer
    assert all(np.isfinite(v) for v in sizes.values()) and sizes["wrt_scores"] == pytest.approx(0.25 * 2**0.5 / 1e-300)


def test_no_softmax_x_leaks_from_query_step_or_attention_steps(refused, no_warnings):
    refused(lambda: qkv.query_step([1e200, 1e200], [[1e200, 1e200], [1, 1]], [[1, 1], [1, 1]]),
            "query and the keys", "finite scores")
    refused(lambda: qkv.query_step([], [[]], [[1.0]]), "d_k = 0", "query and the keys")
    refused(lambda: qkv.query_step([1.0, 2.0], np.zeros((0, 2)), np.zeros((0, 3))), "keys", "at least one row")
    refused(lambda: qkv.attention_steps(np.ones((2, 3)), np.ones((3, 0)), np.ones((3, 0)), np.ones((3, 2))),
            "W_Q and W_K", "d_k = 0")
    refused(lambda: qkv.attention_steps(np.ones((0, 3)), np.ones((3, 2)), np.ones((3, 2)), np.ones((3, 2))),
            "X", "at least one row")
    refused(lambda: qkv.attention_head(torch.ones(2, 3), torch.ones(3, 0), torch.ones(3, 0), torch.ones(3, 0),
                                       torch.ones(0), torch.ones(0), torch.ones(0)), "d_k = 0")
    refused(lambda: scaling.scaled_scores(torch.ones(2, 0), torch.ones(0, 0), torch.ones(0, 0), torch.ones(0),
                                          torch.ones(0), 1), "d_k = 0", "n_heads")


def test_attention_steps_and_attention_head_count_their_query_key_value_tables(refused):
    # 2,000 tokens (T x T tables of 0.2 GiB) but queries 100,000 wide: Q, K, V alone would need 4.5 GiB
    X, wide = np.broadcast_to(0.0, (2_000, 1)), np.broadcast_to(0.0, (1, 100_000))
    refused(lambda: qkv.attention_steps(X, wide, wide, wide), "1.5 GiB", "narrower")
    x, W = torch.zeros(1).expand(2_000, 1), torch.zeros(1).expand(1, 100_000)
    b = torch.zeros(1).expand(100_000)
    refused(lambda: qkv.attention_head(x, W, W, W, b, b, b), "1.5 GiB")


def test_spread_figure_refuses_scores_it_cannot_draw(refused):
    refused(lambda: scaling.spread_figure([{"d": 4, "scores": [np.nan, 1.0, np.inf]}], dims=(4,)), "d = 4", "nan")
    refused(lambda: scaling.spread_figure([{"d": 4, "scores": []}], dims=(4,)), "empty")
    refused(lambda: scaling.spread_figure([{"d": [4], "scores": [1.0]}], dims=(4,)), "each row's d")
    refused(lambda: scaling.spread_figure([{"d": 4, "scores": np.broadcast_to(0.0, 10**8)}], dims=(4,)), "1.5 GiB")
    fig = scaling.spread_figure([{"d": 4, "scores": [1.0, -2.0]}, {"d": 9, "scores": [0.5, 1.0, 3.0]}], dims=(4, 9))
    assert [ax.get_title() for ax in fig.axes] == ["d = 4 (2 pairs)", "d = 9 (3 pairs)"]   # each panel its own n


def test_training_figure_and_same_start_check_each_run_before_reading_it(refused):
    run = dict(seed=0, scaled=True, losses=[2.0, 1.0], d_k=4, saturated_at_start=0.5, grad_W_Q_at_start=1.0)
    refused(lambda: scaling.training_figure([{**run, "losses": np.broadcast_to(1.0, 10**8)}]), "losses", "10,000")
    refused(lambda: scaling.training_figure([{**run, "scaled": "no"}]), "scaled", "True or False")
    refused(lambda: scaling.training_figure([{**run, "d_k": float("nan")}]), "d_k")
    refused(lambda: scaling.training_figure([{**run, "losses": [1.0, np.nan]}]), "finite", "nan")
    refused(lambda: scaling.same_start([run], [{**run, "losses": np.broadcast_to(1.0, 10**8)}]), "losses", "10,000")
    refused(lambda: scaling.same_start([run], [{**run, "seed": np.array([0, 1])}]), "seed")
    assert scaling.same_start([run], [{**run, "losses": [2.0]}]) is True
    refused(lambda: scaling.gradient_figure([{"d": 4, "raw": [0.1, 0.2], "scaled": 0.1, "scaled_wrt_raw": 0.1}] * 3),
            "one number")


def test_jacobian_size_refuses_rows_that_are_no_softmax_outputs(refused):
    refused(lambda: scaling.jacobian_size([[np.nan, 1.0]]), "softmax outputs", "NaN")
    refused(lambda: scaling.jacobian_size([[0.5, 0.5], [0.2, 0.2]]), "sum to 0.4")
    refused(lambda: scaling.softmax_jacobian([0.2, 0.2]), "sum to 0.4")
    assert scaling.jacobian_size([[1.0, 0.0]]) == pytest.approx([0.0])


def test_printed_difference_counts_its_tables_before_making_them(refused):
    T = 11_000   # two broadcast views of 121 million entries: its tables would need about 1.8 GiB
    refused(lambda: qkv.printed_difference(np.broadcast_to(0.5, (T, T)), np.broadcast_to(0.25, (T, T))),
            "printed_difference", "1.5 GiB")
    assert qkv.printed_difference([[1.0, -np.inf]], [[1.25, -np.inf]]) == 0.25
    assert qkv.printed_difference(np.broadcast_to(0.5, (100, 100)), np.broadcast_to(0.25, (100, 100))) == 0.25


def test_scaling_explorer_checks_what_it_draws_and_its_curve(refused):
    refused(lambda: scaling_explorer.scaling_view(curve_queries=0), "curve_queries")
    refused(lambda: scaling_explorer.scaling_view(curve_queries=10**9), "curve_queries", "10,000")
    good = scaling.explore(16)
    refused(lambda: scaling_explorer.check_explore_result({**good, "scores": np.array([np.nan, 1.0])}), "scores")
    refused(lambda: scaling_explorer.check_explore_result({**good, "weights": np.full(6, 0.5)}), "weights")
    refused(lambda: scaling_explorer.check_explore_result({**good, "gradient": float("inf")}), "gradient")
    assert scaling_explorer.check_explore_result(good) is good
