"""Round 12 (tester J, 10 and 11): chapter 01's own_group_share, neighbour_groups, plot_maps and plot_runs
refuse what is not word_map's or map_runs' output, a label given as one word, and a k below 1, each in one
sentence, as map_runs already did."""
import numpy as np
import pytest

from helpers.geometry import compute as geometry

NOT_A_MAP = [{}, None, 5, {"labels": [1]}, [{}]]
RUNS = [{"method": "random", "seed": 0, "kept": np.array([0.1, 0.2]), "agreement": 0.0},
        {"method": "PCA", "seed": None, "kept": np.array([0.5, 0.7]), "agreement": 0.8}]


@pytest.mark.parametrize("result", NOT_A_MAP)
def test_round_12_group_helpers_refuse_what_word_map_does_not_return(refused, result):
    refused(lambda: geometry.own_group_share(result), "result should be what word_map returns", "labels")
    refused(lambda: geometry.neighbour_groups(result, "dog"), "result should be what word_map returns", "words")


@pytest.mark.parametrize("result", NOT_A_MAP)
def test_round_12_plot_maps_refuses_what_word_map_does_not_return(refused, result):
    refused(lambda: geometry.plot_maps(result), "result should be what word_map returns", "coords")


@pytest.mark.parametrize("runs", [{}, None, [{}], [], (), [{"method": "pca", "kept": np.ones(2), "agreement": 0.5}]])
def test_round_12_plot_runs_refuses_what_map_runs_does_not_return(refused, runs):
    refused(lambda: geometry.plot_runs(runs), "runs should be what map_runs returns", "non-empty")


@pytest.mark.parametrize("k", [-5, 0, "x", 2.5, True])
def test_round_12_plot_runs_refuses_a_k_that_is_not_a_whole_number_from_1(refused, k):
    refused(lambda: geometry.plot_runs(RUNS, k=k), "k should be")


def test_round_12_plot_runs_checks_k_and_still_draws_map_runs_output(refused):
    import matplotlib.pyplot as plt
    refused(lambda: geometry.plot_runs(RUNS, k=-5), "k should be at least 1", "-5")
    fig = geometry.plot_runs(RUNS, k=np.int64(3))
    assert fig.axes[0].get_xlabel() == "share of each word's 3 nearest neighbours the map keeps"
    plt.close(fig)


@pytest.mark.parametrize("label", ["dog", None, 5, ["dog", 3]])
def test_round_12_plot_maps_refuses_a_label_that_is_not_a_list_of_words(refused, glove, label):
    result = geometry.word_map(glove, ["animals"], methods=("PCA",), k=5)
    message = refused(lambda: geometry.plot_maps(result, label=label), "label should be a list of words")
    assert "'d' is not" not in message


def test_round_12_the_sentence_is_map_runs_own(refused):
    """One check, one sentence form: map_runs says the same as the helpers that read the same dict."""
    assert (refused(lambda: geometry.map_runs({}), "word_map")
            == "result should be what word_map returns (a dict with points, k and coords), but got {}")
    assert (refused(lambda: geometry.own_group_share(None), "word_map")
            == "result should be what word_map returns (a dict with points, labels and k), but got None")
