"""helpers.explorer, the explorer framework: controls wired to one render function, the first
picture saved as a plain image, bad input shown as one sentence, fast blitted redraws."""
import ipywidgets as widgets
import pytest

from helpers.errors import CourseInputError, fail
from helpers.explorer import STILL, Blitter, Explorer, new_figure, png, show


def square_explorer():
    fig = new_figure((3, 2))
    ax = fig.add_subplot()
    (line,) = ax.plot([0, 1], [0, 1])
    blit = Blitter(fig)
    blit.animate(line)

    def render(slope):
        if slope < 0:
            fail(f"slope should be at least 0, but got {slope}")
        line.set_ydata([0, slope])
        return blit.png()
    return {"slope": widgets.FloatSlider(value=1.0, min=-1, max=2)}, render


def test_picture_follows_the_controls():
    controls, render = square_explorer()
    ex = Explorer(controls, render)
    first = ex.picture()
    assert first.startswith(b"\x89PNG")
    controls["slope"].value = 2.0
    assert ex.picture() != first


def test_show_displays_controls_and_a_first_picture_then_redraws(monkeypatch):
    shown, updates = [], []

    class Handle:
        def update(self, obj):
            updates.append(obj)

    def display(*objs, display_id=None):
        shown.extend(objs)
        return Handle() if display_id else None

    monkeypatch.setattr("IPython.display.display", display)
    controls, render = square_explorer()
    ex = show(controls, render)
    assert any(getattr(o, "format", None) == "png" for o in shown)   # the static first picture
    controls["slope"].value = 0.5
    assert len(updates) == 1 and ex.message.value == ""
    controls["slope"].value = -0.5                                    # bad input: one sentence, no redraw
    assert len(updates) == 1 and "slope should be at least 0" in ex.message.value


def test_where_widgets_cannot_run_the_controls_read_as_a_sentence():
    controls, render = square_explorer()
    ex = Explorer(controls, render)
    assert repr(ex.box) == STILL and "VBox(" not in repr(ex.box)
    assert ex.layout in ex.box.children and ex.message in ex.box.children


def test_png_of_a_whole_figure():
    fig = new_figure((2, 2))
    fig.add_subplot().plot([1, 2])
    assert png(fig).startswith(b"\x89PNG")


def test_encode_writes_the_canvas_pixels_as_a_png_any_reader_decodes():
    import io
    import zlib

    import numpy as np
    from PIL import Image

    from helpers.explorer import canvas_of, encode
    fig = new_figure((1.63, 0.97), dpi=100)      # an odd width and height: 163 x 97 px
    ax = fig.add_axes((0, 0, 1, 1))
    ax.imshow(np.random.default_rng(0).random((97, 163, 3)), interpolation="nearest", aspect="auto")
    canvas = canvas_of(fig)
    canvas.draw()
    data = encode(canvas)
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, at = [], 8                            # PIL checks only the header's CRC: walk them all
    while at < len(data):
        length = int.from_bytes(data[at:at + 4], "big")
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        assert int.from_bytes(data[at + 8 + length:at + 12 + length], "big") == zlib.crc32(kind + body), kind
        chunks.append(kind)
        at += 12 + length
    assert at == len(data) and chunks[0] == b"IHDR" and chunks[-1] == b"IEND"
    assert set(chunks[1:-1]) == {b"IDAT"}
    image = Image.open(io.BytesIO(data))
    image.load()
    assert (image.mode, image.size) == ("RGB", (163, 97))
    assert (np.asarray(image) == np.asarray(canvas.buffer_rgba())[..., :3]).all()
    assert len(np.unique(np.asarray(image).reshape(-1, 3), axis=0)) > 10_000   # every pixel its own colour, near enough


def test_course_input_errors_are_value_errors():
    with pytest.raises(ValueError):
        fail("x")
    assert issubclass(CourseInputError, ValueError)


def text_figure():
    import numpy as np
    fig = new_figure((4, 2.5))
    ax = fig.add_subplot()
    ax.set_xticks(range(4), ["<BOS>", "cat", "mat", "ä"], rotation=45, ha="right")
    for i in range(12):   # sizes, angles and sub-pixel positions that differ
        ax.text(i * 0.27, (i * 0.037) % 1, f"{i * 0.137:.2f}", fontsize=6 + i % 4, rotation=(0, 30, 90, 60)[i % 4])
    ax.set_title("$x^2$ and plain text")
    ax.text(0.5, 0.5, "not antialiased", antialiased=False)
    ax.text(0.1, 0.2, "two\nlines", family="monospace")
    return fig, np


def test_the_glyph_caching_canvas_draws_matplotlibs_pixels_again_and_again(pixels):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig, np = text_figure()
    reference = FigureCanvasAgg(text_figure()[0])
    reference.draw()
    expected = np.asarray(reference.buffer_rgba())[..., :3]
    for _ in range(2):   # the second draw comes from the caches
        drawn = pixels(png(fig))
        assert drawn.shape == expected.shape and (drawn == expected).all()


def test_a_seldom_artist_changes_the_picture_only_after_refresh():
    fig = new_figure((2, 2))
    ax = fig.add_subplot()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    (rare,) = ax.plot([0, 1], [0, 1], lw=4)
    (often,) = ax.plot([0, 1], [1, 0], lw=4)
    blit = Blitter(fig, [often], [rare])
    first = blit.png()
    rare.set_ydata([1, 1])
    assert blit.png() == first            # not redrawn yet
    blit.refresh()
    second = blit.png()
    assert second != first
    often.set_ydata([0.5, 0.5])
    assert blit.png() not in (first, second)
    assert png(fig) != first              # a full draw shows every artist


def test_values_already_on_screen_are_not_drawn_again(monkeypatch):
    monkeypatch.setattr("IPython.display.display", lambda *objs, display_id=None: None)
    calls = []
    a, b = widgets.IntSlider(value=0), widgets.IntSlider(value=0)
    a.observe(lambda change: setattr(b, "value", change["new"]), names="value")  # a sets b first
    ex = show({"a": a, "b": b}, lambda a, b: calls.append((a, b)) or b"png")
    a.value = 3     # b's observer draws (3, 3); a's own then finds it on screen
    assert calls == [(0, 0), (3, 3)] and ex.message.value == ""
