"""Chapter 02's explorer: one query against the keys of "the cat sat".

* ``query_view()`` builds the three-panel figure once and returns the function that
  draws one ``compute.three_words_query`` result on it (fast redraws through a Blitter).
* ``explorer()`` wires a token menu, two sliders and two tick boxes to it with
  ``helpers.explorer.show``.
"""
import numpy as np

from ..errors import check_number, check_positive_int, check_switch, count, fail, shown, to_numpy
from ..explorer import Blitter, new_figure, show, start_at
from ..plots import check_ax, check_label_list, check_labels, literal
from ..readout import check_probabilities
from .compute import three_words, three_words_qkv, three_words_query

QUERY_COLOUR, KEY_COLOUR, OUTPUT_COLOUR, HIDDEN_COLOUR = "#d1495b", "#30638e", "#00798c", "#bbbbbb"


MAX_ARROWS = 12   # the most fixed arrows one panel draws ("the cat sat" has 3)


def plane_vector(v, name):
    """``v`` as two finite numbers (2,), a point of the explorer's plane; else one sentence."""
    v = to_numpy(v, name)
    if v.shape != (2,) or not np.isfinite(v).all():
        fail(f"{name} should be two finite numbers (x, y), but got {shown(v.tolist() if v.size <= 4 else v)}")
    return v


def check_vectors(vectors, names):
    """(vectors (T, 2) finite, names: T labels) for the fixed arrows, 1 <= T <= MAX_ARROWS; else one sentence."""
    vectors = to_numpy(vectors, "vectors")
    names = check_label_list(names, "names", "vector")
    if vectors.ndim != 2 or vectors.shape[1] != 2 or not 1 <= len(vectors) <= MAX_ARROWS \
            or not np.isfinite(vectors).all():
        fail(f"vectors should be 1 to {MAX_ARROWS} rows of two finite numbers, shape (T, 2), "
             f"but got shape {vectors.shape}"
             + ("" if np.isfinite(vectors).all() else " holding NaN or inf"))
    if len(names) != len(vectors):
        fail(f"names should hold one name per vector ({len(vectors)}), but holds {count(len(names))}")
    check_labels(names, "each name")
    return vectors, names


def vector_groups(vectors, names):
    """Group equal rows of vectors (T, 2): [(vector (2,), "name1, name2"), ...] in first-seen order."""
    vectors, names = check_vectors(vectors, names)
    groups = {}
    for v, name in zip(vectors, names):
        groups.setdefault(tuple(np.round(v, 9)), []).append(name)
    return [(np.array(v), ", ".join(n)) for v, n in groups.items()]


def draw_fixed_arrows(ax, vectors, names, colour, limit):
    """Arrows from the origin for each distinct row of vectors (T, 2), equal rows sharing a label;
    a zero vector is a dot. Sets up the plane (axes, limits, grid): limit, a finite number > 0."""
    ax, limit = check_ax(ax, optional=False), check_number(limit, "limit", low=0, low_open=True)
    groups = vector_groups(vectors, names)   # (checked before anything is drawn)
    for v, label in groups:
        if np.allclose(v, 0):
            ax.plot([0], [0], "o", color=colour, ms=5)
            ax.annotate(literal(f"{label} (zero)"), (0, 0), xytext=(5, -12), textcoords="offset points",
                        color=colour, fontsize=9)
            continue
        ax.annotate("", xy=v, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.5,
                                                              shrinkA=0, shrinkB=0))
        ax.annotate(literal(label), xy=v, xytext=(4, 4), textcoords="offset points", color=colour, fontsize=9)
    ax.axhline(0, color="#dddddd", lw=0.8, zorder=0)
    ax.axvline(0, color="#dddddd", lw=0.8, zorder=0)
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)


def moving_arrow(ax, colour, name, alpha=1.0, lw=2.5):
    """An arrow from the origin and its tip label, to be moved with ``point``."""
    check_ax(ax, optional=False)
    check_labels([name], "name")
    alpha, lw = check_number(alpha, "alpha", 0.0, 1.0), check_number(lw, "lw", low=0, low_open=True, high=100)
    arrow = ax.annotate("", xy=(1, 0), xytext=(0, 0),
                        arrowprops=dict(arrowstyle="-|>", color=colour, lw=lw, alpha=alpha, shrinkA=0, shrinkB=0))
    tip = ax.annotate(literal(name), xy=(1, 0), xytext=(-6, 4), textcoords="offset points", ha="right",
                      color=colour, fontsize=10, fontweight="bold", zorder=4)
    return arrow, tip


