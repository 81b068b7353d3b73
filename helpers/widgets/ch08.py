"""Chapter 08 explorer: depth and LayerNorm placement on a stack, from the shipped runs.

* ``stack_view`` is the compute (tests call it; the widget calls it on every move):
  the three placements' loss and first-layer gradient curves for one depth and
  learning rate, read from ``data/normalization/curves.json``.
* ``stack_figure`` draws one view; ``explorer()`` wires a depth slider and a
  learning-rate toggle to it and redraws the one figure in place.
"""
import numpy as np

from ..errors import fail
from ..normalization import COLOURS, LABELS, PLACEMENTS, best_loss, cat_batch, get_run, unigram_loss
from . import Blitter

FLOOR = 1e-15  # gradient norms below this are drawn at it (a log axis has no 0)
LOSS_TOP = 1e4  # losses above this run off the top of the loss panel


def reference_losses():
    """(unigram, best): the loss of a model that ignores its input, and the lowest possible."""
    from .. import worlds

    world = worlds.cat_world()
    return unigram_loss(cat_batch()[1]), best_loss(world.train)


def stack_view(curves, n_layers=8, lr=3e-2):
    """The three placements trained at one depth and learning rate.

    Returns a dict: steps (S,), loss {placement: (S,)}, grad_first {placement: (S,)},
    final {placement: last loss}, and text, one line with the final losses.
    """
    if n_layers not in curves["depths"]:
        fail(f"n_layers should be one of the trained depths {curves['depths']}, but got {n_layers!r}")
    if not any(np.isclose(lr, x) for x in curves["lrs"]):
        fail(f"lr should be one of the trained learning rates {curves['lrs']}, but got {lr!r}")
    lr = min(curves["lrs"], key=lambda x: abs(x - lr))
    runs = {norm: get_run(curves, norm, n_layers, lr) for norm in PLACEMENTS}
    final = {norm: float(run["loss"][-1]) for norm, run in runs.items()}
    text = f"{n_layers} layers, lr {lr:g}, final loss: " + ", ".join(
        f"{LABELS[norm]} {final[norm]:.3f}" for norm in PLACEMENTS)
    broken = [f"{LABELS[norm]} diverged (NaN) at step {int(np.flatnonzero(np.isnan(run['loss']))[0])}"
              for norm, run in runs.items() if np.isnan(run["loss"]).any()]
    text += "".join("; " + b for b in broken)
    return {"steps": np.arange(1, curves["steps"] + 1),
            "loss": {norm: run["loss"] for norm, run in runs.items()},
            "grad_first": {norm: run["grad_first"] for norm, run in runs.items()},
            "final": final, "text": text}


def limits(curves, name):
    """(low, high) of one curve kind over the whole grid, for fixed log axes."""
    values = np.concatenate([np.asarray(run[name], dtype=float) for run in curves["runs"].values()])
    values = np.maximum(values[np.isfinite(values)], FLOOR)
    return values.min() / 1.5, values.max() * 1.5


def fixed_log_ticks(ax, every=1):
    """Label every ``every``-th power of ten on the log y axis with plain text ("1e-3"),
    no minor ticks: the labels are then drawn without mathtext, which keeps a redraw fast."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    low, high = ax.get_ylim()
    powers = [p for p in range(int(np.floor(np.log10(low))), int(np.ceil(np.log10(high))) + 1)
              if p % every == 0]
    ax.yaxis.set_major_locator(FixedLocator([10.0 ** p for p in powers]))
    ax.yaxis.set_major_formatter(FixedFormatter([f"1e{p}" if p else "1" for p in powers]))
    ax.yaxis.set_minor_locator(NullLocator())


def stack_view_figure(curves):
    """An empty two-panel figure and the function that draws a stack_view on it: (fig, show)."""
    from matplotlib.figure import Figure

    unigram, best = reference_losses()
    fig = Figure(figsize=(10.0, 3.9), dpi=80)
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.13, top=0.82, wspace=0.22)
    ax_loss, ax_grad = fig.subplots(1, 2)
    steps = np.arange(1, curves["steps"] + 1)
    lines = {}
    for norm in PLACEMENTS:
        lines[norm, "loss"], = ax_loss.plot(steps, steps * 0 + 1.0, color=COLOURS[norm], label=LABELS[norm])
        lines[norm, "grad"], = ax_grad.plot(steps, steps * 0 + 1.0, color=COLOURS[norm], lw=1)
    for level, style, text in ((unigram, "--", "ignores its input"), (best, ":", "best possible")):
        ax_loss.axhline(level, color="grey", ls=style, lw=0.8)
        ax_loss.text(steps[-1], level * 1.12, f"{text}: {level:.3f}", ha="right", fontsize=8)
    ax_loss.set(yscale="log", ylim=(best * 0.6, LOSS_TOP), xlabel="training step",
                ylabel="training loss (nats)")
    ax_grad.set(yscale="log", ylim=limits(curves, "grad_first"), xlabel="training step",
                ylabel="gradient norm of layer 0")
    fig.legend(loc="upper center", bbox_to_anchor=(0.5, 0.93), ncol=3, fontsize=9, frameon=False)
    for ax, every in ((ax_loss, 1), (ax_grad, 3)):
        fixed_log_ticks(ax, every)
        ax.grid(alpha=0.3)
    title = fig.text(0.5, 0.96, "", ha="center", va="top", fontsize=10)

    def show(view):
        for norm in PLACEMENTS:
            lines[norm, "loss"].set_ydata(view["loss"][norm])
            lines[norm, "grad"].set_ydata(np.maximum(view["grad_first"][norm], FLOOR))
        title.set_text(view["text"])
        return fig
    show.moving = list(lines.values()) + [title]   # the artists a redraw changes
    return fig, show


def stack_figure(curves, n_layers=8, lr=3e-2):
    """The figure of one stack_view."""
    return stack_view_figure(curves)[1](stack_view(curves, n_layers, lr))


def update_png(curves, show, render, n_layers, lr):
    """What the explorer does on every move: compute the view, move the artists, render PNG bytes.

    render: a function returning PNG bytes, e.g. ``Blitter(fig, show.moving).png``."""
    show(stack_view(curves, n_layers, lr))
    return render()


def explorer(curves, n_layers=8, lr=3e-2):
    """A depth slider, a learning-rate toggle and one figure redrawn in place.

    The figure is an ordinary image output, replaced through its display id on
    every move, so it also shows when the notebook runs without a browser.
    """
    import ipywidgets as widgets
    from IPython.display import Image, display

    depth = widgets.SelectionSlider(options=curves["depths"], value=n_layers, description="layers")
    rate = widgets.ToggleButtons(options=[(f"{x:g}", x) for x in curves["lrs"]], value=lr,
                                 description="lr")
    fig, show = stack_view_figure(curves)
    render = Blitter(fig, show.moving).png

    def image():
        return Image(data=update_png(curves, show, render, depth.value, rate.value), format="png")

    display(widgets.HBox([depth, rate]))
    handle = display(image(), display_id=True)
    for control in (depth, rate):
        control.observe(lambda change: handle.update(image()), names="value")
