"""Chapter 04 explorer: the cat model's attention maps for a prompt you type, mask on or off.

* ``compute.attention_maps(model, world, prompt, causal)`` is the compute.
* ``maps_view(n_layers, n_heads)`` builds a grid of heatmaps once (room for the longest
  prompt) and returns ``draw(maps)``, which fills them in and returns PNG bytes.
* ``explorer(models, world)``: a prompt box, a model choice and a mask switch over it.
"""
import numpy as np
import torch

from ..errors import check_finite, check_number, check_positive_int, check_switch, check_text, count, fail, shown, \
    to_numpy
from ..explorer import Blitter, check_model_and_world, new_figure, show, start_at, weights_version
from ..model import check_finite_weights
from ..readout import SUM_TOLERANCE
from .compute import attention_maps

HIDDEN = (0.85, 0.85, 0.85, 1.0)   # grey: a key the mask hides
MAX_MAPS, MAX_SIZE = 64, 64   # the most heatmaps in the grid and words a map has room for (the chapter: 4 and 10)


def check_maps(maps, n_layers, n_heads, size):
    """An ``attention_maps`` result for a grid of n_layers x n_heads maps of at most ``size`` words (words: T
    texts, weights (n_layers, n_heads, T, T) attention weights, next: a text, p_next: a probability, causal: a
    switch); returns the weights as NumPy, else one sentence. Shapes are checked before the weights are read."""
    keys = ("words", "weights", "next", "p_next", "causal")
    if not isinstance(maps, dict) or not all(key in maps for key in keys):
        fail(f"draw's maps should be what attention_maps returns, a dict with {', '.join(keys)}, but got {shown(maps)}")
    words, weights = maps["words"], maps["weights"]
    if not isinstance(words, (list, tuple)) or not words or not all(isinstance(w, str) for w in words):
        fail(f"the maps' words should be a non-empty list of texts, but got {shown(words)}")
    T = len(words)
    if T > size:
        fail(f"the maps' words should be at most {size} (the explorer's room), but the prompt has {count(T)}")
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != (n_layers, n_heads, T, T):
        got = f"shape {tuple(weights.shape)}" if isinstance(weights, torch.Tensor) else shown(weights)
        fail(f"the maps' weights should be a tensor of shape {(n_layers, n_heads, T, T)} (layers, heads, "
             f"words, words), but got {got}")
    if not isinstance(maps["next"], str):
        fail(f"the maps' next word should be a text, but got {shown(maps['next'])}")
    check_number(maps["p_next"], "the maps' p_next", 0, 1)
    causal = check_switch(maps["causal"], "the maps' causal")
    rounding = 2 * torch.finfo(weights.dtype).eps if weights.is_floating_point() else 0.0   # (bfloat16: 0.016)
    return check_weights(to_numpy(weights, "the maps' weights"), causal, max(SUM_TOLERANCE, rounding))


def check_weights(weights, causal, tolerance=SUM_TOLERANCE):
    """Attention weights (n_layers, n_heads, T, T) as a colour map reads them: finite, from 0 to 1, each row
    summing to 1 (within ``tolerance``: readout.SUM_TOLERANCE, or twice the rounding of the type they came in),
    and 0 above the diagonal when ``causal``; returns them, else one sentence (nothing is clipped to fit the
    colours)."""
    check_finite(weights, "the maps' weights")
    if (weights < 0).any() or (weights > 1).any():
        bad = weights[(weights < 0) | (weights > 1)]
        fail(f"the maps' weights should lie from 0 to 1 (attention weights), but {count(bad.size)} of "
             f"{count(weights.size)} do not, such as {float(bad[0]):.4g}")
    sums = weights.sum(-1)
    worst = float(sums.flat[np.abs(sums - 1).argmax()])
    if abs(worst - 1) > tolerance:
        fail(f"each row of the maps' weights should sum to 1 (a softmax over the keys), but one sums to {worst:.4g}")
    T = weights.shape[-1]
    hidden = weights[..., np.triu(np.ones((T, T), dtype=bool), 1)] if causal else np.zeros(0)
    if hidden.any():
        fail(f"the maps' weights should be 0 above the diagonal when causal is True (the mask hides those keys), "
             f"but {count(int((hidden != 0).sum()))} are not, the largest {float(hidden.max()):.4g}")
    return weights


