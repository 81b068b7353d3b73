"""helpers.plots: the course's figures draw, and refuse labels or sizes that do not fit."""
import matplotlib
import numpy as np
import pytest

from helpers import plots

matplotlib.use("Agg")


def test_the_figures_draw():
    assert plots.attention_heatmap(np.eye(3) / 1, ["a", "b", "c"]).images
    assert len(plots.prob_bars(np.array([0.5, 0.3, 0.2]), ["x", "y", "z"], top=2).patches) == 2


@pytest.mark.parametrize("call, words", [
    (lambda: plots.attention_heatmap(np.eye(3), ["a", "b"]), ["(3, 3)", "2 query"]),
    (lambda: plots.prob_bars(np.ones(3) / 3, ["a", "b"]), ["3 entries", "2 words"]),
    (lambda: plots.prob_bars(np.ones(3) / 3, ["a", "b", "c"], top=-1), ["top", "at least 1", "-1"]),
])
def test_bad_input_is_refused_in_one_sentence(refused, call, words):
    refused(call, *words)
