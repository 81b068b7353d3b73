"""Chapter 02 explorer: one query against the keys of "the cat sat".

* ``query_step`` is the compute: one query row against every key, the weights and
  the output (tests call it; the widget calls it on every move).
* ``three_words_query`` runs it on the chapter's hand-picked example.
* ``query_view()`` builds the three-panel figure once and returns the function that
  updates it; ``explorer()`` wires a token menu, two sliders and two tick boxes to it.
"""
import math

import numpy as np

from .. import reference as ref
from ..errors import as_array, fail
from ..qkv import three_words
from . import Blitter

QUERY_COLOUR, KEY_COLOUR, OUTPUT_COLOUR, HIDDEN_COLOUR = "#d1495b", "#30638e", "#00798c", "#bbbbbb"


def query_step(query, keys, values, scale=True, visible=None):
    """One query against T keys.

    query: (d_k,); keys: (T, d_k); values: (T, d_v).
    scale: divide the scores by sqrt(d_k). visible: how many keys, from the first,
    the query may see (the causal mask of a query at position visible - 1); None = all.
    Returns a dict: scores (T,) = keys @ query; scaled (T,); weights (T,), 0 on hidden
    keys and summing to 1; output (d_v,) = weights @ values; visible (int); scale (bool).
    """
    query = as_array(query, "query", 1)
    keys, values = as_array(keys, "keys", 2), as_array(values, "values", 2)
    T, d_k = keys.shape
    if query.shape[0] != d_k:
        fail(f"the query has d_k={query.shape[0]} but the keys have d_k={d_k}")
    if values.shape[0] != T:
        fail(f"there are {T} keys but {values.shape[0]} values; each key needs one value")
    visible = T if visible is None else visible
    if isinstance(visible, bool) or not isinstance(visible, (int, np.integer)) or not 1 <= visible <= T:
        fail(f"visible should be a whole number of keys from 1 to {T}, but got {visible!r}")
    scores = keys @ query
    scaled = scores / math.sqrt(d_k) if scale else scores
    shown = np.where(np.arange(T) < visible, scaled, -np.inf)
    weights = ref.softmax(shown)
    return {"scores": scores, "scaled": scaled, "weights": weights, "output": weights @ values,
            "visible": int(visible), "scale": bool(scale)}


def three_words_query(token="sat", query=None, scale=True, causal=False):
    """query_step on "the cat sat" with the hand-picked W_q, W_k, W_v (d_k = d_v = 2).

    token: whose query (and, with causal=True, whose position); query: a (2,) vector
    that replaces the token's own query, or None. Returns query_step's dict plus
    tokens, token, query (2,), keys (3, 2) and values (3, 2).
    """
    ex = three_words()
    if token not in ex["tokens"]:
        fail(f"token should be one of {ex['tokens']}, but got {token!r}")
    position = ex["tokens"].index(token)
    q_all, keys, values = ex["x"] @ ex["W_q"], ex["x"] @ ex["W_k"], ex["x"] @ ex["W_v"]
    query = q_all[position] if query is None else as_array(query, "query", 1)
    result = query_step(query, keys, values, scale=scale, visible=position + 1 if causal else None)
    return {**result, "tokens": ex["tokens"], "token": token, "query": query,
            "keys": keys, "values": values}


def vector_groups(vectors, names):
    """Group equal rows of vectors (T, 2): [(vector, "name1, name2"), ...] in first-seen order."""
    groups = {}
    for v, name in zip(np.asarray(vectors, dtype=float), names):
        groups.setdefault(tuple(np.round(v, 9)), []).append(name)
    return [(np.array(v), ", ".join(n)) for v, n in groups.items()]


def draw_fixed_arrows(ax, vectors, names, colour, limit):
    """Arrows from the origin for each distinct row of vectors (T, 2), equal rows sharing a label;
    a zero vector is a dot. Sets up the plane (axes, limits, grid)."""
    for v, label in vector_groups(vectors, names):
        if np.allclose(v, 0):
            ax.plot([0], [0], "o", color=colour, ms=5)
            ax.annotate(f"{label} (zero)", (0, 0), xytext=(5, -12), textcoords="offset points",
                        color=colour, fontsize=9)
            continue
        ax.annotate("", xy=v, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.5,
                                                              shrinkA=0, shrinkB=0))
        ax.annotate(label, xy=v, xytext=(4, 4), textcoords="offset points", color=colour, fontsize=9)
    ax.axhline(0, color="#dddddd", lw=0.8, zorder=0)
    ax.axvline(0, color="#dddddd", lw=0.8, zorder=0)
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)


def moving_arrow(ax, colour, name):
    """An arrow from the origin and its tip label, to be moved with ``point``."""
    arrow = ax.annotate("", xy=(1, 0), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=colour, lw=2.5, shrinkA=0, shrinkB=0))
    tip = ax.annotate(name, xy=(1, 0), xytext=(-6, 4), textcoords="offset points", ha="right",
                      color=colour, fontsize=10, fontweight="bold")
    return arrow, tip


