"""Grading that a student's code cannot game: answers are recorded in the student's kernel and
judged in another run that never executes student code.

``Exercise.grade`` (the call in nbgrader's hidden tests) behaves by the kernel's environment
variable COURSE_GRADING:

* unset: it raises AssertionError on a wrong answer (nbgrader's own ``validate``/``autograde``);
* ``record:<file>``: the student's notebook is running. Each grade call appends the student's
  answer, as data, to <file> (a function answer: what it returned on the check's inputs).
  Nothing is judged there, so patching the checks in that kernel gains nothing;
* ``judge:<records>:<verdicts>``: the instructor's own notebook is running, with its own
  arguments. Each grade call judges every student's recorded answer for that cell and appends
  the verdicts. Only data written by student code reaches this run, never its code.

``scripts/autograde.py`` assembles the notebooks, starts both runs and reads the verdicts;
it puts ``helpers.grading.cell("<grade id>")`` at the top of each hidden-test cell, so each
record knows its exercise.

Records are written by student code, so the judge trusts none of them: ``decode`` checks every
record's form (tags, shapes, kinds, sizes, depth) and refuses a malformed one with one sentence
(``RecordError``), which costs that answer only. ``encode`` keeps any answer as bounded data:
more than MAX_VALUES numbers, a text of more than MAX_TEXT characters or a number of more than
MAX_DIGITS digits is recorded as what it was, not copied.
"""
import functools
import hashlib
import json
import math
import os
import types

import numpy as np

from .errors import CourseInputError, fail
from .files import read_json

MAX_RECORDS_BYTES = 20 * 2**20   # a records file larger than this is not read
MAX_VALUES = 1_000_000           # numbers (or items) one recorded answer may hold
MAX_TEXT = 1_000_000             # characters of one recorded text
MAX_DIGITS = 1_000               # digits of one recorded whole number
MAX_DEPTH = 20                   # nesting of one recorded answer
STATE = {"cell": None, "index": 0}


class RecordError(CourseInputError):
    """A recorded answer the judge cannot rebuild; the message names what was expected and what arrived."""


def mode():
    """('record', file) or ('judge', records, verdicts), or None when grading is off."""
    setting = os.environ.get("COURSE_GRADING", "")
    kind, _, rest = setting.partition(":")
    if kind == "record" and rest:
        return ("record", rest)
    if kind == "judge" and rest.count(":") == 1:
        return ("judge", *rest.split(":"))
    return None


def cell(grade_id):
    """Mark the start of the hidden tests of the exercise cell ``grade_id`` (placed by the grader)."""
    if not isinstance(grade_id, str) or not 0 < len(grade_id) <= 200 or not grade_id.isprintable():
        fail(f"expected a grade id (a short line of text such as 'ch00_ex1_check'), but got {_what(grade_id)}")
    STATE["cell"], STATE["index"] = grade_id, 0


def handle(exercise, answer, args, kwargs):
    """Record or judge one grade call, as the mode says."""
    key = (STATE["cell"], STATE["index"])
    STATE["index"] += 1
    how = mode()
    if how[0] == "record":
        append(how[1], {"cell": key[0], "index": key[1], "check": exercise.title,
                        "answer": record_answer(exercise, answer, args, kwargs)})
    else:
        for student, recorded in recorded_answers(how[1]).get(key, {}).items():
            try:
                problems = exercise.feedback(decode(recorded), *args, **kwargs)
            except RecordError as error:
                problems = [f"your answer could not be judged: {error}"]
            except Exception as error:   # one strange record never stops the class's judging
                problems = [f"your answer could not be judged ({type(error).__name__})"]
            append(how[2], {"student": student, "cell": key[0], "index": key[1], "problems": problems})


def append(path, entry):
    """Append one JSON line to ``path`` and flush it to disk (a kernel may die just after)."""
    with open(path, "a") as file:
        file.write(json.dumps(entry) + "\n")
        file.flush()
        os.fsync(file.fileno())


_LOADED = {}


MAX_RECORDS_BYTES = 256 * 2**20   # what recorded_answers reads at most (a class's records: a few MB)


def recorded_answers(path):
    """{(cell, index): {student: encoded answer}} from the judge's records file (read once)."""
    if not isinstance(path, (str, os.PathLike)) or path not in _LOADED:   # read_json refuses a non-path
        by_student = read_json(path, "the judge's records", MAX_RECORDS_BYTES)
        table = {}
        for student, records in by_student.items():
            for record in records:
                table.setdefault((record["cell"], record["index"]), {})[student] = record["answer"]
        _LOADED[path] = table
    return _LOADED[path]


