"""Red team: bad input of every class, generated, against the public functions (issue 31, item 7).

``CLASSES`` holds the bad values, by class. ``TABLE`` holds one row per public function and
argument: how to call the function with that argument replaced by a bad value, and what it must
do then (``expect``):

* ``refuses``: raise CourseInputError whose message is one sentence (no line break, not
  longer than MAX_SENTENCE) saying what was expected and what arrived ("expected … but …",
  or "… should … but …"), and leave ``state()`` (when the row has one) as it was;
* any other callable: it is called with (value, result) and asserts what handling the value
  correctly means for that function (e.g. ``grading.encode`` keeps anything as bounded data).

Every generated value is tried on every row, except the values the row's ``valid`` says are
not bad input for that argument (a grade id may be the text 'False'); those are not counted.
To hold another module to the rule, append rows to TABLE:
``Row("module.function(arg)", call, expect, state=..., valid=...)``. The test prints the number
of bad inputs tried per class (``pytest -s`` shows it).
"""
import collections
import json
import logging
import math

import numpy as np
import pytest

from helpers.errors import CourseInputError

MAX_SENTENCE = 400


def nested_list(depth):
    value = [1]
    for _ in range(depth):
        value = [value]
    return value


def nested_dict(depth):
    value = {"kind": "more", "id": 1}
    for _ in range(depth):
        value = {"kind": "want", "state": value}
    return value


CLASSES = {
    "wrong type": [None, object(), b"bytes", 3j, {"a": 1}, print, {1, 2}],
    "out of range": [-1, -(2**63), 2**64, 10**9, -0.5],
    "NaN/inf": [float("nan"), float("inf"), float("-inf"), np.float32("nan"), np.float64("-inf")],
    "wrong shape": [[], [[1, 2], [3]], np.zeros((2, 3, 4)), (1,), [1, 2, 3, 4, 5, 6, 7]],
    "huge": ["x" * 10_000_000, [0.5] * 2_000_000, np.zeros(3_000_000), 10**2000],
    "nested": [nested_list(500), nested_dict(500), nested_list(5000)],
    "bools as ints": [True, False, np.bool_(True)],
    "strings 'False'": ["False", "0", "True", "none"],
    "lone surrogates": ["\ud800", "cat\udfff", ["\ud800", 0]],
}


class Row:
    """One public function and argument: call(value) with the bad value in place; expect;
    state(): a snapshot that a refusal must leave as it was; valid(value): not bad input here;
    raises: the exception a refusal is (the helpers' CourseInputError; the scripts' own)."""

    def __init__(self, name, call, expect="refuses", state=None, valid=None, raises=CourseInputError):
        self.name, self.call, self.expect, self.state, self.valid = name, call, expect, state, valid
        self.raises = raises


def scalar(v):
    """A JSON scalar as a page or a record holds one: None, a bool, an int, a finite float, a text."""
    return v is None or type(v) in (bool, int, str) or type(v) is float and math.isfinite(v)


def one_sentence(message):
    assert "\n" not in message and len(message) <= MAX_SENTENCE, message[:MAX_SENTENCE]
    assert " but " in message and ("expected" in message or "should" in message), message


# ---------------------------------------------------------------- helpers/grading.py

from helpers import grading  # noqa: E402


def encoded_as_bounded_data(value, result):
    """grading.encode keeps any answer as JSON data of bounded size, which decode rebuilds."""
    text = json.dumps(result)
    assert len(text) < 30 * 2**20
    again = grading.decode(json.loads(text))
    if isinstance(result, dict) and "unknown" in result:
        assert isinstance(again, grading.Unknown)


def fingerprinted(value, result):
    assert isinstance(result, str) and len(result) < 10_000


def grading_state():
    return dict(grading.STATE)


GRADING_ROWS = [
    Row("grading.cell(grade_id)", grading.cell, state=grading_state,
        valid=lambda v: isinstance(v, str) and 0 < len(v) <= 200 and v.isprintable()),
    Row("grading.encode(answer)", grading.encode, expect=encoded_as_bounded_data),
    Row("grading.fingerprint(x)", grading.fingerprint, expect=fingerprinted),
    Row("grading.decode(record)", grading.decode, valid=lambda v: scalar(v) and len(str(v)) <= 10**6),
    Row("grading.decode({'array': ...})", lambda v: grading.decode({"array": v, "shape": [2], "kind": "f"})),
    Row("grading.decode({'shape': ...})", lambda v: grading.decode({"array": [1.0, 2.0], "shape": v, "kind": "f"})),
    Row("grading.decode({'kind': ...})", lambda v: grading.decode({"array": [1.0, 2.0], "shape": [2], "kind": v})),
    Row("grading.decode({'float': ...})", lambda v: grading.decode({"float": v})),
    Row("grading.decode({'list': ...})", lambda v: grading.decode({"list": v}),
        valid=lambda v: isinstance(v, list) and len(v) <= 10**6 and all(scalar(x) for x in v)),
    Row("grading.decode({'dict': ...})", lambda v: grading.decode({"dict": v}), valid=lambda v: v == []),
    Row("grading.decode({'torch': ...})", lambda v: grading.decode({"torch": v})),
]


# ---------------------------------------------------------------- helpers/frames.py

pytest.importorskip("ipywidgets")
import ipywidgets as widgets  # noqa: E402

from helpers import frames  # noqa: E402


