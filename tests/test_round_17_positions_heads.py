"""Round 17 (issue 31): chapters 05 and 06 refuse what they cannot take, before any work.

order_demo counts the attention's rows before it matches the words, and seeds its layers with
seed + 1 wrapped round 2**64; MultiHeadAttention counts its (B, T, d_model) tables too;
check_perm reads a tensor that requires grad; repeat_score and head_figure check shapes before
they take a length.
"""
import time

import numpy as np
import pytest
import torch

from helpers.errors import MAX_SEED
from helpers.heads import compute as heads
from helpers.heads import explorer as heads_explorer
from helpers.positions import checks
from helpers.positions import compute as pos


def test_order_demo_refuses_more_rows_than_the_attention_takes_before_matching_them(refused):
    words = [f"w{i:05d}" for i in range(20_000)]   # (the old row lookup, a scan per word, took over ten seconds)
    start = time.perf_counter()
    refused(lambda: pos.order_demo(words, words[::-1], d=1), "20,000 rows", "fewer rows")
    refused(lambda: pos.order_demo(["a"] * 30_000 + ["b"] * 30_000, ["b", "a"] * 30_000), "at most 10,000,000,000")
    refused(lambda: pos.order_demo(words, ["x"], d=1), "20,000 rows")   # counted before the words are compared
    assert time.perf_counter() - start < 3


def test_attention_stack_counts_its_tables_before_any_layer_runs(refused):
    X = np.ones((8_000, 1))
    refused(lambda: pos.attention_stack(X, pos.random_attention(1, 0)), "8,000 rows", "GiB")


def test_order_demo_takes_the_largest_seed_and_wraps_its_layers_seed_round():
    demo = pos.order_demo(["a", "b", "c"], ["c", "a", "b"], seed=MAX_SEED)
    assert np.array_equal(demo["E"], np.random.default_rng(MAX_SEED).normal(size=(3, 8)))
    # the layers get seed + 1 = 2**64, wrapped round to 0 (as helpers.model seeds its MLPs)
    assert np.allclose(demo["out_first"], pos.attention_stack(demo["E"], pos.random_attention(8, 0)))
    assert demo["max_diff"] < 1e-12


def test_order_demo_gives_the_rows_it_gave_before():
    demo = pos.order_demo(["the", "cat", "sat", "the"], ["sat", "the", "the", "cat"], seed=3)
    assert demo["vocab"] == ["cat", "sat", "the"]
    assert list(demo["perm"]) == [2, 0, 3, 1]
    E, layers = demo["E"], pos.random_attention(8, 4)
    assert np.allclose(demo["out_first"], pos.attention_stack(E[[2, 0, 1, 2]], layers))


def test_multi_head_attention_counts_its_rows_before_any_work(refused):
    mha = heads.MultiHeadAttention(512, 8)
    x = torch.zeros(1, 1, 1).expand(400_000, 1, 512)   # stands for 820 MB, stores 4 bytes: q, k, v... 9 times that
    with torch.no_grad():
        refused(lambda: mha(x), "400,000 sequences", "width 512", "GiB")
        assert mha(torch.zeros(1, 1, 1).expand(2, 3, 512)).shape == (2, 3, 512)


@pytest.mark.parametrize("perm", [torch.tensor([2.0, 0.0, 1.0], requires_grad=True),
                                  torch.tensor([2.0, 0.0, 1.0]), np.array([2.0, 0.0, 1.0])])
def test_a_perm_of_decimal_numbers_is_refused_naming_its_dtype(refused, perm):
    refused(lambda: pos.permutation_matrix(perm), "whole numbers", "dtype float")


class Unreadable:
    """An object whose conversion raises what NumPy's own errors are not."""

    def __len__(self):
        return 2

    def __array__(self, *args, **kwargs):
        raise RuntimeError("not today")


def test_the_unscrambled_check_names_a_perm_it_cannot_use_in_one_sentence():
    Y = np.array([[1.0, 2.0], [3.0, 4.0]])
    for perm in (torch.tensor([1.0, 0.0], requires_grad=True), Unreadable(), range(10**12)):
        (sentence,) = checks.unscrambled.feedback(Y[::-1], Y, perm)
        assert "perm should be a rearrangement of 0..1" in sentence and "itself failed" not in sentence
    assert checks.unscrambled.feedback(Y[::-1], Y, torch.tensor([1, 0])) == []


def test_permutation_matrix_refuses_an_unreadable_perm_and_reads_a_whole_number_tensor(refused):
    refused(lambda: pos.permutation_matrix(Unreadable()), "rearrangement of 0..1")
    assert np.array_equal(pos.permutation_matrix(torch.tensor([1, 0])), [[0.0, 1.0], [1.0, 0.0]])


@pytest.mark.parametrize("weights", [torch.tensor(0.5), torch.tensor([1.0]), torch.ones(2, 3) / 3,
                                     torch.ones(1, 2, 2) / 2])
def test_repeat_score_checks_the_weights_shape_before_their_length(refused, weights):
    refused(lambda: heads.repeat_score(weights, [1]), "weights should be", "(T, T)")


def test_repeat_score_still_scores_a_repeated_prompt(refused):
    w = torch.tensor([[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.7, 0.1]])
    assert heads.repeat_score(w, [5, 6, 5]) == pytest.approx(0.7)
    refused(lambda: heads.repeat_score(w, [1, 2, 3]), "should hold a token that repeats")


VIEW = dict(weights=np.array([[1.0, 0.0], [0.4, 0.6]]), tokens=["<BOS>", "cat"], title="a view")


@pytest.mark.parametrize("view, words", [
    (None, ("view should be", "head_view")),
    (dict(VIEW, tokens=1), ("tokens should be",)),
    (dict(VIEW, weights=torch.tensor(0.5)), ("(2, 2)", "shape ()")),
    (dict(VIEW, weights=np.full((2, 2), np.nan)), ("weights", "finite")),
    (dict(VIEW, weights=-np.eye(2)), ("weights", "between 0 and 1")),
])
def test_head_figure_and_the_fast_heatmap_check_the_view_before_drawing(refused, view, words):
    refused(lambda: heads_explorer.head_figure(view), *words)
    refused(lambda: heads_explorer.FastHeatmap().render(view), *words)


def test_head_figure_refuses_a_figure_it_did_not_draw_and_draws_a_view(refused):
    from matplotlib.figure import Figure

    other = Figure()
    other.add_subplot()
    refused(lambda: heads_explorer.head_figure(VIEW, other), "fig should be", "head_figure")
    fig = heads_explorer.head_figure(VIEW)
    assert [t.get_text() for t in fig.axes[0].texts] == ["1.00", "0.40", "0.60"]
    assert heads_explorer.head_figure(dict(VIEW, title=None), fig) is fig
