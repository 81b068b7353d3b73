"""The explorer framework: controls, one render function, one picture redrawn in place.

Every chapter's explorer is its controls plus a render function that calls the
chapter's compute and returns the picture::

    def explorer():
        d = widgets.IntSlider(value=4, min=1, max=16, description="d")
        fig = new_figure((6, 3))
        ax = fig.add_subplot()
        def render(d):
            y = compute.something(d)   # first: a refusal here leaves the figure as it was
            ax.clear()
            ax.plot(y)
            return fig            # or PNG bytes from a Blitter
        return show({"d": d}, render)

``show`` displays the controls, then the first picture (saved into the notebook as a
plain image, so a reader who has not run it still sees one), and redraws it whenever a
control moves. A CourseInputError raised by render (a prompt with an unknown word) is
shown as one red sentence above the picture, which keeps its last state. So a render
function checks and computes everything before it clears or changes its figure (and what it
remembers of it, like the prompt it last drew): a refused draw leaves them as they were.

In a live page the picture is drawn by a ``Frames`` widget under the controls instead
(``helpers/frames.py``): the page keeps every picture the kernel sent, by the values it
shows, and while the explorer is on screen the page asks the kernel, one picture at a time,
for the pictures a move is likely to need next, so most moves are shown without a round
trip to the kernel. When that widget first says hello from a page, the plain image below
gives way to it.

Two ways to turn a figure into the PNG bytes a widget shows:

* ``png(fig)`` draws the whole figure (simple; fine when everything changes).
* ``Blitter(fig)`` redraws fast when only a few artists change: mark each moving artist
  with ``animate``; the first ``png()`` draws the still parts once and keeps that bitmap,
  later calls paste it back and draw only the moving artists on top (matplotlib's
  "blitting" on the Agg canvas). After changing a still part call ``reset()``.

Both draw on a canvas that remembers the glyphs it has rasterised (the same pixels
matplotlib's Agg canvas draws, without laying out and rendering "0.42" again on every
redraw) and encode the PNG themselves, Up-filtered with fast compression (``encode``).
"""
import contextlib
import copy
import html
import warnings

from .errors import CourseInputError, check_index, fail, shown
from .states import course_modes


