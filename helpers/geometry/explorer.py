"""Chapter 01's explorer: turn and stretch two 2-D vectors, watch dot product and cosine.

``pair_view`` draws a vector_pair on one figure by moving its arrows (fast);
``explorer()`` shows four sliders and that figure, redrawn on every move (the axes and grid
drawn once, the arrows, their labels and the title blitted over them).
"""
from ..explorer import Blitter, new_figure, show, start_at
from . import compute


def pair_view(limit=5.5):
    """An empty pair figure and the function that draws a vector_pair on it: (fig, draw).

    draw(pair) moves the arrows and rewrites the title, then returns the figure;
    moving artists is much faster than drawing a new figure.
    """
    fig = new_figure(compute.ARROWS_SIZE, dpi=90)
    fig.subplots_adjust(**compute.ARROWS_MARGINS)
    ax = fig.add_subplot()
    artists = compute.draw_arrows(ax, {"a": (1.0, 0.0), "b": (0.0, 1.0)}, limit)

    def draw(pair):
        compute.move_arrows(artists, {"a": pair["a"], "b": pair["b"]})
        ax.set_title(compute.pair_title(pair), fontsize=10)
        return fig
    return fig, draw


def explorer(angle_a=10.0, norm_a=3.0, angle_b=60.0, norm_b=2.0):
    """Four sliders (direction and norm of a and b) and one figure redrawn in place.

    Returns the Explorer (its ``controls`` and ``picture()``). Each value must lie on its slider
    (angles -180..180 degrees, norms 0.5..5): anything else is refused, not clamped.
    """
    import ipywidgets as widgets

    def slider(lo, hi, step, description):
        return widgets.FloatSlider(value=(lo + hi) / 2, min=lo, max=hi, step=step, description=description)

    controls = start_at({"angle_a": slider(-180, 180, 5, "a: angle°"), "norm_a": slider(0.5, 5, 0.25, "a: norm"),
                         "angle_b": slider(-180, 180, 5, "b: angle°"), "norm_b": slider(0.5, 5, 0.25, "b: norm")},
                        angle_a=angle_a, norm_a=norm_a, angle_b=angle_b, norm_b=norm_b)   # refused outside, never clamped
    fig, draw = pair_view()
    ax = fig.axes[0]
    blit = Blitter(fig, [*ax.texts, ax.title])   # the arrows (annotations), tips, listings and title

    def render(**values):
        draw(compute.vector_pair(**values))
        return blit.png()

    layout = widgets.HBox([widgets.VBox([controls["angle_a"], controls["norm_a"]]),
                           widgets.VBox([controls["angle_b"], controls["norm_b"]])])
    return show(controls, render, layout)
