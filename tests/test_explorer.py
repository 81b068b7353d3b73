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
    assert ex.box._repr_mimebundle_()["text/plain"] == STILL   # in full, though longer than 110 characters
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


# ---- the picture in the page (helpers/frames.py): what the kernel sends and in what order

def live(explorer):
    """Make `explorer` act as if a page showed it: its Frames widget's messages go to a list,
    and the page says hello. Returns the list of (content, PNG bytes or None) sent."""
    sent = []
    explorer.frames.send = lambda content, buffers=None: sent.append((content, buffers[0] if buffers else None))
    explorer.received(None, {"kind": "hello", "lab": True}, [])
    return sent


def shown_square(monkeypatch, updates):
    class Handle:
        def update(self, obj, raw=False):
            updates.append((obj, raw))

    monkeypatch.setattr("IPython.display.display", lambda *objs, display_id=None: Handle() if display_id else None)
    controls, render = square_explorer()
    return show(controls, render)


def test_choices_and_likely_states_follow_each_kind_of_control():
    from helpers.frames import choices, key, likely_states

    controls = {"n": widgets.IntSlider(value=1, min=0, max=3), "on": widgets.Checkbox(value=False),
                "word": widgets.Dropdown(options=[("cat", 10), ("mat", 20)], value=20),
                "d": widgets.FloatLogSlider(value=8, base=2, min=1, max=4, step=1),
                "prompt": widgets.Text(value="free")}
    assert [v for v, _ in choices(controls["n"])] == [0, 1, 2, 3]
    assert choices(controls["word"]) == [(["cat", 0], 10), (["mat", 1], 20)]   # a menu: label and index
    assert [v for v, _ in choices(controls["d"])] == [2, 4, 8, 16]
    assert choices(controls["prompt"]) is None                            # free text is never guessed
    states = list(likely_states(controls))
    assert states[0] == ([1, False, ["mat", 1], 8.0, "free"], {"n": 1, "on": False, "word": 20, "d": 8.0, "prompt": "free"})
    singles = [s for s, _ in states[1:6]]
    assert singles == [[2, False, ["mat", 1], 8.0, "free"], [0, False, ["mat", 1], 8.0, "free"], [1, True, ["mat", 1], 8.0, "free"],
                       [1, False, ["cat", 0], 8.0, "free"], [1, False, ["mat", 1], 16.0, "free"]]
    assert [1, False, ["mat", 1], 4.0, "free"] in [s for s, _ in states[1:7]]   # one step either way, every control
    assert [3, False, ["mat", 1], 8.0, "free"] in [s for s, _ in states]        # then further along a slider
    keys = [key(s) for s, _ in states]
    assert len(keys) == len(set(keys))                                   # no state twice
    assert all(s[4] == "free" for s, _ in states)
    values = dict((key(s), v) for s, v in states)
    assert values[key([2, True, ["mat", 1], 8.0, "free"])]["word"] == 20           # the render function gets values
    # the last move took n from 0 to 1: the next steps that way come first (n = 4 is past the end)
    after_a_move = [s for s, _ in likely_states(controls, came_from=[0, False, ["mat", 1], 8.0, "free"])]
    assert after_a_move[:4] == [[1, False, ["mat", 1], 8.0, "free"], [2, False, ["mat", 1], 8.0, "free"],
                                [3, False, ["mat", 1], 8.0, "free"], [0, False, ["mat", 1], 8.0, "free"]]
    after_a_move = [s for s, _ in likely_states(controls, came_from=[1, False, ["mat", 1], 16.0, "free"])]
    assert after_a_move[1:3] == [[1, False, ["mat", 1], 4.0, "free"], [1, False, ["mat", 1], 2.0, "free"]]   # downwards
    assert sorted(map(key, after_a_move)) == sorted(keys)                # the same states, in another order


def test_hello_sends_the_picture_and_the_plain_image_gives_way(monkeypatch):
    updates = []
    ex = shown_square(monkeypatch, updates)
    sent = live(ex)
    (content, data), = sent
    assert content == {"kind": "frame", "state": [1.0], "prefetch": False, "id": None} and data == ex.picture()
    assert updates == []      # JupyterLab: the page hides the plain image, the saved notebook keeps it
    ex.received(None, {"kind": "hello", "lab": False}, [])                # Colab, VS Code: emptied
    assert updates[-1] == ({"text/html": "", "text/plain": ""}, True)


