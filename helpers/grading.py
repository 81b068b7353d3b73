"""Grading that a student's code cannot game: answers are recorded in the student's kernel and
judged in another run that never executes student code.

``Exercise.grade`` (the call in nbgrader's hidden tests) behaves by the kernel's environment
variable COURSE_GRADING:

* unset: it raises AssertionError on a wrong answer (nbgrader's own ``validate``/``autograde``);
* ``record:<file>``: the student's notebook is running. Each grade call appends the student's
  answer, as data, to <file> (a function answer: what it returned on the check's inputs).
  Nothing is judged there, so patching the checks in that kernel gains nothing. A check cell's
  visible line runs a function answer through the check once and that run is what its grade call
  records (``shown``): the learner's function runs once per check cell, not twice;
* ``judge:<records>:<verdicts>``: the instructor's own notebook is running, with its own
  arguments. Each grade call judges every student's recorded answer for that cell and appends
  the verdicts. Only data written by student code reaches this run, never its code.

``scripts/autograde.py`` assembles the notebooks, starts both runs and reads the verdicts;
it puts ``helpers.grading.cell("<grade id>")`` at the top of each hidden-test cell, so each
record knows its exercise. In the grader's record run, records go to the grader's driver (another
process, which runs no student code) on a socket it handed the kernel (``records_channel``, sealed
before any cell of the student's runs): once written there no one can change them, as student code
could change a file in place. Student code can write to that socket too, so each record starts with
a token the driver wrote on the socket before the kernel started (``_token``, read by ``seal``): a line
without it is no record. The driver also notes which cell was running when each record came, and a
record counts only when written while the check cell it names ran. The grader's hidden grade call
reaches the course's check through this module (``sealed_check``), not the notebook's ``checks``,
which a learner's function may rebind to make the call do nothing. The record key (``STATE``) is plain
data student code can change, so the
grader trusts none: a check cell counts for nothing when it has two records for one grade call,
records out of their order 0, 1, 2, ..., a grade call recorded under another check's name, a record
the judge never asks for, or records and then an error (``autograde.attributed``,
``autograde.read_records``, ``autograde.judge``). The record mode (COURSE_GRADING) is read once, when
this module is imported (``mode``): a cell that changes the environment later is ``tampered``.
The recording code itself runs in the student's kernel too, so it notes itself as imported (``seal``,
before any student cell: the grader's first cell imports it) and each record checks it is unchanged
(``tampered``): a record made once a student's cell replaced a piece of it holds no answer, and
counts for nothing.

Records are written by student code, so the judge trusts none of them: ``decode`` checks every
record's form (tags, shapes, kinds, sizes, depth) and refuses a malformed one with one sentence
(``RecordError``), which costs that answer only. ``encode`` keeps any answer as bounded data:
more than MAX_VALUES numbers, a text of more than MAX_TEXT characters or a number of more than
MAX_DIGITS digits is recorded as what it was, not copied. An array or a tensor keeps its dtype and
its exact values, a NumPy scalar its kind (``_encode_numpy_scalar``), and an array.array, an np.matrix,
a torch.Size, a frozenset and an nn.Parameter (or a tensor that requires grad) their own type, so the
judge sees what the live check saw (a check may refuse one kind and take another with the same values).
"""
import array
import functools
import hashlib
import importlib
import inspect
import json
import math
import operator
import os
import select
import stat
import sys
import threading
import types
import weakref

import numpy as np

from .errors import CourseInputError, Wrong, class_name, fail, message_of
from .files import read_json
from .states import OutOfTime

MAX_RECORDS_BYTES = 20 * 2**20   # a records file larger than this is not read
MAX_VALUES = 1_000_000           # numbers (or items) one recorded answer may hold
MAX_TEXT = 1_000_000             # characters of one recorded text
MAX_DIGITS = 1_000               # digits of one recorded whole number
MAX_DEPTH = 20                   # nesting of one recorded answer
MAX_UNKNOWN = 500                # characters of one recorded "unknown" (why it could not be kept)
STATE = {"cell": None, "index": 0}   # the key of the next record: plain data, which student code can change;
# so the grader trusts no key (scripts/autograde.py: ``attributed`` wants a check cell's records numbered 0, 1,
# 2, ... under its own name, and ``judge`` a record for every number it asks for and no other)


class RecordError(CourseInputError):
    """A recorded answer the judge cannot rebuild; the message names what was expected and what arrived."""


def mode():
    """('record', file) or ('judge', records, verdicts), or None when grading is off. Once this module
    was imported (``seal``) in a record run, that record mode stays, whatever the environment says
    later: a learner's cell that changes COURSE_GRADING cannot send the records elsewhere or turn
    recording off (``tampered`` says it changed)."""
    return _SEALED.get("mode") or setting_mode()


def setting_mode():
    """The mode COURSE_GRADING says now (``mode``)."""
    setting = os.environ.get("COURSE_GRADING", "")
    kind, _, rest = setting.partition(":")
    if kind == "record" and rest:
        return ("record", rest)
    if kind == "judge" and rest.count(":") == 1:
        return ("judge", *rest.split(":"))
    return None


def cell(grade_id):
    """Mark the start of the hidden tests of the exercise cell ``grade_id`` (placed by the grader).
    When recording, a course's recording code changed since it was imported (``tampered``) is
    recorded for the cell, as its first answer ({"unknown": CHANGED}, "tampered": what changed):
    none of its answers counts."""
    if not isinstance(grade_id, str) or not 0 < len(grade_id) <= 200 or not grade_id.isprintable():
        fail(f"expected a grade id (a short line of text such as 'ch00_ex1_check'), but got {_what(grade_id)}")
    STATE["cell"], STATE["index"] = grade_id, 0
    _PENDING.clear()   # (a visible line's record is for the grade call of its own cell only)
    how = mode()
    changed = tampered() if how is not None and how[0] == "record" else []
    if changed:
        _SEALED["append"](how[1], {"cell": grade_id, "index": 0, "answer": {"unknown": CHANGED}, "tampered": changed})


def handle(exercise, answer, args, kwargs):
    """Record or judge one grade call, as the mode says. A record made while the course's recording
    code is changed (``tampered``, before the answer is read and after) holds no answer but what
    changed: the grader counts none of that cell's answers."""
    key = (STATE["cell"], STATE["index"])
    STATE["index"] += 1
    how = mode()
    if how[0] == "record":
        changed = tampered(exercise)
        kept = _kept_record(key, exercise, answer, args, kwargs)   # the visible line's run (``shown``): not run again
        recorded = None if changed else record_answer(exercise, answer, args, kwargs) if kept is _MISSING else kept
        changed = changed or tampered(exercise)   # (a learner's function the check called may change it)
        if changed:
            _SEALED["append"](how[1], {"cell": key[0], "index": key[1], "answer": {"unknown": CHANGED},
                                       "tampered": changed})
        else:
            append(how[1], {"cell": key[0], "index": key[1], "check": exercise.title, "answer": recorded})
    else:
        for student, recorded in recorded_answers(how[1]).get(key, {}).items():
            append(how[2], {"student": student, "cell": key[0], "index": key[1],
                            "problems": judged(exercise, recorded, args, kwargs)})


_PENDING = []   # [(key, exercise, answer, args, kwargs, record)]: the visible line's record (``shown``)


def shown(exercise, given, named):
    """The check's sentences for a check cell's visible line, ``check(*given, **named)`` (Exercise.__call__).
    In the grader's record run, a function answer runs through the check once, here, as ``record_answer``
    runs it, and the record is kept for the grade call after it in the same cell (``handle``, when it names
    the same check, answer and arguments): a check may take its whole time limit, and the cell's time limit
    (scripts/autograde.py CELL_TIMEOUT) need cover it only once. Anything else: ``exercise.feedback``."""
    answer, args, kwargs = exercise.answer_of(given, named)
    how = mode()
    if how is None or how[0] != "record" or not callable(answer) or tampered(exercise):
        return exercise.feedback(*given, **named)
    key = (STATE["cell"], STATE["index"])
    record, found = _recording(exercise, answer, args, kwargs)
    if found is None:   # not run through the check (refused first, or a class a value check takes): judged as ever
        return exercise.feedback(*given, **named)
    if not tampered(exercise):
        _PENDING[:] = [(key, exercise, answer, args, dict(kwargs), record)]
    return found


