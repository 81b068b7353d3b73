"""Chapter 07's explorer: probe one hidden unit of the cat model's MLPs.

Its controls are a layer menu and a unit slider; ``render`` calls ``compute.probe`` and
moves the bars of one figure (``probe_panel``), redrawn through a Blitter.
"""
import numpy as np

from ..errors import as_array, check_finite, check_number, fail, shown
from ..explorer import Blitter, check_model_and_world, new_figure, check_unchanged, show, start_at, weights_version
from . import compute

MAX_BARS = 100   # the most words a probe figure draws a bar for (a world has 10 to 20)


def check_probe_result(result):
    """A dict of ``compute.probe``, else one sentence: layer and unit whole numbers, words a list of texts,
    means as many finite numbers, top_contexts a non-empty list of (context, value), share from 0 to 1,
    promotes a list of texts. Return it."""
    keys = ("layer", "unit", "words", "means", "top_contexts", "share", "promotes")
    if not isinstance(result, dict) or not set(keys) <= set(result):
        fail(f"result should be the dict of mlp.probe(model, world, collected, layer, unit), but got {shown(result)}")
    check_bar_words(result["words"], "result's words")
    means = check_finite(as_array(result["means"], "result's means", 1), "result's means")
    contexts = result["top_contexts"]
    if len(means) != len(result["words"]) or not isinstance(contexts, list) or not contexts or not all(
            isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in contexts):
        fail(f"result should be the dict of mlp.probe(...): a mean per word and a list of (context, value), but "
             f"got {len(means)} means for {len(result['words'])} words and top_contexts {shown(contexts)}")
    check_number(contexts[0][1], "result's top value")
    check_number(result["share"], "result's share", low=0, high=1)
    check_bar_words(result["promotes"], "result's promotes")
    return result


def check_bar_words(words, name):
    """1 to MAX_BARS texts in a list or tuple, else one sentence; return them."""
    if not isinstance(words, (list, tuple)) or not 1 <= len(words) <= MAX_BARS \
            or not all(isinstance(word, str) for word in words):
        fail(f"{name} should be a list of 1 to {MAX_BARS} words (texts), but got {shown(words)}")
    return words


def probe_title(result):
    """Three lines: which unit and how often it fires; its strongest context; what it promotes."""
    check_probe_result(result)
    context, value = result["top_contexts"][0]
    return (f"layer {result['layer']}, unit {result['unit']}: above 0.5 at {result['share']:.0%} of positions\n"
            f"strongest after: {context}  ({value:.2f})\n"
            f"its value row promotes: {', '.join(result['promotes'])}")


def probe_panel(words, limits=(-0.5, 7.0)):
    """An empty bar chart over ``words`` and the function that shows a probe result on it:
    (fig, draw, changing). draw(result) moves the bars and rewrites the title; ``changing``
    lists the artists it touches (for a Blitter)."""
    from ..plots import ACCENT, BASE, literal

    check_bar_words(words, "words")
    if not isinstance(limits, (list, tuple)) or len(limits) != 2 \
            or check_number(limits[0], "limits' low") >= check_number(limits[1], "limits' high"):
        fail(f"limits should be (low, high), two finite numbers with low below high, but got {shown(limits)}")
    fig = new_figure((6.6, 3.4))
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.76)
    ax = fig.add_subplot()
    x = np.arange(len(words))
    bars = ax.bar(x, np.zeros(len(words)), color=BASE)
    ax.axhline(0, color="#888888", lw=0.8)
    ax.set_xticks(x, [literal(word) for word in words], rotation=60, ha="right", fontsize=8)   # a "$" as typed
    ax.set_ylim(*limits)
    ax.set_ylabel("mean activation")
    ax.set_xlabel("current word", fontsize=8)
    title = fig.suptitle("", fontsize=9, y=0.99)

    def draw(result):
        if len(check_probe_result(result)["words"]) != len(words):
            fail(f"result should be a probe over this figure's {len(words)} words, but it has {len(result['words'])}")
        top = int(np.argmax(result["means"]))
        for i, (bar, value) in enumerate(zip(bars, result["means"])):
            bar.set_height(value)
            bar.set_color(ACCENT if i == top else BASE)
        title.set_text(literal(probe_title(result)))
        return fig
    return fig, draw, [*bars, title]


def probe_figure(result):
    """The figure of one probe result."""
    return probe_panel(check_probe_result(result)["words"])[1](result)


def explorer(model, world, layer=0, unit=1):
    """A layer menu and a unit slider over one figure redrawn in place. Returns the Explorer."""
    import ipywidgets as widgets

    check_model_and_world(model, world)
    compute.check_mlp_model(model)   # an attention-only model has no unit to slide over
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