def test_a_reloaded_page_gets_the_picture_of_the_values_now(monkeypatch):
    ex = shown_square(monkeypatch, [])
    sent = live(ex)
    ex.received(None, {"kind": "more"}, [])                               # 1.1, sent ahead
    ex.controls["slope"].value = 1.1                                      # the page holds it: not drawn
    ex.received(None, {"kind": "hello", "lab": True}, [])                 # a reload: the page holds nothing
    content, data = sent[-1]
    assert content["state"] == [1.1] and data == ex.picture()


def test_a_page_lacking_the_picture_of_its_values_gets_it_again(monkeypatch):
    ex = shown_square(monkeypatch, [])
    sent = live(ex)
    ex.received(None, {"kind": "more"}, [])                               # 1.1, sent ahead
    ex.controls["slope"].value = 1.1                                      # the page holds it: not drawn
    n = len(sent)
    ex.received(None, {"kind": "want", "state": [1.1]}, [])               # ... but it lost it
    content, data = sent[-1]
    assert len(sent) == n + 1 and ex.resent == 1
    assert content == {"kind": "frame", "state": [1.1], "prefetch": False, "id": None} and data == ex.picture()
    ex.received(None, {"kind": "want", "state": [1.5]}, [])               # values the kernel has not seen yet
    ex.received(None, {"kind": "want"}, [])                               # no state at all
    assert len(sent) == n + 1 and ex.resent == 1


def test_a_failing_guess_is_skipped_and_the_page_still_gets_an_answer(monkeypatch):
    controls, render = square_explorer()

    def fragile(slope):
        if round(slope, 1) == 1.1:
            raise ZeroDivisionError("a bug in a render")
        return render(slope)
    monkeypatch.setattr("IPython.display.display", lambda *objs, display_id=None: None)
    ex = show(controls, fragile)
    sent = live(ex)
    ex.received(None, {"kind": "more"}, [])
    ex.received(None, {"kind": "more"}, [])
    assert [c["state"] for c, _ in sent[1:]] == [[0.9], [1.2]]            # 1.1 failed: skipped, not retried
    assert ex.failed == [([1.1], "ZeroDivisionError('a bug in a render')")]
    ex.received(None, {"kind": "more", "id": 7}, [])                      # the answer names the request
    assert sent[-1][0]["id"] == 7 and sent[-1][0]["prefetch"]
    ex.failed += [None, None]                                             # three failures: no more guessing
    ex.received(None, {"kind": "more", "id": 8}, [])
    assert sent[-1] == ({"kind": "done", "id": 8}, None)


def test_menu_options_with_the_same_label_are_told_apart():
    from helpers.frames import key, state_of
    menu = widgets.Dropdown(options=[("same", 1), ("same", 2)], value=1)
    first = key(state_of([menu]))
    menu.value = 2
    assert key(state_of([menu])) != first


def test_without_anywidget_the_kernel_redraws_the_plain_image(monkeypatch):
    import sys

    import helpers
    import helpers.frames
    monkeypatch.setattr(helpers, "frames", helpers.frames)                # both put back afterwards
    monkeypatch.setitem(sys.modules, "anywidget", None)                   # import anywidget fails
    monkeypatch.delitem(sys.modules, "helpers.frames")
    updates = []
    ex = shown_square(monkeypatch, updates)
    assert ex.frames is None and ex.frames not in ex.box.children
    ex.controls["slope"].value = 0.5
    assert len(updates) == 1 and getattr(updates[0][0], "format", None) == "png"


