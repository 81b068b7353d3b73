"""An explorer's picture kept in the page, so a move the kernel has already drawn shows at once.

Without it, every move of a control goes to the kernel, which draws the picture, encodes it
and sends it back to be decoded and shown: a round trip that costs 30–50 ms in JupyterLab
with nothing drawn at all (the floor row of ``scripts/benchmark.py --browser``). ``Frames``
is a small widget (``frames.js``, run by anywidget) that holds the pictures in the page by
the control values they show. The page reads the controls itself, so a picture it already
has is shown in the same frame as the move.

The kernel fills that store two ways:

* when a control moves to values it has not sent, it draws them and sends the picture
  (``Explorer.update``), as before;
* while the explorer is on screen, no answer is awaited and the page is not busy (a picture
  decoding to go up, for 2 s at most, or the picture of its values missing within a second
  of a move, which the kernel is likely drawing), the page asks for one more picture at a time and the kernel draws the next in ``likely_states`` order: a dozen more
  steps the way the last move went, every control one step either way from where it is,
  then two steps, and so on, then two controls one step each. One picture at a time keeps
  the kernel free: a learner's move or cell waits at most one drawing.

A state, as the page and the kernel both name it, is one entry per control: a menu's (or
toggle row's) [option label, index], any other control's value. Free text (a prompt) is
never guessed. A render function must draw the same picture for the same values whatever it
drew before, depend on nothing else that changes, and refuse values it cannot draw with a
CourseInputError (tests/test_explorer.py checks the first pictures each chapter sends ahead).

The page's messages are checked before the kernel acts on one (``check_message``): "hello"
{lab: bool}, "more" {id: whole number}, "want" {state}, "forget" {states: a list of states},
with no other key, no binary buffer, a state of one entry per control, each entry a number,
a bool, a short text or a menu's [label, index]. A message that is not one of these, or a
handler that fails on one, is dropped with one line on the ``course.frames`` logger; nothing
reaches the learner's output as a traceback, and nothing is raised out of the comm handler.
"""
import logging
import math
from pathlib import Path

import ipywidgets as widgets
import traitlets

from .errors import fail

try:
    import anywidget
except ImportError:       # Colab before its first cell ran, say: no Frames; Explorer draws the plain image
    anywidget = None

PREFETCH_LIMIT = 160   # how many of likely_states' first states the kernel sends ahead
MOMENTUM = 12          # steps the way the last move went, sent first
KEEP = 400             # pictures a page keeps (20-60 kB each); more than PREFETCH_LIMIT, or a
                       # page would let go of pictures the kernel then sends again, round and round
MAX_CONTROLS = 64      # entries a state may have (an explorer has a handful of controls)
MAX_TEXT = 100_000     # characters of a text entry (a prompt) or a menu's label in a page's message
MAX_FORGET = 4 * KEEP  # states one "forget" may name
MAX_ID = 2**53         # a request's number: a whole number the page can count to exactly
MESSAGES = {"hello": {"lab"}, "more": {"id"}, "want": {"state"}, "forget": {"states"}}   # kind -> its other keys

log = logging.getLogger("course.frames")