def _kept_record(key, exercise, answer, args, kwargs):
    """The record ``shown`` kept for this grade call (the same key, check, answer and arguments, by
    identity), else _MISSING; either way none is kept after."""
    kept = _PENDING[:1]
    _PENDING.clear()
    if not kept:
        return _MISSING
    at, then, given, then_args, then_kwargs, record = kept[0]
    same = (at == key and then is exercise and given is answer and len(then_args) == len(args)
            and all(map(operator.is_, then_args, args)) and list(then_kwargs) == list(kwargs)
            and all(then_kwargs[name] is kwargs[name] for name in kwargs))
    return record if same else _MISSING


def judged(exercise, recorded, args, kwargs):
    """What the judge says of one recorded answer (JSON data, ``record_answer``'s): the check's
    sentences, the live check's own for a ``Said`` record, one sentence for a record ``decode`` refuses.
    A function's wrong outputs on a model the check cell gave it that held other weights in the student's
    kernel (``_model_digests``) are said to come from other inputs, as the replay says of other arrays."""
    try:
        answer = decode(recorded)
        if type(answer) is Said:
            return [answer.what]
        found = exercise.feedback(answer, *args, **kwargs)
        other = _other_model(exercise, answer, args, kwargs) if found and isinstance(answer, Replay) else None
        return found if other is None else [
            f"your function was called on other inputs in the student's kernel: the check cell's model {other} held "
            "other weights there than in the instructor's notebook (a cell that changed it in place, left in?), so "
            "what your function returned there cannot be judged on the instructor's model"]
    except RecordError as error:
        return [f"your answer could not be judged: {error}"]
    except Exception as error:   # one strange record never stops the class's judging
        return [f"your answer could not be judged ({type(error).__name__})"]


def append(path, entry, _open=open, _dumps=json.dumps, _fsync=os.fsync, _write=os.write):
    """Append one JSON line to ``path`` and flush it to disk (a kernel may die just after); with the
    standard library's functions as they were when this module was imported (a learner's cell may
    replace json.dumps or open). The line starts on a line of its own: after a fragment someone else
    left unfinished, a newline first (the grader then finds that fragment as a line of its own).
    In the grader's record run (``channel``, sealed for the records ``path``), the line goes to the
    grader's driver instead, on the socket it handed the kernel: once written there, no one can
    change it (a file can be rewritten in place before the grader reads it)."""
    channel = _SEALED.get("channel")
    if channel is not None and _SEALED.get("mode") == ("record", path):
        data = (_SEALED.get("token", "") + _dumps(entry) + "\n").encode("utf-8")   # (the driver's token first)
        while data:
            data = data[_write(channel[0], data):]
        return
    with _open(path, "a+b") as file:   # (appended: every write goes to the end, wherever it reads)
        end = file.seek(0, 2)
        file.seek(max(end - 1, 0))
        last = file.read(1)   # b"" when the file is empty
        start = b"\n" if last not in (b"", b"\n") else b""
        file.write(start + (_dumps(entry) + "\n").encode("utf-8"))
        file.flush()
        _fsync(file.fileno())


# ---- the recording code, as it was before a learner's cell could change it -----------------------
#
# The record run records in the learner's own kernel, so a cell of theirs could replace what records
# an answer (``record_answer``, ``encode``, ``Recorder``, ``Exercise.grade``) and record what it likes.
# ``seal`` notes each course module's functions and classes (and their code) as it is imported (this
# one at its end, helpers.exercises at its end, both in the grader's first cell, before any cell of
# the learner's); ``tampered`` compares at each record. It takes a deliberate attack on this code to
# get past (the instructor guide says what in-process recording cannot rule out).

CHANGED = ("the course's recording code, or how IPython runs a check cell, was changed by the notebook's own code "
           "before this answer was recorded, so it does not count")
_SEAL = []      # (where, holder, name, object, code) of what records an answer (``seal``)
_SEALED = {}    # this module's functions as they were sealed (what writes a "tampered" record)
_MISSING = object()


def _code(value):
    """What of ``value`` a change would show in: a function's code, defaults and closure (of the
    function a staticmethod, classmethod or property holds); None for anything else."""
    value = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
    if not isinstance(value, types.FunctionType):
        return None
    return (value.__code__, value.__defaults__, value.__kwdefaults__, value.__closure__)


def _current(holder, name):
    """``holder``'s ``name`` as its own dict holds it (a module's, a class's; or a dict's item)."""
    space = holder if isinstance(holder, dict) else type.__dict__["__dict__"].__get__(holder) \
        if isinstance(holder, type) else vars(holder)
    return space.get(name, _MISSING)


def _parts(module):
    """[(where, holder, name)] of what records an answer in ``module``: its own entry in sys.modules,
    each of its attributes that is a function, class or module of the course's, and the functions
    of each class it defines."""
    parts = [(f"sys.modules[{module.__name__!r}]", sys.modules, module.__name__)]
    for name, value in list(vars(module).items()):
        owner = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(value, (types.FunctionType, type, types.ModuleType)) and _course_module(owner):
            parts.append((f"{module.__name__}.{name}", module, name))
        if isinstance(value, type) and owner == module.__name__:
            parts += [(f"{module.__name__}.{name}.{attr}", value, attr) for attr, member in vars(value).items()
                      if _code(member) is not None]
    return parts


def seal(module=None):
    """Note ``module`` (a course module; this one when None) as it is now: ``tampered`` compares with
    it. A module is sealed once (a learner's cell cannot seal what it changed)."""
    module = sys.modules[__name__] if module is None else module
    if not isinstance(module, types.ModuleType) or not _course_module(module.__name__):
        fail(f"expected one of the course's modules, but got {_what(module)}")
    if any(where == f"sys.modules[{module.__name__!r}]" for where, *_ in _SEAL):
        return
    for where, holder, name in _parts(module):
        value = _current(holder, name)
        _SEAL.append((where, holder, name, value, _code(value)))
    if module.__name__ == __name__:
        recording = setting_mode()
        recording = recording if recording is not None and recording[0] == "record" else None
        channel = records_channel() if recording is not None else None
        _SEALED.update(append=append, mode=recording, channel=channel, token=_token(channel[0]) if channel else "")
        if recording is not None:
            _seal_shell()


RECORDS_FD = "COURSE_RECORDS_FD"   # the grader's record run: the kernel's end of its records channel


def records_channel():
    """(descriptor, (device, inode)) of the records channel the grader's driver handed this kernel
    (scripts/autograde.py ``Attributor``: a unix socket, its number in COURSE_RECORDS_FD), as ``seal``
    finds it before any cell of the learner's runs; None without one (nbgrader, the tests: records
    are appended to the file COURSE_GRADING names)."""
    number = os.environ.get(RECORDS_FD, "")
    number = int(number) if number.isdigit() and len(number) < 10 else None
    kind = _identity(number) if number is not None else None
    return (number, kind[1:]) if kind is not None and stat.S_ISSOCK(kind[0]) else None


def _token(descriptor):
    """The driver's token for this run's records, the one line it wrote on the channel before the kernel
    started (scripts/autograde.py ``Attributor``), read by ``seal`` before any cell of the learner's: each
    record starts with it (``append``), so the driver knows the course's records from a line a learner's
    code wrote on the channel; "" when none comes within a few seconds."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 200:
        if not select.select([descriptor], [], [], 5)[0]:
            return ""
        piece = os.read(descriptor, 200 - len(data))
        if not piece:
            return ""
        data += piece
    return data.decode("ascii", errors="replace").strip()


def _identity(descriptor):
    """(mode, device, inode) of an open ``descriptor``, or None when it is not open."""
    try:
        info = os.fstat(descriptor)
    except OSError:
        return None
    return info.st_mode, info.st_dev, info.st_ino


# ---- how a check cell runs, as it was before a learner's cell could change it ---------------------
#
# IPython lets a cell change how later cells run: an input transformer rewrites a cell's text as it is sent (one
# turned the grader's check cell into a forged record: red team round 29), an AST transformer its parsed code, a
# pre_run_cell callback or a trace function runs code before it or inside it. In the grader's record run ``seal``
# notes these hooks (``_hooks``) and puts ``_transform`` in the place of the shell's transform_cell, the first step
# of every cell: the grader's check cell (it starts with MARK) runs as written, not transformed, with the hooks put
# back as sealed (``_unhook``), and when any had changed, the check's first record says what (as ``tampered`` says
# of the course's code): none of its answers counts. Code that replaces _transform itself, or runs in the check
# cell through other ways (a thread, a destructor), is the deliberate attack the instructor guide speaks of.

MARK = "import helpers.grading; helpers.grading.cell("   # how scripts/autograde.py's MARKER starts a check cell
SHELL_PATH = ("__class__", "transform_cell", "run_cell", "run_cell_async", "_run_cell", "should_run_async",
              "transform_ast", "run_ast_nodes", "run_code", "compile", "compile.ast_parse", "compile.cache", "events",
              "events.trigger", "kernel.shell", "kernel.do_execute", "input_transformer_manager", "prefilter_manager")
HOOK_LISTS = ("input_transformer_manager.cleanup_transforms", "input_transformer_manager.line_transforms",
              "input_transformer_manager.token_transformers", "input_transformers_post", "ast_transformers",
              "prefilter_manager.transformers", "prefilter_manager.checkers")   # (first: input_transformers_cleanup)
EARLY_EVENTS = ("pre_execute", "pre_run_cell")   # callbacks that run before a cell's code: left out for a check cell
_TRACERS = (sys.gettrace, sys.getprofile, sys.settrace, sys.setprofile)   # as imported (a cell may replace them)


def _attr(holder, dotted):
    """``holder``'s attribute ``dotted`` ("compile.ast_parse"), or _MISSING."""
    try:
        return functools.reduce(getattr, dotted.split("."), holder)
    except Exception:   # noqa: BLE001 (a learner's replacement may raise anything)
        return _MISSING


