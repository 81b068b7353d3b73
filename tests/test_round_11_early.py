"""Round 11 of the red team (the early chapters, 00 to 05, and the shared figures): a check says ✓ to
the right answer where a known slip gives the same number, a check's reference data is out of the
learner's reach, a check refuses its own bad arguments, and a helper refuses what it cannot use
(a line through one d, NaN, a text for a layer, labels that are not a list, a chart's top beyond its
words, a training run of about a day) with one sentence."""
import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from helpers import plots  # noqa: E402
from helpers.geometry import compute as geometry  # noqa: E402
from helpers.heads import checks as heads_checks  # noqa: E402
from helpers.qkv import compute as qkv  # noqa: E402
from helpers.scaling import checks as scaling_checks, compute as scaling  # noqa: E402
from helpers.tour import checks as tour_checks, compute as tour  # noqa: E402


# ------------------------------------------------------------------ ✓ where a slip gives the right value

def test_round_11_weights_megabytes_is_right_at_one_token():
    right = 8 * 16 * 1 * 1 * 4 / 1e6
    assert heads_checks.weights_megabytes.feedback(right, batch=8, n_heads=16, T=1) == []
    assert heads_checks.weights_megabytes.feedback(8 * 16 * 4 * 4 / 1e6, batch=8, n_heads=16, T=1) != []


def test_round_11_typical_size_is_right_at_d_1():
    assert scaling_checks.typical_size.feedback(1.0, d=1) == []
    assert "variance" in scaling_checks.typical_size.feedback(4.0, d=4)[0]   # the slip is still named


def test_round_11_jacobian_of_a_one_hot_output_is_right():
    w = np.array([1.0, 0.0, 0.0])
    assert scaling_checks.jacobian.feedback(np.diag(w) - np.outer(w, w), w) == []
    w = np.array([0.2, 0.3, 0.5])
    assert "every sign is flipped" in scaling_checks.jacobian.feedback(np.outer(w, w) - np.diag(w), w)[0]


def test_round_11_gradient_wrt_raw_is_right_without_division():
    s = np.array([1.0, 2.0, 3.0])
    w = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    right = float(np.linalg.norm((np.diag(w) - np.outer(w, w))[2]))
    assert scaling_checks.gradient_wrt_raw.feedback(right, s, index=2, divide_by=1.0) == []


def test_round_11_split_is_right_when_T_equals_n_heads():
    q = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(0))
    assert heads_checks.split.feedback(q.view(2, 3, 3, 2).transpose(1, 2), q, n_heads=3) == []
    found = heads_checks.split.feedback(q.view(2, 3, 3, 2), q, n_heads=3)   # the unswapped split: still named
    assert "swap the token and head axes" in found[0], found


# ------------------------------------------------------------------ a check's reference data out of reach

def test_round_11_layer_scores_references_cannot_be_changed_by_a_learner():
    def right(x, W_Q, W_K, b_Q, b_K, n_heads):
        T, d = x.shape
        d_k = d // n_heads
        q = (x @ W_Q + b_Q).view(T, n_heads, d_k).transpose(0, 1)
        k = (x @ W_K + b_K).view(T, n_heads, d_k).transpose(0, 1)
        return q @ k.transpose(-2, -1) / math.sqrt(d_k)

    def meddling(x, W_Q, W_K, b_Q, b_K, n_heads):
        import helpers.scaling.checks as reached
        for _, args, reference in reached.cat_cases():
            reference.zero_()
            args[0].zero_()
        return right(x, W_Q, W_K, b_Q, b_K, n_heads) + 0.5

    assert scaling_checks.layer_scores.feedback(right) == []
    assert scaling_checks.layer_scores.feedback(meddling) != []
    assert scaling_checks.layer_scores.feedback(right) == []
    assert not hasattr(scaling_checks, "_CASES")


# ------------------------------------------------------------------ a check refuses its own bad arguments

@pytest.mark.parametrize("n_heads, T, answer", [(2, None, (2, 5, 5)), (-2, 5, (-2, 5, 5)), (2, -5, (2, -5, -5)),
                                                 (True, 5, (1, 5, 5))])
def test_round_11_scores_shape_refuses_bad_check_arguments(n_heads, T, answer):
    found = tour_checks.scores_shape.feedback(answer, n_heads=n_heads, T=T)
    assert len(found) == 1 and "the check cannot use what the check cell gives it" in found[0], found
    assert tour_checks.scores_shape.feedback((2, 5, 5), n_heads=2, T=5) == []


# ------------------------------------------------------------------ helpers refuse what they cannot use

def test_round_11_log_fit_refuses_one_d(refused):
    refused(lambda: scaling.log_fit([64, 64, 64], [0.1, 0.01, 0.001]), "dims", "two different", "64")
    assert set(scaling.log_fit([64, 64, 256], [0.1, 0.01, 0.001])) == {"sqrt_d", "d"}