if anywidget is not None:
    class Frames(anywidget.AnyWidget):
        """The picture of an explorer, drawn in the page from pictures the kernel sent."""

        _esm = Path(__file__).with_name("frames.js")
        controls = traitlets.List(traitlets.Instance(widgets.Widget)).tag(sync=True, **widgets.widget_serialization)
        kinds = traitlets.List(traitlets.Unicode()).tag(sync=True)
        keep = traitlets.Int(KEEP).tag(sync=True)

        def __init__(self, controls, **kwargs):
            super().__init__(controls=list(controls), kinds=[kind_of(c) for c in controls], **kwargs)

        def _handle_custom_msg(self, content, buffers):
            """A message from the page: acted on only if ``check_message`` finds nothing wrong."""
            problem = check_message(content, buffers, kinds=self.kinds)
            if problem is not None:
                log.warning("explorer: a message from the page was dropped: %s", problem)
                return
            for callback in list(self._msg_callbacks.callbacks):   # not ipywidgets' dispatcher: it shows
                callback(self, content, buffers)                    # a handler's traceback to the learner

        def _handle_msg(self, msg):
            """Every message from the page (the comm's handler). A custom message is checked and
            handed to the explorer here, so whatever goes wrong is one log line: ipywidgets' own
            handler would show a traceback in the learner's output. An "update" (a change of its
            traits) is dropped with a log line: only the kernel sets the controls, their kinds and
            ``keep`` (frames.js only reads them), and a page that set them would make the explorer's
            own "want" messages the wrong length. Its other messages go to ipywidgets as before."""
            try:
                data = msg["content"]["data"]
                if data["method"] == "update":
                    state = data.get("state")
                    got = (", ".join(_shown(k, 30) if type(k) is str else _what(k) for k in list(state)[:5])
                           + ("…" if len(state) > 5 else "") if type(state) is dict and state else _what(state))
                    log.warning("explorer: a message from the page was dropped: expected no change to the "
                                "picture's settings from the page (the kernel sets them), but got one to %s", got)
                    return
                if data["method"] != "custom":
                    return super()._handle_msg(msg)
                self._handle_custom_msg(data["content"], msg.get("buffers") or [])
            except Exception as error:   # noqa: BLE001 — nothing leaves the comm handler
                log.warning("explorer: a message from the page could not be handled (%s: %s)",
                            type(error).__name__, _shown(str(error), 200))


def _shown(text, limit=60):
    """``text`` as ASCII (lone surrogates and all), cut to ``limit`` characters, for a sentence."""
    text = ascii(text)[1:-1]
    return text if len(text) <= limit else text[:limit] + "…"


def _what(x):
    """A short description of what arrived, never its whole contents (JSON's own types only: a
    message from the page holds nothing else, and a subclass's repr or len may raise)."""
    if x is None or type(x) is bool:
        return repr(x)
    if type(x) in (int, float):
        return _shown(repr(x), 40)
    if type(x) is str:
        return f"the text '{_shown(x, 40)}'" if len(x) <= 40 else f"a text of {len(x):,} characters"
    if type(x) in (list, tuple, dict):
        return f"a {type(x).__name__} of {len(x):,} item{'' if len(x) == 1 else 's'}"
    return f"a {type(x).__name__}"


def _entry_problem(entry, kind):
    """None if ``entry`` is a state entry the page may send for a control of ``kind``; else why not."""
    if kind == "label":
        if not (type(entry) is list and len(entry) == 2):
            return f"a menu's [label, index], but got {_what(entry)}"
        label, index = entry
        if type(label) is not str or len(label) > MAX_TEXT:
            return f"a menu label of at most {MAX_TEXT:,} characters, but got {_what(label)}"
        if type(index) is not int or not 0 <= index < MAX_ID:
            return f"a menu index (a whole number from 0), but got {_what(index)}"
        return None
    if type(entry) is str:
        return None if len(entry) <= MAX_TEXT else f"a text of at most {MAX_TEXT:,} characters, but got {_what(entry)}"
    if type(entry) is bool or type(entry) is int and abs(entry) < MAX_ID:
        return None
    if type(entry) is float:
        return None if math.isfinite(entry) else f"a finite number, but got {entry!r}"
    return f"a number, a bool or a text (a control's value), but got {_what(entry)}"


def _state_problem(state, kinds):
    """None if ``state`` names one entry per control (``kinds``, 'label' or 'value'); else why not."""
    if type(state) is not list:
        return f"a state (a list of one entry per control), but got {_what(state)}"
    if kinds is None and len(state) > MAX_CONTROLS or kinds is not None and len(state) != len(kinds):
        wanted = f"{len(kinds)}" if kinds is not None else f"at most {MAX_CONTROLS}"
        return f"a state of {wanted} entries (one per control), but got {_what(state)}"
    for i, entry in enumerate(state):
        problem = _entry_problem(entry, kinds[i] if kinds is not None else ("label" if type(entry) is list else "value"))
        if problem is not None:
            return f"entry {i} of the state should be {problem}"
    return None