def new_figure(size, dpi=80):
    """A matplotlib Figure outside pyplot (size in inches), so a redraw leaves no figure behind."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=dpi)
    canvas_of(fig)
    return fig


_CANVAS = None


def _glyph_canvas_class():
    """FigureCanvasAgg whose renderer caches text layouts and glyph bitmaps (made once)."""
    global _CANVAS
    if _CANVAS is not None:
        return _CANVAS
    import math

    import numpy as np
    from matplotlib import ft2font, text
    from matplotlib.backends import backend_agg

    # The cache reaches FreeType through matplotlib's private glyph calls (3.11 has them); on a
    # matplotlib without them (Colab's 3.10, say) explorers draw with the plain Agg canvas.
    needed = (hasattr(ft2font, "RenderMode") and hasattr(ft2font.FT2Font, "_render_glyph")
              and hasattr(ft2font.FT2Font, "_set_transform") and hasattr(text.Text, "get_fontfeatures")
              and hasattr(text.Text, "get_language"))
    if not needed:
        _CANVAS = backend_agg.FigureCanvasAgg
        return _CANVAS
    RenderMode = ft2font.RenderMode

    class GlyphCachingRenderer(backend_agg.RendererAgg):
        """RendererAgg drawing plain text from cached layouts and glyph bitmaps.

        A glyph's bitmap depends only on its font, size, angle and the sub-pixel part of
        its position (FreeType's 1/64 px); a whole-pixel shift moves the same bitmap, so
        the cached pixels equal freshly rendered ones."""
        layouts, glyphs = {}, {}

        def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
            if ismath or (mtext is not None and (mtext.get_fontfeatures() or mtext.get_language())):
                return super().draw_text(gc, x, y, s, prop, angle, ismath, mtext)
            font = self._prepare_font(prop)
            size = prop.get_size_in_points()
            key = (s, font.fname, size, self.dpi)
            items = self.layouts.get(key)
            if items is None:
                if len(self.layouts) > 20000:
                    self.layouts.clear()
                items = self.layouts[key] = [(item.ft_object, item.glyph_index, item.x, item.y)
                                             for item in font._layout(s, flags=backend_agg.get_hinting_flag())]
            self._draw_cached_glyphs(gc, x, y, angle, size, items)

        def _draw_cached_glyphs(self, gc, x, y, angle, size, items):
            cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
            aa = bool(gc.get_antialiased())
            for ft_object, glyph_index, dx, dy in items:
                px = round(0x40 * (x + dx * cos - dy * sin))
                py = round(0x40 * (self.height - y + dx * sin + dy * cos))
                key = (ft_object.fname, size, self.dpi, glyph_index, angle, px % 64, py % 64, aa)
                glyph = self.glyphs.get(key)
                if glyph is None:
                    glyph = self._render(ft_object, size, glyph_index, cos, sin, px % 64, py % 64, aa)
                    if len(self.glyphs) > 50000:
                        self.glyphs.clear()
                    self.glyphs[key] = glyph
                buffer, left, top = glyph
                self._renderer.draw_text_image(buffer, left + px // 64,
                                               int(self.height) - (top + py // 64) + buffer.shape[0], 0, gc)

        def _render(self, font, size, glyph_index, cos, sin, fx, fy, aa):
            """(bitmap copy, left, top) of one glyph placed at sub-pixel offset (fx, fy)/64."""
            font.set_size(size, self.dpi)
            font._set_transform((0x10000 * np.array([[cos, -sin], [sin, cos]])).round().astype(int), [fx, fy])
            bitmap = font._render_glyph(glyph_index, backend_agg.get_hinting_flag(),
                                        RenderMode.NORMAL if aa else RenderMode.MONO)
            buffer = np.array(bitmap.buffer)
            if not aa:
                buffer *= 0xff
            return buffer, bitmap.left, bitmap.top

    class GlyphCachingCanvas(backend_agg.FigureCanvasAgg):
        def get_renderer(self):
            w, h = self.get_width_height(physical=True)
            key = w, h, self.figure.dpi
            if self._lastKey != key:
                self.renderer = GlyphCachingRenderer(w, h, self.figure.dpi)
                self._lastKey = key
            return self.renderer

    _CANVAS = GlyphCachingCanvas
    return _CANVAS


def canvas_of(fig):
    """The figure's glyph-caching Agg canvas (attached on first use)."""
    cls = _glyph_canvas_class()
    return fig.canvas if isinstance(fig.canvas, cls) else cls(fig)


def encode(canvas):
    """The canvas's current pixels as PNG bytes: RGB, every row "Up"-filtered, zlib level 1.

    PNG is a signature and three chunks (header, compressed rows, end), each its length,
    its type, its data and a CRC. Each row starts with its filter's number; filter 2 ("Up")
    stores each byte minus the byte above it (mod 256; above the first row count zeros),
    which turns a figure's plain areas into zeros that compress fast. PIL's encoder tries
    five filters on every row and took about 1.5 times as long for chapter 04's picture
    (13 ms against 8.6 ms here), for a file 3 % smaller; the browser decodes both alike.
    """
    import struct
    import zlib

    import numpy as np
    from PIL import Image

    width, height = canvas.get_width_height(physical=True)
    rgb = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).convert("RGB")
    pixels = np.frombuffer(rgb.tobytes(), dtype=np.uint8).reshape(height, 3 * width)
    rows = np.full((height, 1 + 3 * width), 2, dtype=np.uint8)   # 2: the "Up" filter, before each row
    rows[0, 1:] = pixels[0]
    rows[1:, 1:] = pixels[1:] - pixels[:-1]                      # uint8: wraps mod 256, as PNG says

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)   # 8 bits per channel, colour type 2: RGB
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes(), 1))
            + chunk(b"IEND", b""))


def png(fig):
    """The whole matplotlib figure rendered as PNG bytes."""
    canvas = canvas_of(fig)
    canvas._is_saving = True   # as savefig does: artists a Blitter marked animated are drawn too
    try:
        with quiet_glyphs():
            canvas.draw()
    finally:
        canvas._is_saving = False
    return encode(canvas)


