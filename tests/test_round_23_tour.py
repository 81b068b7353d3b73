"""Red team round 23 (tester A, entry 4): chapter 00's tour explorer with attention off. A prompt whose
tokens differed from the last drawn one was refused by the heatmap's row check (all-zero weights); the
refused draw had cleared the axes while the view kept the old prompt, so going back raised a raw
IndexError. Now attention off draws a grid that says so, and a refused draw leaves everything as it was."""
import contextlib
import io

import matplotlib.pyplot as plt
import pytest
import torch

from helpers import plots
from helpers.tour import compute, explorer

PNG = b"\x89PNG"


@pytest.fixture
def tour(cat, cat_world):
    with contextlib.redirect_stdout(io.StringIO()):   # show() displays the controls and the first picture
        return explorer.explorer(cat, cat_world, "<BOS> the cat is")


def axes_state(axes):
    """What a draw puts on the two axes: their texts, titles, tick labels, bars, hatches and images."""
    return [(tuple(t.get_text() for t in ax.texts), ax.get_title(), tuple(t.get_text() for t in ax.get_xticklabels()),
             tuple(t.get_text() for t in ax.get_yticklabels()), len(ax.patches), len(ax.images)) for ax in axes]


def test_attention_off_draws_any_prompt_and_says_so(tour, cat, cat_world):
    tour.set(attention=False, prompt="<BOS> the dog is")   # tokens the explorer has not drawn before
    assert tour.message.value == ""
    off = tour.picture()
    assert off.startswith(PNG)
    assert tour.set(prompt="<BOS> the cat is").picture().startswith(PNG)   # back: no IndexError
    assert tour.message.value == ""
    figure = explorer.TourView(cat_world.tokenizer.vocab)
    figure.png(compute.prompt_view(cat, cat_world, "<BOS> the dog sat on the", False), 1, 1)
    right = figure.axes[1]
    assert "attention off" in right.get_title()
    assert any("attention off" in t.get_text() for t in right.texts)   # the grid itself says so
    assert [t.get_text() for t in right.get_yticklabels()] == ["<BOS>", "the", "dog", "sat", "on", "the"]
    assert not any(t.get_text().startswith("0.") for t in right.texts)   # no weights that do not exist


def test_switching_attention_redraws_the_heatmap_for_the_same_prompt(cat, cat_world):
    figure = explorer.TourView(cat_world.tokenizer.vocab)
    on = compute.prompt_view(cat, cat_world, "<BOS> the cat is", True)
    first = figure.png(on, 0, 0)
    figure.png(compute.prompt_view(cat, cat_world, "<BOS> the cat is", False), 0, 0)
    assert any("attention off" in t.get_text() for t in figure.axes[1].texts)
    assert figure.png(on, 0, 0) == first


def test_a_refused_draw_leaves_the_figure_and_the_view_as_they_were(cat, cat_world, refused):
    figure = explorer.TourView(cat_world.tokenizer.vocab)
    cat_is = compute.prompt_view(cat, cat_world, "<BOS> the cat is", True)
    first = figure.png(cat_is, 0, 0)
    before = axes_state(figure.axes)
    dog = compute.prompt_view(cat, cat_world, "<BOS> the dog sat", True)
    halves = dict(dog, weights=dog["weights"] / 2)   # rows summing to 1/2: refused by the heatmap's check
    refused(lambda: figure.png(halves, 0, 0), "rows that each sum to 1")
    refused(lambda: figure.png(dict(dog, probs=dog["probs"] * 2), 0, 0), "probs")
    assert axes_state(figure.axes) == before
    assert figure.png(cat_is, 0, 0) == first   # the old prompt again: the same picture, no IndexError


def test_draw_checks_everything_before_it_clears_the_axes(cat, cat_world, refused):
    fig, axes = plt.subplots(1, 2)
    view = compute.prompt_view(cat, cat_world, "<BOS> the cat is", True)
    explorer.draw(axes, view, cat_world.tokenizer.vocab, 0, 0)
    before = axes_state(axes)
    refused(lambda: explorer.draw(axes, dict(view, weights=view["weights"] * 0), cat_world.tokenizer.vocab, 0, 0),
            "rows that each sum to 1")
    assert axes_state(axes) == before
    plt.close(fig)


def test_a_layer_or_head_the_model_lacks_is_refused_in_a_sentence(cat, cat_world, refused):
    figure = explorer.TourView(cat_world.tokenizer.vocab)
    view = compute.prompt_view(cat, cat_world, "<BOS> the cat is", True)
    refused(lambda: figure.png(view, 2, 0), "layer", "from 0 to 1", "2")
    refused(lambda: figure.png(view, 0, -1), "head", "from 0 to 1", "-1")
    refused(lambda: figure.png(view, True, 0), "layer")
    refused(lambda: figure.png({"tokens": view["tokens"]}, 0, 0), "the view should be", "prompt_view")
    refused(lambda: figure.png(dict(view, attention="False"), 0, 0), "attention", "True or False")
    assert figure.png(view, 1, 1).startswith(PNG)


def test_attention_off_heatmap_checks_its_tokens_before_any_grid_is_made(refused):
    fig, ax = plt.subplots()
    refused(lambda: plots.attention_off_heatmap(["w"] * 10**6, ax=ax), "at most 256", "1,000,000")
    refused(lambda: plots.attention_off_heatmap("the cat", ax=ax), "tokens should be a list")
    refused(lambda: plots.attention_off_heatmap([], ax=ax), "at least one")
    assert not ax.texts and not ax.images
    plots.attention_off_heatmap(["<BOS>", "the"], ax=ax, title="off")
    assert ax.get_title() == "off" and len(ax.images) == 1
    plt.close(fig)


def test_shape_flow_refuses_a_step_without_a_shape_before_it_draws(cat, refused):
    trace = dict(cat(torch.tensor([0, 1, 2]), trace=True))
    fig, ax = plt.subplots()
    refused(lambda: plots.shape_flow(dict(trace, **{"L0.q": 5}), ax=ax), "tensor or an array", "'L0.q'")
    assert not ax.patches and not ax.texts
    plots.shape_flow(trace, ax=ax)
    assert ax.patches
    plt.close(fig)
