"""Red team round 23 (tester A, entries 11 and 12; tester B, entry 10): figures and explorer controls.

* A token text such as "$$" or "$x$" (GPT-2's vocabulary has such tokens) was drawn as matplotlib math text:
  the heatmaps, the bar chart and the heads explorer raised a raw ValueError from the math parser. Every token,
  label and title is now drawn as typed.
* A 3-D Axes passed the axes check, then the drawing raised a raw AttributeError or TypeError: refused now.
* An explorer menu refused a NumPy number equal to one of its options (a layer from np.argmax): taken now.
"""
import contextlib
import io

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from helpers import plots
from helpers.explorer import as_png, check_control
from helpers.geometry import compute as geometry
from helpers.heads import explorer as heads_explorer

PNG = b"\x89PNG"
TOKENS = ["$x$", "$$", "a\\$b", "$\\frac{$"]   # math text, an unclosed one, an escaped dollar


@pytest.fixture(autouse=True)
def no_figures_left():
    yield
    plt.close("all")


def drawn_as(text):
    """The string matplotlib draws for a Text artist, and whether it reads it as math (its own preprocessing)."""
    return text._preprocess_math(text.get_text())


def png_of(fig):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def triangle(T):
    w = np.tril(np.ones((T, T)))
    return w / w.sum(axis=1, keepdims=True)


def test_heatmap_draws_dollar_tokens_as_typed():
    ax = plots.attention_heatmap(triangle(4), TOKENS, title="a $y$ title")
    assert png_of(ax.figure).startswith(PNG)
    assert [drawn_as(t) for t in ax.get_xticklabels()] == [(token, False) for token in TOKENS]
    assert [drawn_as(t) for t in ax.get_yticklabels()] == [(token, False) for token in TOKENS]
    assert drawn_as(ax.title) == ("a $y$ title", False)


def test_attention_off_heatmap_draws_dollar_tokens_as_typed():
    ax = plots.attention_off_heatmap(TOKENS, title="$$")
    assert png_of(ax.figure).startswith(PNG)
    assert [drawn_as(t) for t in ax.get_xticklabels()] == [(token, False) for token in TOKENS]
    assert drawn_as(ax.title) == ("$$", False)


def test_prob_bars_draw_dollar_words_as_typed():
    ax = plots.prob_bars(np.full(4, 0.25), TOKENS, title="$x$ next", highlight="$$")
    assert png_of(ax.figure).startswith(PNG)
    assert [drawn_as(t) for t in ax.get_xticklabels()] == [(token, False) for token in TOKENS]
    assert drawn_as(ax.title) == ("$x$ next", False)


def test_cell_numbers_draw_dollar_labels_as_typed():
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    fig, ax = plt.subplots()
    ax.imshow(np.zeros((1, 2)))
    numbers = plots.cell_numbers(ax, [["$$", "$x$"]], [["black", "black"]])
    assert png_of(fig).startswith(PNG)
    for path, label in zip(numbers.get_paths(), ["$$", "$x$"]):   # the outline of the text as typed, math off
        typed, _ = text_to_path.get_text_path(FontProperties(size=7), label, ismath=False)
        assert len(path.vertices) == len(typed)


def test_maps_figure_draws_dollar_tokens_and_titles_as_typed():
    fig = heads_explorer.maps_figure([triangle(4), triangle(4)], TOKENS, ["$x$ one", "$$"], numbers=True,
                                     title="$y$ both")
    assert png_of(fig).startswith(PNG)
    assert [drawn_as(ax.title) for ax in fig.axes[:2]] == [("$x$ one", False), ("$$", False)]
    assert drawn_as(fig._suptitle) == ("$y$ both", False)


class DollarTokenizer:
    """A tokenizer whose vocabulary holds "$$" and "$x$" (the README: any object with vocab, encode, decode)."""
    vocab = ["a", "$$", "$x$", "d", "e"]

    def encode(self, text):
        return torch.tensor([self.vocab.index(word) for word in text.split()])

    def decode(self, ids):
        return [self.vocab[int(i)] for i in ids]


def test_heads_explorer_draws_dollar_tokens_as_typed():
    from helpers.model import Config, Transformer

    torch.manual_seed(0)
    model = Transformer(Config(vocab_size=5, d_model=8, n_heads=2, n_layers=2, d_ff=16, n_max=6))
    with contextlib.redirect_stdout(io.StringIO()):
        explorer = heads_explorer.explorer(model=model, layer=0, head=0, tokenizer=DollarTokenizer(),
                                           prompts=["a $$ $x$ d"])
    assert as_png(explorer.picture()).startswith(PNG)
    assert explorer.message.value == ""
    view = dict(weights=triangle(4), tokens=["a", "$$", "$x$", "d"], title="$$ L0H0")
    fig = heads_explorer.head_figure(view)
    ticks = fig.axes[0].get_xticklabels()
    assert [drawn_as(t) for t in ticks] == [(token, False) for token in view["tokens"]]
    assert drawn_as(fig.axes[0].title) == ("$$ L0H0", False)
    fast = heads_explorer.FastHeatmap()
    assert fast.render(view).startswith(PNG)
    assert drawn_as(fast.fig.axes[0].title) == ("$$ L0H0", False)


