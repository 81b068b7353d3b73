"""Chapter 03's explorer: grow d, switch the √d scaling on and off, and watch the scores
spread, one softmax row saturate and its gradient die.

* ``compute.explore(d, scaled)`` is the compute (tests call it directly).
* ``scaling_view()`` builds the three-panel figure once and returns ``draw(result)``,
  which moves its artists and returns PNG bytes (the still parts are drawn once).
* ``explorer()`` wires a log slider for d and a scaling checkbox to it with
  ``helpers.explorer.show``.
"""
import math

import numpy as np

from .. import plots
from ..errors import check_number, check_positive_int, check_switch, fail, shown, to_numpy
from ..explorer import Blitter, new_figure, show, start_at
from .compute import explore, gradient_by_dim
from ..states import course_modes

BINS = np.linspace(-100, 100, 81)
CURVE_DIMS = [int(round(2 ** (e / 2))) for e in range(2, 21)]   # 2 .. 1024, half-octave steps


MAX_CURVE_QUERIES = 10_000   # queries per d of the precomputed gradient curve (the explorer's: 300)
RESULT_KEYS = ("d", "scaled", "scores", "spread", "weights", "gradient")


def check_explore_result(result):
    """``result`` as compute.explore returns it: a dict with d (a whole number >= 1), scaled (True or
    False), scores (at least one finite number), spread and gradient (finite numbers >= 0) and weights
    (a softmax row of six keys); else one sentence. Returns it."""
    if not isinstance(result, dict) or not set(RESULT_KEYS) <= set(result):
        fail(f"result should be the dict explore returns (with {', '.join(RESULT_KEYS)}), but got {shown(result)}")
    check_positive_int(result["d"], "result['d']")
    check_switch(result["scaled"], "result['scaled']")
    for name in ("spread", "gradient"):
        check_number(result[name], f"result[{name!r}]", low=0)
    scores, weights = to_numpy(result["scores"], "result['scores']"), to_numpy(result["weights"], "result['weights']")
    if scores.ndim != 1 or not len(scores) or not np.isfinite(scores).all():
        fail(f"result['scores'] should be a row of finite numbers, at least one, but got {shown(scores)}")
    if weights.shape != (6,) or not np.isfinite(weights).all() or (weights < 0).any() or abs(weights.sum() - 1) > 1e-6:
        fail(f"result['weights'] should be one softmax row of six keys (six numbers >= 0 summing to 1), "
             f"but got {shown(weights)}")
    return result


