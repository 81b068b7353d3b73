"""Chapter 08 explorer: depth and LayerNorm placement on a stack, from the shipped runs.

A depth slider and a learning-rate toggle; the figure shows the three placements' loss and
first-layer gradient at every step (``compute.stack_view``), redrawn by blitting only the
curves and the title.
"""
import numpy as np

from ..explorer import Blitter, check_control, new_figure, show, start_at
from ..errors import fail, shown
from .compute import COLOURS, LABELS, PLACEMENTS, check_runs, curves_run, reference_losses, stack_view

FLOOR = 1e-15  # gradient norms below this are drawn at it (a log axis has no 0)
LOSS_TOP = 1e4  # losses above this run off the top of the loss panel


def limits(curves, name):
    """(low, high) of one curve kind over the whole grid (checked: ``check_explorer_curves``), for fixed log axes."""
    values = np.concatenate([curves_run(curves, key, (name,))[name] for key in curves["runs"]])
    values = np.maximum(values[np.isfinite(values)], FLOOR)
    if not values.size:
        fail(f"curves' runs should hold at least one finite {name} to scale the axis by, but every one is NaN or inf")
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


def check_explorer_curves(curves):
    """The curves the explorer draws (``compute.check_runs``): a run of each placement at each depth and
    learning rate, each with loss and grad_first of curves' steps numbers; return them, else one sentence."""
    return check_runs(curves, PLACEMENTS, ("loss", "grad_first"), full=True)


def stack_view_figure(curves):
    """An empty two-panel figure and the function that draws a stack_view on it: (fig, draw).

    ``draw.moving`` lists the artists a redraw changes (for a Blitter)."""
    check_explorer_curves(curves)
    unigram, best = reference_losses()
    fig = new_figure((10.0, 3.9))
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

    def draw(view):
        for norm in PLACEMENTS:
            lines[norm, "loss"].set_ydata(view["loss"][norm])
            lines[norm, "grad"].set_ydata(np.maximum(view["grad_first"][norm], FLOOR))
        title.set_text(view["text"])
        return fig
    draw.moving = list(lines.values()) + [title]
    return fig, draw


def stack_figure(curves, n_layers=8, lr=3e-2):
    """The figure of one stack_view (every artist drawn)."""
    return stack_view_figure(curves)[1](stack_view(curves, n_layers, lr))


def explorer(curves, n_layers=8, lr=3e-2):
    """A depth slider, a learning-rate toggle and one figure redrawn in place; returns the Explorer."""
    import ipywidgets as widgets

    check_explorer_curves(curves)
    depths = list(curves["depths"])
    if isinstance(n_layers, bool) or not isinstance(n_layers, (int, np.integer)) or n_layers not in depths:
        fail(f"n_layers should be one of the trained depths {', '.join(map(str, depths))}, but got {shown(n_layers)}")
    controls = {
        "n_layers": widgets.SelectionSlider(options=depths, description="layers"),
        "lr": widgets.ToggleButtons(options=[(f"{x:g}", x) for x in curves["lrs"]], description="lr")}
    n_layers = check_control(controls["n_layers"], int(n_layers), "n_layers")   # SelectionSlider: one of its depths
    start_at(controls, lr=lr)
    controls["n_layers"].value = n_layers
    fig, draw = stack_view_figure(curves)
    blitter = Blitter(fig, draw.moving)

    def render(n_layers, lr):
        draw(stack_view(curves, n_layers, lr))
        return blitter.png()
    return show(controls, render)