def test_more_sends_likely_pictures_once_each_then_done(monkeypatch):
    from helpers import frames
    ex = shown_square(monkeypatch, [])
    sent = live(ex)
    for _ in range(40):
        ex.received(None, {"kind": "more"}, [])
    frames_sent = [c["state"][0] for c, _ in sent if c["kind"] == "frame"]
    # the slider runs -1 .. 2 in steps of 0.1; render refuses slopes under 0, so those are never sent
    assert frames_sent[:5] == [1.0, 1.1, 0.9, 1.2, 0.8]
    assert sorted(round(s, 1) for s in frames_sent) == [round(0.1 * i, 1) for i in range(21)]
    assert sent[-1] == ({"kind": "done", "id": None}, None)
    assert all(c["prefetch"] for c, _ in sent[1:] if c["kind"] == "frame")
    renders = ex.renders
    ex.controls["slope"].value = 0.5                                      # the page holds it: nothing drawn
    assert ex.renders == renders and sent[-1] == ({"kind": "done", "id": None}, None) and ex.message.value == ""
    ex.received(None, {"kind": "forget", "states": [[1.1], [0.9]]}, [])   # the page let two go
    ex.received(None, {"kind": "more"}, [])
    ex.received(None, {"kind": "more"}, [])
    assert [c.get("state") for c, _ in sent[-2:]] == [[0.9], [1.1]]     # sent again, the nearer first
    ex.controls["slope"].value = -0.5                                     # still refused with a sentence
    assert "slope should be at least 0" in ex.message.value and ex.renders == renders
    monkeypatch.setattr(frames, "PREFETCH_LIMIT", 0)
    ex.received(None, {"kind": "hello"}, [])                              # a reloaded page holds nothing
    ex.received(None, {"kind": "more"}, [])
    assert sent[-1] == ({"kind": "done", "id": None}, None) and sent[-2][0]["prefetch"] is False


def test_a_move_to_values_the_page_lacks_draws_and_sends_them(monkeypatch):
    updates = []
    ex = shown_square(monkeypatch, updates)
    sent = live(ex)
    ex.controls["slope"].value = 1.7
    content, data = sent[-1]
    assert content == {"kind": "frame", "state": [1.7], "prefetch": False, "id": None} and data == ex.picture()
    assert updates == []                                                  # the plain image is left alone


@pytest.fixture(scope="module")
def factories():
    from benchmark import explorer_factories
    return explorer_factories()


@pytest.mark.parametrize("chapter", ["00", "01", "02", "03", "04", "05", "06", "07", "08", "09", "10", "11"])
def test_every_picture_sent_ahead_is_the_picture_of_its_values(factories, chapter, capsys):
    """The page shows a picture sent ahead as the picture of its state: each must be exactly
    what a freshly built explorer draws for those values, whatever was drawn before it."""
    import traitlets

    from helpers.frames import key, likely_states
    ex = factories[chapter]()
    values = {key(s): v for s, v in likely_states(ex.controls)}
    sent = live(ex)
    for _ in range(8):
        ex.received(None, {"kind": "more"}, [])
    pictures = [(c["state"], data) for c, data in sent if c["kind"] == "frame"]
    assert len(pictures) >= min(5, len(values)), f"chapter {chapter}: only {len(pictures)} pictures sent"
    fresh, checked = factories[chapter](), 0
    for state, data in reversed(pictures):                               # another order than they were drawn in
        try:
            for name, value in values[key(state)].items():
                fresh.controls[name].value = value
        except traitlets.TraitError:                                     # an option another control has replaced
            continue
        assert fresh.picture() == data, f"chapter {chapter}: the picture sent for {state} differs"
        checked += 1
    assert checked >= len(pictures) - 2
    assert ex.failed == [], f"chapter {chapter}: renders failed while guessing: {ex.failed}"


def test_round_7_what_a_control_takes_and_how_it_draws(refused, capsys):
    """Red team round 7: the scaling explorer rounded d=2.5 to 2 silently; a text control took a lone
    surrogate the page cannot be sent; a NUL in a prompt printed matplotlib's missing-glyph warning;
    the tour's explorer named weights to slice for a prompt too long to label."""
    import warnings

    from helpers import worlds
    from helpers.scaling import explorer as scaling_explorer
    from helpers.tour import explorer as tour_explorer
    from helpers.weights import load_cat

    scaling = scaling_explorer.explorer()
    refused(lambda: scaling.set(d=2.5), "d should be a whole number", "2.5")
    refused(lambda: scaling.set(d=1023.9999), "1023.9999")
    assert scaling.values()["d"] == 64
    scaling.set(d=2 ** 5.5).set(d=45)   # a position of the slider, and any whole number

    tour = tour_explorer.explorer(load_cat(), worlds.cat_world())
    refused(lambda: tour.set(prompt="the \ud800"), "lone surrogate")
    assert tour.values()["prompt"] == "<BOS> the cat is"
    tour.set(prompt="<BOS> " + "the " * 498)
    refused(tour.picture, "the prompt should have at most 256 tokens", "499")
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a warning would fail the picture
        figure = new_figure((2, 1))
        figure.text(0.1, 0.5, "Hello\x00world")
        assert png(figure)[:4] == b"\x89PNG"
    capsys.readouterr()