def test_round_11_printed_difference_refuses_nan(refused):
    refused(lambda: qkv.printed_difference(np.array([[np.nan, 1.0]]), [[0.5, 1.0]]), "ours", "NaN")
    refused(lambda: qkv.printed_difference([[0.5, 1.0]], [[np.nan, 1.0]]), "printed", "NaN")
    assert qkv.printed_difference([[-np.inf, 1.0]], [[-np.inf, 1.25]]) == 0.25   # a masked score still counts as 0


def test_round_11_step_rows_checks_the_layer(refused, cat, cat_world):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat sat"), trace=True)
    for layer in ("0", True, 1.5, torch.tensor(0), 2, -1):
        message = refused(lambda: tour.step_rows(trace, layer, -1, ["attn"]), "layer", "2 layers", "from 0 to 1")
        assert "LTrue" not in message
    assert torch.equal(tour.step_rows(trace, 1, -1, ["attn"])["attn"], trace["L1.attn"][-1])


def test_round_11_heatmap_and_bars_refuse_labels_that_are_not_a_list(refused):
    for tokens in (None, 3, "abc"):
        refused(lambda: plots.attention_heatmap(np.eye(3), tokens), "tokens", "list of labels")
        refused(lambda: plots.prob_bars(np.full(3, 1 / 3), tokens), "vocab", "list of labels")
    refused(lambda: plots.attention_heatmap(np.eye(3), ["a", "b", "c"], keys=5), "keys", "list of labels")
    plt.close("all")


def test_round_11_cell_numbers_checks_its_arguments(refused):
    fig, ax = plt.subplots()
    ax.imshow([[0.0, 1.0]])
    labels, colors = [["1", "2"]], [["k", "k"]]
    refused(lambda: plots.cell_numbers(None, labels, colors), "ax", "Axes", "None")
    refused(lambda: plots.cell_numbers(ax, None, colors), "labels", "list of rows")
    refused(lambda: plots.cell_numbers(ax, ["12"], colors), "each row of labels", "'12'")
    refused(lambda: plots.cell_numbers(ax, labels, None), "colors", "list of rows")
    refused(lambda: plots.cell_numbers(ax, labels, ["kk"]), "each row of colors", "list of colours")
    refused(lambda: plots.cell_numbers(ax, labels, [["k", "no colour"]]), "colour", "'no colour'")
    for fontsize, word in (("big", "number"), (True, "number"), (-5, "> 0"), (0, "> 0")):
        refused(lambda: plots.cell_numbers(ax, labels, colors, fontsize=fontsize), "fontsize", word)
    assert len(plots.cell_numbers(ax, labels, colors, fontsize=6.5).get_paths()) == 2
    plt.close(fig)


def test_round_11_prob_bars_refuses_top_beyond_the_vocabulary(refused):
    vocab = [f"w{i}" for i in range(20)]
    refused(lambda: plots.prob_bars(np.full(20, 0.05), vocab, top=10**12), "top", "20 words", "1,000,000,000,000")
    refused(lambda: plots.prob_bars(np.full(20, 0.05), vocab, top=21), "top", "20 words", "21")
    assert len(plots.prob_bars(np.full(20, 0.05), vocab, top=20).patches) == 20   # chapter 09: top=len(vocab)
    plt.close("all")


def test_round_11_distance_agreement_refuses_what_is_not_points(refused):
    h = np.random.default_rng(0).normal(size=(6, 3))
    refused(lambda: geometry.distance_agreement("x", h[:, :2]), "high", "text")
    refused(lambda: geometry.distance_agreement(h, {}), "low")
    refused(lambda: geometry.distance_agreement(object(), h[:, :2]), "high")
    refused(lambda: geometry.distance_agreement(h, np.full((6, 2), np.nan)), "low", "finite")
    refused(lambda: geometry.distance_agreement(h, h[:5, :2]), "same n")
    assert geometry.distance_agreement(h, 2 * h) == pytest.approx(1)


def test_round_11_training_of_about_a_day_is_refused_up_front(refused):
    import time

    start = time.monotonic()
    refused(lambda: scaling.train_with_and_without_scaling(seeds=range(20), steps=10_000, d_model=512, n_layers=4),
            "at most", "units of work", "40 runs of 10,000 steps", "fewer seeds")
    assert time.monotonic() - start < 5
    from helpers import worlds
    world = worlds.cat_world()
    shape = tuple(world.batch(world.train)[0].shape)
    notebook = scaling.training_work(scaling.scaling_config(), shape, 8, 6)   # chapter 03: 3 seeds, stop_after=8
    shipped = scaling.training_work(scaling.scaling_config(), shape, 300, 6)  # data/scaling/build.py
    assert notebook < shipped < scaling.MAX_TRAINING_WORK