@contextlib.contextmanager
def quiet_glyphs():
    """Draw without matplotlib's warning for a character its font lacks (a NUL or an emoji typed
    into a prompt): the character shows as a box; the warning would print a file name and a line."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Glyph .* missing from", category=UserWarning)
        yield


class Blitter:
    """Render ``fig`` to PNG again and again, redrawing only the ``moving`` artists.

    ``animate(artist)`` adds a moving artist (returns it), ``replace_moving(artists)`` swaps
    them all for others; ``png()`` returns PNG bytes;
    ``reset()`` forgets the saved background after a still part of the figure changed.
    ``seldom(artist)`` adds an artist that changes now and then (a map that follows one
    control of several): it is drawn onto a second saved background, which ``refresh()``
    redraws from the first (cheaper than ``reset()``, which draws the whole figure again).
    Moving and seldom artists are marked animated, so a plain full draw of ``fig`` leaves them out.
    """

    def __init__(self, fig, moving=(), seldom=()):
        self.fig = fig
        self.canvas = canvas_of(fig)
        self.moving, self.rare, self.background, self.layer = [], [], None, None
        for artist in moving:
            self.animate(artist)
        for artist in seldom:
            self.seldom(artist)

    def animate(self, artist):
        """Leave ``artist`` out of the background; it is drawn on every ``png()``. Returns it."""
        artist.set_animated(True)
        self.moving.append(artist)
        return artist

    def replace_moving(self, artists):
        """Draw ``artists`` on every ``png()`` instead of the moving artists so far (which a
        caller has removed from the figure or will draw no more)."""
        self.moving = []
        for artist in artists:
            self.animate(artist)

    def seldom(self, artist):
        """Leave ``artist`` out of the background; draw it after each ``refresh()``. Returns it."""
        artist.set_animated(True)
        self.rare.append(artist)
        self.layer = None
        return artist

    def reset(self):
        """Draw the background again on the next ``png()`` (call it after a still part changed)."""
        self.background = self.layer = None

    def refresh(self):
        """Draw the seldom artists again on the next ``png()`` (call it after one of them changed)."""
        self.layer = None

    def png(self):
        """The figure as PNG bytes, with the moving artists drawn as they are now."""
        with quiet_glyphs():
            if self.background is None:
                self.canvas.draw()
                self.background = self.canvas.copy_from_bbox(self.fig.bbox)
            if self.layer is None:
                self.canvas.restore_region(self.background)
                for artist in self.rare:
                    self.fig.draw_artist(artist)
                self.layer = self.canvas.copy_from_bbox(self.fig.bbox)
            self.canvas.restore_region(self.layer)
            for artist in self.moving:
                self.fig.draw_artist(artist)
        return encode(self.canvas)


def as_png(picture):
    """What a render function returned (PNG bytes or a matplotlib Figure) as PNG bytes."""
    return picture if isinstance(picture, (bytes, bytearray)) else png(picture)


STILL = ("Explorer controls: they move in a running notebook (trust it, then run the cells above). "
         "The picture below is their first state.")


def controls_box(layout, message, frames=None):
    """A VBox of the controls, the message line and the live picture (``frames``) whose
    plain-text form, which a notebook shows where widgets cannot run (on GitHub, untrusted,
    not yet run), is a sentence."""
    import ipywidgets as widgets

    class Controls(widgets.VBox):
        def __repr__(self):
            return STILL

        def _repr_mimebundle_(self, **kwargs):   # ipywidgets 8 cuts a repr at 110 characters
            shown = getattr(super(), "_repr_mimebundle_", None)   # ipywidgets 7 (Colab) has none
            return {**((shown(**kwargs) if shown else None) or {}), "text/plain": STILL}

    return Controls([layout, message] + ([frames] if frames is not None else []))


MAX_TEXT = 2_000   # characters a text control (a prompt box) takes


def _option_values(control):
    """The values a menu control offers (its options' values, for (label, value) pairs)."""
    return [o[1] if isinstance(o, tuple) and len(o) == 2 else o for o in control.options]


def check_control(control, value, name):
    """``value`` as the widget ``control`` (named ``name``) may hold it, else one sentence
    (CourseInputError): a switch True or False; a slider's number within its range (a whole
    number for an IntSlider; bools refused; a log slider's own ``course_rule(value, name)`` too, if
    it has one); a menu's value one of its options (a NumPy number or bool equal to one counts, as that
    option); a text a str of at most MAX_TEXT characters that UTF-8 can write. Nothing is clamped. Other
    widgets take what they take."""
    import ipywidgets as widgets
    import numpy as np

    from .errors import check_number, check_positive_int, check_switch, check_text, shown

    if isinstance(control, (widgets.Checkbox, widgets.ToggleButton)):
        return check_switch(value, name)
    if isinstance(control, widgets.IntSlider):
        value = check_positive_int(value, name, minimum=control.min)
        if value > control.max:
            fail(f"{name} should be a whole number from {control.min} to {control.max}, but got {shown(value)}")
        return value
    if isinstance(control, widgets.FloatLogSlider):
        value = check_number(value, name, low=control.base ** control.min, high=control.base ** control.max)
        rule = getattr(control, "course_rule", None)   # a slider's own rule on top, e.g. whole numbers only
        return rule(value, name) if rule is not None else value
    if isinstance(control, widgets.FloatSlider):
        return check_number(value, name, low=control.min, high=control.max)
    if isinstance(control, (widgets.Dropdown, widgets.ToggleButtons, widgets.Select, widgets.RadioButtons,
                            widgets.SelectionSlider)):
        offered = _option_values(control)
        plain = np.generic.item(value) if isinstance(value, np.generic) else value   # np.int64(1) as 1
        for option in offered:   # of the same type: True is no option 1, nor 1.0 an option 1
            if option is value or type(option) is type(plain) and option == plain:
                return option
        listed = ", ".join(shown(v) for v in offered[:8]) + (", ..." if len(offered) > 8 else "")
        fail(f"{name} should be one of {listed}, but got {shown(value)}")
    if isinstance(control, widgets.Text):   # a lone surrogate could not be sent to the page: refused too
        return check_text(value, name, empty=True, max_chars=MAX_TEXT)
    return value


def start_at(controls, **values):
    """Set the controls a constructor was given values for, each checked first (``check_control``),
    all before any is set: a refused construction refuses before it draws or shows anything."""
    checked = {name: check_control(controls[name], value, name) for name, value in values.items()}
    for name, value in checked.items():
        controls[name].value = value
    return controls


def check_model_and_world(model, world):
    """A course Transformer and a World (helpers.worlds) that belong together (the world's
    vocabulary is the model's), else one sentence; an explorer asks this before any work."""
    from .model import Transformer
    from .worlds import World
    from .errors import shown

    if not isinstance(model, Transformer):
        fail(f"expected a helpers.model.Transformer as the model, but got {shown(model)}")
    if not isinstance(world, World):
        fail(f"expected a helpers.worlds.World (such as worlds.cat_world()) as the world, but got {shown(world)}")
    if len(world.tokenizer.vocab) != model.cfg.vocab_size:
        fail(f"expected a model and a world that belong together, but the model has {model.cfg.vocab_size} "
             f"tokens and the {world.name} world {len(world.tokenizer.vocab)}")
    return model, world


class Guarded:
    """What ``guard`` adds to a control: a value the page sends that ``check_control`` refuses is
    not raised (ipywidgets would print its traceback in the learner's output): the page is set back
    to the value the control kept and ``refused(error)``, if given, shows the sentence. Any other failure
    on a page's message is dropped with one line on the ``course.frames`` logger, as ``Frames`` drops one."""
    refused = None

    def set_state(self, sync_data):
        from traitlets import TraitError

        try:
            keys = PAGE_KEYS if hasattr(self, "options") else PAGE_KEYS - {"index"}   # a slider has no index
            if not isinstance(sync_data, dict) or set(sync_data) - keys:   # min, max, step, description...
                fail(f"a control's message from the page should change only its value (or a menu's index), "
                     f"but it changes {shown(sorted(sync_data) if isinstance(sync_data, dict) else sync_data)}")
            if "index" in sync_data:
                check_index(sync_data["index"], "the menu's index from the page", len(self.options))
            super().set_state(sync_data)
        except (CourseInputError, TraitError) as error:
            self.send_state()
            if self.refused is not None:
                self.refused(error if isinstance(error, CourseInputError) else CourseInputError(str(error)))
        except Exception as error:   # noqa: BLE001 (ipywidgets would show its traceback in the learner's output)
            from .frames import _shown, log

            log.warning("explorer: a control's message from the page was dropped (%s: %s)",
                        type(error).__name__, _shown(str(error), 200))
            self.send_state()


PAGE_KEYS = {"value", "index"}   # what a learner's move on the page changes; the rest of a control is the course's


def checked_value(cls, name):
    """A copy of the value trait of the widget class ``cls`` that asks ``check_control`` about a
    value before the trait casts it (traitlets reads True as 1 for an IntSlider, 1 as True for a
    Checkbox, "1" as 1.0 for a FloatSlider) and before it lets None through (a menu takes None)."""
    trait = copy.copy(cls.class_traits()["value"])
    cast = trait._validate
    trait._validate = lambda obj, value: cast(obj, check_control(obj, value, name))
    return trait


def guard(controls, refused=None):
    """Make each control refuse a value it cannot hold with one sentence (``check_control``) and keep
    its value, however the value comes (``control.value = ...`` in a cell, ``Explorer.set``, the page),
    where ipywidgets would cast it or clamp it silently (a slider) or name no control (a menu). Each
    control becomes an instance of its own subclass (as traitlets' ``add_traits`` does) with a checked
    value trait and ``Guarded``'s handling of the page; ``refused(error)`` shows a refusal from the page."""
    for name, control in controls.items():
        cls = type(control)
        if issubclass(cls, Guarded):   # guarded before (a second Explorer of the same controls): again, afresh
            cls = cls.__bases__[1]
        attrs = {"value": checked_value(cls, name), "refused": staticmethod(refused),
                 "__module__": cls.__module__, "__qualname__": cls.__qualname__}
        control.__class__ = type(cls.__name__, (Guarded, cls), attrs)


class Explorer:
    """Controls wired to one render function; ``show`` builds and displays one.

    controls: {name: widget}; render(**values) -> PNG bytes or a Figure. ``picture()`` is
    the PNG of the controls' current values (tests and the benchmark call it directly).
    ``live`` turns true when a page shows the Frames widget; then pictures go to it. Without
    anywidget installed there is no Frames widget and every picture goes to the plain image.
    ``version``: None, or a function of no arguments whose value changes when what the pictures show
    does (``model.weights_state`` of the explorer's model): the pictures drawn before are then drawn
    again as they are visited, never shown as they were.
    """

    def __init__(self, controls, render, layout=None, version=None):
        import ipywidgets as widgets

        self.controls, self.render = dict(controls), render
        self.message = widgets.HTML()
        guard(self.controls, refused=self.say)
        self.layout = layout if layout is not None else widgets.HBox(list(self.controls.values()))
        try:
            from .frames import Frames
            self.frames = Frames(list(self.controls.values()))
            self.frames.on_msg(self.received)
        except ImportError:       # no anywidget: the kernel redraws the plain image, as before
            self.frames = None
        self.box = controls_box(self.layout, self.message, self.frames)
        self.handle, self.drawn, self.last = None, None, None
        self.live, self.sent, self.refused, self.failed, self.renders = False, set(), set(), [], 0
        self.resent = 0                           # pictures sent again because the page lacked them
        self.shown, self.came_from = None, None   # the controls' state now and before the last move
        self.version, self.drawn_for = version, version() if version is not None else None
        self.stale = set()   # states whose picture the page may hold from before a change of version

    def say(self, error):
        """Show a CourseInputError as one red sentence above the picture (which keeps its last state)."""
        self.message.value = f"<span style='color:#d1495b'>{html.escape(str(error))}</span>"   # <BOS> stays text

    def _ipython_display_(self):
        pass  # already on screen; as a cell's last value it adds nothing

    def values(self):
        return {name: control.value for name, control in self.controls.items()}

    def set(self, **values):
        """Move controls as a learner would (``set(layer=1, head=0)``), in the order given: each value is
        checked (``check_control``) against its control as the values before it left it (moving ``model``
        may change the ``prompt`` menu), and a refusal puts every control back as it was."""
        unknown = sorted(set(values) - set(self.controls))
        if unknown:
            fail(f"expected controls among {', '.join(self.controls)}, but got {', '.join(map(str, unknown))}")
        before = self.values()
        try:
            for name, value in values.items():
                self.controls[name].value = check_control(self.controls[name], value, name)
        except Exception:   # noqa: BLE001 (a refusal, or whatever else stopped the move: every control goes back)
            self.put_back(before)
            raise
        return self

    def put_back(self, values):
        """Set every control back to ``values`` (what ``values()`` gave), in the controls' order: a control that
        changes others (a model menu setting the prompt menu and the sliders' ranges) before those others."""
        for name, control in self.controls.items():
            if control.value != values[name]:
                control.value = values[name]

    @course_modes(grad=False)   # (a render draws on the CPU inside torch.device("meta") or autocast; no torch: nothing)
    def picture(self):
        return as_png(self.render(**self.values()))

    def state(self):
        """The controls' state as the page names it (helpers/frames.py)."""
        from .frames import state_of
        return state_of(self.controls.values())

    @course_modes(grad=False)
    def update(self, change=None):
        """Redraw for the controls' current values; bad input shows one sentence instead.

        Values already on screen are not drawn again (one control that sets others, like a
        model picker that changes the prompt list, would otherwise redraw the same picture),
        nor values whose picture the page already holds. (``sent`` is never stale here: the
        page's "forget" and its controls' changes reach the kernel in the order they were
        sent, over the same channel.)"""
        from IPython.display import Image

        from .frames import key

        self.check_version()
        values, state = self.values(), self.state()
        if self.shown is not None and key(state) != key(self.shown):
            self.came_from, self.shown = self.shown, state     # the last move, for likely_states
        if values == self.drawn or (self.live and key(state) in self.sent):
            self.message.value = ""
            self.drawn = values
            return
        try:
            data = as_png(self.render(**values))
        except CourseInputError as error:
            self.say(error)
            return
        self.message.value = ""
        self.drawn, self.last, self.renders = values, (state, data), self.renders + 1
        if self.live:
            self.send(state, data, prefetch=False)
        elif self.handle is not None:
            self.handle.update(Image(data=data, format="png"))

    def send(self, state, data, prefetch, id=None):
        """Send one picture to the page's Frames widget, named by the state it shows (and the
        number of the page's request it answers, if any)."""
        from .frames import key

        self.sent.add(key(state))
        self.stale.discard(key(state))
        self.frames.send({"kind": "frame", "state": list(state), "prefetch": prefetch, "id": id}, buffers=[data])

    def received(self, _widget, content, _buffers):
        """A message from the page: "hello" (a view appeared), "more" (send a likely picture),
        "want" (send the picture of these values, which the page lacks) or "forget" (the page let
        go of the pictures of these states)."""
        from .frames import key

        if content.get("kind") == "hello":
            self.hello(lab=bool(content.get("lab")))
        elif content.get("kind") == "more":
            self.more(content.get("id"))
        elif content.get("kind") == "want":
            self.want(content.get("state"))
        elif content.get("kind") == "forget":
            self.sent.difference_update(key(state) for state in content.get("states", []))
            self.stale.difference_update(key(state) for state in content.get("states", []))

    def check_version(self):
        """If ``version`` changed since the pictures were drawn (the model was trained or edited in
        place), forget them: each is drawn again when its values are visited (a picture drawn for a
        move replaces the one the page holds), and none is sent ahead in the meantime."""
        if self.version is None:
            return
        now = self.version()
        if now != self.drawn_for:
            self.drawn_for, self.drawn, self.last = now, None, None
            self.stale |= self.sent
            self.sent.clear()
            self.refused.clear()

    def hello(self, lab=True):
        """A page shows the Frames widget: from now on pictures go there, and the current one
        goes now. A page reloaded holds no pictures, so everything sent so far is forgotten.

        The plain image below must give way. In JupyterLab (``lab``) the page hides it itself
        and the saved notebook keeps it, so a notebook reopened without running still shows a
        picture; other front ends cannot be reached that way, so there it is emptied."""
        self.live = True
        self.sent.clear()
        self.stale.clear()
        self.check_version()
        self.now_picture()
        if self.last is not None:                                 # the last picture, if these values have none
            self.send(*self.last, prefetch=False)
        if self.handle is not None and not lab:
            self.handle.update({"text/html": "", "text/plain": ""}, raw=True)

    def want(self, state):
        """The page lacks the picture of the values it shows, ``state``: send it if the controls
        here hold the same values, even if it was sent before (a message lost, or a second view
        of the widget that never got it). Else the kernel has not seen those values yet, and
        ``update`` will send their picture when it does. ``resent`` counts the pictures sent so."""
        from .frames import key

        self.check_version()
        if state is None or key(state) != key(self.state()) or not self.now_picture():
            return
        self.resent += 1
        self.send(*self.last, prefetch=False)

    def now_picture(self):
        """Make ``last`` the picture of the controls' values now, drawing it if the values moved
        since the last drawing; False if ``guess`` could not draw them (``last`` stays)."""
        from .frames import key

        state = self.state()
        if self.last is None or key(self.last[0]) != key(state):
            data = self.guess(state, self.values())
            if data is None:
                return False
            self.last = (state, data)
        return True

    def guess(self, state, values):
        """The PNG for values the page wants without a move asking for them, or None: render
        refused them (a CourseInputError: values a learner cannot reach together, say) or
        failed (anything else, kept in ``failed``; tests check it stays empty)."""
        try:
            return as_png(self.render(**values))
        except CourseInputError:
            return None
        except Exception as error:      # noqa: BLE001 — a failing guess must not stop the page's requests
            self.failed.append((state, repr(error)))
            return None

    def more(self, id=None):
        """Draw and send the likeliest picture the page does not hold yet, of the first
        PREFETCH_LIMIT likely states; "done" if none is left (``id``: the page's request). A
        state ``guess`` cannot draw is never tried again; after three failures (not refusals)
        the guessing stops, so a broken render costs little."""
        import itertools

        from .frames import PREFETCH_LIMIT, key, likely_states

        self.check_version()
        if len(self.failed) < 3:
            for state, values in itertools.islice(likely_states(self.controls, self.came_from), PREFETCH_LIMIT):
                if key(state) in self.sent or key(state) in self.refused or key(state) in self.stale:
                    continue
                data = self.guess(state, values)
                if data is not None:
                    self.send(state, data, prefetch=True, id=id)
                    return
                self.refused.add(key(state))
                if len(self.failed) >= 3:
                    break
        self.frames.send({"kind": "done", "id": id})

    def display(self):
        """Show the controls and, right under them, the first picture (drawn first, so the two
        arrive together and a page finds the plain picture where it expects it)."""
        from IPython.display import Image, display

        self.shown = self.state()
        try:
            values = self.values()
            data = as_png(self.render(**values))
            self.drawn, self.last = values, (self.shown, data)
            first = Image(data=data, format="png")
        except CourseInputError as error:
            self.say(error)
            first = Image(data=b"", format="png")
        display(self.box)
        self.handle = display(first, display_id=True)
        for control in self.controls.values():
            control.observe(self.update, names="value")
        return self


def weights_version(*models):
    """A ``version`` for an explorer of these models: the state of their weights (``model.weights_state``),
    which changes when one is trained or edited in place."""
    from .model import weights_state

    return lambda: tuple(weights_state(model) for model in models)


def check_unchanged(version, made):
    """Refuse to draw for an explorer that computed from its model's numbers when it was made (``made``:
    ``version()`` then) once they have changed."""
    if version() != made:
        fail("the model's weights should be as they were when this explorer was made (it computed from them "
             "then), but they have changed since: run the cell that makes the explorer again")


def show(controls, render, layout=None, version=None):
    """Display the controls (``layout``, default a row of them) and the picture ``render``
    draws for their values, and redraw it in place whenever one of them changes (or ``version``
    changes: see Explorer).

    Returns the Explorer, so a caller can move its controls and read ``picture()``."""
    return Explorer(controls, render, layout, version).display()
