"""Chapter 01 explorer: turn and stretch two 2-D vectors, watch dot product and cosine.

* ``vector_pair`` is the compute (tests call it; the widget calls it on every move).
* ``arrows_figure`` draws a few named vectors as arrows; ``pair_view`` draws a pair fast.
* ``explorer()`` shows four sliders and one figure that is redrawn in place.
"""
import numpy as np

from ..errors import fail
from . import png  # noqa: F401  (tests call explore.png)

COLOURS = ("#30638e", "#d1495b", "#00798c", "#edae49", "#66a182")


def vector_pair(angle_a=10.0, length_a=3.0, angle_b=60.0, length_b=2.0):
    """Two 2-D vectors given by their directions (degrees) and lengths.

    Returns a dict: a (2,), b (2,), dot = a·b, cos = a·b / (|a| |b|), and
    angle = the angle between them in degrees (0 to 180).
    """
    for name, length in (("length_a", length_a), ("length_b", length_b)):
        if not length > 0:
            fail(f"{name} should be a positive number, but got {length!r}")
    a = length_a * np.array([np.cos(np.radians(angle_a)), np.sin(np.radians(angle_a))])
    b = length_b * np.array([np.cos(np.radians(angle_b)), np.sin(np.radians(angle_b))])
    dot = float(a @ b)
    cos = dot / (length_a * length_b)
    angle = float(np.degrees(np.arccos(np.clip(cos, -1.0, 1.0))))
    return {"a": a, "b": b, "dot": dot, "cos": cos, "angle": angle}


def pair_title(pair):
    """One line with the pair's dot product, cosine and angle."""
    return f"a·b = {pair['dot']:.3f}    cos = {pair['cos']:.3f}    angle = {pair['angle']:.1f}°"


def arrow_label(name, v):
    """'a = [3.00, 1.00]' (rounded, and never '-0.00')."""
    x, y = np.round(v, 2) + 0.0
    return f"{name} = [{x:.2f}, {y:.2f}]"


def new_figure(size=(4.6, 5.2), pyplot=False):
    """A matplotlib Figure with fixed margins, which makes redrawing it fast.

    pyplot=False keeps it outside pyplot, so a widget callback never leaves a
    figure behind; pyplot=True makes an ordinary figure the notebook shows.
    """
    if pyplot:
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=size)
    else:
        from matplotlib.figure import Figure

        fig = Figure(figsize=size, dpi=90)
    fig.subplots_adjust(left=0.1, right=0.96, bottom=0.2, top=0.93)
    return fig


def draw_arrows(ax, vectors, limit=None):
    """Draw named 2-D vectors {name: (2,)} as arrows from the origin on ``ax``, the name
    at each tip and the coordinates listed under the axes (two per row).

    Returns {name: (arrow, tip, listing)}, the artists ``move_arrows`` updates.
    """
    vectors = {name: np.asarray(v, dtype=float) for name, v in vectors.items()}
    limit = limit or 1.25 * max(np.abs(v).max() for v in vectors.values())
    artists = {}
    for row, ((name, v), colour) in enumerate(zip(vectors.items(), COLOURS * 3)):
        arrow = ax.annotate("", xy=v, xytext=(0, 0),
                            arrowprops=dict(arrowstyle="-|>", color=colour, lw=2,
                                            shrinkA=0, shrinkB=0))
        tip = ax.annotate(name, xy=v, xytext=(4, 4), textcoords="offset points",
                          color=colour, fontsize=11, fontweight="bold")
        listing = ax.text(0.5 * (row % 2), -0.06 - 0.06 * (row // 2), arrow_label(name, v),
                          transform=ax.transAxes, color=colour, fontsize=10, va="top")
        artists[name] = (arrow, tip, listing)
    ax.axhline(0, color="#bbbbbb", lw=0.8)
    ax.axvline(0, color="#bbbbbb", lw=0.8)
    ax.set_xlim(-limit, limit)
    ax.set_ylim(-limit, limit)
    ax.set_aspect("equal")
    ax.grid(alpha=0.3)
    return artists


def move_arrows(artists, vectors):
    """Point the arrows of ``draw_arrows`` at new vectors {name: (2,)}."""
    for name, v in vectors.items():
        arrow, tip, listing = artists[name]
        arrow.xy = tip.xy = tuple(v)
        listing.set_text(arrow_label(name, v))


def arrows_figure(vectors, title=None, limit=None):
    """A (pyplot) figure of named 2-D vectors {name: (2,)} drawn as arrows."""
    fig = new_figure(pyplot=True)
    ax = fig.add_subplot()
    draw_arrows(ax, vectors, limit)
    ax.set_title(title or "", fontsize=10)
    return fig


def pair_view(limit=5.5):
    """An empty pair figure and the function that draws a vector_pair on it: (fig, show).

    show(pair) moves the arrows and rewrites the title, then returns the figure;
    moving artists is much faster than drawing a new figure.
    """
    fig = new_figure()
    ax = fig.add_subplot()
    artists = draw_arrows(ax, {"a": (1.0, 0.0), "b": (0.0, 1.0)}, limit)

    def show(pair):
        move_arrows(artists, {"a": pair["a"], "b": pair["b"]})
        ax.set_title(pair_title(pair), fontsize=10)
        return fig
    return fig, show


def explorer(angle_a=10.0, length_a=3.0, angle_b=60.0, length_b=2.0):
    """Four sliders (direction and length of a and b) and one figure redrawn in place.

    The figure is an ordinary image output, replaced through its display id on
    every move, so it also shows when the notebook runs without a browser.
    """
    import ipywidgets as widgets
    from IPython.display import Image, display

    def slider(value, lo, hi, step, description):
        return widgets.FloatSlider(value=value, min=lo, max=hi, step=step, description=description)

    sliders = {"angle_a": slider(angle_a, -180, 180, 5, "a: angle°"),
               "length_a": slider(length_a, 0.5, 5, 0.25, "a: length"),
               "angle_b": slider(angle_b, -180, 180, 5, "b: angle°"),
               "length_b": slider(length_b, 0.5, 5, 0.25, "b: length")}
    _, show = pair_view()

    def image():
        pair = vector_pair(**{name: s.value for name, s in sliders.items()})
        return Image(data=png(show(pair)), format="png")

    display(widgets.HBox([widgets.VBox([sliders["angle_a"], sliders["length_a"]]),
                          widgets.VBox([sliders["angle_b"], sliders["length_b"]])]))
    handle = display(image(), display_id=True)
    for s in sliders.values():
        s.observe(lambda change: handle.update(image()), names="value")