def controls():
    return {"slope": widgets.FloatSlider(value=1.0, min=0, max=2, step=0.5),
            "word": widgets.Dropdown(options=["a", "b"], value="b")}


def a_sentence(value, result):
    """check_message answers a bad message with one sentence (it returns it; the widget logs it)."""
    assert isinstance(result, str), result
    one_sentence(result)


def first_state(call):
    return lambda v: next(iter(call(v)))


def entry(v):
    """A state entry: a scalar (an int within what the page counts exactly), or a menu's [label, index]."""
    return (scalar(v) and not (type(v) is int and abs(v) >= 2**53) and not (type(v) is str and len(v) > 100_000)
            or isinstance(v, list) and len(v) == 2 and type(v[0]) is str and type(v[1]) is int and 0 <= v[1] < 2**53)


def key_entry(v):
    return scalar(v) or isinstance(v, (list, tuple)) and len(v) <= 2 and all(scalar(x) for x in v)


FRAMES_ROWS = [
    Row("frames.check_message(content)", lambda v: frames.check_message(v, [], ["value", "label"]), expect=a_sentence),
    Row("frames.check_message(content['state'])",
        lambda v: frames.check_message({"kind": "want", "state": v}, [], ["value", "label"]), expect=a_sentence),
    Row("frames.check_message(content['state'][0])",
        lambda v: frames.check_message({"kind": "want", "state": [v, ["b", 1]]}, [], ["value", "label"]),
        expect=a_sentence, valid=lambda v: entry(v) and not isinstance(v, list)),
    Row("frames.check_message(content['states'])",
        lambda v: frames.check_message({"kind": "forget", "states": v}, [], ["value", "label"]), expect=a_sentence,
        valid=lambda v: v == []),
    Row("frames.check_message(content['id'])", lambda v: frames.check_message({"kind": "more", "id": v}, []),
        expect=a_sentence, valid=lambda v: type(v) is int and 0 <= v < 2**53),
    Row("frames.check_message(content['lab'])", lambda v: frames.check_message({"kind": "hello", "lab": v}, []),
        expect=a_sentence, valid=lambda v: type(v) is bool),
    Row("frames.kind_of(control)", frames.kind_of),
    Row("frames.state_of(controls)", frames.state_of, valid=lambda v: v == []),
    Row("frames.key(state)", frames.key,
        valid=lambda v: isinstance(v, (list, tuple)) and len(v) <= 64 and all(key_entry(x) for x in v)),
    Row("frames.choices(control)", frames.choices),
    Row("frames.position(options, entry)", lambda v: frames.position(frames.choices(controls()["slope"]), v),
        valid=key_entry),
    Row("frames.likely_states(controls)", first_state(frames.likely_states)),
    Row("frames.likely_states(came_from)", first_state(lambda v: frames.likely_states(controls(), v)),
        valid=lambda v: v is None),
]

# ---------------------------------------------------------------- scripts/fence.py (the grader's)

import fence  # noqa: E402  (scripts/ is on pytest's pythonpath)

FENCE_ROWS = [
    Row("fence.choose_fence(unfenced)", fence.choose_fence, raises=TypeError, valid=lambda v: type(v) is bool),
    Row("fence.fence_prefix(fence)", lambda v: fence.fence_prefix(v, "/nowhere"), raises=ValueError),
]


# ---------------------------------------------------------------- scripts/homework.py (the instructor's)

import homework  # noqa: E402

HOMEWORK_ROWS = [
    Row("homework.find_chapter(name)", homework.find_chapter, raises=homework.HomeworkError,
        valid=lambda v: isinstance(v, str) and v.isdigit() and len(v) <= 2),   # '0' is chapter 00
]

TABLE = GRADING_ROWS + FRAMES_ROWS + FENCE_ROWS + HOMEWORK_ROWS


def is_valid(row, value):
    try:
        return row.valid is not None and bool(row.valid(value))
    except Exception:   # noqa: BLE001 — a value the predicate cannot even look at is bad input
        return False


CASES = [(row, cls, i) for row in TABLE for cls in CLASSES for i in range(len(CLASSES[cls]))
         if not is_valid(row, CLASSES[cls][i])]
COUNTS = collections.Counter()


def describe(value):
    text = repr(value) if not isinstance(value, (str, list, bytes)) or len(value) < 40 else f"{type(value).__name__}[{len(value)}]"
    return text[:60]


@pytest.mark.parametrize("row, cls, i", CASES, ids=[f"{r.name}-{c}-{i}" for r, c, i in CASES])
def test_bad_input_gets_its_sentence_or_is_handled(row, cls, i, caplog):
    value = CLASSES[cls][i]
    before = row.state() if row.state else None
    COUNTS[cls] += 1
    with caplog.at_level(logging.WARNING):
        if row.expect == "refuses":
            with pytest.raises(row.raises) as refused:
                row.call(value)
            one_sentence(str(refused.value))
        else:
            row.expect(value, row.call(value))
    if row.state:
        assert row.state() == before, f"{row.name} changed its state on {describe(value)}"


def test_zz_counts_per_class():
    """Prints how many bad inputs each class had (run after the table: pytest keeps file order)."""
    lines = [f"{cls:<18}{COUNTS[cls]:>5}" for cls in CLASSES]
    print("\nred team, bad inputs per class:\n" + "\n".join(lines) + f"\n{'total':<18}{sum(COUNTS.values()):>5}")
    if COUNTS:
        assert set(COUNTS) <= set(CLASSES)