def scaling_view(curve_queries=300):
    """The explorer's figure and the function that draws one ``explore`` result on it: (view, draw).

    Left: histogram of 2,000 scores as softmax sees them (from -100 to 100; its header says how many lie
    further out, none dropped without a word). Middle: one softmax row over six
    keys. Right: the median gradient size against d (precomputed, scaled and raw), with
    this row's gradient marked. ``draw(result)`` moves the artists and returns PNG bytes.
    """
    curve_queries = check_positive_int(curve_queries, "curve_queries")
    if curve_queries > MAX_CURVE_QUERIES:
        fail(f"curve_queries should be at most {MAX_CURVE_QUERIES:,} (this course's limit), but got {curve_queries:,}")
    fig = new_figure((10.5, 3.4))
    fig.subplots_adjust(left=0.06, right=0.985, bottom=0.17, top=0.8, wspace=0.32)
    view = Blitter(fig)
    animate = view.animate
    ax_hist, ax_row, ax_grad = fig.subplots(1, 3)
    hist = animate(ax_hist.stairs(np.zeros(len(BINS) - 1), BINS, fill=True, color=plots.BASE))
    ax_hist.set_xlim(BINS[0], BINS[-1])
    ax_hist.set_ylim(0, 0.6)
    ax_hist.set_xlabel("score fed to softmax")
    ax_hist.set_ylabel("share of 2,000 pairs")
    bars = [animate(b) for b in ax_row.bar(range(6), np.zeros(6), color=plots.BASE)]
    labels = [animate(ax_row.text(i, 0, "", ha="center", fontsize=8)) for i in range(6)]
    ax_row.set_xticks(range(6), [str(i) for i in range(6)])
    ax_row.set_xlabel("key")
    ax_row.set_ylim(0, 1.12)
    ax_row.set_ylabel("attention weight")
    curve = gradient_by_dim(CURVE_DIMS, n_queries=curve_queries, seed=3)
    dims = [r["d"] for r in curve]
    ax_grad.loglog(dims, [r["scaled"] for r in curve], color=plots.BASE, label="median, scaled")
    ax_grad.loglog(dims, [max(r["raw"], 1e-12) for r in curve], color=plots.ACCENT, label="median, raw")
    marker = animate(ax_grad.plot([2], [0.3], "o", color="black", label="this row")[0])
    ax_grad.set_ylim(1e-12, 2)
    ax_grad.set_yticks([1e-12, 1e-9, 1e-6, 1e-3, 1], ["1e-12", "1e-9", "1e-6", "0.001", "1"])
    ax_grad.set_xticks([2, 8, 32, 128, 512], ["2", "8", "32", "128", "512"])
    ax_grad.minorticks_off()
    ax_grad.set_xlabel("d (log scale)")
    ax_grad.set_ylabel("‖∂weights/∂input‖")
    ax_grad.legend(fontsize=7, loc="lower left")
    title = animate(fig.text(0.5, 0.95, "", ha="center", fontsize=11))
    headers = [animate(fig.text(0.5 * (ax.get_position().x0 + ax.get_position().x1), 0.83, "",
                                ha="center", fontsize=9)) for ax in (ax_hist, ax_row, ax_grad)]

    def draw(result):
        check_explore_result(result)
        scores = to_numpy(result["scores"], "result['scores']")
        counts, _ = np.histogram(scores, BINS)   # (a score past the bins is counted in the header, not piled at an edge)
        hist.set_data(counts / len(scores))
        outside = int(((scores < BINS[0]) | (scores > BINS[-1])).sum())
        for bar, label, w in zip(bars, labels, result["weights"]):
            bar.set_height(w)
            label.set_position((label.get_position()[0], w + 0.02))
            label.set_text(f"{w:.3f}")
        marker.set_data([result["d"]], [max(result["gradient"], 1e-12)])
        how = "scores / √d" if result["scaled"] else "raw scores q·k (no scaling)"
        title.set_text(f"d = {result['d']}, softmax of {how}")
        headers[0].set_text(f"spread (std) = {result['spread']:.2f}"
                            + (f", {outside:,} of {len(scores):,} past ±{BINS[-1]:.0f} not shown" if outside else ""))
        headers[1].set_text(f"one query, six keys: largest weight {result['weights'].max():.3f}")
        headers[2].set_text(f"gradient size of this row: {result['gradient']:.2g}")
        return view.png()
    return view, draw


def slider_dimension(d, name="d"):
    """A d the slider may hold: a whole number, or one of its own positions 2**(k/2) (2**5.5 draws as
    d = 45); 2.5 is neither and is refused, not rounded."""
    half_octaves = 2 * math.log2(d)
    if d != round(d) and abs(half_octaves - round(half_octaves)) > 1e-9:
        fail(f"{name} should be a whole number (or one of the slider's positions), but got {d!r}")
    return d


@course_modes(grad=False)   # (built on the CPU inside torch.device("meta"); no torch: nothing)
def explorer(d=64, scaled=False):
    """A log slider for d (2 to 1024), a checkbox for the √d scaling, and one figure redrawn
    in place. Returns the Explorer."""
    import ipywidgets as widgets

    slider = widgets.FloatLogSlider(base=2, min=1, max=10, step=0.5, description="d", readout_format=".0f")
    slider.course_rule = slider_dimension
    box = widgets.Checkbox(description="divide by √d")
    controls = start_at({"d": slider, "scaled": box}, d=d, scaled=scaled)   # d from 2 to 1024, refused outside
    _, draw = scaling_view()
    return show(controls, lambda d, scaled: draw(explore(round(d), scaled)))   # the log slider's 2**5.5 is d = 45