def point(arrow_and_tip, v):
    """Move an arrow made by ``moving_arrow`` to the vector v (2,); its label stays at the tip."""
    arrow, tip = check_arrow(arrow_and_tip)
    v = plane_vector(v, "v")
    arrow.xy = tip.xy = (float(v[0]), float(v[1]))


def point_query(arrow_and_tip, v, gap=11.0):
    """Move the query arrow to v (2,) with its label beside the middle of the shaft, on the
    counter-clockwise side: the keys' labels sit at their tips, so the two never meet, even
    when q lies on a key."""
    arrow, tip = check_arrow(arrow_and_tip)
    v = plane_vector(v, "v")
    gap = check_number(gap, "gap", 0.0, 1000.0)
    arrow.xy = (float(v[0]), float(v[1]))
    length = float(np.hypot(*v))
    if length < 1e-9:
        tip.xy, tip.xyann = (0.0, 0.0), (-gap, gap)
        return
    side = np.array([-v[1], v[0]]) / length          # v turned by +90°
    tip.xy = (float(v[0]) / 2, float(v[1]) / 2)
    tip.xyann = (float(gap * side[0]), float(gap * side[1]))


def check_arrow(arrow_and_tip):
    """``arrow_and_tip``, what ``moving_arrow`` returned (two matplotlib Annotations); else one sentence."""
    from matplotlib.text import Annotation

    if not (isinstance(arrow_and_tip, (tuple, list)) and len(arrow_and_tip) == 2
            and all(isinstance(a, Annotation) for a in arrow_and_tip)):
        fail(f"arrow_and_tip should be what moving_arrow returns (an arrow and its label), "
             f"but got {shown(arrow_and_tip)}")
    return arrow_and_tip


def fmt(v):
    """'[0.40, -0.20]' with no '-0.00'. v: a few finite numbers (at most 16)."""
    v = to_numpy(v, "v").ravel()
    if not 1 <= v.size <= 16 or not np.isfinite(v).all():
        fail(f"v should be 1 to 16 finite numbers, but got {shown(v.tolist() if v.size <= 16 else v)}")
    return "[" + ", ".join(f"{x:.2f}" for x in np.round(v, 2) + 0.0) + "]"


RESULT_KEYS = ("token", "query", "output", "weights", "scaled", "visible", "scale")


def check_query_result(result, tokens):
    """``result`` as compute.three_words_query returns it, for ``tokens``: a dict with token (one of tokens),
    query and output (two finite numbers each), weights (one probability per token), scaled (one finite
    score per token), visible (a whole number from 1 to len(tokens)) and scale (True or False); else one
    sentence. Returns it."""
    if not isinstance(result, dict) or not set(RESULT_KEYS) <= set(result):
        fail(f"result should be the dict three_words_query returns (with {', '.join(RESULT_KEYS)}), "
             f"but got {shown(result)}")
    if type(result["token"]) is not str or result["token"] not in tokens:
        fail(f"result['token'] should be one of {tokens}, but got {shown(result['token'])}")
    for name in ("query", "output"):
        plane_vector(result[name], f"result[{name!r}]")
    for name in ("weights", "scaled"):
        row = to_numpy(result[name], f"result[{name!r}]")
        if row.shape != (len(tokens),) or not np.isfinite(row).all():
            fail(f"result[{name!r}] should be {len(tokens)} finite numbers, one per token, but got {shown(row)}")
    check_probabilities(to_numpy(result["weights"], "result['weights']"), "result['weights']",
                        "pass a result three_words_query made")
    if check_positive_int(result["visible"], "result['visible']") > len(tokens):
        fail(f"result['visible'] should be a number of keys from 1 to {len(tokens)}, "
             f"but got {shown(result['visible'])}")
    check_switch(result["scale"], "result['scale']")
    return result