def _parts_of(value):
    """What of ``value`` a change would show in (compared by identity): a method's function and object, a
    function's code, defaults and closure, a list's entries; else itself."""
    try:
        if isinstance(value, types.MethodType):
            return (value.__func__, value.__self__, *(_code(value.__func__) or ()))
        return (value, *value) if type(value) is list else (value, *(_code(value) or ()))
    except Exception:   # noqa: BLE001 (a learner's object may raise anything when read)
        return (value,)


def _hooks(shell):
    """{name: ``_parts_of`` what it is now} of what changes how the ``shell`` runs a cell: each of SHELL_PATH
    and HOOK_LISTS, the kernel's execute handler, the built-in exec, compile and __import__, and the trace and
    profile functions (sys's, and threading's for new threads)."""
    import builtins
    import threading

    found = {f"IPython's {name}": _parts_of(_attr(shell, name)) for name in SHELL_PATH + HOOK_LISTS}
    handlers = _attr(shell, "kernel.shell_handlers")
    found["the kernel's execute_request"] = _parts_of(handlers.get("execute_request") if isinstance(handlers, dict)
                                                      else handlers)
    found.update({f"builtins.{name}": (vars(builtins).get(name),) for name in ("exec", "compile", "__import__")})
    found["a trace or profile function (sys.settrace, sys.setprofile)"] = (_TRACERS[0](), _TRACERS[1](),
                                                                          threading.gettrace(), threading.getprofile())
    return found


def _seal_shell():
    """In the grader's record run, inside IPython (the grader's first cell): note the shell's hooks (``_hooks``),
    with ``_transform`` as its transform_cell, and its early callbacks (EARLY_EVENTS)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or "shell" in _SEALED:
        return
    transform = shell.transform_cell
    shell.transform_cell = _transform
    events = {name: list(shell.events.callbacks.get(name, [])) for name in EARLY_EVENTS}
    _SEALED.update(shell=shell, transform=transform, hooks=_hooks(shell), events=events, left_out=[],
                   lists={name: _attr(shell, name) for name in HOOK_LISTS})


def _hooks_changed():
    """The names of the shell's hooks (``_hooks``) changed since they were sealed (none outside the record run)."""
    if "shell" not in _SEALED:
        return []
    sealed = _SEALED["hooks"]
    now = _hooks(_SEALED["shell"])
    return [name for name, parts in now.items()
            if len(parts) != len(sealed[name]) or not all(map(operator.is_, parts, sealed[name]))]


def _transform(raw_cell):
    """The shell's transform_cell in the record run (``_seal_shell``): the grader's check cell (it starts with MARK)
    as written, its hooks put back first (``_unhook``) and, when any had changed, the check's first record saying
    what (the course's code changed counts too: ``tampered``); any other cell as the shell transforms it."""
    _resume()
    grade_id = raw_cell[len(MARK):].partition(")")[0] if isinstance(raw_cell, str) and raw_cell.startswith(MARK) else ""
    if not (grade_id[:1] == grade_id[-1:] == "'" and len(grade_id) > 2):
        return _SEALED["transform"](raw_cell)
    changed = tampered()
    _unhook()
    how = _SEALED["mode"]
    if changed and how is not None:
        _SEALED["append"](how[1], {"cell": grade_id[1:-1], "index": 0, "answer": {"unknown": CHANGED},
                                   "tampered": changed})
    return raw_cell


def _unhook():
    """Before the grader's check cell: the shell's transformer lists hold what they held when sealed, no trace
    or profile function is set, and the callbacks a learner's cell added to EARLY_EVENTS are left out for this
    cell (``_resume`` puts them back before the next)."""
    import threading

    shell = _SEALED["shell"]
    for name, sealed in _SEALED["lists"].items():
        owner, _, last = name.rpartition(".")
        try:
            if _attr(shell, name) is not sealed:
                setattr(_attr(shell, owner) if owner else shell, last, sealed)
            sealed[:] = _SEALED["hooks"][f"IPython's {name}"][1:]
        except Exception:   # noqa: BLE001 (not put back: its change is recorded all the same)
            pass
    _TRACERS[2](None)
    _TRACERS[3](None)
    threading.settrace(None)
    threading.setprofile(None)
    callbacks = shell.events.callbacks
    for name, sealed in _SEALED["events"].items():
        now = callbacks.get(name, [])
        _SEALED["left_out"] += [(name, f) for f in now if not any(f is g for g in sealed)]
        now[:] = sealed


def _resume():
    """Put back the callbacks ``_unhook`` left out for the last check cell."""
    left_out, _SEALED["left_out"] = _SEALED["left_out"], []
    try:
        for name, function in left_out:
            _SEALED["shell"].events.callbacks.setdefault(name, []).append(function)
    except Exception:   # noqa: BLE001 (the learner's cell replaced the shell's events: theirs are theirs to keep)
        pass


GRADED_METHODS = ("grade", "feedback", "answer_of")   # an Exercise's own: an instance's copy replaces them
_CHECKS = []    # (module name, attribute name, the course's Exercise) of every check made (``noted``)


def noted(exercise, problems):
    """``exercise`` (made by helpers.exercises.exercise from the function ``problems``), noted as the
    check its module holds under the function's name: ``tampered`` says when that changes."""
    _CHECKS.append((getattr(problems, "__module__", None), getattr(problems, "__name__", None), exercise))
    return exercise


def sealed_check(module, name):
    """The check ``name`` of the course's checks module ``module`` (such as "helpers.qkv.checks") as the
    course made it (``noted``), whatever a learner's cell bound since: what the grader's hidden grade
    calls use (scripts/autograde.py ``sealed_calls``), so a learner's function that rebinds the notebook's
    ``checks`` cannot make the grade call do nothing."""
    if not isinstance(module, str) or not _course_module(module) or not isinstance(name, str):
        fail(f"expected a course module's name and a check's name, but got {_what(module)} and {_what(name)}")
    importlib.import_module(module)   # (made and noted on import; once imported, nothing is made again)
    made = [exercise for module_name, check, exercise in _CHECKS if (module_name, check) == (module, name)]
    if not made:
        fail(f"expected a check of {module}, but got {name!r}, which it does not make")
    return made[-1]


def _checks_changed():
    """The checks (``noted``) replaced in their module, or given a copy of an Exercise method of their own."""
    changed, made = [], {}
    for module_name, name, exercise in _CHECKS:
        made.setdefault((module_name, name), []).append(exercise)
        changed += [f"{module_name}.{name}.{method}" for method in GRADED_METHODS if method in vars(exercise)]
    for (module_name, name), exercises in made.items():   # (a module imported again makes its checks again)
        module = sys.modules.get(module_name) if _course_module(module_name) else None
        now = vars(module).get(name, exercises[-1]) if module is not None else exercises[-1]
        if not any(now is exercise for exercise in exercises):
            changed.append(f"{module_name}.{name}")
    return changed