def test_round_8_a_value_typed_into_a_control_gets_the_checks_of_set(factories, refused, capsys):
    """Red team round 8: ``ex.controls[name].value = ...`` in a cell was cast by traitlets before the
    course's check saw it (True became unit 1, 1 became a ticked box, "1" became 1.0), or raised
    traitlets' own TraitError (nan on an IntSlider, 'False' on a Checkbox), and None on a menu raised
    KeyError and stayed there. Now each gets set's sentence, and the control and picture stay as they were."""
    import numpy as np

    cases = {"07": [("unit", True, "unit should be a whole number", "True"), ("unit", 8, "from 0 to 7", "8"),
                    ("unit", float("nan"), "unit should be", "nan"), ("unit", "1", "unit should be", "'1'")],
             "09": [("temperature", True, "temperature should be a number", "True"),
                    ("top_k", None, "top_k should be", "None")],
             "02": [("q0", True, "q0 should be a number", "True"), ("q1", "1", "q1 should be a number", "'1'"),
                    ("scale", 1, "scale is a switch", "1"), ("causal", "False", "causal is a switch", "'False'"),
                    ("token", None, "token should be one of", "None")],
             "01": [("angle_a", True, "angle_a should be a number", "True"), ("norm_a", 9, "at most 5", "9")],
             "03": [("scaled", 1, "scaled is a switch", "1"), ("d", "64", "d should be a number", "'64'")],
             "06": [("seed", True, "seed should be a whole number", "True"), ("positions", 0, "positions is a switch")],
             "05": [("layer", True, "layer should be a whole number", "True"), ("head", 1.0, "head should be", "1.0")],
             "08": [("n_layers", np.int8(3), "n_layers should be one of 2, 4, 8, 12", "3")]}
    for chapter, tries in cases.items():
        ex = factories[chapter]()
        values, picture = ex.values(), ex.picture()
        for name, value, *words in tries:
            def typed(name=name, value=value):
                ex.controls[name].value = value
            assert refused(lambda: ex.set(**{name: value}), *words) == refused(typed, *words)
            assert ex.values() == values and ex.picture() == picture, (chapter, name, value)
    ex = factories["02"]()
    ex.controls["token"].value = "cat"                                    # a good value still moves it
    ex.controls["scale"].value = np.False_                               # a NumPy bool is a bool (as for set)
    assert ex.values()["token"] == "cat" and ex.values()["scale"] is False
    capsys.readouterr()


def test_round_8_a_value_the_page_sends_is_checked_and_a_refusal_is_a_sentence_in_the_explorer(factories, capsys):
    """The page's own path (a comm "update" message, as a mouse or a typed prompt sends it) moves a
    control as before; a value the course refuses (a pasted prompt too long) raises nothing out of the
    comm handler (ipywidgets would print a traceback), the page is set back to the kept value, and the
    sentence shows in the explorer's message line."""
    def page(control, **state):
        control._handle_msg({"content": {"data": {"method": "update", "state": state}}})

    ex = factories["07"]()
    unit, sent = ex.controls["unit"], []
    unit._send = lambda msg, buffers=None: sent.append(msg)
    first = ex.picture()
    page(unit, value=3)
    assert unit.value == 3 and ex.picture() != first and ex.message.value == ""
    kept = ex.picture()
    page(unit, value=99)
    assert unit.value == 3 and ex.picture() == kept
    assert "unit should be a whole number from 0 to 7, but got 99" in ex.message.value
    assert sent[-1]["method"] == "update" and sent[-1]["state"]["value"] == 3   # the page is set back
    page(unit, value=4)
    assert unit.value == 4 and ex.message.value == ""
    tour = factories["00"]()
    prompt, layer = tour.controls["prompt"], tour.controls["layer"]
    prompt._send = layer._send = lambda msg, buffers=None: None
    page(prompt, value="x" * 3000)
    assert prompt.value == "<BOS> the cat is" and "at most 2,000 characters" in tour.message.value
    page(prompt, value="<BOS> the cat sat")
    page(layer, index=1)                                                  # a menu's page sends its index
    assert tour.values()["prompt"] == "<BOS> the cat sat" and layer.value == 1 and tour.message.value == ""
    capsys.readouterr()
