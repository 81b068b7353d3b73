"""Widget explorers, one module per chapter.

The compute lives in plain functions that tests call; a widget only wires
sliders to them and redraws one figure in place.

Two ways to turn a figure into the PNG bytes a widget shows:

* ``png(fig)`` draws the whole figure (simple; fine for a figure drawn once).
* ``Blitter(fig, moving)`` redraws fast when only a few artists change::

      blit = Blitter(fig)
      bar = blit.animate(ax.bar(...)[0])   # mark each artist that moves
      bar.set_height(0.7)                  # ... move them ...
      data = blit.png()                    # PNG bytes of the figure as it is now

  The first ``png()`` draws everything except the moving artists once and keeps
  that bitmap; later calls paste it back and draw only the moving artists on top
  (matplotlib's "blitting" on the Agg canvas). After changing a still part (tick
  labels, a fixed title) call ``reset()`` so the next ``png()`` draws it again.
"""
import io


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