def tampered(exercise=None):
    """What of the sealed recording code is changed now (``seal``), by name, at most 20: an object
    replaced, or a function's code, defaults or closure changed; a check replaced in its module or
    given a method of its own (``noted``); and ``exercise`` (the check being recorded) when it is not
    the course's Exercise, or has a method of its own."""
    changed = _checks_changed()
    for where, holder, name, value, code in _SEAL:
        now = _current(holder, name)
        parts = _code(now)
        same = parts is code or parts is not None and code is not None and all(map(operator.is_, parts, code))
        if now is not value or not same:   # (by identity: no == of a learner's object runs)
            changed.append(where)
    if _SEALED.get("mode") is not None and setting_mode() != _SEALED["mode"]:
        changed.append("os.environ['COURSE_GRADING']")
    sealed = _SEALED.get("channel")   # (closed, or another file put in its place: records would go elsewhere)
    if sealed is not None and (_identity(sealed[0]) or (None,))[1:] != sealed[1]:
        changed.append(f"the grader's records channel ({RECORDS_FD})")
    changed += _hooks_changed()
    sealed = [value for where, _, _, value, _ in _SEAL if where == "helpers.exercises.Exercise"]
    if exercise is not None and sealed and type(exercise) is not sealed[0]:
        changed.append("the check (not the course's Exercise)")
    elif exercise is not None and sealed:   # the course's Exercise: its instance's own dict, read as is
        changed += [f"the check's {name}" for name in GRADED_METHODS if name in vars(exercise)
                    and not any(exercise is noted for _, _, noted in _CHECKS)]   # (else said already)
    return changed[:20]


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


# ---- plain values: what a check takes, screened by type alone --------------------------------

MAX_ANSWER_DEPTH = 100   # lists in lists a screened answer may nest
MAX_ANSWER_ITEMS = 1_000_000   # Python values (list entries, dict keys and values) a screened answer may hold


def plain(x, name):
    """Wrong unless ``x`` holds only plain values: numbers, text, None, lists, tuples, dicts and sets
    of them, NumPy's own arrays (a masked one with nothing hidden) and scalars, ``array.array``, torch
    tensors and sizes, functions and classes (of exactly these types, not subclasses; a class with no metaclass of its
    own). Anything else could run code of its own when a check converts it (a ``__float__`` that
    raises or never ends, an ``__array__`` or ``__len__`` that lies, a metaclass's ``__iter__`` or
    ``__class__``), outside ``call``'s time limit; so it is refused first, by type alone (compared by
    identity), without calling it. The grader records an answer only if this takes it
    (``grading.encode``), so that the grade says what the live check said."""
    from array import array as numbers_array   # (the standard library's typed array: a plain buffer of numbers)
    torch = sys.modules.get("torch")
    sizes = (torch.Size,) if torch is not None else ()
    leaves = _PLAIN_SCALARS + _PLAIN_CALLABLES + (type, numbers_array) + \
        ((torch.Tensor, torch.nn.Parameter) if torch is not None else ())
    stack, seen = [(x, 0)], 1
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        if depth > MAX_ANSWER_DEPTH:
            raise Wrong(f"{name} should nest at most {MAX_ANSWER_DEPTH} lists deep, but it nests deeper")
        if _one_of(kind, leaves) or id(kind) in _NUMPY_SCALARS:
            continue
        sequence, array = _one_of(kind, (list, tuple, set, frozenset) + sizes), _one_of(kind, _numpy_arrays())
        inside = len(value) if sequence or kind is dict else value.size if array and value.dtype.kind == "O" else 0
        seen += inside * (2 if kind is dict else 1)   # counted before any is looked at: a list of 10**8 is refused at once
        if seen > MAX_ANSWER_ITEMS:
            raise Wrong(f"{name} should be small (at most {MAX_ANSWER_ITEMS:,} values in lists, tuples and dicts; "
                        "an array may hold more), but it holds more")
        if sequence:
            stack.extend((v, depth + 1) for v in value)
        elif kind is dict:
            stack.extend((v, depth + 1) for pair in value.items() for v in pair)
        elif array and _hides_entries(value):
            raise Wrong(f"{name} holds a masked array with hidden entries, but a check takes only plain values "
                        "(fill them first with x.filled(0.0))")
        elif array:
            if value.dtype.kind == "O":
                stack.extend((v, depth + 1) for v in value.flat)
        elif not (callable(value) and _is_courses(kind)):
            raise Wrong(_refusal(value, kind, name))


def _refusal(value, kind, name):
    """The sentence for ``value`` (of the type ``kind``), which ``plain`` refuses."""
    if kind is Unknown:   # a record the grader could not keep (the student's kernel refused it)
        return f"{name} could not be judged: {value.what}"
    if issubclass(kind, type):
        return (f"{name} holds the class {class_name(value)}, made by a metaclass of its own ({class_name(kind)}), "
                "but a check takes a class only as a plain class statement makes it: a metaclass's code would run "
                "outside the check's time limit")
    if callable(value):
        return (f"{name} is a {class_name(kind)} object that can be called, but a check calls only a plain "
                "function (def ...) or a class: its own code would run outside the check's time limit")
    return (f"{name} holds a {class_name(kind)}, but a check takes only plain values: numbers, text, "
            "lists, tuples, dicts, NumPy arrays and torch tensors (convert it, e.g. with float(x) or np.asarray(x))")


def _one_of(kind, kinds):
    """Whether the class ``kind`` is one of ``kinds``, by identity (``in`` compares with ``==``, which a
    learner's metaclass may define, and run its own code)."""
    return any(kind is k for k in kinds)


def _is_class(x):
    """Whether ``x`` is a class, by its type (``isinstance`` reads ``x.__class__``, which a learner's
    object may define as a property that runs its own code)."""
    return issubclass(type(x), type)


def _numpy_arrays():
    """NumPy's own array types (its masked ones once numpy.ma is imported: before, none exists)."""
    masked = sys.modules.get("numpy.ma.core")
    return _NUMPY_ARRAYS + ((masked.MaskedArray, masked.MaskedConstant) if masked is not None else ())


def _hides_entries(array):
    """Whether the NumPy array ``array`` is a masked one that hides entries (its mask read from its
    own dict: a mask of any other kind counts as hiding)."""
    if _one_of(type(array), _NUMPY_ARRAYS):
        return False
    mask = vars(array).get("_mask", False)
    if _one_of(type(mask), (bool, np.bool_)):
        return bool(mask)
    return not (type(mask) is np.ndarray and mask.dtype.kind == "b") or bool(mask.any())


def _is_courses(kind):
    """``_courses``, its ``__module__`` taken only as an exact str (any other object there could run code)."""
    return type(_own_attribute(kind, "__module__")) is str and _courses(kind)


def _courses(kind):
    """Whether the class ``kind`` is the course's own (a grader's Replay of a recorded function)."""
    return _course_module(_own_attribute(kind, "__module__"))


_PLAIN_SCALARS = (type(None), bool, int, float, complex, str, bytes, range, slice, type(Ellipsis))
_PLAIN_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial)
_NUMPY_ARRAYS = (np.ndarray, np.matrix, np.memmap, np.recarray)
_NUMPY_SCALARS = frozenset(map(id, {*np.sctypeDict.values(), np.record}))   # ids: NumPy's scalar types (they live on)


def _course_module(module):
    """Whether ``module`` (a module's name, or anything) names one of the course's modules."""
    return type(module) is str and (module == "helpers" or module.startswith("helpers."))   # (by type: see _is_class)


def _own_attribute(cls, name):
    """``name`` as the class ``cls`` or the first of its bases defines it, read from their own
    dicts (a metaclass of the learner's could make ``cls.forward`` raise or never return); None
    if none does."""
    namespace, order = type.__dict__["__dict__"], type.__dict__["__mro__"]
    for base in order.__get__(cls):
        if name in namespace.__get__(base):
            return namespace.__get__(base)[name]
    return None


# ---- answers as data ----------------------------------------------------------------------------


def record_answer(exercise, answer, args, kwargs):
    """The answer as JSON data, screened as the live check screens it (``Exercise.feedback``): a
    function (or a class, for a Function or Module check) is run through the check here, and its
    outputs kept (an nn.Module class through its ``run`` function: helpers.exercises.Module); what
    the live check refuses, or what ``encode`` cannot keep (a complex number, bytes, a date) and the
    live check refuses, is recorded as {"said": its sentence}, which the judge says as it is."""
    return _recording(exercise, answer, args, kwargs)[0]


