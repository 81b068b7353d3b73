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
"""
import hashlib
import json
import math
import os

import numpy as np

MAX_RECORDS_BYTES = 20 * 2**20   # a records file larger than this is not read
STATE = {"cell": None, "index": 0}


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
    STATE["cell"], STATE["index"] = str(grade_id), 0


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


def recorded_answers(path):
    """{(cell, index): {student: encoded answer}} from the judge's records file (read once)."""
    if path not in _LOADED:
        with open(path) as file:
            by_student = json.load(file)
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
    recordable = getattr(exercise.answer, "recordable", None)
    if recordable is not None:
        try:
            answer = recordable(answer)
        except Exception:   # not a module class: recorded as it is, and judged wrong
            pass
    if callable(answer) and not isinstance(answer, type):
        recorder = Recorder(answer)
        exercise.feedback(recorder, *args, **kwargs)
        return {"function": recorder.calls}
    return encode(answer)


def encode(x, depth=0):
    """Plain data for JSON: numbers, strings, lists, tuples, sets, dicts and arrays (torch kept apart)."""
    if depth > 20:
        return {"unknown": "nested too deeply"}
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return {"float": repr(float(x))} if not math.isfinite(x) else float(x)
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        try:
            return {"torch": encode(x.detach().cpu().float().numpy(), depth + 1)}
        except (TypeError, RuntimeError):
            return {"unknown": f"a tensor of {x.dtype}"}
    if isinstance(x, range):
        return {"list": [int(v) for v in x]}
    if not isinstance(x, np.ndarray) and hasattr(x, "__array__") or type(x).__name__ == "array":
        try:
            x = np.asarray(x)
        except Exception:
            return {"unknown": type(x).__name__}
    if isinstance(x, np.ndarray):
        x = np.asarray(x)   # np.matrix and other subclasses as a plain array
        if x.dtype.kind not in "biuf":
            return {"unknown": f"an array of {x.dtype}"}
        values = x.astype(float).ravel()
        return {"array": [v if math.isfinite(v) else repr(v) for v in values.tolist()],
                "shape": list(x.shape), "kind": x.dtype.kind}
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


def decode(x):
    """The inverse of ``encode`` (torch tensors come back as torch tensors)."""
    if not isinstance(x, dict):
        return x
    if "float" in x:
        return float(x["float"])
    if "array" in x:
        values = np.array([float(v) for v in x["array"]], dtype=float).reshape([int(n) for n in x["shape"]])
        return values.astype({"b": bool, "i": np.int64, "u": np.int64}.get(x["kind"], float))
    if "torch" in x:
        import torch
        return torch.as_tensor(decode(x["torch"]))
    if "list" in x:
        return [decode(v) for v in x["list"]]
    if "tuple" in x:
        return tuple(decode(v) for v in x["tuple"])
    if "set" in x:
        return {_hashable(decode(v)) for v in x["set"]}
    if "dict" in x:
        return {_hashable(decode(k)): decode(v) for k, v in x["dict"]}
    if "function" in x:
        return Replay(x["function"])
    return Unknown(x.get("unknown", "something"))


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
    """A short text that is the same for equal inputs (arrays by their bytes, models by kind)."""
    if depth > 10:
        return "…"
    if hasattr(x, "detach") and hasattr(x, "numpy"):
        x = x.detach().cpu().numpy()
    if isinstance(x, np.ndarray):
        return f"array{x.shape}:" + hashlib.sha1(np.ascontiguousarray(x, dtype=float).tobytes()).hexdigest()[:16]
    if isinstance(x, (list, tuple)):
        return "(" + ",".join(fingerprint(v, depth + 1) for v in x) + ")"
    if isinstance(x, dict):
        return "{" + ",".join(f"{k!r}:{fingerprint(v, depth + 1)}" for k, v in sorted(x.items(), key=repr)) + "}"
    if x is None or isinstance(x, (bool, int, float, str, np.number)):
        return repr(x)
    return type(x).__name__ + repr(getattr(x, "cfg", ""))


class Recorder:
    """Wraps a learner's function in their own kernel: calls it and keeps each input's
    fingerprint and what it returned (or how it failed)."""

    def __init__(self, function):
        self.function, self.calls = function, []

    def __call__(self, *args, **kwargs):
        entry = {"inputs": fingerprint((args, kwargs))}
        self.calls.append(entry)
        try:
            out = self.function(*args, **kwargs)
        except SystemExit:
            entry["raised"] = ["SystemExit", ""]
            raise
        except BaseException as exc:
            entry["raised"] = [type(exc).__name__, str(exc)[:500]]
            raise
        entry["output"] = encode(out)
        return out


class ReplayError(Exception):
    """A learner's function failed in their kernel; replayed with its name and message."""


class Replay:
    """Stands in for a learner's function in the judge: returns what it returned in the student's
    kernel for the same inputs, in the same order; other inputs are refused."""

    def __init__(self, calls):
        self.calls, self.next = list(calls), 0

    def __call__(self, *args, **kwargs):
        if self.next >= len(self.calls):
            raise ReplayError("its outputs for these inputs were not recorded")
        entry = self.calls[self.next]
        self.next += 1
        if entry.get("inputs") != fingerprint((args, kwargs)):
            raise ReplayError("it was called on other inputs in the student's kernel")
        if "raised" in entry:
            name, message = entry["raised"]
            if name == "SystemExit":
                raise SystemExit(0)
            if name == "_OutOfTime":
                raise ReplayError("no result: it ran longer than the time limit and was stopped (a loop that never ends?)")
            raise ReplayError(f"{name}: {message}")
        return decode(entry.get("output"))
