"""Chapter 07 explorer: probe one hidden unit of the cat model's MLPs.

* ``probe`` is the compute (tests call it; the widget calls it on every change): which
  current words make the unit fire, its strongest contexts, and what its value row
  writes toward.
* ``probe_panel`` draws it; ``explorer()`` wires a layer menu and a unit slider to it
  and redraws one figure in place.
"""
import numpy as np

from .. import mlp
from ..errors import fail
from . import Blitter, png  # noqa: F401  (png: tests call explore.png)
from .ch06 import new_figure


def corpus_words(collected, vocab):
    """The words that occur at some input position, in vocabulary order."""
    present = set(collected["tokens"].tolist())
    return [w for w in vocab if w in present]


def probe(model, world, collected, layer=0, unit=0):
    """What unit ``unit`` of layer ``layer`` responds to, over ``collected``
    (``mlp.collect_activations(model, world)``).

    Returns dict(layer, unit, words, means (len(words),) the mean activation per current
    word, top_contexts [(context, value)], share of positions above 0.5, promotes: the
    3 words its value row W_2[unit] scores highest through the unembedding).
    """
    if not isinstance(collected, dict) or "act" not in collected:
        fail("collected should be the dict returned by mlp.collect_activations(model, world)")
    words = corpus_words(collected, world.tokenizer.vocab)
    profile = mlp.unit_profile(collected, layer, unit, words)
    promotes = [world.tokenizer.vocab[i] for i, _ in mlp.value_readout(model, layer, unit)]
    return dict(layer=layer, unit=unit, words=words, promotes=promotes, **profile)


def probe_title(result):
    """Three lines: which unit and how often it fires; its strongest context; what it promotes."""
    context, value = result["top_contexts"][0]
    return (f"layer {result['layer']}, unit {result['unit']}: above 0.5 at {result['share']:.0%} of positions\n"
            f"strongest after: {context}  ({value:.2f})\n"
            f"its value row promotes: {', '.join(result['promotes'])}")


def probe_panel(words, limits=(-0.5, 7.0)):
    """An empty bar chart over ``words`` and the function that shows a probe result on it:
    (fig, show, changing). show(result) moves the bars and rewrites the title; ``changing``
    lists the artists it touches (for a Blitter)."""
    from ..plots import ACCENT, BASE

    fig = new_figure((6.6, 3.4))
    fig.subplots_adjust(top=0.76)
    ax = fig.add_subplot()
    x = np.arange(len(words))
    bars = ax.bar(x, np.zeros(len(words)), color=BASE)
    ax.axhline(0, color="#888888", lw=0.8)
    ax.set_xticks(x, words, rotation=60, ha="right", fontsize=8)
    ax.set_ylim(*limits)
    ax.set_ylabel("mean activation")
    ax.set_xlabel("current word", fontsize=8)
    title = fig.suptitle("", fontsize=9, y=0.99)

    def show(result):
        top = int(np.argmax(result["means"]))
        for i, (bar, value) in enumerate(zip(bars, result["means"])):
            bar.set_height(value)
            bar.set_color(ACCENT if i == top else BASE)
        title.set_text(probe_title(result))
        return fig
    return fig, show, [*bars, title]


def probe_figure(result):
    """The figure of one probe result."""
    return probe_panel(result["words"])[1](result)


def explorer(model, world, layer=0, unit=1):
    """A layer menu and a unit slider; one figure redrawn in place (an image output
    replaced through its display id)."""
    import ipywidgets as widgets
    from IPython.display import Image, display

    collected = mlp.collect_activations(model, world)
    layer_menu = widgets.Dropdown(options=list(range(model.cfg.n_layers)), value=layer, description="layer")
    unit_slider = widgets.IntSlider(value=unit, min=0, max=model.cfg.d_ff - 1, description="unit")
    fig, show, changing = probe_panel(corpus_words(collected, world.tokenizer.vocab))
    fast = Blitter(fig, changing)

    def image():
        show(probe(model, world, collected, layer_menu.value, unit_slider.value))
        return Image(data=fast.png(), format="png")

    display(widgets.HBox([layer_menu, unit_slider]))
    handle = display(image(), display_id=True)
    for control in (layer_menu, unit_slider):
        control.observe(lambda change: handle.update(image()), names="value")