# ---- answers as data ----------------------------------------------------------------------------


def record_answer(exercise, answer, args, kwargs):
    """The answer as JSON data; a function is run through the check here, and its outputs kept
    (an nn.Module class through its ``run`` function: helpers.exercises.Module)."""
    kind = exercise.answer
    if callable(answer) and hasattr(kind, "convert"):   # a Function or Module answer: judged as the live check
        try:                                            # judges it (the course's own piece is no answer)
            answer = kind.convert(answer, exercise.problems, args, kwargs)
        except Exception as wrong:   # noqa: BLE001 (Wrong: the sentence is what the judge will say)
            return {"unknown": str(wrong)[:200]}
    if callable(answer) and not isinstance(answer, type):
        recorder = Recorder(answer)
        exercise.feedback(recorder, *args, **kwargs)
        return {"function": recorder.calls}
    return encode(answer)


def _what(x):
    """What arrived, in a few words (never its whole contents)."""
    if x is None or isinstance(x, (bool, int, float)) and len(repr(x)) <= 30:
        return repr(x)
    if isinstance(x, str):
        return f"the text {ascii(x)}" if len(x) <= 30 else f"a text of {len(x):,} characters"
    if isinstance(x, (list, tuple, dict, set)):
        return f"a {type(x).__name__} of {len(x):,} item{'' if len(x) == 1 else 's'}"
    return f"a {type(x).__name__}"


def encode(x, depth=0):
    """Plain data for JSON: numbers, strings, lists, tuples, sets, dicts and arrays (torch kept apart).

    Never raises; what is too big, too deep or not data is recorded as {"unknown": what it was}."""
    if depth > MAX_DEPTH:
        return {"unknown": "nested too deeply"}
    if x is None or isinstance(x, bool):
        return x
    if isinstance(x, str):
        return x if len(x) <= MAX_TEXT else {"unknown": f"a text of {len(x):,} characters"}
    if isinstance(x, (int, np.integer)):
        x = int(x)
        return x if x.bit_length() <= MAX_DIGITS * 3.33 else {"unknown": f"a whole number of {x.bit_length():,} bits"}
    if isinstance(x, (float, np.floating)):
        return {"float": repr(float(x))} if not math.isfinite(x) else float(x)
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        try:
            if x.numel() > MAX_VALUES:
                return {"unknown": f"a tensor of {x.numel():,} numbers"}
            return {"torch": encode(x.detach().cpu().float().numpy(), depth + 1)}
        except (TypeError, RuntimeError, AttributeError):
            return {"unknown": f"a tensor of {getattr(x, 'dtype', 'unknown type')}"}
    if isinstance(x, range):
        return {"list": [int(v) for v in x]} if len(x) <= MAX_VALUES else {"unknown": f"a range of {len(x):,} numbers"}
    if not isinstance(x, np.ndarray) and hasattr(x, "__array__") or type(x).__name__ == "array":
        try:
            x = np.asarray(x)
        except Exception:
            return {"unknown": type(x).__name__}
    if isinstance(x, np.ndarray):
        x = np.asarray(x)   # np.matrix and other subclasses as a plain array
        if x.dtype.kind not in "biuf":
            return {"unknown": f"an array of {x.dtype}"}
        if x.size > MAX_VALUES:
            return {"unknown": f"an array of {x.size:,} numbers"}
        values = x.astype(float).ravel()
        return {"array": [v if math.isfinite(v) else repr(v) for v in values.tolist()],
                "shape": list(x.shape), "kind": x.dtype.kind}
    if isinstance(x, (list, tuple, set, frozenset, dict)) and len(x) > MAX_VALUES:
        return {"unknown": f"a {type(x).__name__} of {len(x):,} items"}
    if isinstance(x, (list, tuple, set, frozenset)):
        items = sorted(x, key=repr) if isinstance(x, (set, frozenset)) else x
        kind = {list: "list", tuple: "tuple"}.get(type(x), "set")
        return {kind: [encode(v, depth + 1) for v in items]}
    if isinstance(x, dict):
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    return {"unknown": type(x).__name__}


class Unknown:
    """A recorded answer of a kind that could not be kept as data (the checks reject it)."""

    def __init__(self, what):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


