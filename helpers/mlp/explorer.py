"""Chapter 07's explorer: probe one hidden unit of the cat model's MLPs.

Its controls are a layer menu and a unit slider; ``render`` calls ``compute.probe`` and
moves the bars of one figure (``probe_panel``), redrawn through a Blitter.
"""
import numpy as np

from ..explorer import Blitter, check_model_and_world, new_figure, check_unchanged, show, start_at, weights_version
from . import compute


def probe_title(result):
    """Three lines: which unit and how often it fires; its strongest context; what it promotes."""
    context, value = result["top_contexts"][0]
    return (f"layer {result['layer']}, unit {result['unit']}: above 0.5 at {result['share']:.0%} of positions\n"
            f"strongest after: {context}  ({value:.2f})\n"
            f"its value row promotes: {', '.join(result['promotes'])}")


def probe_panel(words, limits=(-0.5, 7.0)):
    """An empty bar chart over ``words`` and the function that shows a probe result on it:
    (fig, draw, changing). draw(result) moves the bars and rewrites the title; ``changing``
    lists the artists it touches (for a Blitter)."""
    from ..plots import ACCENT, BASE

    fig = new_figure((6.6, 3.4))
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.76)
    ax = fig.add_subplot()
    x = np.arange(len(words))
    bars = ax.bar(x, np.zeros(len(words)), color=BASE)
    ax.axhline(0, color="#888888", lw=0.8)
    ax.set_xticks(x, words, rotation=60, ha="right", fontsize=8)
    ax.set_ylim(*limits)
    ax.set_ylabel("mean activation")
    ax.set_xlabel("current word", fontsize=8)
    title = fig.suptitle("", fontsize=9, y=0.99)

    def draw(result):
        top = int(np.argmax(result["means"]))
        for i, (bar, value) in enumerate(zip(bars, result["means"])):
            bar.set_height(value)
            bar.set_color(ACCENT if i == top else BASE)
        title.set_text(probe_title(result))
        return fig
    return fig, draw, [*bars, title]


def probe_figure(result):
    """The figure of one probe result."""
    return probe_panel(result["words"])[1](result)


def explorer(model, world, layer=0, unit=1):
    """A layer menu and a unit slider over one figure redrawn in place. Returns the Explorer."""
    import ipywidgets as widgets

    check_model_and_world(model, world)
    controls = dict(layer=widgets.Dropdown(options=list(range(model.cfg.n_layers)), description="layer"),
                    unit=widgets.IntSlider(min=0, max=model.cfg.d_ff - 1, description="unit"))
    start_at(controls, layer=layer, unit=unit)   # checked before the activations are collected
    version = weights_version(model)
    collected, made = compute.collect_activations(model, world), version()
    fig, draw, changing = probe_panel(compute.corpus_words(collected, world.tokenizer.vocab))
    fast = Blitter(fig, changing)

    def render(layer, unit):
        check_unchanged(version, made)   # the activations were collected from the weights as they were
        draw(compute.probe(model, world, collected, layer, unit))
        return fast.png()

    return show(controls, render, version=version)