def maps_view(n_layers=2, n_heads=2, size=10):
    """A grid of n_layers x n_heads heatmaps for prompts of up to ``size`` tokens: returns draw(maps).

    draw takes an ``attention_maps`` result, draws each head's weights (grey where the mask
    hides a key), labels rows and columns with the words, and returns PNG bytes. Each map is
    cut to the prompt's length, so it fills its square; one colour bar gives the scale. The
    words are part of the saved background, so switching the mask or the model redraws only
    the maps; a new prompt redraws all. Each map is one image of colours (the colour map's
    colour for each weight, grey where hidden), so a redraw paints four images, not eight.
    """
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    from ..plots import literal

    n_layers, n_heads = check_positive_int(n_layers, "n_layers"), check_positive_int(n_heads, "n_heads")
    if n_layers * n_heads > MAX_MAPS:
        fail(f"maps_view should draw at most {MAX_MAPS} maps (n_layers x n_heads), but got "
             f"{count(n_layers)} x {count(n_heads)}")
    if check_positive_int(size, "size") > MAX_SIZE:
        fail(f"size should be at most {MAX_SIZE} words, but got {count(size)}")
    fig = new_figure((3.0 * n_heads + 1.6, 3.0 * n_layers + 0.9))
    fig.subplots_adjust(left=0.11, right=0.86, bottom=0.1, top=0.9, wspace=0.12, hspace=0.22)
    view = Blitter(fig)
    axes = fig.subplots(n_layers, n_heads, squeeze=False)   # (n_layers, n_heads), one head or one layer too
    images, labelled = [], []
    blues = colormaps["Blues"]
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            ax.set_xticks([])
            ax.set_yticks([])
            images.append(view.animate(ax.imshow(np.zeros((size, size, 4)), interpolation="nearest")))
            ax.set_title(f"layer {layer}, head {head} (L{layer}H{head})", fontsize=9)
            ax.spines[:].set_visible(False)
            labelled.append(ax)
    bar = fig.colorbar(ScalarMappable(Normalize(0, 1), cmap="Blues"), ax=list(axes.flat), fraction=0.04, pad=0.03)
    bar.set_label("attention weight (grey: a key the mask hides)", fontsize=8)
    bar.ax.tick_params(labelsize=7)
    title = view.animate(fig.text(0.5, 0.965, "", ha="center", fontsize=10))
    fig.text(0.015, 0.5, "query (row) attends to key (column)", rotation=90, va="center", fontsize=8)
    drawn = {"words": None}

    def set_words(words):
        T, labels = len(words), [literal(word) for word in words]   # a word of "$" drawn as typed, not as math
        for ax in labelled:
            ax.set_xlim(-0.5, T - 0.5)
            ax.set_ylim(T - 0.5, -0.5)
            ax.set_xticks(range(T), labels if ax in axes[-1] else [""] * T, rotation=45, ha="right",
                          rotation_mode="anchor", fontsize=8)
            ax.set_yticks(range(T), labels if ax in axes[:, 0] else [""] * T, fontsize=8)
            ax.tick_params(length=0)
        view.reset()
        drawn["words"] = list(words)

    def draw(maps):
        weights, T = check_maps(maps, n_layers, n_heads, size), len(maps["words"])
        if drawn["words"] != maps["words"]:      # new words: redraw the background once
            set_words(maps["words"])
        colours = blues(weights)          # (n_layers, n_heads, T, T, 4)
        if maps["causal"]:
            colours[:, :, np.triu(np.ones((T, T), dtype=bool), 1)] = HIDDEN
        for n, image in enumerate(images):
            rgba = np.zeros((size, size, 4))            # room for the longest prompt; the axes show T x T
            rgba[:T, :T] = colours[n // weights.shape[1], n % weights.shape[1]]
            image.set_data(rgba)
        mask = "mask ON" if maps["causal"] else "mask OFF (every word sees every word)"
        title.set_text(literal(f"{mask}   ·   next word: {maps['next']} ({maps['p_next']:.2f})"))
        return view.png()
    draw.figure = fig        # for a test that reads the colours back
    return draw


MAX_NAME = 100   # characters of a model's name in the menu


def explorer(models, world, prompt="<BOS> the cat sat on the mat", causal=True):
    """A prompt box, a model choice and a mask switch over one grid of heatmaps redrawn in place.

    models: {name (a string): trained cat-world model}, copied when the explorer is made (a name rebound in the
    dict afterwards is not seen: make the explorer again; a model changed in place is redrawn). A
    model whose weights hold NaN or inf is refused here. A prompt with a word outside the vocabulary
    (or too long) shows the reason in words and keeps the last picture. Returns the Explorer.
    """
    import ipywidgets as widgets

    from ..model import Transformer

    if not isinstance(models, dict) or not models or not all(isinstance(m, Transformer) for m in models.values()):
        fail(f"models should be a non-empty dict {{name: helpers.model.Transformer}}, but got {shown(models)}")
    # copied (the pictures are keyed on these models' weights: the menu's names stay bound to them), each name a
    # plain string: the menu would read a tuple as (label, value)
    models = {check_text(name, "each model's name (a key of models)", max_chars=MAX_NAME): model
              for name, model in models.items()}
    first = next(iter(models.values()))
    for name, model in models.items():
        check_model_and_world(model, world)    # the dragon world on the cat model: refused here, not at a prompt
        check_finite_weights(model, f"the model {name!r}")
        if (model.cfg.n_layers, model.cfg.n_heads) != (first.cfg.n_layers, first.cfg.n_heads):
            fail(f"the models should share one grid of layers x heads, but {name!r} has {model.cfg.n_layers} x "
                 f"{model.cfg.n_heads} and the first {first.cfg.n_layers} x {first.cfg.n_heads}")
    controls = dict(
        prompt=widgets.Text(description="prompt", continuous_update=False, layout=widgets.Layout(width="420px")),
        model=widgets.Dropdown(options=list(models), description="model"),
        causal=widgets.ToggleButtons(options=[("mask on", True), ("mask off", False)]))
    start_at(controls, prompt=prompt, causal=causal)
    draw = maps_view(first.cfg.n_layers, first.cfg.n_heads)

    def render(prompt, model, causal):
        return draw(attention_maps(models[model], world, prompt, causal=causal))

    layout = widgets.VBox([controls["prompt"], widgets.HBox([controls["model"], controls["causal"]])])
    return show(controls, render, layout, version=weights_version(*models.values()))
