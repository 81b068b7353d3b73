"""Red team round 15, chapter 08 (normalization): a run whose loss overflowed to inf is diverged wherever a
NaN one is; swapped or negative reference losses and negative losses are refused in one sentence; the
stream and residual figures refuse norms they cannot draw and an empty list of depths, before drawing."""
import copy

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from helpers.normalization import explorer  # noqa: E402
from helpers.normalization import compute as nz  # noqa: E402

INF = float("inf")


@pytest.fixture(scope="module")
def curves():
    return nz.load_curves()


@pytest.fixture(scope="module")
def references():
    return nz.reference_losses()


def test_round_15_inf_is_diverged_as_nan_is(references):
    """B7 (a): [3.0, 2.0, inf] was "other" for run_outcome while learning_state said "has diverged"."""
    unigram, best = references
    for loss in ([3.0, 2.0, INF], [3.0, INF, 2.0], [INF]):
        assert nz.run_outcome(loss, unigram, best) == "diverged"
        assert nz.learning_state(loss, unigram) == "has diverged"
        assert nz.diverged(np.array(loss))
    assert nz.final_text([3.0, INF, 2.0], "pre", 4, unigram, best) == "inf"
    assert nz.final_text([3.0, 2.0, INF], "none", 8, unigram, best) == "inf*"   # a chaotic run
    assert nz.final_text([3.0, float("nan")], "none", 12, unigram, best) == "NaN*"
    assert nz.final_text([3.0, float("nan"), INF], "pre", 2, unigram, best) == "NaN"
    assert nz.run_outcome([3.0, best], unigram, best) == "trained"


def test_round_15_an_inf_final_loss_is_marked_diverged_on_the_grid(curves, references):
    """B7 (a): plot_grid marked NaN finals in its strip, but an inf final nowhere."""
    grown = copy.deepcopy(curves)
    grown["runs"]["pre/2/0.03"]["loss"][-1] = INF
    fig = nz.plot_grid(grown, *references)
    try:
        strip = fig.axes[0]   # the first learning rate's (0.03) strip of diverged runs
        marked = {(line.get_label(), float(x)) for line in strip.get_lines() for x in line.get_xdata()}
        assert ("pre-LN: diverged (NaN)", 2.0) in marked
    finally:
        plt.close(fig)


def test_round_15_swapped_reference_losses_are_refused(refused, curves, references):
    """B7 (b): outcomes(curves, best, unigram) was taken and sorted 12 post-LN runs "trained" instead of 5."""
    unigram, best = references
    for call in (lambda: nz.outcomes(curves, best, unigram), lambda: nz.run_outcome([3.0, 1.0], best, unigram),
                 lambda: nz.final_text([3.0, 1.0], "pre", 2, best, unigram),
                 lambda: nz.plot_grid(curves, best, unigram), lambda: nz.plot_residual(curves, curves, best=unigram,
                                                                                        unigram=best)):
        figures = plt.get_fignums()
        refused(call, "best", "should be at most unigram", f"best={unigram:g}", f"unigram={best:g}")
        assert plt.get_fignums() == figures
    assert nz.outcome_counts(nz.outcomes(curves, unigram, best), "post") == \
        {"trained": 5, "frequencies": 6, "diverged": 0, "other": 1}   # what chapter 08 prints
    assert nz.run_outcome([3.0, 1.0], 1.0, 1.0) == "trained"   # equal references: a world without context


def test_round_15_negative_losses_are_refused(refused, curves, references):
    """B16 (also): losses below 0, impossible for a cross-entropy, were taken and sorted "trained"."""
    unigram, best = references
    for call, where in ((lambda: nz.run_outcome([3.0, -0.2], unigram, best), "step 1 holds -0.2"),
                        (lambda: nz.learning_state([-1.0, 2.0], unigram), "step 0 holds -1"),
                        (lambda: nz.final_text([3.0, -INF], "pre", 2, unigram, best), "step 1 holds -inf")):
        refused(call, "loss should hold numbers >= 0", "never negative", where)
    negative = copy.deepcopy(curves)
    negative["runs"]["post/8/0.03"]["loss"][-1] = -0.5
    for call in (lambda: nz.outcomes(negative, unigram, best), lambda: nz.stack_view(negative, 8, 0.03),
                 lambda: explorer.stack_figure(negative, 8, 0.03), lambda: nz.plot_grid(negative)):
        refused(call, "curves' run post/8/0.03's loss should hold numbers >= 0", "-0.5")


def test_round_15_plot_stream_refuses_norms_it_cannot_draw(refused):
    """B16: NaN norms (a diverged model's) stopped in matplotlib's "Axis limits cannot be NaN or Inf"."""
    fig, ax = plt.subplots()
    try:
        names, tokens = ["h0", "L0.h_mid"], ["<BOS>", "the", "cat"]
        for norms, words in ((np.full((2, 3), np.nan), "finite"), (np.array([[1, 2, INF], [1, 2, 3]]), "finite"),
                             (-np.ones((2, 3)), ">= 0")):
            refused(lambda: nz.plot_stream(ax, names, norms, tokens, "a diverged model"), "norms should hold", words)
        refused(lambda: nz.plot_stream(ax, [], np.ones((0, 3)), tokens, "t"), "names should be a non-empty list")
        refused(lambda: nz.plot_stream(ax, names, np.ones((2, 0)), [], "t"), "tokens should be a non-empty list")
        refused(lambda: nz.plot_stream(ax, "h0", np.ones((2, 3)), tokens, "t"), "names should be", "'h0'")
        assert not ax.get_lines()   # nothing drawn by a refused call
        nz.plot_stream(ax, names, np.ones((2, 3)), tokens, "fine")
        assert len(ax.get_lines()) == 3
    finally:
        plt.close(fig)


def test_round_15_plot_residual_refuses_no_depths_before_its_figure(refused, curves):
    """B16: depths=() stopped in matplotlib's "Number of columns must be a positive integer, not 0"."""
    plain = nz.load_plain_curves()
    figures = plt.get_fignums()
    refused(lambda: nz.plot_residual(curves, plain, depths=()), "depths should be a list of 1 to 100", "()")
    refused(lambda: nz.plot_residual(curves, plain, depths=[2, 5]), "pre/5/0.03")
    refused(lambda: nz.plot_residual(curves, plain, depths="2"), "depths should be a list")
    assert plt.get_fignums() == figures   # no figure left open by a refusal
    fig = nz.plot_residual(curves, plain, depths=np.array([2, 4]))
    assert len(fig.axes) == 2
    plt.close(fig)