def flat_only_calls():
    """Each function that draws on a given Axes, as ax -> its call."""
    w = triangle(2)
    return {"prob_bars": lambda ax: plots.prob_bars(np.array([0.5, 0.5]), ["a", "b"], ax=ax),
            "attention_heatmap": lambda ax: plots.attention_heatmap(w, ["a", "b"], ax=ax),
            "attention_off_heatmap": lambda ax: plots.attention_off_heatmap(["a", "b"], ax=ax),
            "cell_numbers": lambda ax: plots.cell_numbers(ax, [["1"]], [["black"]]),
            "plot_cosines": lambda ax: geometry.plot_cosines(np.eye(2), ["a", "b"], ax=ax)}


@pytest.mark.parametrize("name", sorted(flat_only_calls()))
def test_a_3d_axes_is_refused_in_one_sentence(name, refused):
    ax = plt.figure().add_subplot(projection="3d")
    refused(lambda: flat_only_calls()[name](ax), "ax should be", "a matplotlib Axes (a 2-D one", "Axes3D")


@pytest.mark.parametrize("name", sorted(flat_only_calls()))
def test_a_polar_axes_is_refused_and_a_flat_one_drawn_on(name, refused):
    refused(lambda: flat_only_calls()[name](plt.figure().add_subplot(projection="polar")), "2-D", "polar")
    flat_only_calls()[name](plt.subplots()[1])


def test_a_menu_takes_a_numpy_number_equal_to_an_option_as_that_option(refused):
    layers = widgets.Dropdown(options=[0, 1, 2])
    value = check_control(layers, np.int64(1), "layer")
    assert value == 1 and type(value) is int
    rates = widgets.ToggleButtons(options=[("0.03", 0.03), ("0.01", 0.01)])
    value = check_control(rates, np.float64(0.03), "lr")
    assert value == 0.03 and type(value) is float
    assert check_control(widgets.Dropdown(options=[True, False]), np.True_, "switch") is True
    refused(lambda: check_control(layers, np.True_, "layer"), "layer should be one of 0, 1, 2", "True")
    refused(lambda: check_control(layers, True, "layer"), "layer should be one of", "True")
    refused(lambda: check_control(layers, np.float64(1.0), "layer"), "layer should be one of")
    refused(lambda: check_control(layers, np.int64(3), "layer"), "layer should be one of 0, 1, 2", "3")


def test_the_explorers_take_numpy_numbers_for_their_menus(cat, cat_world):
    from helpers.mlp import explorer as mlp_explorer
    from helpers.normalization import compute as normalization
    from helpers.normalization import explorer as normalization_explorer

    with contextlib.redirect_stdout(io.StringIO()):
        mlp = mlp_explorer.explorer(cat, cat_world, layer=np.int64(1), unit=np.int64(7))
        stack = normalization_explorer.explorer(normalization.load_curves(), n_layers=8, lr=np.float64(0.03))
    assert mlp.controls["layer"].value == 1 and type(mlp.controls["layer"].value) is int
    assert stack.controls["lr"].value == 0.03
    mlp.set(layer=np.int64(0))
    assert mlp.message.value == "" and mlp.controls["layer"].value == 0


# ------------------------------------------------------------ chapter 01's figures: names drawn as typed, flat axes


def test_chapter_01s_figures_draw_dollar_names_as_typed():
    fig = geometry.arrows_figure({"$$": np.array([1.0, 0.5]), "$x$": np.array([-0.5, 1.0])}, title="$y$")
    fig.canvas.draw()   # (a "$$" read as math raised ValueError here)
    assert {t.get_text().replace("\\$", "$") for t in fig.axes[0].texts} >= {"$$ = [1.00, 0.50]", "$x$ = [-0.50, 1.00]"}
    ax = geometry.plot_cosines(np.eye(2), ["$$", "$x$"], title="$t$")
    ax.figure.canvas.draw()
    assert [t.get_text().replace("\\$", "$") for t in ax.get_yticklabels()] == ["$$", "$x$"]
    plt.close("all")


def test_draw_arrows_refuses_axes_it_cannot_draw_on(refused):
    fig = plt.figure()
    refused(lambda: geometry.draw_arrows(fig.add_subplot(projection="3d"), {"a": np.array([1.0, 0.0])}),
            "ax should be a matplotlib Axes", "3d")
    plt.close(fig)