TAGS = {"float": set(), "array": {"shape", "kind"}, "torch": set(), "list": set(), "tuple": set(), "set": set(),
        "dict": set(), "function": set(), "unknown": set()}   # tag -> the other keys its record has
SPECIAL_FLOATS = {"nan", "inf", "-inf"}


def _refuse(what, x):
    raise RecordError(f"expected {what}, but the record holds {_what(x)}")


def _number(v):
    """One entry of a recorded array: a finite number, or 'nan', 'inf', '-inf'."""
    if isinstance(v, str) and v in SPECIAL_FLOATS:
        return float(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        _refuse("an array entry (a finite number, or 'nan', 'inf', '-inf')", v)
    return float(v)


def _items(x, tag, depth):
    if not isinstance(x[tag], list) or len(x[tag]) > MAX_VALUES:
        _refuse(f"the items of a recorded {tag} (a list of at most {MAX_VALUES:,})", x[tag])
    return [decode(v, depth + 1) for v in x[tag]]


def decode(x, depth=0):
    """The inverse of ``encode`` (torch tensors come back as torch tensors). A record ``encode``
    cannot have written (it came from student code) raises RecordError, one sentence."""
    if depth > MAX_DEPTH + 2:
        raise RecordError(f"expected a recorded answer nested at most {MAX_DEPTH} deep, but the record is deeper")
    if x is None or isinstance(x, (bool, int)) or isinstance(x, float) and math.isfinite(x):
        return x
    if isinstance(x, str):
        return x if len(x) <= MAX_TEXT else _refuse(f"a text of at most {MAX_TEXT:,} characters", x)
    if not isinstance(x, dict):
        _refuse("a recorded answer (None, a bool, a number, a text or a tagged dict)", x)
    tag = next((t for t in TAGS if t in x), None)
    if tag is None or set(x) != {tag} | TAGS[tag]:
        _refuse(f"a tagged record with one of the keys {', '.join(TAGS)}", {k: None for k in list(x)[:5]})
    if tag == "float":
        if not (isinstance(x["float"], str) and x["float"] in SPECIAL_FLOATS):
            _refuse("'nan', 'inf' or '-inf' for a recorded float that is not finite", x["float"])
        return float(x["float"])
    if tag == "array":
        shape, kind = x["shape"], x["kind"]
        if not (isinstance(shape, list) and len(shape) <= 32
                and all(type(n) is int and 0 <= n <= MAX_VALUES for n in shape)):
            _refuse("an array's shape (at most 32 whole numbers from 0)", shape)
        if not (isinstance(kind, str) and kind in ("b", "i", "u", "f")):
            _refuse("an array's kind ('b', 'i', 'u' or 'f')", kind)
        if not isinstance(x["array"], list) or len(x["array"]) > MAX_VALUES:
            _refuse(f"an array's numbers (a list of at most {MAX_VALUES:,})", x["array"])
        if math.prod(shape) != len(x["array"]):
            raise RecordError(f"expected {math.prod(shape):,} numbers for an array of shape {tuple(shape)}, "
                              f"but the record holds {len(x['array']):,}")
        values = np.array([_number(v) for v in x["array"]], dtype=float).reshape(shape)
        if kind != "f" and not np.isfinite(values).all():
            _refuse(f"finite numbers in an array of kind '{kind}'", "nan or inf")
        return values.astype({"b": bool, "i": np.int64, "u": np.int64}.get(kind, float))
    if tag == "torch":
        inner = x["torch"]
        if not (isinstance(inner, dict) and set(inner) == {"array", "shape", "kind"}):
            _refuse("a recorded tensor's array", inner)
        import torch
        return torch.as_tensor(decode(inner, depth + 1))
    if tag in ("list", "tuple"):
        items = _items(x, tag, depth)
        return items if tag == "list" else tuple(items)
    if tag == "set":
        return {_hashable(v) for v in _items(x, tag, depth)}
    if tag == "dict":
        pairs = x["dict"]
        if not (isinstance(pairs, list) and len(pairs) <= MAX_VALUES
                and all(isinstance(p, list) and len(p) == 2 for p in pairs)):
            _refuse("a recorded dict's [key, value] pairs", pairs)
        return {_hashable(decode(k, depth + 1)): decode(v, depth + 1) for k, v in pairs}
    if tag == "function":
        calls = x["function"]
        if not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            _refuse("a recorded function's calls (a list of records)", calls)
        return Replay(calls)
    return Unknown(x["unknown"] if isinstance(x["unknown"], str) and len(x["unknown"]) <= 200 else "something")


def _hashable(x):
    """x made hashable, at any depth (lists become tuples, sets frozensets, dicts item tuples)."""
    if isinstance(x, (list, tuple)):
        return tuple(_hashable(v) for v in x)
    if isinstance(x, (set, frozenset)):
        return frozenset(_hashable(v) for v in x)
    if isinstance(x, dict):
        return tuple((_hashable(k), _hashable(v)) for k, v in x.items())
    if isinstance(x, np.ndarray):
        return tuple(x.ravel().tolist())
    return x


# ---- function answers: run in the student's kernel, replayed in the judge ----------------------


def fingerprint(x, depth=0):
    """A short text that is the same for equal inputs (arrays by their bytes, models by kind);
    one longer than 1,000 characters is replaced by its hash."""
    if depth == 0:
        text = fingerprint(x, 1)
        return text if len(text) <= 1000 else "long:" + hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()
    if depth > 11:
        return "…"
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        try:
            x = x.detach().cpu().float().numpy()
        except (TypeError, RuntimeError, AttributeError):
            return f"tensor:{getattr(x, 'dtype', '?')}"
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            return f"array{x.shape}:{x.dtype}"
        return f"array{x.shape}:" + hashlib.sha1(np.ascontiguousarray(x, dtype=float).tobytes()).hexdigest()[:16]
    if isinstance(x, str) and len(x) > 200:
        return "text:" + hashlib.sha1(x.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if isinstance(x, (list, tuple)):
        return "(" + ",".join(fingerprint(v, depth + 1) for v in x) + ")"
    if isinstance(x, dict):
        return "{" + ",".join(f"{k!r}:{fingerprint(v, depth + 1)}" for k, v in sorted(x.items(), key=repr)) + "}"
    if x is None or isinstance(x, (bool, int, float, str, np.number)):
        return repr(x)
    return type(x).__name__ + repr(getattr(x, "cfg", ""))


MAX_CALLBACK_CALLS = 10_000      # calls of the check's own functions (a callback) one recorded call keeps
MAX_CALLBACK_CHARS = 10 * 2**20  # characters of their recorded arguments, all calls together


def is_callback(x):
    """Whether ``x`` is a plain function the check hands the learner's function (a callback, a
    metric), whose calls the check may count: not a model, a class or other data."""
    return isinstance(x, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial))


class Recorder:
    """Wraps a learner's function in their own kernel: calls it and keeps each input's
    fingerprint and what it returned (or how it failed), and every call it made to a function the
    check gave it (a callback: ``callbacks``, with its arguments as data), for the judge to make
    again in the same order (a check may count them, as chapter 12's ``train_loop`` does)."""

    def __init__(self, function):
        self.function, self.calls = function, []

    def __call__(self, *args, **kwargs):
        entry = {"inputs": fingerprint((args, kwargs))}
        self.calls.append(entry)
        given = {**dict(enumerate(args)), **kwargs}
        before = {key: fingerprint(value) for key, value in given.items()}
        args, kwargs = self._watched(entry, args, kwargs)
        try:
            out = self.function(*args, **kwargs)
        except SystemExit:
            entry["raised"] = ["SystemExit", ""]
            raise
        except BaseException as exc:
            entry["raised"] = [type(exc).__name__, str(exc)[:500]]
            raise
        entry["output"] = encode(out)
        changed = [key for key, value in given.items() if fingerprint(value) != before[key]]
        if changed:   # changed in place: the judge's replay changes its copies too, so the check says so there
            entry["changed"] = changed
        return out

    @staticmethod
    def _watched(entry, args, kwargs):
        """(args, kwargs) with each callback (``is_callback``) wrapped so that its calls are kept in
        ``entry["callbacks"]``: [{"at": its place, "args": encoded, "kwargs": encoded}]."""
        places = [key for key, value in {**dict(enumerate(args)), **kwargs}.items() if is_callback(value)]
        if not places:
            return args, kwargs
        calls, budget = entry.setdefault("callbacks", []), {"chars": 0}

        def watched(place, function):
            def callback(*a, **k):
                kept = {"at": place, "args": encode(a), "kwargs": encode(k)}
                budget["chars"] += len(json.dumps(kept))
                if len(calls) < MAX_CALLBACK_CALLS and budget["chars"] <= MAX_CALLBACK_CHARS:
                    calls.append(kept)   # (past these, the judge replays the first: no check counts so many)
                return function(*a, **k)
            return functools.wraps(function)(callback) if isinstance(function, types.FunctionType) else callback

        args = tuple(watched(i, v) if i in places else v for i, v in enumerate(args))
        kwargs = {name: watched(name, v) if name in places else v for name, v in kwargs.items()}
        return args, kwargs


class ReplayError(Exception):
    """A learner's function failed in their kernel; replayed with its name and message."""


class Replay:
    """Stands in for a learner's function in the judge: returns what it returned in the student's
    kernel for the same inputs, in the same order, after calling the check's callbacks as it called
    them there; other inputs are refused."""

    def __init__(self, calls):
        self.calls, self.next = list(calls), 0

    def __call__(self, *args, **kwargs):
        if self.next >= len(self.calls):
            raise ReplayError("its outputs for these inputs were not recorded")
        entry = self.calls[self.next]
        self.next += 1
        if not isinstance(entry, dict):
            raise RecordError(f"expected a record of one call, but the record holds {_what(entry)}")
        if entry.get("inputs") != fingerprint((args, kwargs)):
            raise ReplayError("it was called on other inputs in the student's kernel")
        given = {**dict(enumerate(args)), **kwargs}
        self._call_back(entry, given)   # its calls to the check's callbacks, before it returned (or failed)
        if "raised" not in entry and "output" not in entry:   # the check stopped waiting while it still ran
            raise ReplayError("no result: it ran longer than the time limit and was stopped (a loop that never ends?)")
        if "raised" in entry:
            raised = entry["raised"]
            if not (isinstance(raised, list) and len(raised) == 2 and all(isinstance(r, str) for r in raised)):
                raise RecordError(f"expected how the function failed ([name, message]), but the record holds "
                                  f"{_what(raised)}")
            name, message = raised
            if name == "SystemExit":
                raise SystemExit(0)
            if name == "_OutOfTime":
                raise ReplayError("no result: it ran longer than the time limit and was stopped (a loop that never ends?)")
            raise ReplayError(f"{name}: {message}")
        changed = entry.get("changed", [])
        if not (isinstance(changed, list) and all(type(key) in (int, str) and key in given for key in changed)):
            raise RecordError(f"expected the inputs a call changed (their places), but the record holds {_what(changed)}")
        for key in changed:
            touch(given[key])
        return decode(entry.get("output"))

    @staticmethod
    def _call_back(entry, given):
        """Make again, in order, the calls the learner's function made to the check's callbacks in
        the student's kernel (``Recorder._watched``), with the same arguments (as data)."""
        calls = entry.get("callbacks", [])
        if not (isinstance(calls, list) and len(calls) <= MAX_CALLBACK_CALLS and all(
                isinstance(c, dict) and set(c) == {"at", "args", "kwargs"} and type(c["at"]) in (int, str)
                and c["at"] in given and is_callback(given[c["at"]]) for c in calls)):
            raise RecordError(f"expected the calls to the check's callbacks (a list of records), but the record "
                              f"holds {_what(calls)}")
        for kept in calls:
            a, k = decode(kept["args"]), decode(kept["kwargs"])
            if not (isinstance(a, tuple) and isinstance(k, dict) and all(isinstance(n, str) for n in k)):
                raise RecordError(f"expected a callback's arguments (a tuple and a dict), but the record holds "
                                  f"{_what(a)}")
            try:
                given[kept["at"]](*a, **k)
            except Exception:   # noqa: BLE001 (what the call led to in the student's kernel is in the record)
                pass


def touch(x):
    """Change ``x`` in place, as a learner's function changed its input in the student's kernel
    (the judge's check then finds the change and says so, as the live check did): an array's or
    tensor's first number, a list's length, a dict's keys (else nothing: it cannot change)."""
    if isinstance(x, np.ndarray) and x.size and x.flags.writeable:
        x.flat[0] = 1 if x.flat[0] == 0 else 0   # (+1 would leave NaN, inf and 1e20 as they were)
    elif hasattr(x, "detach") and hasattr(x, "numel") and x.numel():   # a torch tensor
        import torch

        with torch.no_grad():
            first = x.view(-1)[:1] if x.is_contiguous() else x[(0,) * x.dim()]
            first.copy_((first == 0).to(x.dtype))
    elif isinstance(x, list):
        x.append(None)
    elif isinstance(x, dict):
        x[("changed in place",)] = None
    elif isinstance(x, tuple):
        for item in x:
            touch(item)
