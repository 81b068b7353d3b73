"""Chapter 09 explorer: slide temperature, top-k and top-p; watch the distribution, the kept set
and a few sampled continuations change.

``SlideView`` is the figure of one ``compute.slide`` result (``update`` draws it, ``png``
renders it fast by blitting); ``explorer()`` wires four sliders to it.
"""
import numpy as np

from ..errors import fail
from ..explorer import Blitter, new_figure, show
from .compute import settings_text, slide, slider_settings

GREY, BASE, ACCENT = "#c9c9c9", "#30638e", "#d1495b"


class SlideView:
    """One figure for ``slide`` results: grey bars after temperature, coloured bars after the
    filters, the kept probabilities, a title with the settings and the sampled continuations.

    ``update(result, settings)`` redraws it (returns the Figure);
    ``png(result, settings)`` returns PNG bytes fast: the axes, ticks and legend are drawn
    once, and each later call redraws only the bars and texts that change (blitting).
    """

    def __init__(self, vocab, order):
        V = len(vocab)
        if sorted(order) != list(range(V)):
            fail(f"order should list each of the {V} token ids once, but got {order}")
        self.V, self.order = V, list(order)
        self.fig = fig = new_figure((7.0, 4.4), dpi=90)
        fig.subplots_adjust(left=0.09, right=0.98, bottom=0.36, top=0.9)
        self.ax = ax = fig.add_subplot()
        x = np.arange(V)
        self.before = ax.bar(x, np.zeros(V), width=0.8, color=GREY)
        self.after = ax.bar(x, np.zeros(V), width=0.5, color=BASE)
        self.values = [ax.text(i, 0, "", ha="center", fontsize=8) for i in x]
        ax.set_xticks(x, [vocab[i] for i in order], rotation=45, ha="right")
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("probability")
        from matplotlib.patches import Patch
        ax.legend(handles=[Patch(color=GREY, label="after temperature"),
                           Patch(color=BASE, label="drawn from (after top-k, top-p)"),
                           Patch(color=ACCENT, label="drawn from: the most probable word (greedy)")],
                  loc="upper right", fontsize=8, frameon=False)
        self.footer = fig.text(0.09, 0.03, "", fontsize=9, family="monospace", va="bottom")
        self.blitter = None   # made by the first png(), which marks the changing artists animated

    def changing(self):
        """The artists that change from one result to the next."""
        return [*self.before, *self.after, *self.values, self.ax.title, self.footer]

    def update(self, result, settings=""):
        tempered, final, kept = result["tempered"], result["final"], set(result["kept"])
        for slot, i in enumerate(self.order):
            self.before[slot].set_height(tempered[i])
            self.after[slot].set_height(final[i])
            self.after[slot].set_color(ACCENT if i == self.order[0] else BASE)
            self.values[slot].set_position((slot, max(tempered[i], final[i]) + 0.02))
            self.values[slot].set_text(f"{final[i]:.2f}" if i in kept else "")
        self.ax.set_title(f"after \"{result['prompt']}\":  {settings}  →  {len(kept)} of {self.V} "
                          f"tokens kept", fontsize=10)
        self.footer.set_text("sampled continuations:\n" +
                             "\n".join(f"  {n}. {c}" for n, c in enumerate(result["continuations"], 1)))
        return self.fig

    def png(self, result, settings=""):
        """PNG bytes of the figure showing ``result``, redrawing only what changes."""
        if self.blitter is None:
            self.blitter = Blitter(self.fig, self.changing())
        self.update(result, settings)
        return self.blitter.png()


def slide_figure(result, settings=""):
    """The figure of one ``slide`` result (a matplotlib Figure)."""
    return SlideView(result["vocab"], result["order"]).update(result, settings)


def explorer(model, world, prompt="<BOS> dragon drinks"):
    """Sliders for temperature, top-k, top-p and the seed, and one figure redrawn in place.

    top-k at the vocabulary size and top-p at 1.00 mean "off". Returns the Explorer.
    """
    import ipywidgets as widgets

    V = model.cfg.vocab_size
    label = dict(style={"description_width": "8em"})   # the default width cuts "temperature" short
    controls = dict(
        temperature=widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.05, description="temperature", **label),
        top_k=widgets.IntSlider(value=V, min=1, max=V, description="top-k", **label),
        top_p=widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.01, description="top-p", **label),
        seed=widgets.IntSlider(value=0, min=0, max=50, description="seed", **label))
    first = slide(model, world, prompt, n_continuations=0)
    view = SlideView(first["vocab"], first["order"])

    def render(temperature, top_k, top_p, seed):
        t, k, p = slider_settings(temperature, top_k, top_p, V)
        return view.png(slide(model, world, prompt, t, k, p, seed=seed), settings_text(t, k, p))
    layout = widgets.HBox([widgets.VBox([controls["temperature"], controls["seed"]]),
                           widgets.VBox([controls["top_k"], controls["top_p"]])])
    return show(controls, render, layout)