def check_message(content, buffers=(), kinds=None):
    """None if ``content`` (with ``buffers``) is a message the page may send to the kernel; else
    one sentence naming what was expected and what arrived. ``kinds``: the explorer's controls'
    kinds ('label' or 'value', as ``kind_of``), to check a state's entries against; None checks
    their form only. Looks at no more of the message than it must (no recursion, no copy)."""
    if type(content) is not dict:   # JSON's own dict: a message from the page is never anything else
        return f"expected a message (a dict with a 'kind'), but got {_what(content)}"
    kind = content.get("kind")
    if type(kind) is not str or kind not in MESSAGES:
        return f"expected a message kind among {', '.join(MESSAGES)}, but got {_what(kind)}"
    extra = [k for k in content if k != "kind" and k not in MESSAGES[kind]]
    missing = [k for k in sorted(MESSAGES[kind]) if k not in content]
    if extra or missing:
        keys = ", ".join(_shown(k, 30) if type(k) is str else _what(k) for k in list(content)[:5])
        return (f"expected a '{kind}' message with the key(s) kind, {', '.join(sorted(MESSAGES[kind]))}, "
                f"but got {keys}{'…' if len(content) > 5 else ''}")
    if buffers and (type(buffers) not in (list, tuple)
                    or any(not isinstance(b, (bytes, bytearray, memoryview)) or len(memoryview(b)) for b in buffers)):
        return f"expected no binary data with a '{kind}' message, but got {_what(buffers)} of buffers"
    if kind == "hello" and type(content["lab"]) is not bool:
        return f"expected 'lab' of a 'hello' message to be true or false, but got {_what(content['lab'])}"
    if kind == "more":
        number = content["id"]
        if type(number) is not int or not 0 <= number < MAX_ID:
            return f"expected 'id' of a 'more' message to be a whole number from 0, but got {_what(number)}"
    if kind == "want":
        problem = _state_problem(content["state"], kinds)
        if problem is not None:
            return f"expected 'state' of a 'want' message to be valid: {problem}"
    if kind == "forget":
        states = content["states"]
        if type(states) is not list or len(states) > MAX_FORGET:
            return (f"expected 'states' of a 'forget' message to be a list of at most {MAX_FORGET:,} states, "
                    f"but got {_what(states)}")
        for i, state in enumerate(states):
            problem = _state_problem(state, kinds)
            if problem is not None:
                return f"expected state {i} of a 'forget' message to be valid: {problem}"
    return None


def kind_of(control):
    """'label' for a menu-like control (the page knows its option by label and index), else 'value'."""
    if not isinstance(control, widgets.ValueWidget):
        fail(f"expected a control (an ipywidgets widget with a value), but got {_what(control)}")
    return "label" if isinstance(control, widgets.widget_selection._Selection) else "value"


def _controls(controls):
    """``controls`` ({name: widget} or widgets) as a list of widgets, each checked."""
    if isinstance(controls, dict):
        controls = controls.values()
    if isinstance(controls, (list, tuple, type({}.values()))) and len(controls) <= MAX_CONTROLS:
        controls = list(controls)
    else:
        fail(f"expected the controls as a list or a dict of at most {MAX_CONTROLS} widgets, but got {_what(controls)}")
    for control in controls:
        kind_of(control)
    return controls


def state_of(controls):
    """The controls' current state as the page names it: a list, one entry per control."""
    return [[c.label, c.index] if kind_of(c) == "label" else c.value for c in _controls(controls)]


def _key_entry(v, depth):
    if isinstance(v, (list, tuple)):
        if depth >= 1 or len(v) > 2:
            fail(f"expected a state entry to be a value or a menu's [label, index], but got {_what(v)}"
                 + (" nested in another" if depth else ""))
        return tuple(_key_entry(x, depth + 1) for x in v)
    if v is not None and not isinstance(v, (bool, int, float, str)):
        fail(f"expected a state entry to be a number, a bool, a text or a menu's [label, index], but got {_what(v)}")
    return float(f"{v:.12g}") if isinstance(v, float) and not v.is_integer() else v


def key(state):
    """A state as a dict key; fractions to 12 significant digits, as frames.js rounds them."""
    if not isinstance(state, (list, tuple)) or len(state) > MAX_CONTROLS:
        fail(f"expected a state (a list of at most {MAX_CONTROLS} entries, one per control), but got {_what(state)}")
    return tuple(_key_entry(v, 0) for v in state)