def point(arrow_and_tip, v):
    """Move an arrow made by ``moving_arrow`` to the vector v (2,)."""
    arrow, tip = arrow_and_tip
    arrow.xy = tip.xy = (float(v[0]), float(v[1]))


def fmt(v):
    """'[0.40, -0.20]' with no '-0.00'."""
    return "[" + ", ".join(f"{x:.2f}" for x in np.round(v, 2) + 0.0) + "]"


def query_view(limit_q=3.0, limit_v=1.2):
    """The explorer's figure and the function that updates it: (fig, show).

    show(result) takes a three_words_query result, moves the query and output arrows,
    resizes the weight bars, rewrites the titles and returns the figure as PNG bytes.
    Only those moving parts are redrawn: the rest is rendered once (again when the
    scaling is switched, which changes the middle title) and pasted back.
    """
    from matplotlib.figure import Figure

    ex = three_words()
    tokens, keys, values = ex["tokens"], ex["x"] @ ex["W_k"], ex["x"] @ ex["W_v"]
    fig = Figure(figsize=(10.5, 3.3), dpi=80)
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.09, top=0.84, wspace=0.35)
    ax_q, ax_w, ax_v = fig.subplots(1, 3)
    draw_fixed_arrows(ax_q, keys, [f"k {t}" for t in tokens], KEY_COLOUR, limit_q)
    draw_fixed_arrows(ax_v, values, [f"v {t}" for t in tokens], KEY_COLOUR, limit_v)
    ax_w.set_ylim(0, 1.15)
    ax_w.set_ylabel("weight")
    ax_w.set_xticks(range(len(tokens)), tokens)
    ax_q.set_title("the query (red) against the keys")
    ax_v.set_title("output = weights @ values")
    query_arrow = moving_arrow(ax_q, QUERY_COLOUR, "q")
    output_arrow = moving_arrow(ax_v, OUTPUT_COLOUR, "output")
    readouts = [ax.text(0.03, 0.04, "", transform=ax.transAxes, color=colour, fontsize=10,
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.8))
                for ax, colour in ((ax_q, QUERY_COLOUR), (ax_v, OUTPUT_COLOUR))]
    bars = list(ax_w.bar(range(len(tokens)), np.zeros(len(tokens)), color=KEY_COLOUR))
    labels = [ax_w.text(i, 0, "", ha="center", fontsize=9) for i in range(len(tokens))]
    blitter = Blitter(fig, [*query_arrow, *output_arrow, *bars, *labels, *readouts])
    drawn = {"scale": None}   # the scaling the saved background shows

    def show(result):
        point(query_arrow, result["query"])
        point(output_arrow, result["output"])
        readouts[0].set_text(f"q of '{result['token']}' = {fmt(result['query'])}")
        readouts[1].set_text(f"output = {fmt(result['output'])}")
        for i, (bar, label) in enumerate(zip(bars, labels)):
            seen = i < result["visible"]
            bar.set_height(result["weights"][i])
            bar.set_color(KEY_COLOUR if seen else HIDDEN_COLOUR)
            label.set_position((i, result["weights"][i] + 0.03))
            label.set_text(f"{result['weights'][i]:.3f}\n({result['scaled'][i]:.2f})" if seen
                           else "hidden")
        if result["scale"] != drawn["scale"]:
            ax_w.set_title("weights = softmax(score), score = q·k" + (" / √2" if result["scale"] else "")
                           + "\n(score in brackets)")
            blitter.reset()
            drawn["scale"] = result["scale"]
        return blitter.png()
    return fig, show


def query_figure(result):
    """The explorer's figure for one three_words_query result, as PNG bytes."""
    return query_view()[1](result)


def explorer(token="sat"):
    """A token menu, sliders for the query's two numbers, tick boxes for the √d_k scaling and
    the causal mask, and one figure redrawn in place (an image replaced through its display id)."""
    import ipywidgets as widgets
    from IPython.display import Image, display

    ex = three_words()
    own_queries = dict(zip(ex["tokens"], ex["x"] @ ex["W_q"]))
    menu = widgets.Dropdown(options=ex["tokens"], value=token, description="query of")
    q0, q1 = (widgets.FloatSlider(value=float(own_queries[token][i]), min=-3, max=3, step=0.1,
                                  description=f"q[{i}]") for i in (0, 1))
    scale = widgets.Checkbox(value=True, description="divide by √d_k")
    causal = widgets.Checkbox(value=False, description="causal mask")
    _, show = query_view()
    busy = []  # set while the menu moves both sliders, so the figure is drawn once

    def image():
        result = three_words_query(menu.value, [q0.value, q1.value], scale.value, causal.value)
        return Image(data=show(result), format="png")

    def redraw(change):
        if not busy:
            handle.update(image())

    def token_chosen(change):
        busy.append(True)
        q0.value, q1.value = (float(x) for x in own_queries[menu.value])
        busy.clear()
        redraw(change)

    display(widgets.HBox([widgets.VBox([menu, scale, causal]), widgets.VBox([q0, q1])]))
    handle = display(image(), display_id=True)
    menu.observe(token_chosen, names="value")
    for control in (q0, q1, scale, causal):
        control.observe(redraw, names="value")