def _recording(exercise, answer, args, kwargs):
    """(``record_answer``'s record, the check's sentences on the run that made it): the sentences when
    the answer was a function run through the check (a Recorder), else None."""
    kind = exercise.answer
    by_kind = callable(answer) and getattr(type(kind), "calls_answer", False)   # a Function or Module check
    if not by_kind:   # the live check screens it first (plain)
        refused = _not_plain(answer, "your answer")
        if refused is not None:
            return {"said": refused}, None
    if callable(answer) and hasattr(kind, "convert"):   # a Function or Module answer: judged as the live check
        try:                                            # judges it (the course's own piece is no answer)
            answer = kind.convert(answer, exercise.problems, args, kwargs)
        except Exception as wrong:   # noqa: BLE001 (Wrong: the sentence is what the judge will say)
            return {"said" if isinstance(wrong, Wrong) else "unknown": str(wrong)[:MAX_UNKNOWN]}, None
    if callable(answer) and (by_kind or not _is_class(answer)):   # a class the check calls, too
        recorder = Recorder(answer)
        models = _model_digests({**dict(enumerate(args)), **kwargs})   # (as given, before the run)
        found = exercise.feedback(recorder, *args, **kwargs)
        if recorder.refused is not None:   # what only this run could see (the course's own code ran in it)
            return {"unknown": recorder.refused[:MAX_UNKNOWN]}, found
        record = {"function": recorder.calls, "type": class_name(type(recorder))}   # (its type: what a sentence calls it)
        return ({**record, "models": models} if models else record), found
    encoded = encode(answer)
    if not callable(answer) and _holds_unknown(encoded):   # (a complex, bytes, a date: kept as the live check's
        try:                                               # sentence, which says what is wrong with it)
            said = exercise.feedback(answer, *args, **kwargs)
        except Exception:   # noqa: BLE001 (the record is kept as encode made it)
            said = []
        if said and isinstance(said[0], str):
            return {"said": said[0][:MAX_UNKNOWN]}, None
    return encoded, None


def _holds_unknown(encoded):
    """Whether an ``encode`` record holds {"unknown": ...} anywhere (walked without recursion)."""
    stack = [encoded]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            if "unknown" in x:
                return True
            stack.extend(x.values())
        elif isinstance(x, list):
            stack.extend(x)
    return False


def _not_plain(x, name):
    """The live check's sentence when it refuses ``x`` as not plain data (``plain``, by
    type alone: no code of the learner's runs), else None."""
    try:
        plain(x, name)
    except Wrong as wrong:
        return str(wrong)[:MAX_UNKNOWN]
    except Exception:   # noqa: BLE001 (encode never raises)
        return f"{name} could not be read"
    return None


def _what(x):
    """What arrived, in a few words (never its whole contents)."""
    if x is None or isinstance(x, (bool, int, float)) and len(repr(x)) <= 30:
        return repr(x)
    if isinstance(x, str):
        return f"the text {ascii(x)}" if len(x) <= 30 else f"a text of {len(x):,} characters"
    if isinstance(x, (list, tuple, dict, set)):
        return f"a {type(x).__name__} of {len(x):,} item{'' if len(x) == 1 else 's'}"
    return f"a {type(x).__name__}"


def encode(x, depth=0, name="your answer"):
    """Plain data for JSON: numbers, strings, lists, tuples, sets, dicts and arrays (torch kept apart).

    Never raises; what is too big, too deep or not data is recorded as {"unknown": what it was}.
    What the live check refuses as not plain (``plain``: a dict or int subclass, a
    namedtuple, a masked array with hidden entries, a class with a metaclass, an object of the
    learner's) is recorded as {"unknown": its sentence about ``name``}, before anything is read
    from it: so the judge refuses what the live check refused, and only plain types are read
    below (each by its exact type)."""
    if depth == 0:
        refused = _not_plain(x, name)
        if refused is not None:
            return {"unknown": refused}
    if depth > MAX_DEPTH:
        return {"unknown": "nested too deeply"}
    if x is None or type(x) is bool:
        return x
    if type(x) is str:
        return x if len(x) <= MAX_TEXT else {"unknown": f"a text of {len(x):,} characters"}
    if type(x) is int:
        return x if x.bit_length() <= MAX_DIGITS * 3.33 else {"unknown": f"a whole number of {x.bit_length():,} bits"}
    if type(x) is float:
        return {"float": repr(float(x))} if not math.isfinite(x) else float(x)
    if _is_tensor(x):
        return _encode_tensor(x)
    if type(x) is range:   # (as a list: the checks read both alike, through as_wholes, as_array or to_numpy)
        return {"list": [int(v) for v in x]} if len(x) <= MAX_VALUES else {"unknown": f"a range of {len(x):,} numbers"}
    if isinstance(x, np.generic):   # NumPy's scalars (np.str_, np.int64, np.bool_, np.float32, ...): as what they are
        return _encode_numpy_scalar(x)
    if type(x) is array.array:   # the standard library's typed array, as itself (a check may refuse it)
        return _encode_stdarray(x)
    if type(x) is np.matrix:   # as a matrix, not an array: a check may fail on one (int() of a 1x1 matrix)
        return {"matrix": _encode_array(np.asarray(x), depth)}
    if _is_size(x):   # a torch.Size as itself, not a tuple (a check may tell them apart)
        return {"size": [int(v) for v in x]} if len(x) <= MAX_VALUES else {"unknown": f"a torch.Size of {len(x):,} sizes"}
    if isinstance(x, np.ndarray):
        return _encode_array(np.asarray(x), depth)   # np.memmap, a masked array with nothing hidden: as an ndarray
    if isinstance(x, (list, tuple, set, frozenset, dict)) and len(x) > MAX_VALUES:
        return {"unknown": f"a {type(x).__name__} of {len(x):,} items"}
    if isinstance(x, (list, tuple, set, frozenset)):   # (plain: of exactly these types, or a torch.Size)
        kind = "list" if type(x) is list else "set" if type(x) is set else "frozenset" if type(x) is frozenset \
            else "tuple"
        items = sorted(x, key=repr) if kind in ("set", "frozenset") else x
        return {kind: [encode(v, depth + 1) for v in items]}
    if isinstance(x, dict):
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in x.items()]}
    return {"unknown": type(x).__name__}


# dtypes a recorded array or tensor keeps (its "kind"), read back as exactly that dtype with exactly its values:
# the judge sees what the live check saw (an int64 count past 2**24 stays exact, a bool tensor stays True/False)
WHOLE_DTYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
NUMPY_DTYPES = ("bool",) + WHOLE_DTYPES + ("float16", "float32", "float64", np.dtype(np.longdouble).name, "str")
TORCH_DTYPES = ("bool",) + WHOLE_DTYPES + ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn",
                                           "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
LETTER_KINDS = {"b": "bool", "i": "int64", "u": "uint64", "f": "float64"}   # a record's one-letter kinds


def _encode_numbers(values, shape, kind):
    """{"array": values, "shape", "kind"}: ``values`` (a flat list of Python bools, ints, floats or
    texts) with each non-finite float as 'nan', 'inf' or '-inf' (JSON has none)."""
    if kind not in ("bool", "str") + WHOLE_DTYPES:
        values = [v if math.isfinite(v) else repr(v) for v in values]
    return {"array": values, "shape": list(shape), "kind": kind}


STDARRAY_CODES = "bBuhHiIlLqQfd"   # array.array's type codes a record keeps (each read back exactly)


def _encode_stdarray(x):
    """An array.array as {"stdarray": its values, "typecode"}: read back as the same array.array."""
    if len(x) > MAX_VALUES:
        return {"unknown": f"an array.array of {len(x):,} numbers"}
    if x.typecode not in STDARRAY_CODES:
        return {"unknown": f"an array.array of type code {x.typecode!r}"}
    values = x.tolist()
    if x.typecode in "fd":
        values = [v if math.isfinite(v) else repr(v) for v in values]
    return {"stdarray": values, "typecode": x.typecode}


def _is_size(x):
    """Whether ``x`` is a torch.Size, by its exact type."""
    torch = sys.modules.get("torch")
    return torch is not None and type(x) is torch.Size


