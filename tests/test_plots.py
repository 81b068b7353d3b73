"""helpers.plots: the course's figures draw, and refuse labels or sizes that do not fit."""
import matplotlib
import numpy as np
import pytest

from helpers import plots
from helpers.errors import CourseInputError

matplotlib.use("Agg")


def test_the_figures_draw():
    assert plots.attention_heatmap(np.eye(3) / 1, ["a", "b", "c"]).images
    assert len(plots.prob_bars(np.array([0.5, 0.3, 0.2]), ["x", "y", "z"], top=2).patches) == 2


@pytest.mark.parametrize("call, words", [
    (lambda: plots.attention_heatmap(np.eye(3), ["a", "b"]), ["(3, 3)", "2 query"]),
    (lambda: plots.prob_bars(np.ones(3) / 3, ["a", "b"]), ["3 entries", "2 words"]),
    (lambda: plots.prob_bars(np.ones(3) / 3, ["a", "b", "c"], top=-1), ["top", "at least 1", "-1"]),
    # red team round 4: NaN, logits and words not in the vocabulary were drawn without a word
    (lambda: plots.prob_bars(np.array([0.5, np.nan, 0.5]), ["a", "b", "c"]), ["probabilities", "1 NaN"]),
    (lambda: plots.prob_bars(np.array([2.0, -1.0, 0.5]), ["a", "b", "c"]), ["softmax", "-1 to 2"]),
    (lambda: plots.prob_bars(np.ones(3) / 3, ["a", "b", "c"], highlight=["z"]), ["vocabulary's words", "'z'"]),
    (lambda: plots.prob_bars(np.ones(3) / 3, ["a", "b", "c"], highlight=3), ["list", "int"]),
    (lambda: plots.attention_heatmap(np.eye(300), [str(i) for i in range(300)]), ["at most 256", "300 x 300"]),
])

def test_bad_input_is_refused_in_one_sentence(refused, call, words):
    refused(call, *words)


def test_one_highlighted_word_is_that_word_not_its_letters():
    ax = plots.prob_bars(np.array([0.5, 0.3, 0.2]), ["cat", "c", "a"], highlight="cat")
    assert len({tuple(bar.get_facecolor()) for bar in ax.patches}) == 2
    assert ax.patches[1].get_facecolor() == ax.patches[2].get_facecolor()


def test_prob_bars_on_a_log_axis_keep_tiny_runners_up_readable():
    ax = plots.prob_bars(np.array([0.999, 1e-4, 1e-12]), ["on", "dog", "ran"], log=True)
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.texts] == ["1.00", "1e-4", "<1e-8"]


def test_shape_flow_draws_q_k_v_side_by_side_and_two_skips(cat, cat_world):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat sat"), trace=True)
    ax = plots.shape_flow(trace)
    y = {t.get_text().split()[0]: t.get_position()[1] for t in ax.texts
         if t.get_text().split()[:1] in (["q"], ["k"], ["v"])}
    assert y["q"] == y["k"] == y["v"]                                   # parallel, not a chain
    assert sum("residual skip" in t.get_text() for t in ax.texts) == 2
    first, second = [line.get_ydata() for line in ax.lines if len(line.get_ydata()) == 3][:2]
    assert min(first) > max(second)          # the second skip leaves h_mid below where the first enters
    with pytest.raises(Exception, match="lacks"):
        plots.shape_flow({"h0": trace["h0"]})


def test_cell_numbers_stamps_one_outline_per_label_at_its_cell():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    fig, ax = plt.subplots()
    ax.imshow(np.eye(2))
    numbers = plots.cell_numbers(ax, [["1.0", ""], ["0.5", "1.0"]], [["white", "black"], ["black", "red"]])
    assert numbers.get_offsets().tolist() == [[0, 0], [0, 1], [1, 1]]          # (j, i); the blank cell left out
    assert [tuple(c) for c in numbers.get_facecolors()] == [to_rgba("white"), to_rgba("black"), to_rgba("red")]
    paths = numbers.get_paths()
    assert paths[0] is paths[2] and len(paths[0].vertices)                   # "1.0" outlined once, used twice
    centre = paths[1].get_extents()
    assert abs(centre.x0 + centre.x1) < 1e-9 and abs(centre.y0 + centre.y1) < 1e-9
    fig.canvas.draw()
    with pytest.raises(CourseInputError, match="colour for every label"):
        plots.cell_numbers(ax, [["1.0", "2.0"]], [["black"]])
    plt.close(fig)


# ------------------------------------------------------------------ red team round 8

def test_round_8_prob_bars_refuses_more_bars_than_a_chart_can_show(refused):
    import time
    n = 100_000
    probs, vocab = np.ones(n) / n, [f"w{i}" for i in range(n)]
    start = time.monotonic()
    refused(lambda: plots.prob_bars(probs, vocab), f"at most {plots.MAX_BARS} bars", "100,000", "top=")
    refused(lambda: plots.prob_bars(probs, vocab, top=10**6), "100,000")
    assert time.monotonic() - start < 5
    assert len(plots.prob_bars(probs, vocab, top=20).patches) == 20


def test_round_8_titles_and_labels_are_checked_texts(refused):
    w = np.full((2, 2), 0.5)
    for title in ("x" * 10**6, "a\ud800", 5):
        refused(lambda: plots.attention_heatmap(w, ["a", "b"], title=title), "title")
        refused(lambda: plots.prob_bars(np.array([0.5, 0.5]), ["a", "b"], title=title), "title")
    refused(lambda: plots.attention_heatmap(w, ["a", "b\ud800"]), "token label", "lone surrogate")
    refused(lambda: plots.prob_bars(np.array([0.5, 0.5]), ["a", "b" * 10**6]), "word", "at most 100 characters")
    assert plots.attention_heatmap(w, ["a", "b"], title="").get_title() == ""


def test_round_8_attention_heatmap_refuses_nan_and_negative_weights(refused):
    for bad in (np.nan, -0.5, np.inf):
        refused(lambda: plots.attention_heatmap(np.array([[bad, 1.0], [0.5, 0.5]]), ["a", "b"]),
                "finite numbers >= 0")


def test_round_8_shape_flow_refuses_what_is_no_trace_and_a_layer_out_of_range(cat, cat_world, refused):
    trace = cat(cat_world.tokenizer.encode("<BOS> the cat"), trace=True)
    for bad in (None, [1, 2], "trace"):
        refused(lambda: plots.shape_flow(bad), "shape_flow expected the dict")
    for layer in (5, -1, True, 1.0):
        refused(lambda: plots.shape_flow(trace, layer=layer), "layer (this trace has 2 layers)", "from 0 to 1")
    assert plots.shape_flow(trace, layer=1).get_title().startswith("one forward pass (layer 1")


# ------------------------------------------------------------------ red team round 9

def test_round_9_axes_and_switches_are_checked(refused):
    refused(lambda: plots.attention_heatmap(np.eye(2), ["a", "b"], ax="ax"), "ax should be None or a matplotlib Axes")
    refused(lambda: plots.attention_heatmap(np.eye(2), ["a", "b"], annotate="no"), "annotate is a switch")
    refused(lambda: plots.attention_heatmap(np.eye(2), ["a", "b"], fontsize=0), "fontsize should be > 0")
    refused(lambda: plots.prob_bars(np.array([0.5, 0.5]), ["a", "b"], log="yes"), "log is a switch")
    refused(lambda: plots.prob_bars(np.array([0.5, 0.5]), ["a", "b"], ax=3), "ax should be None")
