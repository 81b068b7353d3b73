"""Chapter 05 explorer: pick a model (cat or induction), a layer, a head and a prompt;
the head's attention heatmap is redrawn in place.

* ``head_view`` is the compute (tests call it; the widget calls it on every move).
* ``head_figure`` draws one view; ``explorer()`` wires the controls to it.
"""
import functools

import numpy as np

from ..errors import fail
from . import Blitter, png  # noqa: F401  (png: tests call widget.png)

MODELS = ("cat", "induction")
PROMPTS = {
    "cat": ("<BOS> the cat sat on the red mat",
            "<BOS> the big dog ran fast",
            "<BOS> the mat is blue",
            "<BOS> the small cat sat on the floor"),
    "induction": ("<BOS> k i n g m a d e k i n g m a d e",
                  "<BOS> c a f e b a b e c a f e b a b e",
                  "<BOS> h e l l o h e l l o h e l l o",
                  "<BOS> b a n j o b a n j o b a n j o b a n j o"),
}


@functools.lru_cache(maxsize=None)
def get_model(name):
    """The shipped model ``name`` ('cat' or 'induction') and its tokenizer, loaded once."""
    from .. import heads, weights, worlds

    if name not in MODELS:
        fail(f"the model should be one of {MODELS}, but got {name!r}")
    if name == "cat":
        return weights.load_cat(), worlds.cat_world().tokenizer
    model = heads.load_induction()
    return model, worlds.Tokenizer(heads.induction_vocab(model.cfg.vocab_size))


def head_view(model="cat", layer=0, head=0, prompt=None):
    """The attention weights of one head on one prompt.

    Returns dict(weights (T, T) NumPy, tokens (T words), previous = the mean weight on
    the token just before, title).
    """
    from ..heads import previous_token_score

    net, tokenizer = get_model(model)
    cfg = net.cfg
    if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
        fail(f"head (layer={layer}, head={head}) is out of range: the {model} model has layers "
             f"0..{cfg.n_layers - 1} and heads 0..{cfg.n_heads - 1}")
    prompt = PROMPTS[model][0] if prompt is None else prompt
    ids = tokenizer.encode(prompt)
    if len(ids) > cfg.n_max:
        fail(f"the {model} model takes at most {cfg.n_max} tokens, but the prompt has {len(ids)}")
    import torch
    with torch.no_grad():
        w = net(ids, trace=True)[f"L{layer}.weights"][head]
    previous = float(previous_token_score(w)) if len(ids) > 1 else float("nan")
    title = f"{model} model, L{layer}H{head}: mean weight on the previous token {previous:.2f}"
    return dict(weights=w.numpy(), tokens=tokenizer.decode(ids), previous=previous, title=title)


def new_figure(size=(5.6, 4.8)):
    """A matplotlib Figure outside pyplot, so a widget callback leaves none behind."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=72)
    fig.subplots_adjust(left=0.13, right=0.98, bottom=0.19, top=0.93)
    return fig


def head_figure(view, fig=None):
    """Draw a ``head_view`` result as a heatmap on ``fig`` (a new one if None).

    The first call builds the axes and the image; later calls on the same figure
    only swap the image data, the tick labels and the title, which keeps a widget
    update fast. Weights are printed in the cells for prompts of up to 12 tokens.
    """
    from ..plots import ATTENTION_CMAP

    fig = fig or new_figure()
    w, tokens = view["weights"], view["tokens"]
    T = len(tokens)
    if not fig.axes:
        ax = fig.add_subplot()
        ax.imshow(w, cmap=ATTENTION_CMAP, vmin=0, vmax=1)
        ax.set_xlabel("key (attended to)")
        ax.set_ylabel("query")
        ax.spines[:].set_visible(False)
        ax.tick_params(length=0)
    ax = fig.axes[0]
    image = ax.images[0]
    image.set_data(w)
    image.set_extent((-0.5, T - 0.5, T - 0.5, -0.5))
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(T - 0.5, -0.5)
    ax.set_xticks(range(T), tokens, rotation=45, ha="right")
    ax.set_yticks(range(T), tokens)
    for text in list(ax.texts):
        text.remove()
    if T <= 12:
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if value > 0.6 else "black")
    ax.set_title(view["title"], fontsize=10)
    return fig


class FastHeatmap:
    """A heatmap that re-renders quickly: the axes, tick labels and frame are drawn once per
    token list and kept as a background; an update only paints the new image, cell numbers
    and title over it (a ``Blitter``).

    ``render(view)`` takes a ``head_view`` result and returns PNG bytes.
    """

    def __init__(self, size=(5.6, 4.8)):
        self.fig = new_figure(size)
        self.tokens, self.blitter = None, None

    def render(self, view):
        if view["tokens"] != self.tokens:          # new labels: a new background
            ax = head_figure(view, self.fig).axes[0]
            self.blitter = Blitter(self.fig, [ax.images[0], *ax.texts, ax.title])
            self.tokens = view["tokens"]
        ax = self.fig.axes[0]
        ax.images[0].set_data(view["weights"])
        for text, value in zip(ax.texts, view["weights"].flat):
            text.set_text(f"{value:.2f}")
            text.set_color("white" if value > 0.6 else "black")
        ax.title.set_text(view["title"])
        return self.blitter.png()


def explorer(model="induction", layer=1, head=0):
    """Model, layer, head and prompt controls and one heatmap redrawn in place."""
    import ipywidgets as widgets
    from IPython.display import Image, display

    net, _ = get_model(model)
    pick_model = widgets.Dropdown(options=MODELS, value=model, description="model")
    pick_layer = widgets.IntSlider(value=layer, min=0, max=net.cfg.n_layers - 1, description="layer")
    pick_head = widgets.IntSlider(value=head, min=0, max=net.cfg.n_heads - 1, description="head")
    pick_prompt = widgets.Dropdown(options=PROMPTS[model], description="prompt",
                                   layout=widgets.Layout(width="420px"))
    heatmap = FastHeatmap()

    def image():
        view = head_view(pick_model.value, pick_layer.value, pick_head.value, pick_prompt.value)
        return Image(data=heatmap.render(view), format="png")

    def model_changed(change):
        cfg = get_model(change["new"])[0].cfg
        pick_layer.max, pick_head.max = cfg.n_layers - 1, cfg.n_heads - 1
        pick_prompt.options = PROMPTS[change["new"]]   # also fires a redraw

    display(widgets.HBox([widgets.VBox([pick_model, pick_prompt]), widgets.VBox([pick_layer, pick_head])]))
    handle = display(image(), display_id=True)
    pick_model.observe(model_changed, names="value")
    for control in (pick_layer, pick_head, pick_prompt):
        control.observe(lambda change: handle.update(image()), names="value")
