"""Chapter 09 explorer: slide temperature, top-k and top-p; watch the distribution, the kept set
and a few sampled continuations change.

* ``slide`` is the compute (tests call it; the widget calls it on every move).
* ``SlideView`` is the figure: ``update`` draws a ``slide`` result, ``png`` renders one fast.
* ``explorer()`` shows the sliders and one figure that is redrawn in place.
"""
import numpy as np
import torch

from ..sampling import compute as sampling
from ..errors import fail
from . import Blitter, png  # noqa: F401  (png: tests call explore.png)

GREY, BASE, ACCENT = "#c9c9c9", "#30638e", "#d1495b"


def slide(model, world, prompt="<BOS> dragon drinks", temperature=1.0, top_k=None, top_p=None,
          n_continuations=3, length=4, seed=0):
    """What the sampler does with the next-token logits after ``prompt``.

    Returns a dict:
      vocab          the world's words (V,)
      order          token ids, most probable first (temperature never changes this order)
      tempered       softmax(logits / temperature), (V,) NumPy
      final          the distribution drawn from after top-k and top-p, (V,) NumPy
      kept           ids with final > 0, most probable first
      continuations  n_continuations strings, each ``length`` sampled words (seeds seed, seed+1, ...)
    """
    sampling.check_sampling(temperature, top_k, top_p, vocab_size=model.cfg.vocab_size)
    ids = world.tokenizer.encode(prompt)
    with torch.no_grad():
        logits = model(ids)[-1]
    tempered = sampling.with_temperature(logits, temperature)
    final = sampling.next_distribution(logits, temperature, top_k, top_p)
    order = torch.argsort(logits, descending=True, stable=True)
    kept = [int(i) for i in order if final[i] > 0]
    continuations = []
    for i in range(n_continuations):
        out = sampling.generate(model, ids, length, temperature, top_k, top_p, seed=seed + i)
        continuations.append(" ".join(world.tokenizer.decode(out[len(ids):])))
    return dict(vocab=list(world.tokenizer.vocab), order=[int(i) for i in order],
                tempered=tempered.numpy(), final=final.numpy(), kept=kept,
                continuations=continuations, prompt=prompt)


def slider_settings(temperature, top_k, top_p, vocab_size):
    """Slider values -> the sampler's (temperature, top_k, top_p): top-k at the vocabulary
    size and top-p at 1 mean "off" (None), which is what those values do anyway."""
    return (temperature, None if top_k >= vocab_size else top_k, None if top_p >= 1.0 else top_p)


def settings_text(temperature, top_k, top_p):
    """'T = 0.70, top-k off, top-p = 0.90' (None means off)."""
    k = "off" if top_k is None else str(top_k)
    p = "off" if top_p is None else f"{top_p:.2f}"
    return f"T = {temperature:.2f},  top-k {k},  top-p {p}"


def new_figure(size=(7.0, 4.4)):
    """A matplotlib Figure outside pyplot, with fixed margins and its own Agg canvas."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=90)
    FigureCanvasAgg(fig)
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.36, top=0.9)
    return fig


class SlideView:
    """One figure for ``slide`` results: grey bars after temperature, coloured bars after the
    filters, the kept probabilities, a title with the settings and the sampled continuations.

    ``update(result, settings)`` redraws it (returns the Figure, for display);
    ``png(result, settings)`` returns PNG bytes fast: the axes, ticks and legend are drawn
    once, and each later call redraws only the bars and texts that change (blitting).
    """

    def __init__(self, vocab, order):
        V = len(vocab)
        if sorted(order) != list(range(V)):
            fail(f"order should list each of the {V} token ids once, but got {order}")
        self.V, self.order = V, list(order)
        self.fig = fig = new_figure()
        self.ax = ax = fig.add_subplot()
        x = np.arange(V)
        self.before = ax.bar(x, np.zeros(V), width=0.8, color=GREY, label="after temperature")
        self.after = ax.bar(x, np.zeros(V), width=0.5, color=BASE, label="drawn from (after top-k, top-p)")
        self.values = [ax.text(i, 0, "", ha="center", fontsize=8) for i in x]
        ax.set_xticks(x, [vocab[i] for i in order], rotation=45, ha="right")
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("probability")
        ax.legend(loc="upper right", fontsize=8, frameon=False)
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

    top-k at the vocabulary size and top-p at 1.00 mean "off". The figure is an
    ordinary image output, replaced through its display id on every move.
    """
    import ipywidgets as widgets
    from IPython.display import Image, display

    V = model.cfg.vocab_size
    sliders = dict(
        temperature=widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.05, description="temperature"),
        top_k=widgets.IntSlider(value=V, min=1, max=V, description="top-k"),
        top_p=widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.01, description="top-p"),
        seed=widgets.IntSlider(value=0, min=0, max=50, description="seed"))
    first = slide(model, world, prompt, n_continuations=0)
    view = SlideView(first["vocab"], first["order"])

    def image():
        t, k, p = slider_settings(sliders["temperature"].value, sliders["top_k"].value,
                                  sliders["top_p"].value, V)
        result = slide(model, world, prompt, t, k, p, seed=sliders["seed"].value)
        return Image(data=view.png(result, settings_text(t, k, p)), format="png")

    display(widgets.HBox([widgets.VBox([sliders["temperature"], sliders["seed"]]),
                          widgets.VBox([sliders["top_k"], sliders["top_p"]])]))
    handle = display(image(), display_id=True)
    for s in sliders.values():
        s.observe(lambda change: handle.update(image()), names="value")