def query_view(limit_q=3.0, limit_v=1.2):
    """The explorer's figure and the function that draws on it: (fig, draw).

    draw(result) takes a three_words_query result, moves the query and output arrows,
    resizes the weight bars, rewrites the titles and returns the figure as PNG bytes.
    Only those moving parts are redrawn: the rest is rendered once (again when the
    scaling is switched, which changes the middle title) and pasted back.
    """
    limit_q = check_number(limit_q, "limit_q", low=0, low_open=True)
    limit_v = check_number(limit_v, "limit_v", low=0, low_open=True)
    tokens = three_words()["tokens"]
    _, keys, values = three_words_qkv()
    fig = new_figure((10.5, 3.3))
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.09, top=0.84, wspace=0.35)
    ax_q, ax_w, ax_v = fig.subplots(1, 3)
    draw_fixed_arrows(ax_q, keys, [f"k {t}" for t in tokens], KEY_COLOUR, limit_q)
    draw_fixed_arrows(ax_v, values, [f"v {t}" for t in tokens], KEY_COLOUR, limit_v)
    ax_v.fill(*np.asarray(values, dtype=float).T, color=OUTPUT_COLOUR, alpha=0.12, lw=0, zorder=0)
    ax_v.text(0.5, 0.6, "outputs\nstay in the\ntriangle", color=OUTPUT_COLOUR, fontsize=8)
    ax_w.set_ylim(0, 1.15)
    ax_w.set_ylabel("weight")
    ax_w.set_xticks(range(len(tokens)), tokens)
    ax_q.set_title("the query (red) against the keys")
    ax_v.set_title("output = weights @ values")
    query_arrow = moving_arrow(ax_q, QUERY_COLOUR, "q", alpha=0.45, lw=5)   # a key under q shows through
    query_arrow[1].set(ha="center", va="center")
    output_arrow = moving_arrow(ax_v, OUTPUT_COLOUR, "output")
    readouts = [ax.text(0.03, 0.04, "", transform=ax.transAxes, color=colour, fontsize=10,
                        bbox=dict(facecolor="white", edgecolor="none", alpha=0.8))
                for ax, colour in ((ax_q, QUERY_COLOUR), (ax_v, OUTPUT_COLOUR))]
    bars = list(ax_w.bar(range(len(tokens)), np.zeros(len(tokens)), color=KEY_COLOUR))
    labels = [ax_w.text(i, 0, "", ha="center", fontsize=9) for i in range(len(tokens))]
    blitter = Blitter(fig, [*query_arrow, *output_arrow, *bars, *labels, *readouts], [ax_w.title])
    drawn = {"scale": None}   # the scaling the saved title shows

    def draw(result):
        check_query_result(result, tokens)
        point_query(query_arrow, result["query"])
        point(output_arrow, result["output"])
        readouts[0].set_text(literal(f"q at '{result['token']}' = {fmt(result['query'])}"))
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
            blitter.refresh()   # only the title follows the scaling
            drawn["scale"] = result["scale"]
        return blitter.png()
    return fig, draw


def explorer(token="sat"):
    """A token menu, sliders for the query's two numbers, tick boxes for the √d_k scaling and
    the causal mask, and one figure redrawn in place. Returns the Explorer."""
    import ipywidgets as widgets

    tokens = three_words()["tokens"]
    own_queries = dict(zip(tokens, three_words_qkv()[0]))
    menu = start_at({"token": widgets.Dropdown(options=tokens, description="query of")}, token=token)["token"]
    q0, q1 = (widgets.FloatSlider(value=float(own_queries[token][i]), min=-3, max=3, step=0.1,
                                  description=f"q[{i}]") for i in (0, 1))
    scale = widgets.Checkbox(value=True, description="divide by √d_k")
    causal = widgets.Checkbox(value=False, description="causal mask")
    _, draw = query_view()
    last = {}   # the last picture, by the values it shows: a menu move sets both sliders at once

    def render(token, q0, q1, scale, causal):
        key = (token, q0, q1, scale, causal)
        if key not in last:
            last.clear()
            last[key] = draw(three_words_query(token, [q0, q1], scale, causal))
        return last[key]

    def token_chosen(change):
        with q0.hold_trait_notifications(), q1.hold_trait_notifications():
            q0.value, q1.value = (float(x) for x in own_queries[change["new"]])

    menu.observe(token_chosen, names="value")
    layout = widgets.HBox([widgets.VBox([menu, scale, causal]), widgets.VBox([q0, q1])])
    return show({"token": menu, "q0": q0, "q1": q1, "scale": scale, "causal": causal}, render, layout)