def choices(control):
    """The (state entry, value) pairs a control can take, in order; None for free text."""
    if kind_of(control) == "label":
        return [([label, i], value) for i, (label, value) in
                enumerate(zip(control._options_labels, control._options_values))]
    if isinstance(control, (widgets.Checkbox, widgets.ToggleButton)):
        return [(False, False), (True, True)]
    if isinstance(control, widgets.FloatLogSlider):
        n = math.floor((control.max - control.min) / control.step + 1e-9)   # never past max
        return [(v, v) for v in (control.base ** (control.min + k * control.step) for k in range(n + 1))]
    if isinstance(control, widgets.IntSlider):
        return [(v, v) for v in range(control.min, control.max + 1, control.step)]
    if isinstance(control, widgets.FloatSlider):
        n = math.floor((control.max - control.min) / control.step + 1e-9)
        # 12 significant digits: -1 + 20 × 0.1 is 1.0000000000000004, the slider's value 1.0
        return [(v, v) for v in (float(f"{control.min + k * control.step:.12g}") for k in range(n + 1))]
    return None


def position(options, entry):
    """Where ``entry`` (the control's current state entry) sits among ``options``: the nearest one."""
    if not (isinstance(options, list) and options and all(isinstance(o, tuple) and len(o) == 2 for o in options)):
        fail(f"expected options as a non-empty list of (state entry, value) pairs (choices'), but got {_what(options)}")
    key([entry])                                    # an entry of a state, or a sentence
    if isinstance(entry, float) and not math.isfinite(entry):
        fail(f"expected a finite number as a slider's state entry, but got {entry!r}")
    if isinstance(entry, float):
        if not all(isinstance(o[0], (int, float)) and not isinstance(o[0], bool) for o in options):
            fail(f"expected a number's options to be numbers, but got {_what(options[0][0])} among them")
        return min(range(len(options)), key=lambda i: abs(options[i][0] - entry))
    return next((i for i, (e, _) in enumerate(options) if key([e]) == key([entry])), None)


def likely_states(controls, came_from=None):
    """(state, values) pairs, likeliest first, each once: the current one; then, if the last
    move (from the state ``came_from``) moved one control, MOMENTUM more steps the same way; then
    each control alone one step either way, then two steps, ...; then every pair of controls
    one step each.

    values is {name: value} for the render function; controls is {name: widget}. Bad controls or
    a bad ``came_from`` are refused with one sentence when it is called, before anything is drawn."""
    if not isinstance(controls, dict):
        fail(f"expected the controls as a dict {{name: widget}}, but got {_what(controls)}")
    kinds = [kind_of(c) for c in _controls(controls)]
    if came_from is not None:
        problem = _state_problem(came_from, kinds)
        if problem is not None:
            fail(f"expected came_from to be the state before the last move: {problem}")
    return _likely_states(controls, came_from)


def _likely_states(controls, came_from):
    names = list(controls)
    now_state = state_of(controls.values())
    now_values = {name: c.value for name, c in controls.items()}
    axes = {}
    for i, name in enumerate(names):
        options = choices(controls[name])
        at = None if options is None else position(options, now_state[i])
        if at is not None:
            axes[i] = (options, at)

    def moved(steps):
        state, values = list(now_state), dict(now_values)
        for i, step in steps:
            options, at = axes[i]
            if not 0 <= at + step < len(options):
                return None
            state[i], values[names[i]] = options[at + step]
        return state, values

    def candidates():
        yield now_state, now_values          # first the picture for where the controls are
        changed = [i for i in range(len(names)) if came_from is not None and key([came_from[i]]) != key([now_state[i]])]
        if len(changed) == 1 and changed[0] in axes:
            i = changed[0]
            before = position(axes[i][0], came_from[i])
            if before is not None and before != axes[i][1]:
                way = 1 if axes[i][1] > before else -1
                for steps in range(1, MOMENTUM + 1):
                    yield moved([(i, way * steps)])
        reach = max((max(at, len(options) - 1 - at) for options, at in axes.values()), default=0)
        for distance in range(1, reach + 1):
            for i in axes:
                for step in (distance, -distance):
                    yield moved([(i, step)])
        for a in axes:
            for b in axes:
                if a < b:
                    for sa in (1, -1):
                        for sb in (1, -1):
                            yield moved([(a, sa), (b, sb)])

    seen = set()
    for found in candidates():
        if found is not None and key(found[0]) not in seen:
            seen.add(key(found[0]))
            yield found
