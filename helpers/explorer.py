"""The explorer framework: controls, one render function, one picture redrawn in place.

Every chapter's explorer is its controls plus a render function that calls the
chapter's compute and returns the picture::

    def explorer():
        d = widgets.IntSlider(value=4, min=1, max=16, description="d")
        fig = new_figure((6, 3))
        ax = fig.add_subplot()
        def render(d):
            ax.clear()
            ax.plot(compute.something(d))
            return fig            # or PNG bytes from a Blitter
        return show({"d": d}, render)

``show`` displays the controls, then the first picture (saved into the notebook as a
plain image, so a reader who has not run it still sees one), and redraws it whenever a
control moves. A CourseInputError raised by render (a prompt with an unknown word) is
shown as one red sentence above the picture, which keeps its last state.

Two ways to turn a figure into the PNG bytes a widget shows:

* ``png(fig)`` draws the whole figure (simple; fine when everything changes).
* ``Blitter(fig)`` redraws fast when only a few artists change: mark each moving artist
  with ``animate``; the first ``png()`` draws the still parts once and keeps that bitmap,
  later calls paste it back and draw only the moving artists on top (matplotlib's
  "blitting" on the Agg canvas). After changing a still part call ``reset()``.
"""
import io

from .errors import CourseInputError


def new_figure(size, dpi=80):
    """A matplotlib Figure outside pyplot (size in inches), so a redraw leaves no figure behind."""
    from matplotlib.figure import Figure

    return Figure(figsize=size, dpi=dpi)


def png(fig):
    """The whole matplotlib figure rendered as PNG bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


class Blitter:
    """Render ``fig`` to PNG again and again, redrawing only the ``moving`` artists.

    ``animate(artist)`` adds a moving artist (returns it); ``png()`` returns PNG bytes;
    ``reset()`` forgets the saved background after a still part of the figure changed.
    Moving artists are marked animated, so a plain full draw of ``fig`` leaves them out.
    """

    def __init__(self, fig, moving=()):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        self.fig = fig
        self.canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
        self.moving, self.background = [], None
        for artist in moving:
            self.animate(artist)

    def animate(self, artist):
        """Leave ``artist`` out of the background; it is drawn on every ``png()``. Returns it."""
        artist.set_animated(True)
        self.moving.append(artist)
        return artist

    def reset(self):
        """Draw the background again on the next ``png()`` (call it after a still part changed)."""
        self.background = None

    def png(self):
        """The figure as PNG bytes, with the moving artists drawn as they are now."""
        from PIL import Image

        if self.background is None:
            self.canvas.draw()
            self.background = self.canvas.copy_from_bbox(self.fig.bbox)
        self.canvas.restore_region(self.background)
        for artist in self.moving:
            self.fig.draw_artist(artist)
        image = Image.frombuffer("RGBA", self.canvas.get_width_height(), self.canvas.buffer_rgba(),
                                 "raw", "RGBA", 0, 1)
        buffer = io.BytesIO()
        image.convert("RGB").save(buffer, format="png", compress_level=1)
        return buffer.getvalue()


def as_png(picture):
    """What a render function returned (PNG bytes or a matplotlib Figure) as PNG bytes."""
    return picture if isinstance(picture, (bytes, bytearray)) else png(picture)


STILL = ("Explorer controls: they move in a running notebook (trust it, then run the cells above). "
         "The picture below is their first state.")


def controls_box(layout, message):
    """A VBox of the controls and the message line whose plain-text form, which a notebook
    shows where widgets cannot run (on GitHub, untrusted, not yet run), is a sentence."""
    import ipywidgets as widgets

    class Controls(widgets.VBox):
        def __repr__(self):
            return STILL

    return Controls([layout, message])


class Explorer:
    """Controls wired to one render function; ``show`` builds and displays one.

    controls: {name: widget}; render(**values) -> PNG bytes or a Figure. ``picture()`` is
    the PNG of the controls' current values (tests and the benchmark call it directly).
    """

    def __init__(self, controls, render, layout=None):
        import ipywidgets as widgets

        self.controls, self.render = dict(controls), render
        self.layout = layout if layout is not None else widgets.HBox(list(self.controls.values()))
        self.message = widgets.HTML()
        self.box = controls_box(self.layout, self.message)
        self.handle = None

    def _ipython_display_(self):
        pass  # already on screen; as a cell's last value it adds nothing

    def values(self):
        return {name: control.value for name, control in self.controls.items()}

    def picture(self):
        return as_png(self.render(**self.values()))

    def update(self, change=None):
        """Redraw for the controls' current values; bad input shows one sentence instead."""
        from IPython.display import Image

        try:
            data = self.picture()
        except CourseInputError as error:
            self.message.value = f"<span style='color:#d1495b'>{error}</span>"
            return
        self.message.value = ""
        if self.handle is not None:
            self.handle.update(Image(data=data, format="png"))

    def display(self):
        from IPython.display import Image, display

        display(self.box)
        try:
            first = Image(data=self.picture(), format="png")
        except CourseInputError as error:
            self.message.value = f"<span style='color:#d1495b'>{error}</span>"
            first = Image(data=b"", format="png")
        self.handle = display(first, display_id=True)
        for control in self.controls.values():
            control.observe(self.update, names="value")
        return self


def show(controls, render, layout=None):
    """Display the controls (``layout``, default a row of them) and the picture ``render``
    draws for their values, and redraw it in place whenever one of them changes.

    Returns the Explorer, so a caller can move its controls and read ``picture()``."""
    return Explorer(controls, render, layout).display()
