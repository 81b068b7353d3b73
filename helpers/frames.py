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
"""
import math
from pathlib import Path

import ipywidgets as widgets
import traitlets

try:
    import anywidget
except ImportError:       # Colab before its first cell ran, say: no Frames; Explorer draws the plain image
    anywidget = None

PREFETCH_LIMIT = 160   # how many of likely_states' first states the kernel sends ahead
MOMENTUM = 12          # steps the way the last move went, sent first
KEEP = 400             # pictures a page keeps (20-60 kB each); more than PREFETCH_LIMIT, or a
                       # page would let go of pictures the kernel then sends again, round and round


if anywidget is not None:
    class Frames(anywidget.AnyWidget):
        """The picture of an explorer, drawn in the page from pictures the kernel sent."""

        _esm = Path(__file__).with_name("frames.js")
        controls = traitlets.List(traitlets.Instance(widgets.Widget)).tag(sync=True, **widgets.widget_serialization)
        kinds = traitlets.List(traitlets.Unicode()).tag(sync=True)
        keep = traitlets.Int(KEEP).tag(sync=True)

        def __init__(self, controls, **kwargs):
            super().__init__(controls=list(controls), kinds=[kind_of(c) for c in controls], **kwargs)


def kind_of(control):
    """'label' for a menu-like control (the page knows its option by label and index), else 'value'."""
    return "label" if isinstance(control, widgets.widget_selection._Selection) else "value"


def state_of(controls):
    """The controls' current state as the page names it: a list, one entry per control."""
    return [[c.label, c.index] if kind_of(c) == "label" else c.value for c in controls]


def key(state):
    """A state as a dict key; fractions to 12 significant digits, as frames.js rounds them."""
    return tuple(key(v) if isinstance(v, (list, tuple)) else
                 float(f"{v:.12g}") if isinstance(v, float) and not v.is_integer() else v for v in state)


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
    if isinstance(entry, float):
        return min(range(len(options)), key=lambda i: abs(options[i][0] - entry))
    return next((i for i, (e, _) in enumerate(options) if key([e]) == key([entry])), None)


def likely_states(controls, came_from=None):
    """(state, values) pairs, likeliest first, each once: the current one; then, if the last
    move (from the state ``came_from``) moved one control, MOMENTUM more steps the same way; then
    each control alone one step either way, then two steps, ...; then every pair of controls
    one step each.

    values is {name: value} for the render function; controls is {name: widget}."""
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
