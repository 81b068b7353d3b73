"""Chapter 04 explorer: the cat model's attention maps for a prompt you type, mask on or off.

* ``compute.attention_maps(model, world, prompt, causal)`` is the compute.
* ``maps_view(n_layers, n_heads)`` builds a grid of heatmaps once (room for the longest
  prompt) and returns ``draw(maps)``, which fills them in and returns PNG bytes.
* ``explorer(models, world)``: a prompt box, a model choice and a mask switch over it.
"""
import numpy as np

from ..errors import CourseInputError
from ..explorer import Blitter, new_figure, show
from .compute import attention_maps

HIDDEN = (0.85, 0.85, 0.85, 1.0)   # grey: a key the mask hides


def maps_view(n_layers=2, n_heads=2, size=10):
    """A grid of n_layers x n_heads heatmaps with room for ``size`` tokens: returns draw(maps).

    draw takes an ``attention_maps`` result, draws each head's weights (white beyond the
    prompt, grey where the mask hides a key), labels rows and columns with the words, and
    returns PNG bytes. The words are part of the saved background, so switching the mask or
    the model redraws only the maps; a new prompt redraws all.
    """
    fig = new_figure((2.9 * n_heads + 0.9, 2.7 * n_layers + 0.8))
    fig.subplots_adjust(left=0.12, right=0.98, bottom=0.13, top=0.88, wspace=0.08, hspace=0.18)
    view = Blitter(fig)
    axes = np.atleast_2d(fig.subplots(n_layers, n_heads))
    empty = np.full((size, size), np.nan)
    images, shades, words_left, words_below = [], [], [], []
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_xlim(-0.5, size - 0.5)
            ax.set_ylim(size - 0.5, -0.5)
            images.append(view.animate(ax.imshow(empty, cmap="Blues", vmin=0, vmax=1, interpolation="nearest")))
            shades.append(view.animate(ax.imshow(np.zeros((size, size, 4)), interpolation="nearest")))
            ax.set_title(f"layer {layer}, head {head} (L{layer}H{head})", fontsize=9)
            ax.spines[:].set_visible(False)
            if head == 0:
                words_left.append([ax.text(-0.7, i, "", ha="right", va="center", fontsize=8)
                                   for i in range(size)])
            if layer == n_layers - 1:
                words_below.append([ax.text(j, size - 0.3, "", ha="right", va="top", fontsize=8,
                                            rotation=45, rotation_mode="anchor") for j in range(size)])
    title = view.animate(fig.text(0.55, 0.955, "", ha="center", fontsize=10))
    fig.text(0.01, 0.5, "query (row) attends to key (column)", rotation=90, va="center", fontsize=8)
    drawn = {"words": None}

    def draw(maps):
        weights, T = maps["weights"].numpy(), len(maps["words"])
        if T > size:
            raise CourseInputError(f"the explorer shows at most {size} words, but the prompt has {T}")
        hidden = np.zeros((size, size, 4))
        if maps["causal"]:
            hidden[:T, :T][np.triu(np.ones((T, T), dtype=bool), 1)] = HIDDEN
        for n, (image, shade) in enumerate(zip(images, shades)):
            data = np.full((size, size), np.nan)
            data[:T, :T] = weights[n // weights.shape[1], n % weights.shape[1]]
            image.set_data(data)
            shade.set_data(hidden)
        if drawn["words"] != maps["words"]:      # new words: redraw the background once
            for labels in words_left + words_below:
                for i, label in enumerate(labels):
                    label.set_text(maps["words"][i] if i < T else "")
            for labels in words_below:                 # just under the last row of the map
                for j, label in enumerate(labels):
                    label.set_position((j, T - 0.3))
            view.reset()
            drawn["words"] = list(maps["words"])
        mask = "mask ON" if maps["causal"] else "mask OFF (every word sees every word)"
        title.set_text(f"{mask}   ·   next word: {maps['next']} ({maps['p_next']:.2f})")
        return view.png()
    return draw


def explorer(models, world, prompt="<BOS> the cat sat on the mat", causal=True):
    """A prompt box, a model choice and a mask switch over one grid of heatmaps redrawn in place.

    models: {name: trained cat-world model}. A prompt with a word outside the vocabulary
    (or too long) shows the reason in words and keeps the last picture. Returns the Explorer.
    """
    import ipywidgets as widgets

    controls = dict(
        prompt=widgets.Text(value=prompt, description="prompt", continuous_update=False,
                            layout=widgets.Layout(width="420px")),
        model=widgets.Dropdown(options=list(models), description="model"),
        causal=widgets.ToggleButtons(options=[("mask on", True), ("mask off", False)], value=causal))
    first = next(iter(models.values()))
    draw = maps_view(first.cfg.n_layers, first.cfg.n_heads)

    def render(prompt, model, causal):
        return draw(attention_maps(models[model], world, prompt, causal=causal))

    layout = widgets.VBox([controls["prompt"], widgets.HBox([controls["model"], controls["causal"]])])
    return show(controls, render, layout)