def _encode_array(x, depth):
    """A plain NumPy array ``x`` (of any shape) as a record of its dtype and exact values: numbers,
    True/False, texts, or an object array's items (each encoded); another dtype is unknown."""
    if x.size > MAX_VALUES:
        return {"unknown": f"an array of {x.size:,} {'items' if x.dtype.kind == 'O' else 'numbers'}"}
    kind = x.dtype.name if x.dtype.kind != "U" else "str"
    if x.dtype.kind == "O":
        return {"objects": [encode(v, depth + 1) for v in x.flat], "shape": list(x.shape)}
    if kind not in NUMPY_DTYPES:
        return {"unknown": f"an array of {x.dtype}"}
    if kind == "str" and x.size * (x.dtype.itemsize // 4) > MAX_TEXT:
        return {"unknown": f"an array of {x.size:,} texts of up to {x.dtype.itemsize // 4:,} characters"}
    flat = x.astype(float) if kind == np.dtype(np.longdouble).name else x   # (as the checks read it: float64)
    return _encode_numbers(flat.ravel().tolist(), x.shape, kind)


def _encode_numpy_scalar(x):
    """A NumPy scalar as the judge reads it back: np.str_, np.float64 and np.int64 as the Python
    text or number (every check reads them alike: each converts to the same dtype); another
    kind (np.bool_, np.float32, np.int8, ...) as {"numpy": its value, "kind": its dtype}, read back
    as the same scalar (one per item of a list: a tag costs one dict, within the grader's bounds);
    one no check takes (a complex number, a date, bytes) is unknown."""
    kind = x.dtype.name if x.dtype.kind != "U" else "str"
    if kind not in NUMPY_DTYPES:
        return {"unknown": f"a NumPy {type(x).__name__}"}
    value = x.item() if kind != np.dtype(np.longdouble).name else float(x)   # (longdouble: as the checks read it)
    if kind in ("str", "float64", "int64"):
        return encode(value, depth=1)
    if kind not in ("bool",) + WHOLE_DTYPES and not math.isfinite(value):
        value = repr(value)
    return {"numpy": value, "kind": kind}


def _encode_tensor(x):
    """A torch tensor as a record of its dtype (torch's name), shape and exact values (floats through
    float64, which holds every float dtype's numbers exactly); a complex, quantized, sparse or
    meta tensor is unknown."""
    try:
        kind = str(x.dtype).replace("torch.", "")
        if kind not in TORCH_DTYPES:
            return {"unknown": f"a tensor of {x.dtype}"}
        if x.numel() > MAX_VALUES:
            return {"unknown": f"a tensor of {x.numel():,} numbers"}
        flat = x.detach().cpu().reshape(-1)
        values = (flat.double() if flat.is_floating_point() else flat).tolist()
        record = _encode_numbers(values, x.shape, kind)
        if type(x) is not sys.modules["torch"].Tensor:   # an nn.Parameter, as one (and whether it wants gradients)
            return {"parameter": record, "grad": bool(x.requires_grad)}
        return {"torch_grad": record} if x.requires_grad else {"torch": record}   # (a check may read .requires_grad)
    except Exception:   # noqa: BLE001 (a sparse or meta tensor; encode never raises)
        return {"unknown": f"a tensor of {getattr(x, 'dtype', 'unknown type')}"}


def _is_tensor(x):
    """Whether ``x`` is a torch tensor (or Parameter), by its exact type."""
    torch = sys.modules.get("torch")
    return torch is not None and any(type(x) is kind for kind in (torch.Tensor, torch.nn.Parameter))


class _ByType(type):
    """The metaclass of the grader's classes that checks test answers against (``isinstance(fn,
    Replay)``): isinstance reads the instance's type only, never a learner's own ``__class__``
    (a property that could run for ever, outside any time limit)."""

    def __instancecheck__(cls, instance):
        return issubclass(type(instance), cls)


class Unknown(metaclass=_ByType):
    """A recorded answer of a kind that could not be kept as data (the checks reject it)."""

    def __init__(self, what):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


class Said(Unknown):
    """A recorded answer the live check refused (not plain, or a complex number, bytes, a date the
    record could not keep as data): ``what`` is the live check's sentence, which the judge says as it is."""


TAGS = {"float": set(), "array": {"shape", "kind"}, "torch": set(), "numpy": {"kind"}, "objects": {"shape"},
        "torch_grad": set(), "parameter": {"grad"}, "stdarray": {"typecode"}, "matrix": set(), "size": set(),
        "list": set(), "tuple": set(), "set": set(), "frozenset": set(), "dict": set(), "function": set(),
        "unknown": set(), "said": set()}   # tag -> the other keys its record has
OPTIONAL_KEYS = {"function": {"type", "models"}}   # tag -> the other keys its record may have
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


def _shape(shape):
    """A recorded array's shape, checked: a list of at most 32 whole numbers from 0."""
    if not (isinstance(shape, list) and len(shape) <= 32
            and all(type(n) is int and 0 <= n <= MAX_VALUES for n in shape)):
        _refuse("an array's shape (at most 32 whole numbers from 0)", shape)
    return shape


def _values(x, kinds):
    """(values, shape, kind) of a recorded array {"array", "shape", "kind"}, each checked: ``kind`` one
    of ``kinds`` (or a one-letter kind), every value of that kind (True/False, a whole number in the
    dtype's range, a number or 'nan'/'inf'/'-inf', a text), as many as the shape holds."""
    shape, kind = _shape(x["shape"]), x["kind"]
    kind = LETTER_KINDS.get(kind, kind) if isinstance(kind, str) else kind
    if not (isinstance(kind, str) and kind in kinds):
        _refuse(f"an array's kind (one of {', '.join(kinds)})", x["kind"])
    values = x["array"]
    if not isinstance(values, list) or len(values) > MAX_VALUES:
        _refuse(f"an array's numbers (a list of at most {MAX_VALUES:,})", values)
    if math.prod(shape) != len(values):
        raise RecordError(f"expected {math.prod(shape):,} numbers for an array of shape {tuple(shape)}, "
                          f"but the record holds {len(values):,}")
    if kind == "bool":   # (_MISSING, not None, when all are fine: a None among them is refused too)
        bad = next((v for v in values if type(v) is not bool), _MISSING)
        if bad is not _MISSING:
            _refuse("True or False in an array of kind 'bool'", bad)
    elif kind in WHOLE_DTYPES:
        low, high = int(np.iinfo(kind).min), int(np.iinfo(kind).max)
        bad = next((v for v in values if type(v) is not int or not low <= v <= high), _MISSING)
        if bad is not _MISSING:
            _refuse(f"a whole number from {low:,} to {high:,} in an array of kind '{kind}'", bad)
    elif kind == "str":
        if not all(type(v) is str for v in values) or sum(map(len, values)) > MAX_TEXT:
            _refuse(f"texts of at most {MAX_TEXT:,} characters in all in an array of kind 'str'", values)
    else:
        values = [_number(v) for v in values]
    return values, shape, kind


def _numpy_array(x):
    """A recorded NumPy array, of exactly its recorded dtype and values."""
    values, shape, kind = _values(x, NUMPY_DTYPES)
    if kind == "str":
        return np.array(values, dtype=str).reshape(shape)
    if kind == "bool" or kind in WHOLE_DTYPES:
        return np.array(values, dtype=kind).reshape(shape)
    numbers = np.array(values, dtype=float)
    with np.errstate(over="ignore"):   # (1e308 overflows float16: refused below, not warned about)
        array = numbers.astype(kind)
    return _exactly(array, array.astype(float), numbers, kind).reshape(shape)


def _exactly(array, read_back, numbers, kind):
    """``array`` (``numbers``, float64, turned into the dtype ``kind``) when each of its values is exactly the
    recorded one (``read_back``: its values as float64), as ``encode`` writes them; else RecordError (a number
    past the dtype's range, which would become inf, or one it does not hold)."""
    if not np.array_equal(read_back, numbers, equal_nan=True):
        bad = numbers[~((read_back == numbers) | np.isnan(numbers))][0]
        _refuse(f"numbers an array of kind '{kind}' holds exactly (as its record has them)", float(bad))
    return array


def _torch_tensor(x):
    """A recorded torch tensor, of exactly its recorded dtype and values."""
    import torch

    values, shape, kind = _values(x, tuple(k for k in TORCH_DTYPES if hasattr(torch, k)))
    dtype = getattr(torch, kind)
    if dtype.is_floating_point:
        numbers = torch.tensor(values, dtype=torch.float64)
        tensor = numbers.to(dtype)
        return _exactly(tensor, tensor.double().numpy(), numbers.numpy(), kind).reshape(shape)
    return torch.tensor(values, dtype=dtype).reshape(shape)


def _std_array(values, code):
    """A recorded array.array, of exactly its type code and values."""
    if not (type(code) is str and len(code) == 1 and code in STDARRAY_CODES):
        _refuse(f"an array.array's type code (one of {', '.join(STDARRAY_CODES)})", code)
    if not isinstance(values, list) or len(values) > MAX_VALUES:
        _refuse(f"an array.array's values (a list of at most {MAX_VALUES:,})", values)
    if code == "u":
        bad = next((v for v in values if type(v) is not str or len(v) != 1), _MISSING)
    elif code in "fd":
        values = [_number(v) for v in values]   # ('f': each a float32's value, as encode wrote it)
        with np.errstate(over="ignore"):   # (1e300 overflows float32: refused below, not warned about)
            bad = next((v for v in values if code == "f" and v == v and float(np.float32(v)) != v), _MISSING)
    else:
        bad = next((v for v in values if type(v) is not int), _MISSING)
    if bad is not _MISSING:
        _refuse(f"a value of an array.array of type code {code!r}", bad)
    try:
        return array.array(code, values)
    except (OverflowError, TypeError, ValueError):   # a whole number out of the type code's range
        raise RecordError(f"expected values that fit an array.array of type code {code!r}, but the record holds "
                          "one out of its range") from None


def _wanting_grad(tensor, parameter, grad):
    """``tensor`` as an nn.Parameter (``parameter``) or a tensor that requires grad, as recorded."""
    import torch

    if type(grad) is not bool:
        _refuse("True or False for whether a recorded tensor requires grad", grad)
    if grad and not tensor.is_floating_point():
        raise RecordError(f"expected a float tensor for one that requires grad, but the record holds one of {tensor.dtype}")
    return torch.nn.Parameter(tensor, requires_grad=grad) if parameter else tensor.requires_grad_(True)


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
    if tag is None or not {tag} | TAGS[tag] <= set(x) <= {tag} | TAGS[tag] | OPTIONAL_KEYS.get(tag, set()):
        _refuse(f"a tagged record with one of the keys {', '.join(TAGS)}", {k: None for k in list(x)[:5]})
    if tag == "float":
        if not (isinstance(x["float"], str) and x["float"] in SPECIAL_FLOATS):
            _refuse("'nan', 'inf' or '-inf' for a recorded float that is not finite", x["float"])
        return float(x["float"])
    if tag == "array":
        return _numpy_array(x)
    if tag == "numpy":   # a NumPy scalar: of its dtype
        return _numpy_array({"array": [x["numpy"]], "shape": [], "kind": x["kind"]})[()]
    if tag == "objects":   # a NumPy array of objects: each item decoded
        shape = _shape(x["shape"])
        items = _items(x, tag, depth)
        if math.prod(shape) != len(items):
            raise RecordError(f"expected {math.prod(shape):,} items for an array of shape {tuple(shape)}, "
                              f"but the record holds {len(items):,}")
        array = np.empty(len(items), dtype=object)
        for i, item in enumerate(items):
            array[i] = item
        return array.reshape(shape)
    if tag == "stdarray":
        return _std_array(x["stdarray"], x["typecode"])
    if tag == "matrix":   # a NumPy matrix: its 2-D array's record, read back as a matrix
        inner = decode(x["matrix"], depth + 1)
        if isinstance(inner, Unknown):
            return inner
        if not (type(inner) is np.ndarray and inner.ndim == 2):
            _refuse("a recorded matrix's 2-D array", inner)
        return np.asmatrix(inner)
    if tag == "size":
        import torch

        sizes = x["size"]
        if not (isinstance(sizes, list) and len(sizes) <= MAX_VALUES
                and all(type(v) is int and -2**63 <= v < 2**63 for v in sizes)):
            _refuse(f"a recorded torch.Size's sizes (at most {MAX_VALUES:,} whole numbers of int64)", sizes)
        return torch.Size(sizes)
    if tag in ("torch", "torch_grad", "parameter"):
        inner = x[tag]
        if not (isinstance(inner, dict) and set(inner) == {"array", "shape", "kind"}):
            _refuse("a recorded tensor's array", inner)
        tensor = _torch_tensor(inner)
        return tensor if tag == "torch" else _wanting_grad(tensor, tag == "parameter", x.get("grad", True))
    if tag in ("list", "tuple"):
        items = _items(x, tag, depth)
        return items if tag == "list" else tuple(items)
    if tag in ("set", "frozenset"):
        items = {_hashable(v) for v in _items(x, tag, depth)}
        return items if tag == "set" else frozenset(items)
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
        kind, models = x.get("type", "function"), x.get("models", [])
        if not (type(kind) is str and 0 < len(kind) <= 100 and kind.isidentifier()):
            _refuse("a recorded function's type name", kind)
        if not (isinstance(models, list) and len(models) <= 100 and all(
                isinstance(m, list) and len(m) == 2 and type(m[0]) in (int, str) and type(m[1]) is str
                and len(m[1]) <= 100 for m in models)):
            _refuse("the digests of a recorded function's models (a list of [place, digest])", models)
        return Replay(calls, kind, models)
    if tag == "said":
        return Said(x["said"] if isinstance(x["said"], str) and 0 < len(x["said"]) <= MAX_UNKNOWN else "something")
    return Unknown(x["unknown"] if isinstance(x["unknown"], str) and len(x["unknown"]) <= MAX_UNKNOWN else "something")


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
        try:   # floats as float32 (as before); whole numbers and True/False exactly, with their dtype
            x = x.detach().cpu().float().numpy() if x.is_floating_point() else x.detach().cpu().numpy()
        except (TypeError, RuntimeError, AttributeError):
            return f"tensor:{getattr(x, 'dtype', '?')}"
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            return f"array{x.shape}:{x.dtype}"
        if x.dtype.kind in "biu":   # exactly (as float64, an int64 past 2**53 would hide a change of one)
            data = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<"))
            return f"array{x.shape}:{x.dtype.name}:" + hashlib.sha1(data.tobytes()).hexdigest()[:16]
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


def _model_digests(given):
    """[[place, digest]] of each torch model (an nn.Module, by type) among ``given`` ({place: value}: the
    check cell's arguments), its weights' digest a short text (helpers.model.weights_state, exact: CRC-32s,
    the real model's 538 MB in about 0.4 s): ``fingerprint`` takes models by kind, so the judge compares
    these to say that a wrong answer came of a model changed in the student's kernel (``_other_model``)."""
    torch = sys.modules.get("torch")
    digests = []
    for place, value in given.items() if torch is not None else ():
        if issubclass(type(value), torch.nn.Module):
            from .model import weights_state

            try:
                state = repr(weights_state(value, exact=True))
            except Exception:   # noqa: BLE001 (a model that cannot be read is taken by kind, as before)
                continue
            digests.append([place, hashlib.sha1(state.encode("utf-8", "surrogatepass")).hexdigest()[:16]])
    return digests


def _other_model(exercise, replay, args, kwargs):
    """The name of the check cell's first model whose weights differ from those the recorded function's
    check was given in the student's kernel (``replay.models``, ``_model_digests``), else None."""
    given = {**dict(enumerate(args)), **kwargs}
    here = dict((place, digest) for place, digest in _model_digests(given))
    for place, digest in replay.models:
        if place in here and here[place] != digest:
            names = (_parameter_names(exercise.problems) or [])[1:]
            return names[place] if type(place) is int and place < len(names) else \
                place if type(place) is str else f"(argument {place + 2})"
    return None


MAX_CALLBACK_CALLS = 10_000      # calls of the check's own functions (a callback) one recorded call keeps
MAX_CALLBACK_CHARS = 10 * 2**20  # characters of their recorded arguments, all calls together


_COUNTED = {}   # id of an argument a check counts the uses of -> (a weak reference to it, read, put)


def counted(x, read, put):
    """Mark ``x``, an argument a check hands a learner's function (chapter 09's watched model), as one
    whose uses the check counts: ``read()`` gives the count now, ``put(n)`` sets it. The record keeps
    the count after each call, and the judge's replay puts it back before the check reads it, so the
    check judges the replay as it judged the call."""
    _COUNTED[id(x)] = (weakref.ref(x, lambda _, key=id(x): _COUNTED.pop(key, None)), read, put)
    return x


def _counter(x):
    """(read, put) of an argument marked by ``counted``, else None (by identity: no code of x runs)."""
    kept = _COUNTED.get(id(x))
    return kept[1:] if kept is not None and kept[0]() is x else None


def is_callback(x):
    """Whether ``x`` is a plain function the check hands the learner's function (a callback, a
    metric), whose calls the check may count: not a model, a class or other data."""
    return isinstance(x, (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial))


class Recorder:
    """Wraps a learner's function in their own kernel: calls it and keeps each input's
    fingerprint and what it returned (or how it failed), and every call it made to a function the
    check gave it (a callback: ``callbacks``, with its arguments as data), for the judge to make
    again in the same order (a check may count them, as chapter 12's ``train_loop`` does). ``refused``: set
    by the check when the run found what the judge's replay cannot (the course's own code ran in it).
    It stands in for the function as the check sees it: its type named as the function's (``_stand_in``),
    its parameters' names (``names``, kept in the record of a call that changed an input in place) and
    a plain function's ``__name__``."""

    def __new__(cls, function):
        return _stand_in(cls, class_name(type(function)))

    def __init__(self, function):
        self.function, self.calls = function, []
        self.refused = None   # the sentence of a refusal the judge could not make (helpers.exercises.Seen)
        self.names = _parameter_names(function)   # (read by type: no code of the learner's runs)
        if type(function) is types.FunctionType:
            self.__name__ = function.__name__

    def __call__(self, *args, **kwargs):
        entry = {"inputs": fingerprint((args, kwargs))}
        self.calls.append(entry)
        _CALLS_IN.setdefault(threading.current_thread(), []).append(entry)   # (for ``timed_out``)
        given = {**dict(enumerate(args)), **kwargs}
        before = {key: fingerprint(value) for key, value in given.items()}
        args, kwargs = self._watched(entry, args, kwargs)
        try:
            out = self.function(*args, **kwargs)
        except SystemExit:   # ("stopped": what a class of the learner's, whatever its name, cannot say)
            entry["raised"], entry["stopped"] = ["SystemExit", ""], "exit"
            raise
        except BaseException as exc:   # (a message that cannot be read is said so, as the live check says it)
            entry["raised"] = [class_name(type(exc)), message_of(exc, 500)]
            if isinstance(exc, OutOfTime):   # the course's own time-out, not a class named so
                entry["stopped"] = "time"
            raise
        entry["output"] = encode(out, name="what your function returned")
        counts = [[key, _counter(value)[0]()] for key, value in given.items() if _counter(value) is not None]
        if counts:   # how often the learner's function used an argument the check counts
            entry["counts"] = counts
        changed = [key for key, value in given.items() if fingerprint(value) != before[key]]
        if changed:   # changed in place: the judge's replay changes its copies too, so the check says so there
            entry["changed"] = changed
            if self.names:   # (so the judge's check names the input as the live check does)
                entry["names"] = self.names
        if entry.get("stopped") == "time":   # the check stopped waiting meanwhile (``timed_out``): not taken
            _not_taken(entry)
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
                said = "what your function gave the check's callback"
                kept = {"at": place, "args": encode(a, name=said), "kwargs": encode(k, name=said)}
                budget["chars"] += len(json.dumps(kept))
                if len(calls) < MAX_CALLBACK_CALLS and budget["chars"] <= MAX_CALLBACK_CHARS:
                    calls.append(kept)   # (past these, the judge replays the first: no check counts so many)
                return function(*a, **k)
            return functools.wraps(function)(callback) if isinstance(function, types.FunctionType) else callback

        args = tuple(watched(i, v) if i in places else v for i, v in enumerate(args))
        kwargs = {name: watched(name, v) if name in places else v for name, v in kwargs.items()}
        return args, kwargs


_CALLS_IN = weakref.WeakKeyDictionary()   # a thread a Recorder ran in -> the entries of its calls there


def timed_out(thread):
    """Mark the calls a Recorder made in ``thread`` as stopped by the course's time-out ("stopped": "time", what
    they returned dropped): ``thread`` is the one a check ran a learner's function in, and the check did not take
    its answer, past its limit (helpers.exercises._bounded: stopped, or ended too late after one long call into C).
    The judge's replay then says it was stopped, as the live check said, whatever it returned."""
    for entry in _CALLS_IN.pop(thread, ()):
        entry["stopped"] = "time"   # (first: a call that returns meanwhile drops its own, ``Recorder.__call__``)
        _not_taken(entry)


def _not_taken(entry):
    """Drop what a Recorder's ``entry`` kept of what its call returned."""
    for key in ("output", "counts", "changed", "names"):
        entry.pop(key, None)


class ReplayError(Exception):
    """A learner's function failed in their kernel; replayed with its name and message."""


def _stand_in(cls, name):
    """A new instance of ``cls`` (the grader's Recorder or Replay, standing in for a learner's function),
    of a subclass named ``name``, the learner's function's type: a check's sentence that names what it
    was given ("your answer should be one number, but it is a function") says what the live check says."""
    return object.__new__(type(cls)(name, (cls,), {"__module__": cls.__module__, "__qualname__": name}))


class Replay(metaclass=_ByType):
    """Stands in for a learner's function in the judge: returns what it returned in the student's
    kernel for the same inputs, in the same order, after calling the check's callbacks as it called
    them there; other inputs are refused. As the Recorder, of a type named as the learner's function's
    (``kind``); ``names``: its parameters' names, as the call replayed last recorded them (or None);
    ``models``: the digests of the check cell's models in the student's kernel (``_model_digests``)."""

    def __new__(cls, calls, kind="function", models=()):
        return _stand_in(cls, kind)

    def __init__(self, calls, kind="function", models=()):
        self.calls, self.next, self.names, self.models = list(calls), 0, None, list(models)

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
        names = entry.get("names")
        if not (names is None or isinstance(names, list) and len(names) <= 255 and all(
                type(name) is str and name.isidentifier() and len(name) <= 100 for name in names)):
            raise RecordError(f"expected the function's parameter names (a list of names), but the record holds "
                              f"{_what(names)}")
        self.names = names   # (what the check's sentence calls an input changed in place)
        self._call_back(entry, given)   # its calls to the check's callbacks, before it returned (or failed)
        if "raised" not in entry and "output" not in entry:   # the check stopped waiting while it still ran
            raise ReplayError("no result: it ran longer than the time limit and was stopped (a loop that never ends?)")
        if "raised" in entry:
            raised = entry["raised"]
            if not (isinstance(raised, list) and len(raised) == 2 and all(isinstance(r, str) for r in raised)):
                raise RecordError(f"expected how the function failed ([name, message]), but the record holds "
                                  f"{_what(raised)}")
            name, message = raised
            stopped = entry.get("stopped")   # (the Recorder's mark: a learner's class named SystemExit is not exit())
            if stopped not in (None, "exit", "time"):
                raise RecordError(f"expected how the function was stopped ('exit' or 'time'), but the record holds "
                                  f"{_what(stopped)}")
            if stopped == "exit":
                raise SystemExit(0)
            if stopped == "time":   # the course's time-out (states.OutOfTime)
                raise ReplayError("no result: it ran longer than the time limit and was stopped (a loop that never ends?)")
            raise ReplayError(f"{name}: {message}".rstrip(": "))   # (as the live check says it: exercises._standing_for)
        changed = entry.get("changed", [])
        if not (isinstance(changed, list) and all(type(key) in (int, str) and key in given for key in changed)):
            raise RecordError(f"expected the inputs a call changed (their places), but the record holds {_what(changed)}")
        for key in changed:
            touch(given[key])
        self._counts(entry, given)
        return decode(entry.get("output"))

    @staticmethod
    def _counts(entry, given):
        """Put back the counts of the arguments the check counts (``counted``), as the call left them."""
        counts = entry.get("counts", [])
        if not (isinstance(counts, list) and all(
                isinstance(c, list) and len(c) == 2 and type(c[0]) in (int, str) and c[0] in given
                and _counter(given[c[0]]) is not None and type(c[1]) is int and 0 <= c[1] <= 10**9 for c in counts)):
            raise RecordError(f"expected the counts of the arguments the check counts, but the record holds {_what(counts)}")
        for key, n in counts:
            _counter(given[key])[1](n)

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


seal()   # last: every function above, as imported


def _parameter_names(function):
    """The names of a plain function's positional parameters (a method's too, ``self`` first), read
    from its code, or from a ``__signature__`` the course set (a Module's run); None for anything
    else: inspect.signature would run a learner's object's own code (``__signature__``,
    ``__wrapped__``, ``__class__``), outside any time limit."""
    if issubclass(type(function), (Recorder, Replay)):   # the grader's stand-ins: its function's names
        return function.names
    method = type(function) is types.MethodType
    target = function.__func__ if method else function
    if type(target) is not types.FunctionType:
        return None
    for _ in range(10):   # a function made by functools.wraps (a decorator) names the one it wraps
        wrapped = target.__dict__.get("__wrapped__")
        if type(wrapped) is not types.FunctionType:
            break
        target = wrapped
    signature = target.__dict__.get("__signature__")
    if type(signature) is inspect.Signature:
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names = [name for name, parameter in signature.parameters.items() if parameter.kind in kinds]
    else:
        names = list(target.__code__.co_varnames[:target.__code__.co_argcount])
    return names[1:] if method else names
