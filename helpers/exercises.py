"""The exercise framework: one way to check a learner's answer, used by every chapter.

A chapter's check is a generator that yields one sentence for each mistake it can
name, and yields nothing when the answer is right. ``@exercise`` turns it into an
``Exercise``::

    @exercise("the causal mask", answer=Array(shape=lambda T: (T, T), allow_inf=True))
    def mask(answer, T=5):
        if (answer == np.triu(...)).all(): ...
            yield "the diagonal is hidden too: ..."

The framework, not the check, does what every check needs:

* an answer left as ``None`` is "not answered yet";
* ``answer=`` converts the answer once (torch tensors with or without grad, lists,
  NumPy) and applies the gate: the right kind (a number, a whole number, an array of
  a given shape, a function), finite (NaN and inf are wrong and say so);
* inside a check, ``as_number``, ``as_array`` ... and ``call`` raise ``Wrong`` with one
  sentence, which the framework shows as the problem; ``call`` runs a learner's
  function with a time limit, so a loop that never ends or an ``exit()`` is reported,
  not suffered; all the calls of one check together have a limit too (``CHECK_TIME_LIMIT``, 60 s: longer,
  ``LONG_CHECK_TIME_LIMIT``, only for a check whose calls may each take more than ``TIME_LIMIT``, chapter 11's).
  The one thing no limit can cut short is a single call into C that never lets go of Python's interpreter lock
  (``sum(range(10**10))``, a regular expression that backtracks for minutes): no other thread of the process runs
  until it returns, so neither this stop nor Jupyter's own interrupt button can end it; the check says it ran
  longer than its limit once it does, and a call that never returns needs the kernel restarted.

An ``Exercise`` called as ``check(answer, ...)`` prints ✓ or ✗ with the sentences and
returns an invisible ``Verdict``; it never raises, so an unfinished chapter still runs (but for an
interrupt: the stop button stops the cells after it too).
``check.grade(answer, ...)`` raises AssertionError with the same sentences: that is what
nbgrader's hidden tests use to score; under the course's own grader it records or judges
instead (helpers.grading).
"""
import array
import collections
import contextlib
import contextvars
import copy
import ctypes
import faulthandler
import functools
import gc
import importlib
import inspect
import math
import os
import pickle
import sys
import threading
import time
import types

try:
    import resource
except ImportError:   # (Windows)
    resource = None
try:
    import _posixsubprocess
except ImportError:   # (Windows)
    _posixsubprocess = None

import numpy as np

from . import grading, learner, putback
from .states import ESCALATE_AFTER, OutOfTime, Stop, Stoppable, parts_of, put_back_parts, checksum as _checksum, default_dtype as _default_dtype, digest as _digest, random_states  # noqa: F401  (random_states: the checks' modules import it here)
from . import states
from .states import digests as _digests
from .states import guarded_prlimit, guarded_setrlimit, no_setsid
from .putback import (_FROZEN, _IS, _LOCKS_LET_GO, _gone_owners_let_go, _left_taken, _logging_again, _module_locks_let_go,
                      _process_locks, _reachable, _same, _tensor_kept, course_constants, torch_globals)
from .putback import _CURRENT_THREAD, _threads_started  # noqa: F401  (moved: their old home)
from .putback import _INSTALLED, _KERNEL_LIBRARIES, _NOT_BEFORE, _OWN_THREADS, _Thread, _ThreadLeft, _course_thread, _installed_places, _library_thread, _quiet, own_thread, stop_threads, threads_now  # noqa: F401  (moved: their old home)
from .putback import MAX_REACH_DEPTH, MAX_REACH_ENTRIES, PATCHABLE, PATCHABLE_CLASSES, process_state  # noqa: F401  (their old home: tests and chapters read them here)
from .grading import MAX_ANSWER_DEPTH, MAX_ANSWER_ITEMS, _PLAIN_CALLABLES, _parameter_names, _PLAIN_SCALARS, _course_module, _is_class, _is_courses, _one_of, _own_attribute, plain  # noqa: F401  (plain values: grading screens them)
from .errors import CourseInputError, Wrong, answer_shape, check_bytes, class_name, count, fail, is_bool, \
    length as range_length, message_of, read_shape, shown, tensor_refusal, to_numpy, type_name

NOT_ANSWERED = "not answered yet: replace None in the answer cell above with your answer"
TIME_LIMIT = 10          # seconds a learner's function may run in one call of a check
MAX_ANSWER_ENTRIES = 10_000_000   # numbers an array answer may hold (80 MB as float64); a check's answers hold far fewer
CHECK_TIME_LIMIT = 60    # seconds all the calls of one check may run together: the longest a learner waits
LONG_CHECK_TIME_LIMIT = 120   # the same for a check whose calls may each run longer than TIME_LIMIT (chapter 11's
# real model: two calls of up to 60 s each, helpers.real.checks); a check says so by its calls' ``seconds``
HELD, HELD_SLACK = "held", 2.0   # a call that ended this many s past its limit held the interpreter lock (_bounded)
_CHECK_STARTED = contextvars.ContextVar("check_started", default=None)   # time.monotonic() when the check began


class _LeftOut:
    """The answer of a check called without one (``scores_shape(n_heads=2, T=5)``): see ``Exercise.answer_of``."""

    def __repr__(self):
        return "<the answer, left out>"


LEFT_OUT = _LeftOut()


class Verdict:
    """True or False for code and tests; shows nothing when it is a cell's last value."""

    def __init__(self, ok):
        self.ok = ok

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return f"Verdict({self.ok})"

    def _ipython_display_(self):
        pass  # the printed feedback is all a learner should see


class Exercise:
    """A check that gives feedback (call) or grades (``.grade``)."""

    def __init__(self, title, problems, answer=None, keeps=None):
        self.title = title
        self.problems = problems
        self.answer = answer
        self.keeps = keeps   # the chapter ("05") whose piece this check keeps in my_gpt/ once right
        self.__doc__ = problems.__doc__

    def answer_of(self, given, named):
        """(answer, args, kwargs) of a check cell's call ``check(*given, **named)``: the answer is the first
        argument, or the one named as the check's first parameter (``unscrambled(out=..., Y=Y, perm=perm)``);
        LEFT_OUT when the call gives none (``scores_shape(n_heads=2, T=5)``)."""
        first = (_parameter_names(self.problems) or [None])[0]
        if given:
            return given[0], given[1:], named
        if first in named:
            return named[first], (), {name: value for name, value in named.items() if name != first}
        return LEFT_OUT, (), named

    def feedback(self, /, *given, **named):
        """The list of problem sentences (empty when the answer is right); called as the check is,
        ``feedback(answer, *args, **kwargs)`` (the answer may be given by its name, see ``answer_of``)."""
        answer, args, kwargs = self.answer_of(given, named)
        handed = answer   # (``answer`` becomes what its kind converts it to)
        if answer is None:
            return [NOT_ANSWERED]
        if isinstance(answer, grading.Unknown):   # a record of what could not be kept as data, and why
            return [f"your answer could not be judged: {answer.what}"]
        try:   # a check cell edited to drop or add an argument is not a bug of the check
            if answer is LEFT_OUT:
                inspect.signature(self.problems).bind(*args, **kwargs)
                raise TypeError(f"missing a required argument: {_parameter_names(self.problems)[0]!r}")
            inspect.signature(self.problems).bind(answer, *args, **kwargs)
        except TypeError as error:
            return [f"the check cell should call the check as it was given, but {error}: run the cell as it was"]
        found = []
        own = _CHECK_STARTED.get() is None   # a check run inside another shares the outer one's time
        token = _CHECK_STARTED.set(time.monotonic()) if own else None
        printed = _PRINTED.set({"left": MAX_PRINTED, "said": False}) if own else None
        learners_dtype = _default_dtype(None) if own else None   # the check computes in float32, as the course does
        put_back_random = random_states() if own else None
        try:
            # (NumPy's warnings kept quiet: an answer near 1e308 overflows a check's sums, and its sentence says so)
            with np.errstate(all="ignore"), states.course_modes(), \
                    contextlib.ExitStack() as fence:   # torch's modes the course's (grad on, CPU); the notebook's models, left as
                for model in _small_models((*args, *kwargs.values())):   # they were: those given to the check,
                    fence.enter_context(model_kept(model))                # and those its answer reaches by name
                reached = _small_models(_reached(answer), strict=True)
                if reached:
                    fence.callback(torch_globals())   # (once for them all: each call of the learner's is fenced too)
                for model in reached:
                    with contextlib.suppress(Exception):   # (one that cannot be copied is not the check's to refuse)
                        fence.enter_context(model_kept(model, globals_kept=False))
                if own:   # (entered last, so left first: a learner's __del__ runs while the models are fenced)
                    fence.enter_context(_garbage_fenced())
                if not (callable(answer) and isinstance(self.answer, (Function, Module))):
                    plain(answer, "your answer")   # (a function or a class is for its kind to judge)
                with courses_own_watched(self.answer) as watch:
                    try:
                        if self.answer is not None:
                            answer = self.answer.convert(answer, self.problems, args, kwargs)
                        for sentence in self.problems(answer, *args, **kwargs):
                            found.append(sentence)
                    except Wrong as wrong:   # what the run showed (Seen): the course's own code running in it is
                        if isinstance(wrong, Seen) or watch["tripped"] or watch["peeked"]:   # said first, and so is a call of the
                            _no_courses_own(watch)                          # course's disarmed piece: what went
                        raise                                               # wrong came of that
                if watch["tripped"] or watch["peeked"]:
                    found.clear()
                if not found:   # right, but by the course's own piece (a slip made with a copy keeps its sentence)
                    _no_courses_own(watch)
        except Seen as seen:   # under the grader the judge cannot see it: the record keeps it
            found.append(str(seen))
            if isinstance(handed, grading.Recorder):
                handed.refused = str(seen)
        except Wrong as wrong:
            found.append(str(wrong))
        except CourseInputError as error:   # the check's own arguments (not the answer) cannot be used
            found.append(f"the check cannot use what the check cell gives it ({error}): run the cell as it was given")
        except Exception as exc:  # a bug in a check must not look like the learner's mistake
            found.append(f"the check itself failed on this answer ({type(exc).__name__}: {exc}); "
                         "please report it")
        finally:
            if own:
                _CHECK_STARTED.reset(token)
                _PRINTED.reset(printed)
                _default_dtype(learners_dtype)
                put_back_random()
        return found

    def __call__(self, /, *args, **kwargs):
        if learner.importing():   # a kept cell that calls its check: not run again (see learner.importing)
            return Verdict(False)
        try:   # (under the grader, a function answer's run is recorded here, for the grade call after it)
            found = grading.shown(self, args, kwargs)
        except KeyboardInterrupt:   # the stop button (or a learner's function that interrupted the kernel):
            print(f"✗ {self.title}: the check was interrupted before it finished (the stop button, or your "
                  "function interrupted the kernel): run the check cell again")
            raise                   # said, then let through, so that Run All stops as the learner asked
        if found:
            print(f"✗ {self.title}: " + "; ".join(found))
        else:
            print(f"✓ {self.title}: correct" + self.kept(self.answer_of(args, kwargs)[0]))
        return Verdict(not found)

    def kept(self, answer):
        """Keep a right piece in my_gpt/ (helpers.learner) and say where, or say why not. (Keeping
        it imports the cell that defines it, which may draw random numbers, replace a torch function or start a
        thread: the import runs inside a learner's call's fence, ``_fenced``, and the random states are put back.)"""
        if self.keeps is None:
            return ""
        put_back_random = random_states()
        try:
            return self._kept(answer)
        finally:
            put_back_random()

    def piece_name(self):
        """The name the chapters ahead ask for this exercise's piece by (``learner.use``): the name of the
        course's own implementation, the first of the answer's ``own`` (None when it names none)."""
        own = getattr(self.answer, "own", ())
        return own[0].rpartition(".")[2] if own else None

    def _kept(self, answer):
        limit, _ = time_left(TIME_LIMIT)
        if not (isinstance(answer, type) or type(answer) is types.FunctionType):   # a partial, a bound method
            return (f"; not kept for the chapters ahead: a piece is kept as the function (def ...) or class that "
                    f"defines it, but this one is a {_wrapper_name(answer)}: pass the function itself to keep it")
        own = class_name(answer) if isinstance(answer, type) else answer.__name__
        name = self.piece_name() or own
        try:   # importing the kept cell runs all of it: bounded like a call of the learner's function
            target = learner.path(name)
            earlier = target.read_bytes() if target.is_file() else None
            sys.modules.pop(learner.module_name(target), None)   # (imported anew: not a module the fence puts back)
            with _fenced(f"the cell that defines {own}, run on its own as {learner.shown(target)},", "define it"):
                kept = learner.shown(_bounded(learner.keep, (answer, self.keeps, name), {}, limit))
            return f"; kept in {kept}{'' if name == own else f' as {name} (your {own})'} for the chapters ahead"
        except CourseInputError as error:
            return f"; not kept for the chapters ahead: {error}"
        except Wrong as left:   # what the cell left running, or changed for good: each import would do it again
            _put_back_kept(target, earlier)
            return f"; not kept for the chapters ahead: {left}"
        except OSError as error:
            return f"; not kept for the chapters ahead: the folder cannot be written ({error.strerror})"
        except (OutOfTime, _Raised, SystemExit) as stop:
            if isinstance(stop.__cause__, OSError):   # keep's own: the folder, not the learner's cell
                return f"; not kept for the chapters ahead: the folder cannot be written ({stop.__cause__.strerror})"
            _put_back_kept(target, earlier)
            why = f"ran for more than {limit:.0f} s" if isinstance(stop, OutOfTime) else \
                "called exit()" if isinstance(stop, SystemExit) else f"stopped with {stop}"
            return (f"; not kept for the chapters ahead: run on its own as {learner.shown(target)}, the cell that "
                    f"defines it {why}; keep in it only the definition and what it needs")

    def grade(self, /, *given, **named):
        """Raise AssertionError naming the mistakes; under the course's grader, record or judge
        instead (see helpers.grading: an answer left out is recorded as not answered)."""
        if learner.importing():   # a kept cell that calls its check: not run again (see learner.importing)
            return
        if grading.mode() is not None:
            answer, args, kwargs = self.answer_of(given, named)
            grading.handle(self, None if answer is LEFT_OUT else answer, args, kwargs)
            return
        found = self.feedback(*given, **named)
        if found:
            raise AssertionError(f"{self.title}: " + "; ".join(found))


def _put_back_kept(target, earlier):
    """Put back the kept file ``target`` as it was (``earlier``: its bytes, None when there was none), when its
    cell was not kept; nothing when the folder went away meanwhile."""
    try:
        learner.put_back(target, earlier)
    except OSError:
        pass


def exercise(title, answer=None, keeps=None):
    """Decorator: turn a problem generator into an Exercise with this title.

    answer: what the answer must be (``Number()``, ``Whole()``, ``Array(shape=...)``,
    ``Whole(length=3)``, ``Words()``, ``Function()``), converted before the check sees it;
    None passes the answer through untouched.
    keeps: for a piece of the learner's GPT (a function or class), the chapter ("05") that
    teaches it: once the answer is right, its cell is kept as my_gpt/<name>.py
    (helpers.learner), for the chapters ahead.
    """
    return lambda problems: grading.noted(Exercise(title, problems, answer, keeps), problems)   # (grading.tampered)


# --- What an answer must be: each converts a raw answer or raises Wrong -----------------------


class Kind:
    """Base of the answer kinds: ``convert(answer, check, args, kwargs)`` -> the converted answer."""

    name = "your answer"

    def convert(self, answer, check, args, kwargs):
        raise NotImplementedError


class Number(Kind):
    """One finite real number (a float, an int, a 0-d or one-element array or tensor)."""

    def convert(self, answer, check, args, kwargs):
        return as_number(answer, self.name)


class Whole(Kind):
    """One whole number, or with ``length`` a tuple of that many whole numbers."""

    def __init__(self, length=None):
        self.length = length

    def convert(self, answer, check, args, kwargs):
        if self.length is None:
            return as_whole(answer, self.name)
        return as_wholes(answer, self.name, self.length)


class Array(Kind):
    """An array of finite real numbers of a given shape, as a float NumPy array.

    shape: a tuple, or a function of the check's own arguments (by name) that returns one,
    e.g. ``shape=lambda n, d: (n, d)``. allow_inf: -inf and inf are allowed (masked scores).
    """

    def __init__(self, shape=None, allow_inf=False):
        self.shape, self.allow_inf = shape, allow_inf

    def convert(self, answer, check, args, kwargs):
        shape = self.shape
        if callable(shape):
            bound = inspect.signature(check).bind(None, *args, **kwargs)
            bound.apply_defaults()
            shape = shape(**{name: bound.arguments[name] for name in inspect.signature(shape).parameters})
        return as_array(answer, self.name, shape=shape, allow_inf=self.allow_inf)


class Words(Kind):
    """A list (or tuple) of strings; with ``length``, exactly that many."""

    def __init__(self, length=None):
        self.length = length

    def convert(self, answer, check, args, kwargs):
        return as_words(answer, self.name, self.length)


class Function(Kind):
    """A function the check will call (through ``call``)."""

    calls_answer = True   # (the grader records such an answer through the check: grading.record_answer)

    def __init__(self, what="a function", own=()):
        self.what, self.own = what, own   # own: the course's implementations of it (see courses_own_watched)

    def convert(self, answer, check, args, kwargs):
        if not callable(answer):
            raise Wrong(f"the answer should be {self.what}, but it is a {type_name(answer)}")
        _callable_screened(answer, self.what)
        return not_the_courses(answer, self.what)


def not_the_courses(answer, what):
    """``answer`` (a function or a class), unless it is the course's own (``MLP = mlp.MLP``): then
    Wrong. The course's pieces are there to compare with, not to hand in. A ``functools.partial`` or a
    bound method is judged by the function it wraps (``partial(masking.causal_attention)`` is the course's)."""
    inner = _unwrapped(answer)
    if inner is not answer:
        not_the_courses(inner, what)
        return answer
    if isinstance(answer, type):
        module, name = _own_attribute(answer, "__module__"), class_name(answer)
    elif type(answer) is types.FunctionType:
        module, name = answer.__module__, answer.__name__
    else:
        return answer
    if _course_module(module):
        raise Wrong(f"the answer should be {what} that you write, but it is the course's own {module}.{name}: "
                    "write your own in the answer cell")
    if isinstance(answer, type):   # a subclass of the course's piece that writes neither __init__ nor forward
        namespace, order = type.__dict__["__dict__"], type.__dict__["__mro__"]
        owners = [next((base for base in order.__get__(answer) if name in namespace.__get__(base)), None)
                  for name in ("__init__", "forward")]
        modules = [namespace.__get__(owner).get("__module__") if owner is not None else None for owner in owners]
        if all(map(_course_module, modules)):
            raise Wrong(f"the answer should be {what} that you write, but its __init__ and forward are the course's "
                        f"own (from {modules[1]}.{class_name(owners[1])}): write your own in the answer cell")
        base = next((base for base in order.__get__(answer)[1:] if _course_module(namespace.__get__(base).get("__module__"))),
                    None)
        if base is not None:   # a subclass of the course's piece: what it does not write is the course's
            sentence = (f"the answer should be {what} that you write, but it inherits from the course's own "
                        f"{namespace.__get__(base)['__module__']}.{class_name(base)}: inherit from nn.Module and "
                        "write its __init__ and forward in the answer cell")
            watch = _COURSES_OWN.get()
            if watch is None:
                raise Wrong(sentence)
            watch["inherits"] = sentence   # judged after the check (courses_own_watched), as a call of the course's
    return answer


def _unwrapped(answer):
    """The function or class inside ``answer``: a ``functools.partial``'s ``.func``, a bound method's
    ``.__func__``, looked through up to 10 deep (read by type, running none of the learner's code)."""
    for _ in range(10):
        if type(answer) is functools.partial:
            answer = answer.func
        elif type(answer) is types.MethodType:
            answer = answer.__func__
        else:
            break
    return answer


def _wrapper_name(answer):
    """What kind of callable ``answer`` is, as a learner would name it ("functools.partial")."""
    return "functools.partial" if type(answer) is functools.partial else \
        "bound method" if type(answer) is types.MethodType else type_name(answer)


# --- The course's piece, judged by what runs: a wrapper around it (lambda *a: generate(*a)) is no answer ----

_COURSES_OWN = contextvars.ContextVar("courses_own", default=None)   # the running check's watch (courses_own_watched)


@contextlib.contextmanager
def courses_own_watched(kind):
    """Within the block, every ``call`` of a learner's function runs with the course's own implementations
    of the exercise, ``kind.own`` (functions; for a class its __init__ and forward), disarmed: each raises
    a sentence instead of computing, whatever thread, pool worker or forked child calls it (``_disarmed``).
    A tripwire in the function's thread also notes a copy of one made in an earlier cell and the checks' own
    functions it calls (``_tripwired``). Yields the watch: its "ran" lists the names of the course's pieces
    that ran or were called, "checks" those of the checks' own functions, "peeked" the ways into the check's
    own state it was refused (``_peeked``); ``Exercise.feedback`` refuses the
    answer (one that is wrong anyway, computed by a copy, keeps the check's own sentence: a slip)."""
    functions = _own_functions(getattr(kind, "own", ()))
    codes = _codes_of(functions)
    watch = {"codes": codes, "keys": _own_keys(codes), "ran": [], "inherits": None, "checks": [],
             "functions": functions,   # disarmed while a learner's function runs (``_disarmed``)
             "tripped": False,   # whether a disarmed one was called (from any thread): no answer can come of it
             "trace": False,     # whether the learner's function changed its thread's trace function (``_tripwired``)
             "genuine": _checks_codes(),   # the checks' own code (``_tripwired`` notes the calls made to it)
             "seen": {},   # id(code) -> (code, the course's name of it or None, in_checks): judged once a check
             "what": getattr(kind, "what", "a function")}
    token = _COURSES_OWN.set(watch)
    try:
        with _peeking_refused() as peeked:   # the check's whole run: also between its calls of the function
            watch["peeked"] = peeked   # the check's own state reached by the learner's code (``_peeked``)
            yield watch
    finally:
        _COURSES_OWN.reset(token)


def _own_functions(own):
    """[(function, "module.name")] of the functions named in ``own`` ("helpers.sampling.compute.generate",
    imported only now) and of every function its classes define (``_class_functions``), each looked through
    its decorators (a decorator's wrapper code is shared), each once."""
    found = {}
    for name in own:
        module, _, attribute = name.rpartition(".")
        piece = getattr(importlib.import_module(module), attribute)
        functions = _class_functions(piece) if isinstance(piece, type) else [piece]
        for function in functions:
            function = inspect.unwrap(function) if function is not None else None
            if type(function) is types.FunctionType:
                found[id(function)] = (function, f"{function.__module__}.{function.__qualname__}")
    return list(found.values())


def _class_functions(cls):
    """Every function the class ``cls`` (named in an own= list) defines, and each of the course's classes it
    inherits from: its methods, private ones too, and the functions of its staticmethods, classmethods and
    properties. Any of them may do the piece's work (``helpers.model.Attention._forward`` does the whole
    attention, called on a module built without ``__init__``), so all are watched, not __init__ and forward
    only. Read from the classes' own dicts (no attribute of the class runs); a class of another library
    (torch's) gives its own dict only."""
    functions = []
    for owner in type.__dict__["__mro__"].__get__(cls):
        namespace = type.__dict__["__dict__"].__get__(owner)
        if owner is not cls and not _course_module(namespace.get("__module__")):
            continue
        for value in namespace.values():
            if isinstance(value, (staticmethod, classmethod)):
                functions.append(value.__func__)
            elif isinstance(value, property):
                functions += [value.fget, value.fset, value.fdel]
            else:
                functions.append(value)
    return functions


def _own_codes(own):
    """{id(code): (code, "module.name")} of the functions ``_own_functions`` finds in ``own``."""
    return _codes_of(_own_functions(own))


def _codes_of(functions):
    """{id(code): (code, "module.name")} of ``functions``, [(function, "module.name")]."""
    return {id(function.__code__): (function.__code__, name) for function, name in functions}


def _own_keys(codes):
    """{key: "module.name"} for the codes of ``_own_codes`` by where each is written (file, first line,
    qualified name), so that the tripwire knows a copy of the course's function made in an earlier cell
    (types.FunctionType(f.__code__.replace(), ...)) too. A copy made while a check runs the learner's
    function copies the disarmed code (``_disarmed``) and refuses to run. Known limit: a copy made in an
    earlier cell under another file, first line or name (code.replace(co_firstlineno=1)), or one run in
    another thread, is not known, just as the course's source pasted into a cell is not: that is the
    learner's own code to answer for. (Not by what a code does: a learner's own forward or __init__ written
    with the source texts' names may compile to the course's very bytecode.)"""
    return {("at", code.co_filename, code.co_firstlineno, code.co_qualname): name for code, name in codes.values()}


def _courses_name(code, watch):
    """The course's name of ``code`` if it is one of the watch's own functions (or a copy of one), else None."""
    if id(code) in watch["codes"]:
        return watch["codes"][id(code)][1]
    return watch["keys"].get(("at", code.co_filename, code.co_firstlineno, code.co_qualname))


def _checks_codes():
    """The code objects of the course's checking code as imported: of every function, method and Exercise of
    this module, of its put-back (helpers.putback) and of each chapter's checks module imported
    (helpers.<chapter>.checks), a decorator's wrapper and what it wraps, and the functions nested in each. (By
    identity: code compiled anew under a checks module's file name is none of them.)"""
    codes, found = set(), []
    for name, module in list(sys.modules.items()):
        own = name in (__name__, putback.__name__) or name.startswith("helpers.") and name.endswith(".checks")
        if module is None or not own:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, Exercise):
                value = value.problems
            if getattr(value, "__module__", None) != name:   # (one imported from elsewhere: not the checks' own)
                continue
            if isinstance(value, type):
                found += [getattr(attribute, "__func__", attribute) for attribute in vars(value).values()]
            else:
                found.append(value)
    while found:
        value = found.pop()
        if isinstance(value, types.CodeType):
            if value not in codes:
                codes.add(value)
                found += [c for c in value.co_consts if isinstance(c, types.CodeType)]
        elif type(value) is types.FunctionType:
            found += [value.__code__, *([value.__wrapped__] if hasattr(value, "__wrapped__") else [])]
        elif hasattr(value, "__wrapped__") and callable(value):   # an lru_cache: the function it wraps
            found.append(value.__wrapped__)
    return codes


def _check_function(frame, genuine):
    """"module.name" when ``frame`` runs one of the checks' own functions (a function of a checks module or of
    this one, an Exercise's method, a @sealed reader of a checks module's cases; ``genuine``: ``_checks_codes()``),
    else None. Helpers nested in a check (a callback it gives, a print it catches) and ``_NOT_WATCHED`` are no such."""
    code, module = frame.f_code, frame.f_globals.get("__name__", "?")
    if code is _SEALED_READER:   # (one code for every @sealed function: judged by the cases it reads)
        build = frame.f_locals.get("build")
        code, module = getattr(build, "__code__", None), getattr(build, "__module__", "?")
        if code is None:
            return None
    qualname = code.co_qualname
    top = "." not in qualname or qualname.startswith("Exercise.") and qualname.count(".") == 1
    if not top or qualname.startswith("<") or code in _NOT_WATCHED or code not in genuine:
        return None
    return f"{module}.{qualname}"


def _tripwired(function, watch):
    """``function`` with the watch's tripwire set in the thread that runs it (sys.settrace, called only when
    a Python function starts: a few dict lookups, and None, so no line of it is traced; a call of a C function,
    a NumPy or torch operation, costs nothing); ``function`` itself without a watch. It notes the course's
    own implementations that run (``ran``: a copy made in an earlier cell, as the pieces themselves are
    disarmed, ``_disarmed``) and each of the checks' own functions (``_check_function``) that code outside
    the checking code calls (``checks``): a check's reference numbers are no answer. A function that
    returns with another trace function set (``sys.settrace(None)``) is noted too (``trace``)."""
    if not watch:
        return function
    ran, seen, checks, genuine = watch["ran"], watch["seen"], watch["checks"], watch["genuine"]

    def known(frame):
        code = frame.f_code
        if id(code) not in seen:
            seen[id(code)] = code, _courses_name(code, watch), code in genuine
        return seen[id(code)]

    def tripwire(frame, event, arg):
        _, name, in_checks = known(frame)
        if name is not None and name not in ran:
            ran.append(name)
        if in_checks and (frame.f_back is None or not known(frame.f_back)[2]):
            check = _check_function(frame, genuine)
            if check is not None and check not in checks:
                checks.append(check)

    def tripwired(*args, **kwargs):
        previous = sys.gettrace()
        watch["tripwire"] = tripwire   # (where it traces, the course's disarmed pieces run: ``courses_own_called``)
        sys.settrace(tripwire)
        try:
            out = function(*args, **kwargs)
            if sys.gettrace() is not tripwire:
                watch["trace"] = True
            return out
        finally:
            sys.settrace(previous)
    return tripwired


class CoursesOwnCalled(Exception):
    """What the course's own implementation of an exercise raises when it is called while a check runs a
    learner's function, other than where the tripwire watches it (``courses_own_called``)."""


_DISARMED = []   # the watch of each call whose course's pieces are disarmed now (nested checks: the innermost last)
_TRIPPED_CODES = {}   # id(a piece's code) -> the disarmed code put in its place (``_tripped_code``), made once
_TRIPPED_SOURCE = """def tripped(*args, **kwargs):
    return __import__({module!r}, fromlist=["_"]).courses_own_called({name!r}, args, kwargs)
"""


def courses_own_called(name, args, kwargs):
    """What the disarmed course's piece ``name`` does when called with ``args`` and ``kwargs``: in the thread
    of the learner's function, under the tripwire (``_tripwired``, which notes it), it runs as ever, so that a
    slip made with it keeps the check's sentence; anywhere else (a thread or a pool's worker of the learner's,
    a forked child, a thread whose trace function the learner turned off) it is noted in the watch (from any
    thread: a list's append is atomic) and raises CoursesOwnCalled: no answer can come of it there."""
    watch = _DISARMED[-1] if _DISARMED else None
    if watch is not None and os.getpid() == watch["pid"] and isinstance(threading.current_thread(), _Run) \
            and sys.gettrace() is watch.get("tripwire"):
        return watch["originals"][name](*args, **kwargs)
    if watch is not None:
        watch["tripped"] = True
        if name not in watch["ran"]:
            watch["ran"].append(name)
    raise CoursesOwnCalled(f"{_whose(name)} {name} cannot run while a check runs your function: write your own")


def _whose(name):
    """Whose piece ``name`` (a dotted name an own= list gives) is, as a check says it: "torch's own" (nn.LayerNorm,
    which a check may refuse as an answer too) or "the course's own"."""
    return "torch's own" if name.startswith("torch.") else "the course's own"


def _tripped_code(code, name):
    """A code object to put in the place of the course's piece ``name`` (whose code is ``code``): it takes any
    arguments and hands them to ``courses_own_called``. It reads nothing from the globals of the piece's module
    (which it runs with): that function is this module's, imported by name."""
    if id(code) not in _TRIPPED_CODES:
        namespace = {}
        exec(compile(_TRIPPED_SOURCE.format(module=__name__, name=name), f"<the course's own {name}, disarmed>",
                     "exec"), namespace)
        tripped = namespace["tripped"].__code__
        _TRIPPED_CODES[id(code)] = tripped.replace(co_name=code.co_name, co_qualname=code.co_qualname)
    return _TRIPPED_CODES[id(code)]


def _original(function):
    """A copy of the Python function ``function`` as it is now (its code, globals, name, defaults)."""
    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__)
    copy.__kwdefaults__, copy.__qualname__ = function.__kwdefaults__, function.__qualname__
    return copy


@contextlib.contextmanager
def _disarmed(watch):
    """Within the block (a learner's function running in a check), the course's own implementations in
    ``watch["functions"]`` run ``_tripped_code`` instead of theirs: a call from any thread (one the learner's
    function starts, a pool's worker made in an earlier cell), from a forked child, or of a copy made meanwhile
    (f.__code__.replace()) raises CoursesOwnCalled and computes nothing. Their code is put back when the block
    ends, however it ends. In the learner's function's own thread, under the tripwire, each runs as ever
    (``courses_own_called``: a copy of it, ``_original``). A piece whose code has free variables (a closure,
    or a method that calls super()) cannot take another code: the tripwire watches it (``_tripwired``).
    Nothing is done without a watch."""
    if not watch:
        yield
        return
    swapped = [(function, function.__code__, name) for function, name in watch["functions"]
               if not function.__code__.co_freevars]
    watch["pid"], watch["originals"] = os.getpid(), {name: _original(function) for function, _, name in swapped}
    _DISARMED.append(watch)
    try:
        for function, code, name in swapped:
            function.__code__ = _tripped_code(code, name)
        yield
    finally:
        for function, code, _ in swapped:
            function.__code__ = code
        _DISARMED.remove(watch)


def _peeked_sentence(events, should):
    """The sentence for a learner's code that tried the ways into the check's own state ``events`` (``_peeked``)."""
    return (f"the answer{should}, but it looked into the check's own state ({events[0]}), which a check refuses: "
            "compute the result from the function's inputs")


class Seen(Wrong):
    """A sentence only the run of the learner's code can find (the course's own code ran in it): under the
    grader, ``Exercise.feedback`` keeps it in the record as the answer (``grading.Recorder.refused``), for the
    judge, which replays only what the code returned, to say too."""


def _no_courses_own(watch):
    """Seen when the answer's class inherits from the course's (``not_the_courses``), the course's own
    implementation of the exercise ran in the learner's function (or was called: ``_disarmed``), it called
    the checks' own code, or it changed its thread's trace function, with which the check watches, or it looked
    into the check's own state (``_peeked``)."""
    if watch["peeked"]:
        raise Seen(_peeked_sentence(watch["peeked"], f" should be {watch['what']} that computes its own result"))
    if watch["inherits"]:
        raise Seen(watch["inherits"])
    if watch["ran"]:
        raise Seen(f"the answer should be {watch['what']} that you write, but it ran {_whose(watch['ran'][0])} "
                   f"{watch['ran'][0]}: write your own in the answer cell")
    if watch["checks"]:
        raise Seen(f"the answer should be {watch['what']} that computes its own result, but it called the check's own "
                   f"{watch['checks'][0]} (a check's numbers are no answer): write your own in the answer cell")
    if watch["trace"]:
        raise Seen(f"the answer should be {watch['what']} that leaves Python's trace function as it was, but it "
                   "changed it (sys.settrace), and a check watches what runs with it: leave it alone")


class Module(Kind):
    """An ``nn.Module`` class the learner wrote (a piece of their GPT).

    The check receives ``run(args, state, *inputs)`` instead of the class: it builds
    ``cls(*args)``, loads the tensors ``state`` into it by parameter name (the course's names,
    so the shipped weights fit), and returns ``module(*inputs)`` without gradients (called with
    ``grad_of=`` a tensor, each parameter's gradient of (output * grad_of).sum() instead, {name:
    gradient or None}: ``gradient_problems``). Only data
    goes in and comes out, so the course's grader can record it in the student's kernel and
    judge it elsewhere (helpers.grading). A function given instead is taken as such a ``run``.
    """

    calls_answer = True   # (as Function's)

    def __init__(self, what="an nn.Module class", own=()):
        self.what, self.own = what, own   # (as Function's)

    def convert(self, answer, check, args, kwargs):
        if _is_class(answer):   # (by its type: isinstance would read the learner's own __class__)
            return self.recordable(not_the_courses(answer, self.what))
        if not callable(answer):
            raise Wrong(f"the answer should be {self.what}, but it is a {type_name(answer)}")
        torch = sys.modules.get("torch")
        if torch is not None and issubclass(type(answer), torch.nn.Module):   # a module built from the class:
            return answer                                                       # the check names the slip
        _callable_screened(answer, self.what)
        return not_the_courses(answer, self.what)

    def recordable(self, answer):
        """The class as its ``run`` function (anything else as it is)."""
        if not isinstance(answer, type):
            return answer
        from torch import nn
        if not issubclass(answer, nn.Module):
            raise Wrong(f"the answer should be {self.what}, but the class {class_name(answer)} "
                        "does not inherit from nn.Module")
        return module_runner(answer)


def module_runner(cls):
    """``run(args, state, *inputs)`` for the nn.Module class ``cls`` (see ``Module``)."""
    import torch

    def run(args, state, *inputs, grad_of=None):
        module = cls(*args)
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"{class_name(cls)}(...) made a {type_name(module)}, not an nn.Module")
        own = module.state_dict()
        if set(own) != set(state):
            missing, extra = sorted(set(state) - set(own)), sorted(set(own) - set(state))
            buffers = sorted(set(extra) - {name for name, _ in module.named_parameters()})
            raise ValueError(f"its parameters should be named {sorted(state)}, but "
                             + (f"{missing} are missing" if missing else "")
                             + (" and " if missing and extra else "") + (f"{extra} are extra" if extra else "")
                             + (f" ({', '.join(buffers)}: a buffer saved with the parameters, so the course's weights "
                                "do not load by name; register it with persistent=False, it is computed, not learned)"
                                if buffers else ""))
        for name, tensor in state.items():
            if tuple(own[name].shape) != tuple(tensor.shape):
                raise ValueError(f"its {name} should have shape {tuple(tensor.shape)} (the course's weights), "
                                 f"but it has {tuple(own[name].shape)}")
        module.load_state_dict(state)
        if grad_of is not None:   # gradient_problems: each parameter's gradient of (output * grad_of).sum()
            return _module_gradients(module, inputs, grad_of)
        with torch.no_grad():
            return module(*inputs)
    run.__name__ = class_name(cls)
    run.__signature__ = _run_signature(cls)
    return run


def _module_gradients(module, inputs, grad_of):
    """{name: the gradient of (module(*inputs) * grad_of).sum() for that parameter, or None}: an output with no
    graph (a forward under torch.no_grad()) leaves every one None."""
    import torch

    with torch.enable_grad():
        out = module(*inputs)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            (out * grad_of).sum().backward()
    return {name: None if p.grad is None else p.grad.detach().clone() for name, p in module.named_parameters()}


def gradient_problems(run, reference, args, state, inputs, name, weight=None, rtol=1e-3):
    """One sentence when the learner's module ``run`` (a Module run), built with ``args`` and loaded with
    ``state``, does not give each parameter the gradient the course's ``reference`` class gives it through a
    backward pass of its output on ``inputs`` (the output times fixed random numbers, summed; ``weight``, of the
    output's shape, zeroes positions the check does not judge): a module whose forward runs under torch.no_grad(),
    or reads a parameter through .data or .detach(), cannot learn. A run function of the learner's own (not a
    class) that takes no grad_of is not judged here (told by its signature, ``_takes_grad_of``: an error it raises,
    whatever its text, is its failure)."""
    import torch

    if not _takes_grad_of(run):
        return
    module = reference(*args)
    module.load_state_dict(state)
    with torch.enable_grad():
        out = module(*inputs)
        # (NumPy's draws: the same on every machine, so the judge's replay gets the very inputs the record has)
        grad_of = torch.as_tensor(np.random.default_rng(0).standard_normal(tuple(out.shape)), dtype=out.dtype)
        if weight is not None:
            grad_of = grad_of * weight
        (out * grad_of).sum().backward()
    want = {key: p.grad for key, p in module.named_parameters() if p.grad is not None}
    # (a gradient that is zero but for rounding, b_K's (softmax ignores it), is not asked for: it changes nothing)
    scale = max([float(grad.abs().max()) for grad in want.values()] + [0.0])
    want = {key: grad for key, grad in want.items() if float(grad.abs().max()) > rtol * scale}
    try:
        got = call(run, args, state, *inputs, grad_of=grad_of, what="in a backward pass through its output")
    except Wrong as wrong:
        yield str(wrong)
        return
    watch = _COURSES_OWN.get()
    if watch is not None and (watch["ran"] or watch["checks"] or watch["inherits"]):
        return   # its output came of the course's own code (computed without gradients): that refusal is said instead
    if not isinstance(got, dict):
        yield f"a backward pass through {name}'s output should give each parameter a gradient, but got {type_name(got)}"
        return
    for key, grad in want.items():
        given = got.get(key)
        if given is None:
            yield (f"{key} got no gradient: a backward pass through your {name}'s output left it without one, so it "
                   "cannot learn (is the forward under torch.no_grad(), or does it read the parameter through .data "
                   "or .detach()?)")
            return
        given, grad = np.asarray(given, dtype=float), grad.double().numpy()
        if given.shape != grad.shape or not np.allclose(given, grad, rtol=rtol, atol=rtol * scale):
            yield (f"{key}'s gradient differs from the course's {name}'s: a backward pass through the output "
                   "should reach each parameter as the computation uses it (a .detach() or .data on the way?)")
            return


def _run_signature(cls):
    """run's signature with the inputs named as ``cls.forward`` names them, run(args, state, x, *, grad_of=None), so
    that a sentence about an input says x (or h), not "argument 3"."""
    names = _parameter_names(_own_attribute(cls, "forward"))
    grad_of = inspect.Parameter("grad_of", inspect.Parameter.KEYWORD_ONLY, default=None)
    if names is not None:
        return inspect.Signature([inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD)
                                  for name in ["args", "state"] + names[1:]] + [grad_of])
    return inspect.Signature([inspect.Parameter("args", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                              inspect.Parameter("state", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                              inspect.Parameter("inputs", inspect.Parameter.VAR_POSITIONAL), grad_of])


def _takes_grad_of(run):
    """Whether ``run``, what a Module check calls (``gradient_problems``), takes the keyword grad_of, read from its
    signature without running any of the learner's code (by type, as ``grading._parameter_names`` reads one): a
    class's run (``module_runner``) takes it; a run function of the learner's own (a partial's or bound method's
    function, looked through functools.wraps' ``__wrapped__``) when it names grad_of or takes **kwargs. The grader's
    Recorder asks its function; the judge's Replay its record, which holds the call only when the student's kernel
    made it (``gradient_problems`` calls last)."""
    if issubclass(type(run), grading.Replay):
        return run.next < len(run.calls)
    run = _unwrapped(run.function if issubclass(type(run), grading.Recorder) else run)
    if type(run) is not types.FunctionType:
        return False   # (a module built from the class, which no run takes: the check names that slip)
    for _ in range(10):
        wrapped = dict.get(run.__dict__, "__wrapped__")
        if type(wrapped) is not types.FunctionType:
            break
        run = wrapped
    signature = dict.get(run.__dict__, "__signature__")
    if type(signature) is inspect.Signature:
        return any(p.kind is p.VAR_KEYWORD or name == "grad_of" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                   for name, p in signature.parameters.items())
    code = run.__code__
    return "grad_of" in code.co_varnames[code.co_posonlyargcount:code.co_argcount + code.co_kwonlyargcount] \
        or bool(code.co_flags & inspect.CO_VARKEYWORDS)


# --- Converters a check can use on anything the learner gave (they raise Wrong) ---------------

def _callable_screened(answer, what):
    """Wrong unless the callable ``answer`` is a plain function (def, lambda, a partial, a bound
    method), a class or the course's own (a grader's Replay), told by its type alone (``_is_class``):
    another object's own code would run outside the check's time limit."""
    kind = type(answer)
    if not (_one_of(kind, _PLAIN_CALLABLES) or _is_class(answer) or _is_courses(kind)):
        raise Wrong(f"the answer should be {what}, but it is a {class_name(kind)} object that can be "
                    "called: write it as a function (def ...), whose code runs only when the check calls it")


# --- what a learner's function returned, read as the converters below read an answer (every chapter's checks) ---

def holds_bools(x, depth=0):
    """Whether ``x`` is True/False, a bool array or tensor, or a list, tuple or object array holding one."""
    if is_bool(x):
        return True
    if isinstance(x, np.ndarray) and x.dtype.kind == "O":
        return any(holds_bools(v, depth + 1) for v in x.flat) if depth < 4 else False
    if isinstance(x, (list, tuple)) and depth < 4:
        return any(holds_bools(v, depth + 1) for v in x)
    return False


def numbers(x, name, shape=None, allow_inf=False, allow_nan=False):
    """``x`` (an answer, or what a learner's function returned) as a float array of numbers, else
    Wrong with one sentence about it: exercises.as_array, with True/False refused first (as_array
    takes a boolean mask, which some answers are; where numbers are asked for, True would be judged,
    and maybe named by a hint, as 1). allow_nan: NaN is kept for the check to name (a softmax over a
    row that is all -inf) instead of being refused."""
    if holds_bools(x):
        raise Wrong(f"{name} should hold numbers, but it holds True/False values (a comparison such as x > 0?): "
                    "return the numbers themselves")
    if not allow_nan:
        return as_array(x, name, shape=shape, allow_inf=allow_inf)
    if isinstance(x, (str, bytes, dict, set)) or callable(x):
        raise Wrong(f"{name} should be an array of numbers, but it is a {type(x).__name__}")
    try:   # exercises.as_array's own conversion, without its refusal of NaN (as_array has no allow_nan)
        arr = to_numpy(x, name)
    except CourseInputError as error:
        raise Wrong(str(error)) from None
    if shape is not None and arr.shape != tuple(shape):
        raise Wrong(f"{name} should have shape {tuple(shape)}, but it has shape {arr.shape}")
    if not allow_inf and np.isinf(arr).any():
        raise Wrong(f"{name} holds inf in {int(np.isinf(arr).sum())} of {arr.size} entries: "
                    "a number overflowed (exp of a large number?)")
    return arr


# whole numbers a float type holds exactly (2 ** (its mantissa's bits + 1)); past that it rounds them
EXACT_WHOLES = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53}


def rounded_by_dtype(x, expected):
    """The sentence for a count ``x`` written in a float type too narrow to hold ``expected`` exactly
    (a bfloat16 or float16 tensor, float32 past 16,777,216): the count it reads is that type's
    rounding, so no hint about how it was counted would be true; None for any other ``x``. Every float type
    narrower than float32 (``_narrow_float``: the float8 kinds too) holds whole numbers exactly up to 2 / its eps."""
    narrow = _narrow_float(x)
    if narrow is not None:
        dtype, limit = narrow[0], round(2 / narrow[2])   # eps = 2**-(its mantissa's bits)
    else:
        dtype = "float64" if isinstance(x, float) else str(getattr(x, "dtype", "")).replace("torch.", "")
        limit = EXACT_WHOLES.get(dtype)
    if limit is None or abs(expected) <= limit:
        return None
    return (f"the count is a {dtype} number, which holds whole numbers exactly only up to {limit:,}, so a count "
            "this large is rounded in it: compute it with Python's int (exact at any size), or an int64 tensor")


def narrow_float_problem(x, arr, reference, name, atol):
    """The sentence for ``x`` (an answer, or what a learner's function returned) in a float type narrower than
    float32 (``_narrow_float``: float16, bfloat16, the float8 types) whose numbers, ``arr`` (read as float64), are
    ``reference`` to that type's own precision but not to the check's ``atol``: the type rounded them, so no hint
    about a slip would be true; None for any other ``x``."""
    narrow = _narrow_float(x)
    if narrow is None:
        return None
    dtype, kind, eps, tiny = narrow
    reference = np.asarray(reference, dtype=float)
    # its rounding moves a number by up to eps/2 of it (twice that, for a number computed in it), and one below
    # its smallest normal number (``tiny``) by up to tiny·eps/2
    if arr.shape != reference.shape or not np.allclose(arr, reference, rtol=2 * eps, atol=atol + tiny * eps):
        return None
    digits = max(1, int(-math.log10(eps / 2)))   # float16: 3, bfloat16: 2, float8_e4m3fn: 1
    return (f"{name} came as a {dtype} {kind}, which keeps only about {digits} significant "
            f"digit{'s' if digits > 1 else ''}, too few for the check's tolerance of ±{atol:g}: compute in float32, "
            "as the course does")


def _narrow_float(x):
    """(its dtype's name, "tensor", "array" or "number", eps, tiny) for ``x`` a torch tensor, NumPy array or NumPy
    number in a float type narrower than float32 (fewer bits of mantissa: a larger eps, as torch.finfo and
    np.finfo give it), whatever its name (float16, bfloat16, float8_e4m3fn, float8_e5m2, ...); None for any
    other ``x``. Told by the type, running none of a learner's object's code."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        dtype = x.dtype
        if not dtype.is_floating_point:
            return None
        info, name, kind = torch.finfo(dtype), str(dtype).replace("torch.", ""), "tensor"
    elif isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind == "f":
        info, name, kind = np.finfo(x.dtype), x.dtype.name, "array" if isinstance(x, np.ndarray) else "number"
    else:
        return None
    if float(info.eps) <= float(np.finfo(np.float32).eps):
        return None
    return name, kind, float(info.eps), float(info.tiny)


def precision_problem(x, arr, reference, name, atol):
    """The sentence for ``x`` (an answer, or what a learner's function returned) whose numbers ``arr`` (x read as
    float64) are ``reference`` to x's own precision but not to the check's ``atol``: x in a float type narrower
    than float32 (``exercises.narrow_float_problem``), or rounded to a few decimals (``rounded_problem``). No hint
    about a slip would be true of it. None for any other x."""
    arr = np.asarray(arr, dtype=float)
    return narrow_float_problem(x, arr, reference, name, atol) or rounded_problem(arr, reference, name, atol)


def settled(given, arr, reference, name, atol, rtol=1e-5):
    """What a value check says before it looks for slips: [] when ``arr`` (``given`` read as float64) is
    ``reference`` (same shape, within ``atol`` and ``rtol`` as np.allclose), [precision_problem's sentence] when it
    is ``reference`` only to ``given``'s own precision, None when neither (the check then looks for slips). Used as
    ``done = settled(...)``, then ``if done is not None: yield from done; return``."""
    if np.shape(arr) == np.shape(reference) and np.allclose(arr, reference, atol=atol, rtol=rtol):
        return []
    rounded = precision_problem(given, arr, reference, name, atol)
    return [rounded] if rounded else None


def rounded_problem(arr, reference, name, atol):
    """The sentence for numbers ``arr`` written to d decimals (np.round(x, d), or torch.round in float32), d from 1
    to 6, that are ``reference`` to within that rounding (half a unit of the d-th decimal) but not to the check's
    ``atol``; None for any other arr (whole numbers too: a 0 or a 1 is a slip's value more often than a rounding)."""
    arr, reference = np.asarray(arr, dtype=float), np.asarray(reference, dtype=float)
    if arr.shape != reference.shape or not np.isfinite(arr).all() or not np.isfinite(reference).all():
        return None
    for d in range(7):   # the fewest decimals arr is written to
        half = 0.5 * 10.0 ** -d
        if d > 0 and half <= atol:   # a rounding this fine stays within the tolerance: it is not why arr is off
            return None
        if np.all(np.abs(arr - np.round(arr, d)) <= 1e-7 * np.maximum(np.abs(arr), 1.0)):   # (float32's rounding)
            break
    else:
        return None
    if d == 0 or not np.allclose(arr, reference, rtol=1e-6, atol=half * (1 + 1e-6)):
        return None
    one = arr.size == 1
    return (f"{name} came rounded to {d} decimal{'s' if d > 1 else ''}, which moves {'it' if one else 'each number'} "
            f"by up to {half:g}, more than the check's tolerance of ±{atol:g}: give {'it' if one else 'the numbers'} "
            "as computed, unrounded")


def count_answer(x, name, expected):
    """``x`` (an answer, or what a learner's function returned) as an int, else Wrong: as exercises.as_whole,
    and when it is not ``expected`` and its float type cannot hold that count exactly, a sentence saying so (what
    it reads is a rounding, so a hint about how it was counted could name the wrong mistake)."""
    value = as_whole(x, name)
    if value != expected:
        rounded = rounded_by_dtype(x, expected)
        if rounded:
            raise Wrong(rounded)
    return value


def as_array(x, name, shape=None, allow_inf=False):
    """``x`` as a float NumPy array of finite numbers (of ``shape`` if given), else Wrong."""
    if x is None:
        raise Wrong(f"{name} is None: return or assign the array")
    if isinstance(x, (str, bytes, dict, set)) or callable(x):
        raise Wrong(f"{name} should be an array of numbers, but it is a {type_name(x)}")
    size = _entries(x)
    if size > MAX_ANSWER_ENTRIES:   # looked at before anything is copied or converted
        raise Wrong(f"{name} should be a small array (at most {MAX_ANSWER_ENTRIES:,} numbers), but it holds {size:,}")
    try:
        arr = to_numpy(x, name, bools=True)   # a check compares what it gets: a mask may be an answer
    except CourseInputError as error:
        raise Wrong(str(error)) from None
    if shape is not None and arr.shape != tuple(shape):
        raise Wrong(f"{name} should have shape {tuple(shape)}, but it has shape {arr.shape}")
    if np.isnan(arr).any():
        raise Wrong(f"{name} holds NaN (not a number) in {int(np.isnan(arr).sum())} of {arr.size} entries; "
                    "a NaN usually comes from 0/0, inf - inf or 0 · inf")
    if not allow_inf and np.isinf(arr).any():
        if str(getattr(x, "dtype", "")).replace("torch.", "") == "float16":   # the number overflowed its dtype
            raise Wrong(f"{name} holds inf in {int(np.isinf(arr).sum())} of {arr.size} entries: float16 holds "
                        "numbers only up to 65,504 (use float32 or a Python number)")
        raise Wrong(f"{name} holds inf in {int(np.isinf(arr).sum())} of {arr.size} entries: "
                    "a number overflowed (exp of a large number?)")
    return arr


def _entries(x):
    """How many numbers ``x`` holds, as far as can be told without copying it (an array's or a
    tensor's size, a list's length times its first item's); 0 when it cannot say."""
    if isinstance(x, range):   # made lazily: a long one would fill the memory when converted
        return range_length(x)
    size = getattr(x, "size", None)
    if isinstance(size, (int, np.integer)):
        return int(size)
    if hasattr(x, "numel"):
        return int(x.numel())
    if isinstance(x, (list, tuple)) and x:
        first = x[0]
        return len(x) * max(1, _entries(first) if isinstance(first, (list, tuple, np.ndarray)) or hasattr(first, "numel") else 1)
    return 0


def as_number(x, name):
    """``x`` as one finite float, else Wrong."""
    if is_bool(x):   # True, np.True_, a bool array or tensor: torch and NumPy would read it as 1
        raise Wrong(f"{name} should be a number, but it is a truth value ({shown(x)}), which would be read as 1 or 0")
    if isinstance(x, (list, tuple)) and len(x) != 1:
        raise Wrong(f"{name} should be one number, but it holds {len(x)} numbers")
    if isinstance(x, (str, bytes, dict, set)) or callable(x):
        raise Wrong(f"{name} should be one number, but it is a {type_name(x)}")
    arr = as_array(x, name)
    if arr.size != 1:
        raise Wrong(f"{name} should be one number, but it has shape {arr.shape} ({arr.size} numbers)")
    return float(arr.reshape(()))


def as_whole(x, name):
    """``x`` as one int; a float with a fractional part (302.9) is Wrong, not truncated. An int (a Python int, a
    NumPy or torch integer) is read exactly (``_exact_wholes``), not through float64, which rounds past 2**53."""
    value = as_number(x, name)   # (refused first: a truth value, a date, an int past what a float can hold)
    exact = _exact_wholes(x)
    if exact is not None:
        return exact[0]
    if value != math.floor(value):
        raise Wrong(f"{name} should be a whole number, but it is {value!r}")
    return int(value)


def as_wholes(x, name, length=None, ordered=True):
    """``x`` (a tuple, list, range, torch.Size or 1-D array; a set too unless ``ordered``, as for a
    shape) as a tuple of ints, else Wrong."""
    sequence = (tuple, list, range) if ordered else (tuple, list, range, set, frozenset)
    if ordered and isinstance(x, (set, frozenset)):
        raise Wrong(f"{name} should be a tuple of whole numbers, like (1, 2, 3), but it is a set, which keeps no order")
    shape = None if isinstance(x, sequence) else read_shape(x, name, answer=True)   # (a nested tensor: refused)
    if isinstance(x, (str, bytes)) or not isinstance(x, sequence) and (shape is None or tuple(shape) == ()):
        raise Wrong(f"{name} should be a tuple of whole numbers, like (1, 2, 3), not {shown(x)}")
    if is_bool(x) or isinstance(x, (tuple, list)) and any(is_bool(v) for v in x):
        raise Wrong(f"{name} should hold whole numbers, but it holds a truth value (True or False), which would be "
                    "read as 1 or 0")
    if isinstance(x, range) and _entries(x) > MAX_ANSWER_ENTRIES:
        raise Wrong(f"{name} should be a small tuple (at most {MAX_ANSWER_ENTRIES:,} numbers), but it is a range of "
                    f"{count(_entries(x))}")
    arr = as_array(list(x) if isinstance(x, sequence) else x, name)
    if arr.ndim != 1:
        raise Wrong(f"{name} should be a flat tuple of whole numbers, but it has shape {arr.shape}")
    if length is not None and len(arr) != length:
        raise Wrong(f"{name} should hold {length} whole numbers, but it holds {len(arr)}")
    if (arr != np.floor(arr)).any():
        raise Wrong(f"{name} should hold whole numbers only, but it holds {float(arr[arr != np.floor(arr)][0])!r}")
    exact = _exact_wholes(x)
    return tuple(exact) if exact is not None else tuple(int(v) for v in arr)


def _exact_wholes(x):
    """The whole numbers ``x`` holds as a flat list of Python ints, read exactly when ``x`` holds ints only (a Python
    int, a NumPy integer, an integer array or tensor, or a list, tuple or range of ints); None when it holds anything
    else (floats are read through float64: as_array). Called once ``x`` has passed as_array's checks."""
    if is_bool(x):
        return None
    if isinstance(x, (int, np.integer)):
        return [int(x)]
    if isinstance(x, np.ndarray) and x.dtype.kind in "iu":
        return [int(v) for v in x.reshape(-1).tolist()]
    if hasattr(x, "detach") and not (x.is_floating_point() or x.is_complex()):   # an integer tensor (bool: above)
        return [int(v) for v in x.detach().reshape(-1).tolist()]
    if isinstance(x, (list, tuple, range)):
        parts = [_exact_wholes(v) for v in x]
        if all(part is not None and len(part) == 1 for part in parts):
            return [part[0] for part in parts]
    return None


def as_words(x, name, length=None):
    """``x`` (a list or tuple of strings, or a 1-D NumPy array of them) as a list of strings, else Wrong."""
    if isinstance(x, np.ndarray) and x.ndim == 1 and x.dtype.kind in "UO":   # np.array(words)[order]: NumPy's way
        if x.size > MAX_ANSWER_ENTRIES:   # counted before its words are made (a broadcast view stores one)
            raise Wrong(f"{name} should be a short list (at most {MAX_ANSWER_ENTRIES:,} words), but it holds "
                        f"{x.size:,}")
        x = x.tolist()
    if isinstance(x, str) or not isinstance(x, (list, tuple)):
        raise Wrong(f"{name} should be a list of words (strings), but got {shown(x)}")
    others = [(i, w) for i, w in enumerate(x) if not isinstance(w, str)]
    if others:
        i, other = others[0]
        raise Wrong(f"{name} should hold words (strings) only, but its entry {i} is {shown(other)}, of type "
                    f"{type_name(other)}")
    if length is not None and len(x) != length:
        raise Wrong(f"{name} should hold {length} words, but it holds {len(x)}")
    return list(x)


# --- Calling a learner's function --------------------------------------------------------------


def call(function, *args, what="", seconds=TIME_LIMIT, **kwargs):
    """Call the learner's ``function`` and return what it returns.

    It gets copies of the arrays and tensors in ``args`` and ``kwargs`` (see ``_copies``), so the
    check's own inputs stay as they were; if it changed one of its copies in place, that is Wrong
    too: the caller's own would have changed. torch's default dtype, ``torch_globals`` and the
    course's constants (``course_constants``) are put back afterwards. A function that raises,
    calls ``exit()`` or runs longer than ``seconds`` (or than what is left of its check's
    whole time, ``time_left``) becomes Wrong with one sentence saying so (``what`` names the input,
    e.g. "on the toy"). What it returns must be plain values (``grading.plain``), judged in its own thread:
    a value refused, and what it raises, are dropped there, so that their ``__del__`` runs within the time
    limit (``_Run.call``).

    What is bounded: the check's time, whatever the function does. It runs in a thread of its own
    (``_bounded``) and the check waits at most its limit; then the function is stopped by an
    exception raised in it every 20 ms until it ends, so a bare ``except:``, its own signal
    handler or ``signal.alarm(0)`` does not keep it going (signals play no part). What is not: a
    loop that catches everything around a loop that never ends (``while True: try: while True:
    pass except: pass``) catches every one of them, so it may run on in the background; and one
    long C call (``time.sleep(10**6)``, a huge ``np.linalg`` operation) cannot be interrupted by
    Python; the check still answers on time, while that call finishes in the background and the
    function is stopped when it returns to Python. The sentence says so when it is still running.
    While it runs, what it prints is cut after the check's MAX_PRINTED characters, a process it
    leaves (a double fork's too) is stopped (what it writes to file descriptors 1 and 2 itself,
    ``os.write(1, ...)``, is cut as its printing is: ``_descriptors_capped``), and sys.addaudithook, sys.setswitchinterval and
    sys.setrecursionlimit are refused (an audit hook, or a long switch interval, would outlive the check's own defences; a
    recursion limit set low stops the check's own thread, one set high lets C's stack overflow), and so are a kernel
    registered with torch's dispatcher (``_kernels_refused``), another program started (``_program_refused``: it would
    compute out of the check's sight) and the changes no put-back can undo (``_CHANGES``: a resource limit,
    os.putenv); a piece of process state that cannot be put back is said (``states.not_put_back``);
    a function registered to run at exit is dropped
    (``_exit_functions_dropped``) and the pyplot figures it opened are closed afterwards (``_figures_closed``):
    all of it is ``_fenced``, which Exercise.kept uses too.
    """
    on = f" {what}" if what else ""
    limit, total = time_left(seconds)
    given, given_kwargs = _copies(args), {name: _copies(value) for name, value in kwargs.items()}
    # what it was given, kept apart: the caller's own may change by another way (a global model the
    # function changes), which is not its copy changing (model_kept's to find)
    kept, kept_kwargs = _copies(args), {name: _copies(value) for name, value in kwargs.items()}
    try:
        with _fenced(f"your function{on}", "return its answer"), _disarmed(_COURSES_OWN.get()):
            out = _bounded(_tripwired(function, _COURSES_OWN.get()), given, given_kwargs, limit,
                           screen=functools.partial(plain, name=f"what your function returned{on}"))
        changed = _changed_input(function, kept, kept_kwargs, given, given_kwargs)
        if changed:
            raise Wrong(_in_place_sentence(*changed, on))
        return out   # (screened in its thread: plain)
    except Wrong:
        raise
    except OutOfTime as stop:
        still = ("; it is still running in the background (a long C call, or an except: that catches "
                 "everything?): restart the kernel if the notebook slows down") if stop.args and stop.args[0] is True else ""
        ended = ("in one call into C that kept Python's interpreter lock, so nothing could stop it sooner (a huge "
                 "sum, a regular expression that backtracks?)") if stop.args and stop.args[0] == HELD else \
            "and was stopped (a loop that never ends?)"
        if total is not None:
            raise Wrong(f"{on.strip() or 'your function'}: the check's calls of your function together ran for more "
                        f"than its limit of {total} s, {ended}{still}") from None
        raise Wrong(f"{on.strip() or 'your function'}: it ran for more than {seconds:g} s {ended}{still}") from None
    except SystemExit:
        raise Wrong(f"your function called exit(){on}; return a value instead") from None
    except (grading.ReplayError, _Raised) as exc:   # a record: what it did in the student's kernel
        raise Wrong(f"your function stopped{on} with {exc}") from None
    except Exception as exc:
        raise Wrong(f"your function stopped{on} with {type_name(exc)}: {message_of(exc)}") from None


@contextlib.contextmanager
def _fenced(who, should):
    """The fence around a learner's code a check runs (``call``: their function; ``Exercise.kept``: the cell that
    defines a piece, imported): within the block, what it prints and displays is cut after MAX_PRINTED characters,
    audit hooks, switch intervals, torch kernels, watchdogs, gc.freeze, os.setsid, starting another program
    (``_program_refused``), the changes of ``_CHANGES``, work left on the kernel's event loops (``_loop_refused``) or
    older thread pools (``_pools_refused``) and observers on older widgets (``_observers_refused``) are refused, and
    exit functions dropped; after it, its threads and processes are stopped, its figures closed, and torch_globals
    (process_state with it), course_constants and torch's default dtype put back. Then Wrong, one sentence about
    ``who`` ("your function on the toy"), when it left something behind: a thread or process (it ``should`` "return
    its answer" and leave nothing running), a refused change or program, or state no put-back undoes.
    An exception raised in the block goes through (after the put-backs), as does the block's return."""
    dtype, put_back, put_back_constants = _default_dtype(None), _once(torch_globals()), course_constants()
    threads, processes, started, hooks = threads_now(), _processes(), [], len(_HOOKS_REFUSED)
    watchdogs, kernels, later, learners = len(_WATCHDOGS), len(_KERNELS_REFUSED), len(_LATER_REFUSED), \
        _learners_thread(threads)
    _gone_owners_let_go()   # (held by a thread that ended before the check: not the learner's, let go of unsaid)
    changes, not_put_back, let_go = len(states.changes_refused), len(states.not_put_back), len(_LOCKS_LET_GO)
    programs = len(_PROGRAMS_REFUSED)
    budget = _PRINTED.get() or {"left": MAX_PRINTED, "said": False}
    printed = [_Capped(stream, budget) for stream in (sys.stdout, sys.stderr) if stream is not None]
    states.fenced_pids.append(os.getpid())
    try:
        if len(printed) == 2:
            sys.stdout, sys.stderr = printed
        sys.setswitchinterval, sys.addaudithook = _no_switch_interval, _no_audit_hook   # (put back with sys's streams)
        sys.setrecursionlimit = _no_recursion_limit   # (likewise)
        if resource is not None:   # (put back with the limits: limits_kept)
            resource.setrlimit, resource.prlimit = guarded_setrlimit, guarded_prlimit
        faulthandler.dump_traceback_later = _watchdog   # (put back with PATCHABLE's modules)
        gc.freeze = _no_freeze   # (likewise)
        os.setsid = no_setsid   # (likewise)
        for module, name, guarded in _UNAUDITED:   # (likewise)
            setattr(module, name, guarded)
        with _threads_started(started, learners), _adopting_orphans(), _descriptors_capped((sys.stdout, sys.stderr)), \
                _kernels_refused(), _exit_functions_dropped(), _figures_closed(), _loop_refused(learners), \
                _observers_refused(learners), _pools_refused(learners), _displays_capped(budget) as shown, \
                _peeking_refused() as peeked:
            printed.append(shown)
            try:
                yield
            finally:   # first of all: the check's own code runs on what it had (print, len, os, threading)
                put_back()
                processes = _stop_processes(processes)
                ended = threads
                threads = stop_threads(threads, started)   # (also when it raised or ran out of time)
                _gone_owners_let_go()   # (what its threads held as they ended or were stopped)
                _logging_again()
    finally:
        put_back()   # (if it was not yet: once only)
        put_back_constants()
        states.fenced_pids.remove(os.getpid())
        _default_dtype(dtype)   # torch.set_default_dtype inside it stays inside it
        if len(_WATCHDOGS) != watchdogs:   # a watchdog of the learner's would end the kernel in a later cell
            faulthandler.cancel_dump_traceback_later()
        if len(states.not_put_back) != not_put_back:   # (said whatever else it did: the kernel keeps it)
            raise Wrong(f"{who} changed {states.not_put_back[-1]}, which the check could not put back: "
                        "restart the kernel to undo it")
    _said_what_was_left_out(printed, who)
    if peeked:
        raise Seen(_peeked_sentence(peeked, f" ({who}) should compute its result"))
    _no_threads_left(*threads, who, should)
    held = [name for name, owner in _LOCKS_LET_GO[let_go:] if owner not in ended]   # (not a thread that ran before)
    if held:
        raise Wrong(_locks_sentence(list(dict.fromkeys(held)), who=f"a thread of {who}"))
    if processes:
        raise Wrong(f"{who} should {should} and leave nothing running, but it left "
                    f"{processes} process{'es' if processes > 1 else ''} of its own running (now stopped)")
    if len(_HOOKS_REFUSED) != hooks:
        raise Wrong(f"{who} added an audit hook (sys.addaudithook), which no one can remove: "
                    "it would run in every later cell, so a check does not allow it (it was not added)")
    if len(_PROGRAMS_REFUSED) != programs:
        raise Wrong(f"{who} tried to start another program ({_PROGRAMS_REFUSED[-1]}), which would run where the check "
                    "cannot see what it computes, so a check does not allow it (it was not started)")
    if len(_KERNELS_REFUSED) != kernels:
        raise Wrong(f"{who} registered a kernel with torch's dispatcher (torch.library), which would "
                    "change torch for every later cell, so a check does not allow it (it was not registered)")
    if len(_LATER_REFUSED) != later:
        raise Wrong(f"{who} {_LATER_REFUSED[-1]}, which would run in later cells, outside the check, so a check does "
                    "not allow it (it was refused)")
    if len(states.changes_refused) != changes:
        event, what = states.changes_refused[-1]
        raise Wrong(f"{who} called {event} in a way that would change {what}, so a check does not "
                    "allow it (it was refused)")


def _once(function):
    """``function``, made to run only the first time it is called (later calls do nothing)."""
    done = []

    def once():
        if not done:
            done.append(True)
            function()
    return once


MAX_KEPT_BYTES = 64 * 2**20   # a check copies a model it is given up to this size (a larger one: its check's own pristine)


def _small_models(values, strict=False):
    """The torch models (nn.Modules) among ``values`` and what they hold (``_reachable``: a list of dicts of models,
    chapter 04's ``runs``), whose weights take at most MAX_KEPT_BYTES: each check keeps them as they were
    (``model_kept``). strict: only models whose tensors are all in the CPU's memory, and a model whose
    weights cannot be listed is left out (values the check was not given: a notebook's globals)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    found, ids = [], set()
    for item in _reachable(values, torch.nn.Module):
        module = issubclass(type(item), torch.nn.Module) if strict else isinstance(item, torch.nn.Module)
        if not module or id(item) in ids:   # (strict: by its type alone, no __class__ of the learner's is read)
            continue
        try:
            tensors = item.state_dict().values()
            if strict and not all(t.device.type == "cpu" and t.layout == torch.strided and not t.is_quantized
                                  for t in tensors):
                continue
            size = sum(t.numel() * t.element_size() for t in tensors)
        except Exception:   # noqa: BLE001 (strict: a half-built module of the learner's)
            if not strict:
                raise
            continue
        if size <= MAX_KEPT_BYTES:
            found.append(item)
            ids.add(id(item))
    return found


def _reached(answer):
    """The values a learner's answer (a function, a ``functools.partial``, a bound method or a class)
    reaches by name, where it could change a model of the notebook's in place: its functions' globals
    (the cell's ``model``), closures and defaults, a partial's arguments, a bound method's object.
    Read by type (no code of the learner's runs); the globals' values in a list."""
    if issubclass(type(answer), grading.Recorder):   # the grader's record run: the function it runs
        answer = answer.function
    inside = [answer]
    for _ in range(10):
        if type(answer) is functools.partial:
            inside += [*answer.args, *answer.keywords.values()]
            answer = answer.func
        elif type(answer) is types.MethodType:
            inside.append(answer.__self__)
            answer = answer.__func__
        else:
            break
    functions = [answer] if type(answer) is types.FunctionType else []
    if _is_class(answer):   # the methods of the learner's own classes (not torch's, nor the course's)
        for kind in type.__dict__["__mro__"].__get__(answer)[:-1]:
            for value in type.__dict__["__dict__"].__get__(kind).values():
                value = value.__func__ if _one_of(type(value), (staticmethod, classmethod)) else value
                if type(value) is not types.FunctionType:
                    continue
                module = value.__module__   # (read as an attribute of a function: no code of the learner's runs)
                if not _course_module(module) and not (type(module) is str and module.startswith("torch")):
                    functions.append(value)
    spaces = {}
    for function in functions:
        spaces.setdefault(id(function.__globals__), function.__globals__)
        inside += [*(function.__defaults__ or ()), *(function.__kwdefaults__ or {}).values()]
        for cell in function.__closure__ or ():
            with contextlib.suppress(ValueError):   # (an empty cell)
                inside.append(cell.cell_contents)
    return inside + [value for space in spaces.values() for value in list(space.values())]


@contextlib.contextmanager
def model_kept(model, pristine=None, *, globals_kept=True):
    """Run a learner's code on ``model`` inside this: afterwards, also when the code raised or ran
    out of time, the model is as it was before. Every module's attributes (a hook, a replaced
    forward, the training flag, a swapped parameter, its class), its cfg's fields, torch's global
    module hooks, and every weight's and buffer's values, class, requires_grad, .grad, tensor hooks
    (``register_hook``) and attributes (``_tensor_kept``) are put back; a
    weight the code changed (found by comparing it with its copy, or by its SHA-256, which no change the code
    makes can keep: ``states.digest``, taken before and after the learner's code, so that a change the learner
    made between two checks stays) is copied back from a copy taken before (``pristine=None``: for a small
    model, the copy is limited to MAX_BYTES) or from ``pristine()``, a function that returns the model's
    original state dict (for a large model, whose copy would double its memory). The tensors the state dict leaves out (a non-persistent buffer, such as a
    sinusoidal model's PE table, and a tensor held as a plain attribute: ``_held_tensors``) are always
    copied, and put back from their copies. Not undone: changes to a class itself (a method replaced on
    Transformer). globals_kept=False: torch's global state (``torch_globals``) is left to the caller, which
    keeps it already (a check keeping many models: about 3 ms each saved)."""
    import torch

    if not isinstance(model, torch.nn.Module):
        fail(f"expected a torch model (an nn.Module), but got {shown(model)}")
    if pristine is not None and not callable(pristine):
        fail(f"pristine should be None or a function that returns the model's state dict, but got {shown(pristine)}")
    tensors, extra = _held_tensors(model)
    held = {**tensors, **extra}
    tensors_kept = [_tensor_kept(t) for t in held.values()]
    copied = held if pristine is None else extra
    check_bytes(sum(t.numel() * t.element_size() for t in copied.values()), "a copy of the model's weights",
                "give a pristine() that returns the original weights instead")
    put_back = torch_globals() if globals_kept else lambda: None   # torch's global module hooks among them
    parts = parts_of(model)   # every module and the cfg: their classes and attributes
    copies = {name: t.detach().clone() for name, t in copied.items()}
    digests = None if pristine is None else _digests(tensors, strong=True)   # (SHA-256s on up to 4 threads)
    if pristine is None:
        pristine = lambda: copies   # noqa: E731
    try:
        yield model
    finally:
        put_back_parts(parts)
        put_back()
        for put_back_tensor in tensors_kept:   # (a tensor class of the learner's would run its code on the reads below)
            put_back_tensor.kind()
        after = None if digests is None else _digests(tensors, strong=True)
        changed = [name for name, t in tensors.items()
                   if (digests is None and not _same(t, copies[name])) or digests is not None and after[name] != digests[name]]
        source = pristine() if changed else {}
        lacking = [name for name in changed if not isinstance(source.get(name) if isinstance(source, dict) else None, torch.Tensor)]
        if lacking:
            fail(f"pristine() should return the model's state dict with every weight, but it lacks {shown(lacking[0])}")
        originals = {name: source[name] for name in changed}
        originals.update({name: copies[name] for name, t in extra.items() if not _same(t, copies[name])})
        with torch.no_grad():
            for name, original in originals.items():
                t = held[name]
                if t.shape == original.shape and t.dtype == original.dtype:
                    t.copy_(original)
                else:
                    t.data = original.detach().clone()
        for put_back_tensor in tensors_kept:   # (after the values: a gradient must fit its tensor's)
            put_back_tensor()


def _held_tensors(model):
    """({name: tensor} of ``model``'s state dict, {name: tensor} of those it leaves out): each module's
    non-persistent buffers (``register_buffer(..., persistent=False)``: a sinusoidal model's PE) and the
    tensors it holds as plain attributes (``self.table = torch...``), each once, in the CPU's memory (a
    tensor elsewhere cannot be checksummed: left out)."""
    import torch

    tensors = dict(model.state_dict(keep_vars=True))
    seen, extra = {id(t) for t in tensors.values()}, {}
    for prefix, module in model.named_modules():
        own = vars(module)
        found = [*own.get("_buffers", {}).items(),
                 *((name, value) for name, value in own.items() if isinstance(value, torch.Tensor))]
        for name, t in found:
            if not isinstance(t, torch.Tensor) or id(t) in seen or t.device.type != "cpu" \
                    or t.layout != torch.strided or t.is_quantized:
                continue
            seen.add(id(t))
            extra[f"{prefix}.{name}" if prefix else name] = t
    return tensors, extra


def _collected(generation=1):
    """Collect the garbage a check's calls left (gc's generations up to ``generation``: 1, the young
    ones, takes a fraction of a millisecond; 2 takes all, which is as quick inside ``_garbage_fenced``),
    putting back whatever an object's ``__del__`` changes meanwhile: a learner's object in a reference
    cycle would otherwise run its ``__del__`` at some later cell's collection. The collection runs
    bounded (COLLECT_LIMIT s, ``_bounded``); each learner's call collects its own garbage first, in its
    own thread, within its time limit (``_Run.run``)."""
    put_back = torch_globals()
    try:
        with _peeking_refused():   # in a thread of its own: a learner's __del__ that never ends is stopped as
            _bounded(_COLLECT, (generation,), {}, COLLECT_LIMIT)   # their function is, and one that looks is refused
    except OutOfTime:
        pass
    finally:
        put_back()


@contextlib.contextmanager
def _garbage_fenced():
    """Run a check inside this: afterwards every object it made that is garbage is collected (and so
    a learner's ``__del__`` runs) inside the fence (``_collected``), also one that reached gc's oldest
    generation meanwhile (``gc.collect()`` in the learner's function, or a long call). To keep that
    full collection quick (a few ms, not the 50-100 ms of the whole kernel's), the objects made before
    the check are frozen (``gc.freeze``: left out of every collection) until it ends; not when some
    already are (a learner's ``gc.freeze()``): the collection then takes all that are not."""
    froze = not _FROZEN and not gc.get_freeze_count()
    if froze:
        _FROZEN.append(True)
        _FREEZE()
    try:
        yield
    finally:
        try:
            _collected(2)
        finally:
            if froze:
                _UNFREEZE()   # (put back in the oldest generation, where they were)
                _FROZEN.clear()


COLLECT_LIMIT = 2   # seconds the check's last collection of a learner's garbage may take
_COLLECT, _FREEZE, _UNFREEZE = gc.collect, gc.freeze, gc.unfreeze   # (the check's own: a learner's code may replace them)


def _no_freeze():
    """gc.freeze while a learner's function runs in a check: does nothing (its garbage frozen would
    escape the check's collection; freezing only spares the collector work)."""


def time_left(seconds):
    """(limit, whole): ``seconds``, or what is left of the check's whole time when that is less (``whole``
    is then that time in seconds, else None). A check's whole time is CHECK_TIME_LIMIT, or
    LONG_CHECK_TIME_LIMIT for a call that may run longer than TIME_LIMIT (the real model's)."""
    started = _CHECK_STARTED.get()
    if started is None:
        return seconds, None
    whole = CHECK_TIME_LIMIT if seconds <= TIME_LIMIT else max(CHECK_TIME_LIMIT, LONG_CHECK_TIME_LIMIT)
    left = started + whole - time.monotonic()
    if left < seconds:
        return max(left, 0.0), whole
    return seconds, None


def _bounded(function, args, kwargs, seconds, screen=None):
    """``function(*args, **kwargs)`` run in a thread of its own (``_Run``), waited for at most ``seconds``.

    Returns what it returns (``screen(out)`` run on it there first: the Wrong it raises is raised here);
    raises what it raises as ``_standing_for`` makes it (``exit()`` as SystemExit); past ``seconds``
    (or on Ctrl-C) it is stopped and OutOfTime is raised here, with True as its argument when
    the function has not ended yet; ended, but more than HELD_SLACK s past ``seconds``, OutOfTime(HELD) is raised:
    one call into C kept Python's interpreter lock all along, so that nothing could run to stop it on time."""
    run, started = _Run(function, args, kwargs, screen), time.monotonic()
    run.start()
    try:
        run.join(seconds)
    except BaseException:   # Ctrl-C in the check's thread: stop the function too
        run.stop()
        raise
    if run.is_alive():
        grading.timed_out(run)   # (under the grader, recorded as stopped too, whatever it returns)
        raise OutOfTime(run.stop())
    if seconds is not None and time.monotonic() - started > seconds + HELD_SLACK:
        grading.timed_out(run)
        raise OutOfTime(HELD)   # (its answer is not taken: it came after its limit)
    if "raised" in run.box:
        raise run.box["raised"]
    return run.box.get("out")


def _standing_for(raised):
    """A new exception of the course's own that stands for ``raised`` (what a learner's function raised),
    holding only its message, read here (a learner's ``__str__`` may never return): made in the function's
    thread, so that ``raised``, its traceback and what its arguments hold are dropped there, within the time
    limit. SystemExit, a CourseInputError and a grading.ReplayError keep their kind; anything else becomes
    _Raised ("ValueError: ..."; its own KeyboardInterrupt is no Ctrl-C), with an OSError's number and text
    kept as its cause (``Exercise._kept`` tells the folder's errors by them)."""
    message = message_of(raised)
    for kind in (SystemExit, CourseInputError, grading.ReplayError):
        if isinstance(raised, kind):
            return kind(message)
    stand_in = _Raised(f"{type_name(raised)}: {message}".rstrip(": "))
    if isinstance(raised, OSError):
        errno, text = raised.errno, raised.strerror
        stand_in.__cause__ = OSError(errno if type(errno) is int else None, text if type(text) is str else None)
    return stand_in


def _learners_thread(before):
    """A function saying whether a thread (a threading.Thread) runs a learner's code in a fence that began with the
    threads ``before`` (``threads_now``): a ``_Run`` (the learner's function), or any thread that did not run then
    and is neither the check's own (``_course_thread``) nor one a kernel's library started (``_library_thread``)."""
    def learners(thread):
        return isinstance(thread, _Run) or before.get(thread.ident, _NOT_BEFORE) is not thread and \
            not _course_thread(thread) and not _library_thread(thread)
    return learners


def _no_threads_left(left, running, who, should):
    """Wrong when ``who`` (the learner's function, ``_fenced``) left ``left`` threads of its own running
    (``stop_threads`` stopped them; ``running`` of them still run)."""
    if left:
        raise Wrong(f"{who} should {should} and leave nothing running, but it left "
                    f"{left} thread{'s' if left > 1 else ''} of its own running " +
                    ("(now stopped)" if not running else "that has not stopped yet (a long C call, or an except: "
                     "that catches everything?): restart the kernel if the notebook slows down"))


@contextlib.contextmanager
def _descriptors_capped(streams):
    """While a learner's function runs, file descriptors 1 and 2 each lead to a pipe: what it writes to
    them itself (``os.write(1, ...)``, a C library's printf) passes by sys.stdout and sys.stderr, and
    in a notebook reaches the page whole (35 MB of it would stall the browser). A thread reads each
    pipe and keeps its first 4 x MAX_PRINTED bytes; after the call they are written to ``streams``
    (the check's capped stdout and stderr, which cut them as they cut printing), and the rest is
    counted there. Where the descriptors cannot be moved (none open), nothing is done."""
    for flushed in streams:   # the kernel's own buffered text goes where it was going
        getattr(flushed, "flush", lambda: None)()
    try:
        saved = [os.dup(1), os.dup(2)]
    except OSError:
        yield
        return
    pipes = [os.pipe(), os.pipe()]
    kept, dropped = [bytearray(), bytearray()], [0, 0]

    def drain(i):
        while chunk := os.read(pipes[i][0], 1 << 16):
            room = max(4 * MAX_PRINTED - len(kept[i]), 0)
            kept[i].extend(chunk[:room])
            dropped[i] += max(len(chunk) - room, 0)

    readers = [own_thread(functools.partial(drain, i), "reads what a learner's function writes to a descriptor")
               for i in (0, 1)]
    try:
        os.dup2(pipes[0][1], 1)
        os.dup2(pipes[1][1], 2)
        yield
    finally:
        for stream in streams:   # what it printed and Python has not written yet goes to the pipes, not after them
            getattr(stream, "flush", lambda: None)()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, pipes[0][1], pipes[1][1]):
            os.close(fd)
        for i, (reader, stream) in enumerate(zip(readers, streams)):
            reader.join(1)   # (a process of its own that still holds the pipe: what it writes later is dropped)
            if not reader.is_alive():
                os.close(pipes[i][0])
            if kept[i] and stream is not None:
                stream.write(kept[i].decode("utf-8", errors="replace"))
            if dropped[i] and hasattr(stream, "dropped"):
                stream.dropped += dropped[i]


MAX_PRINTED = 20_000   # characters of a learner's function's printing one check shows (the rest is counted)
MAX_IMAGES, MAX_IMAGE_SIZE = 5, 2 * 2**20   # displays holding an image (a plot's plt.show()) one check shows, and the
# characters each may send at most: counted apart from the printing (one PNG is past MAX_PRINTED's characters of base64)
_PRINTED = contextvars.ContextVar("printed", default=None)   # the check's {"left": characters, "said": bool}


class _Capped:
    """A stream (sys.stdout or sys.stderr) that passes on what a learner's function prints until the
    check's MAX_PRINTED characters are shown, and counts the rest: a function that prints megabytes
    would fill the page and stall the browser. ``budget``: the check's, shared by its calls."""

    def __init__(self, stream, budget):
        self.stream, self.budget, self.dropped = stream, budget, 0

    def write(self, text):
        if type(text) is not str:
            return self.stream.write(text)   # what the stream itself says of it
        left = max(self.budget["left"], 0)
        if len(text) > left:
            self.dropped += len(text) - left
            text = text[:left]
        self.budget["left"] -= len(text)
        return self.stream.write(text) if text else 0

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):   # flush, encoding, isatty, ...: the stream's own
        return getattr(self.stream, name)


class _Shown:
    """What a learner's function displayed (IPython's ``display``) in a check, counted as ``_Capped`` counts its printing
    (``budget``: the check's, shared with its printing; ``dropped``: characters not shown; ``images``: displays of an
    image not shown)."""

    def __init__(self, budget):
        self.budget, self.dropped, self.images = budget, 0, 0


def _payload_size(data):
    """The characters a display's ``data`` ({mime type: its text, bytes or JSON}) sends to the page."""
    if not isinstance(data, dict):
        return 0   # (the publisher's own error says what it should be)
    return sum(len(value) if isinstance(value, (str, bytes)) else len(repr(value)) for value in data.values())


@contextlib.contextmanager
def _displays_capped(budget):
    """While a learner's function runs in a kernel, what it displays (``display()``, a plot's ``plt.show()``: IPython's
    display publisher, which sends to the page directly, past sys.stdout) is shown while it fits in what is left of
    the check's MAX_PRINTED characters (``budget``, which its printing shares), and left out, counted, from the first
    display that does not on; yields the ``_Shown`` that counts it (for ``_said_what_was_left_out``). A display holding
    an image (a mime type image/...: a figure's plt.show()) is counted apart: the check's first MAX_IMAGES of them, each
    of at most MAX_IMAGE_SIZE characters in all, are shown, the rest left out and counted. The publisher's
    ``publish`` is put back afterwards. Outside a kernel a display is printed (and cut as printing is): nothing done."""
    shown = _Shown(budget)
    budget.setdefault("images", MAX_IMAGES)   # (the check's, shared by its calls as its characters are)
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    publisher = getattr(shell, "display_pub", None)
    if getattr(shell, "kernel", None) is None or not callable(getattr(publisher, "publish", None)):
        yield shown
        return
    original, saved = publisher.publish, vars(publisher).get("publish", _NOT_BEFORE)

    def publish(data, *args, **kwargs):
        size = _payload_size(data)
        if isinstance(data, dict) and any(type(kind) is str and kind.startswith("image/") for kind in data):
            if budget["images"] <= 0 or size > MAX_IMAGE_SIZE:
                shown.images += 1
                return None
            budget["images"] -= 1
            return original(data, *args, **kwargs)
        if size > max(budget["left"], 0):
            budget["left"], shown.dropped = 0, shown.dropped + size   # (nothing shown after it: the rest is left out)
            return None
        budget["left"] -= size
        return original(data, *args, **kwargs)
    publisher.publish = publish
    try:
        yield shown
    finally:
        if saved is _NOT_BEFORE:
            vars(publisher).pop("publish", None)
        else:
            publisher.publish = saved


_LATER_REFUSED = []   # one entry per way a learner's function tried to leave work for later cells (each refused): what
_LOOP_METHODS = ("call_soon", "call_soon_threadsafe", "call_later", "call_at", "create_task", "run_in_executor",
                 "add_reader", "add_writer", "add_signal_handler", "set_exception_handler", "set_task_factory",
                 "set_default_executor")   # the ways to leave work on an asyncio loop that runs after the call


def _refusing(method, learners, what, refusal):
    """``method``, made to refuse a learner's code (``learners`` of the current thread) with RuntimeError(``refusal``),
    noting ``what`` it tried in _LATER_REFUSED for its check to say; anyone else's call goes through."""
    def refused(*args, **kwargs):
        if learners(_CURRENT_THREAD()):
            _LATER_REFUSED.append(what)
            raise RuntimeError(refusal)
        return method(*args, **kwargs)
    return refused


def _kernel_loops():
    """The asyncio loops the kernel's threads run (tornado's record of its IOLoops: the kernel's main one, its control,
    IOPub and shell channel threads'); none outside a kernel (tornado not imported)."""
    ioloop = getattr(sys.modules.get("tornado.ioloop"), "IOLoop", None)
    loops = vars(ioloop).get("_ioloop_for_asyncio", {}) if isinstance(ioloop, type) else {}
    return [loop for loop in list(loops) if not loop.is_closed()]


@contextlib.contextmanager
def _loop_refused(learners):
    """While a learner's function runs, the kernel's event loops (``_kernel_loops``) refuse to take work from a learner's
    code (``learners``, of a thread): a callback or task left there (``kernel.io_loop.asyncio_loop.call_soon_threadsafe``,
    ``call_later``, tornado's ``add_callback``, which calls them) would run in the kernel's threads in later cells,
    outside every put-back, again and again if it reschedules itself. Each of ``_LOOP_METHODS`` is set on each loop
    itself, and taken off afterwards; the kernel's own calls go through. (Not seen: a method saved before the check,
    or the loop's private queues changed directly.)"""
    loops = [(loop, vars(loop).get(name, _NOT_BEFORE), name) for loop in _kernel_loops() for name in _LOOP_METHODS
             if hasattr(loop, name)]
    for loop, _, name in loops:
        setattr(loop, name, _refusing(getattr(loop, name), learners, f"left work on the kernel's event loop ({name})",
                                      f"a check does not allow {name} on the kernel's event loop while it runs your "
                                      "function: it would run in later cells, outside the check"))
    try:
        yield
    finally:
        for loop, saved, name in loops:
            if saved is _NOT_BEFORE:
                vars(loop).pop(name, None)
            else:
                setattr(loop, name, saved)


@contextlib.contextmanager
def _pools_refused(learners):
    """While a learner's function runs, a thread pool made before the call (concurrent.futures' ThreadPoolExecutor: a
    notebook's, or an asyncio loop's default executor, which ``run_in_executor`` hands work to) refuses work from a
    learner's code (``learners``, of a thread): its threads ran before the call, so the work would run after the check
    answered, outside its time limit and every put-back. ``submit`` (which ``map`` calls) is refused with RuntimeError,
    said by the check; on a pool the call made itself (told by the id noted as it is made) it goes through: its threads
    are the learner's, stopped after the call. The methods are put back afterwards. (Not seen: a pool's ``submit`` saved
    before the check, or its work queue used directly.)"""
    pool = getattr(sys.modules.get("concurrent.futures.thread"), "ThreadPoolExecutor", None)
    if not isinstance(pool, type) or not {"__init__", "submit"} <= vars(pool).keys():   # (not imported: no pool yet)
        yield
        return
    saved, made = {name: vars(pool)[name] for name in ("__init__", "submit")}, set()

    def made_now(self, /, *args, **kwargs):
        made.add(id(self))
        return saved["__init__"](self, *args, **kwargs)

    refuse = _refusing(saved["submit"], learners, "handed work to a thread pool made before the check "
                       "(ThreadPoolExecutor.submit, map or run_in_executor)",
                       "a check does not allow work handed to a thread pool made before it while it runs your function: "
                       "it would run after the check, outside its time limit")

    def submit(self, /, *args, **kwargs):
        return (saved["submit"] if id(self) in made else refuse)(self, *args, **kwargs)
    pool.__init__, pool.submit = made_now, submit
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(pool, name, method)


@contextlib.contextmanager
def _observers_refused(learners):
    """While a learner's function runs, a learner's code (``learners``, of a thread) may not add or remove an observer
    (traitlets' ``observe``/``unobserve``, which ``link`` and ``interact`` use; ipywidgets' ``on_click``/``on_msg``)
    on a widget or other traitlets object made before the call (a notebook's explorer, IPython's shell): it would run
    in later cells, at a slider's move, outside every put-back (or take an explorer's own away). Refused with
    RuntimeError, said by the check; on an object the call made itself (told by the id noted when traitlets sets it
    up: an older one, alive meanwhile, never has it) it goes through. The methods are put back afterwards. (Not
    seen: an object's notifier lists changed directly.)"""
    traitlets = sys.modules.get("traitlets")
    has_traits = getattr(traitlets, "HasTraits", None)
    if not isinstance(has_traits, type):
        yield
        return
    patched = [(has_traits, name) for name in ("_add_notifiers", "_remove_notifiers")]
    dispatcher = getattr(sys.modules.get("ipywidgets"), "CallbackDispatcher", None)
    if isinstance(dispatcher, type) and "register_callback" in vars(dispatcher):
        patched.append((dispatcher, "register_callback"))
    saved = {(owner, name): vars(owner)[name] for owner, name in patched + [(has_traits, "setup_instance")]}
    made = set()   # the ids of the objects set up meanwhile

    def setup_instance(self, /, *args, **kwargs):
        made.add(id(self))
        return saved[has_traits, "setup_instance"](self, *args, **kwargs)

    def refusing(method, name):
        refuse = _refusing(method, learners, f"changed the observers of a widget made before the check ({name})",
                           "a check does not allow observers added to (or taken from) a widget made before it while it "
                           "runs your function: they would run in later cells, outside the check")

        def refused(self, /, *args, **kwargs):
            return (method if id(self) in made else refuse)(self, *args, **kwargs)
        return refused
    has_traits.setup_instance = setup_instance
    for owner, name in patched:
        setattr(owner, name, refusing(saved[owner, name], name))
    try:
        yield
    finally:
        for (owner, name), method in saved.items():
            setattr(owner, name, method)


def _said_what_was_left_out(printed, who):
    """One line, once a check, after ``who`` (``_fenced``) printed or displayed more than it shows (``printed``: its
    ``_Capped`` streams and its ``_Shown``)."""
    dropped = sum(stream.dropped for stream in printed)
    if dropped and printed and not printed[0].budget["said"]:
        printed[0].budget["said"] = True
        print(f"\n(what {who} printed or displayed went past the {MAX_PRINTED:,} characters a check shows: "
              "the rest was left out)")
    images = sum(getattr(stream, "images", 0) for stream in printed)
    if images and not printed[0].budget.get("images said"):
        printed[0].budget["images said"] = True
        print(f"\n(the images {who} displayed went past the {MAX_IMAGES} images of at most "
              f"{MAX_IMAGE_SIZE // 2**20} MB each a check shows: the rest was left out)")


def _no_recursion_limit(limit):
    """sys.setrecursionlimit while a learner's function runs in a check: a low limit stops the check's own thread, a
    high one lets a deep recursion overflow C's stack and end the kernel."""
    raise RuntimeError("a check does not allow sys.setrecursionlimit: a low limit would stop the check itself, a high "
                       "one lets a deep recursion crash the kernel")


def _no_switch_interval(interval):
    """sys.setswitchinterval while a learner's function runs in a check: a long interval would keep
    the check's own thread from running, and with it the time limit."""
    raise RuntimeError("a check does not allow sys.setswitchinterval: it would hold off the check's time limit")


_WATCHDOGS = []   # one entry per faulthandler watchdog a learner's function armed (each cancelled after its call)
_ARM_WATCHDOG = faulthandler.dump_traceback_later


def _watchdog(*args, **kwargs):
    """faulthandler.dump_traceback_later while a learner's function runs in a check: armed, and noted,
    so that it is cancelled when the call ends (one the notebook armed itself is left alone)."""
    _WATCHDOGS.append(args)
    return _ARM_WATCHDOG(*args, **kwargs)


_HOOKS_REFUSED = []   # one entry per audit hook a learner's function tried to add (each refused)


def _no_audit_hook(hook):
    """sys.addaudithook while a learner's function runs in a check: an audit hook can never be removed,
    so it could change what every later check sees (it is refused, and the check says so)."""
    _HOOKS_REFUSED.append(hook)
    raise RuntimeError("a check does not allow sys.addaudithook: an audit hook could never be removed")


_PEEKS = frozenset({"sys._current_frames", "sys._current_exceptions", "gc.get_objects", "gc.get_referrers",
                    "gc.get_referents"})   # the audit events of the ways to reach another thread's frames or objects
_WATCHING = ()   # one entry per check (and call) running now, innermost last: (its thread's ident, [events]); a tuple
# of tuples, rebound only by _peeking_refused (``_watching``): a learner's code cannot empty or fill it in place
_IDENT = threading.get_ident   # (the check's own: a learner's code may replace threading.get_ident)


def _peeked(event, guard):
    """What the audit hook does on an event of ``_PEEKS``: while a check runs, in any thread but a check's own (the
    learner's function, a thread it starts, a forked child) it notes ``event`` in every running check's "events",
    for it to say (``_no_courses_own``), and raises RuntimeError; elsewhere, nothing. It keeps a learner's code
    from reading or changing the check's own objects (its expected values wait in the frames of the check's
    thread). The learner's own frames stay in reach (``sys._getframe``, as warnings and logging use it). Out of
    reach of a hook: ctypes, which reads memory directly (``ctypes.pythonapi``), and a learner's code that rebinds
    this module's own names (``exercises._WATCHING = ()``: put back after its call, with the module's other names)."""
    if not _in_learners_code():
        return
    for _, events in _WATCHING:
        events.append(event)
    raise RuntimeError(f"a check does not allow {event}() while it runs your function: it reaches the check's own state")


def _in_learners_code():
    """Whether a check runs now and this thread is not a check's own (so runs a learner's code: ``_peeked``)."""
    watching = _WATCHING   # (read once: a check in another thread may rebind it meanwhile)
    if not watching:
        return False
    ident = _IDENT()
    return not any(thread == ident for thread, _ in watching)


_CHANGES = types.MappingProxyType({
    "resource.setrlimit": "the kernel's resource limits out of the check's sight (a hard limit lowered could never be "
                          "raised again)",
    "resource.prlimit": "a process's resource limits out of the check's sight (a hard limit lowered could never be "
                        "raised again)",
    "os.putenv": "the environment of every later subprocess behind os.environ's back",
    "os.unsetenv": "the environment of every later subprocess behind os.environ's back"})
# the audit events of the ways to change the process for good that no put-back can undo, and what each changes (read
# only: a learner's code cannot take one out, which would leave a refused change unsaid)
_CHECKED_CODES = (os._Environ.__setitem__.__code__, os._Environ.__delitem__.__code__, guarded_setrlimit.__code__,
                  guarded_prlimit.__code__)
# the code allowed to make those calls: os.environ's (which a check puts back) and the checked resource functions


def _changed(event, guard):
    """What the audit hook does on an event of ``_CHANGES``: in a learner's code in a check (``_in_learners_code``)
    it notes ``event`` in states.changes_refused and raises RuntimeError; elsewhere, and when the call comes from
    _CHECKED_CODES (``os.environ["TZ"] = ...``, which the check puts back, or ``resource.setrlimit``, which is
    ``guarded_setrlimit`` in a check), nothing."""
    if not _in_learners_code():
        return
    caller = sys._getframe(1)   # (the property and the hook are C: the frame that called os.putenv)
    if caller.f_code in _CHECKED_CODES and caller.f_locals.get("self", os.environ) is os.environ:   # (os.environ's
        return                                                                                  # own, no stand-in)
    states.changes_refused.append((event, _CHANGES[event]))
    raise RuntimeError(f"a check does not allow {event}() while it runs your function: it changes {_CHANGES[event]}")


_PROGRAMS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.startfile",
                       "pty.spawn"})
# the audit events of the ways to start another program (os.popen and subprocess's run, call and check_output go
# through subprocess.Popen; os.spawnv's and pty.spawn's exec in the child they fork too)
_PROGRAMS_REFUSED = []   # one entry per program a learner's code tried to start while a check ran (each refused)


def _program_refused(event, guard=None):
    """What the audit hook does on an event of ``_PROGRAMS`` (and ``_UNAUDITED``'s stand-ins on a call): in a learner's
    code in a check (``_in_learners_code``: its threads, and the processes they fork) it notes ``event`` in
    _PROGRAMS_REFUSED and raises RuntimeError before the program starts; elsewhere, nothing. A program runs out of
    reach of every guard of the check (``_disarmed``, ``_tripwired`` and this hook watch the kernel's process and
    its forks only): a new Python there could run the course's own ``helpers.reference.attention`` unseen. Forking
    without exec goes through (the check watches a forked child). Out of reach: ctypes (``libc.system``), and a
    C function that starts one saved before the check (``_posixsubprocess.fork_exec``)."""
    if not _in_learners_code():
        return
    _PROGRAMS_REFUSED.append(event)
    raise RuntimeError(f"a check does not allow starting another program while it runs your function: {event}() "
                       "would run one where the check cannot see what it computes")


def _program_guarded(event, function):
    """``function`` (one that starts a program with no audit event of its own), refusing first as
    ``_program_refused`` does."""
    @functools.wraps(function)
    def guarded(*args, **kwargs):
        _program_refused(event)
        return function(*args, **kwargs)
    return guarded


_UNAUDITED = tuple((module, name, _program_guarded(event, getattr(module, name)))
                   for module, name, event in ((_posixsubprocess, "fork_exec", "_posixsubprocess.fork_exec"),
                                               (os, "_spawnvef", "os.spawnv"))
                   if hasattr(module, name))
# (module, name, stand-in) of each function that starts a program without an audited event, which a check puts in
# place while a learner's code runs (``_fenced``; put back with PATCHABLE's modules): _posixsubprocess.fork_exec,
# which multiprocessing's spawn and forkserver call directly, and os._spawnvef, by which os.spawnv and its kin fork
# and exec in the child (a refusal there would not reach the check)


class _PeekGuard:
    """The audit hook's table: a property per event of ``_PEEKS`` that runs ``_peeked``, per event of ``_CHANGES``
    that runs ``_changed``, and per event of ``_PROGRAMS`` that runs ``_program_refused``. The hook is
    ``getattr(guard, event, args)``, all of it in C: every other
    event (a course's check reads ``frame.f_code`` some 100,000 times, each an audited event) finds no attribute
    and costs no Python call (about 0.07 µs an event: some 13 ms of chapter 02's attention_head check, where a
    Python hook took 45 ms)."""


for _event in _PEEKS:
    setattr(_PeekGuard, _event, property(functools.partial(_peeked, _event)))
for _event in _CHANGES:
    setattr(_PeekGuard, _event, property(functools.partial(_changed, _event)))
for _event in _PROGRAMS:
    setattr(_PeekGuard, _event, property(functools.partial(_program_refused, _event)))
del _event


@contextlib.contextmanager
def _peeking_refused():
    """Within the block, the audit hook (``_peeked``) refuses a learner's code the ways into other threads' frames and
    objects (all threads but this one); yields the list of the events it refused meanwhile."""
    entry = (_IDENT(), [])
    _watching(lambda watching: watching + (entry,))
    try:
        yield entry[1]
    finally:   # this very entry (a nested check's may be equal to it)
        _watching(lambda watching: tuple(each for each in watching if each is not entry))


def _watching(change):
    """Rebind _WATCHING to ``change(_WATCHING)``, a new tuple: made first, then stored only if no other thread's check
    rebound it meanwhile (the test and the store call nothing, so no thread switch comes between them), else again."""
    global _WATCHING
    while True:
        before = _WATCHING
        after = change(before)
        if _WATCHING is before:
            _WATCHING = after
            return


sys.addaudithook(functools.partial(getattr, _PeekGuard()))   # hook(event, args): getattr(guard, event, args)


_KERNELS_REFUSED = []   # one entry per torch.library registration a learner's function tried (each refused)
_DISPATCH_METHODS = ("def_", "def_legacy", "def_name_t_t", "def_schema_t_t", "define", "fallback", "fallback_fallthrough",
                     "impl", "impl_t_t", "impl_with_aoti_compile", "register_ad_inplace_or_view_fallback")
# the methods by which a torch.library.Library (its C++ handle, torch._C._DispatchModule) registers with the dispatcher
_TORCH_LIBRARY_API = ("library.py", "_library" + os.sep, "_custom_op" + os.sep, "_custom_ops.py")   # torch's files of that API


@contextlib.contextmanager
def _kernels_refused():
    """While a learner's function runs, a registration with torch's dispatcher (``torch.library.Library(...).impl``,
    ``torch.library.custom_op``: it would change ``torch.softmax`` for every later cell and check, and no
    put-back of Python attributes undoes it) is refused with RuntimeError and noted in _KERNELS_REFUSED;
    one a package makes itself (``_from_learner``: torch's ``torch.func.vmap`` registers its batching rules on
    first use) goes through. Nothing when torch was never imported. (Not seen: a registration through a method
    of torch._C._DispatchModule saved before the check, or a compiled library loaded with torch.ops.load_library.)"""
    torch = sys.modules.get("torch")
    module = getattr(getattr(torch, "_C", None), "_DispatchModule", None)
    if module is None:
        yield
        return
    saved = {name: vars(module)[name] for name in _DISPATCH_METHODS if name in vars(module)}
    api = _torch_library_files(torch.__file__)

    def refusing(name, method):
        def registers(*args, **kwargs):
            if _from_learner(sys._getframe(1), api):
                _KERNELS_REFUSED.append(name)
                raise RuntimeError("a check does not allow torch.library registrations: a kernel registered in a "
                                   "check would change torch for every later cell")
            return method(*args, **kwargs)
        return registers
    for name, method in saved.items():
        setattr(module, name, refusing(name, method))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(module, name, method)


@functools.lru_cache(maxsize=2)
def _torch_library_files(torch_file):
    """The files and folders of torch.library's API (``_TORCH_LIBRARY_API``) beside ``torch_file`` (torch's __init__)."""
    return tuple(os.path.join(os.path.dirname(torch_file), name) for name in _TORCH_LIBRARY_API)


def _from_learner(frame, skipped=()):
    """Whether the call being made in ``frame`` (a frame object: the caller's) comes from a learner's code:
    the first frame from it on whose file is not one of ``skipped`` (file names or folders: the called API's
    own) lies outside the Python installation (``_INSTALLED``). A package's own call, made when it is first
    imported or used (``torch.func.vmap`` registers its batching rules, ``import logging`` its exit
    function), is the package's."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not (skipped and filename.startswith(skipped)):
            return not filename.startswith(_INSTALLED)
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _exit_functions_dropped():
    """While a learner's function runs, ``atexit.register`` called from its code registers nothing (it returns the
    function, as it does): a function registered in a check would run when the kernel stops, once for each call
    (a package's own, ``_from_learner``, is registered). One registered by another way (``from atexit import
    register`` before the check) is taken back after the call (``_exit_functions_taken_back``)."""
    import atexit

    register, count = atexit.register, getattr(atexit, "_ncallbacks", lambda: 0)
    before, passed = count(), []

    def dropped(function, /, *args, **kwargs):
        if not callable(function):
            raise TypeError("the first argument must be callable")
        if not _from_learner(sys._getframe(1)):   # a package's own (one imported meanwhile): registered
            passed.append(function)
            return register(function, *args, **kwargs)
        return function
    atexit.register = dropped
    try:
        yield
    finally:
        atexit.register = register
        if count() > before + len(passed):
            _exit_functions_taken_back(count() - before - len(passed))


def _exit_functions_taken_back(added):
    """Unregister the last ``added`` functions atexit holds (the newest), each one alone: atexit.unregister
    compares each function it holds, in order, with the one it is given, so a stand-in that is equal only to
    the last ``added`` of them takes back exactly those (and not an earlier registration of the same function)."""
    import atexit

    class StandIn:
        def __init__(self, equal):
            self.equal, self.seen = equal, 0

        def __eq__(self, other):
            self.seen += 1
            return self.equal(self.seen - 1)
        __hash__ = None
    counted = StandIn(lambda i: False)
    atexit.unregister(counted)
    held = counted.seen
    atexit.unregister(StandIn(lambda i: i >= held - added))


@contextlib.contextmanager
def _figures_closed():
    """The pyplot figures a learner's function opens (a debugging plot left in it) are closed after the call,
    as those of a kept file (helpers.learner's): else each call leaves one open, shown under the check's line."""
    before = learner._figures()
    try:
        yield
    finally:
        learner._close_new_figures(before)


@contextlib.contextmanager
def _adopting_orphans():
    """While the learner's function runs, the processes its children leave behind (a double fork, a
    daemon) become this process's children (Linux's PR_SET_CHILD_SUBREAPER), so that
    ``_stop_processes`` finds and stops them too; elsewhere nothing changes."""
    prctl = getattr(ctypes.CDLL(None), "prctl", None) if sys.platform.startswith("linux") else None
    was = ctypes.c_int(0)
    adopting = prctl is not None and prctl(37, ctypes.byref(was), 0, 0, 0) == 0 \
        and prctl(36, 1, 0, 0, 0) == 0   # 37: PR_GET_CHILD_SUBREAPER, 36: PR_SET_CHILD_SUBREAPER
    try:
        yield
    finally:
        if adopting:
            prctl(36, was.value, 0, 0, 0)


def _children():
    """The ids of this process's child processes (Linux's /proc; an empty set elsewhere)."""
    import glob

    found = set()
    for path in glob.glob(f"/proc/{__import__('os').getpid()}/task/*/children"):
        try:
            with open(path) as file:
                found.update(int(pid) for pid in file.read().split())
        except OSError:   # a thread that ended meanwhile
            pass
    return found


def _processes():
    """The ids of every process now (Linux's /proc; an empty set elsewhere)."""
    import os

    try:
        return {int(name) for name in os.listdir("/proc") if name.isdigit()}
    except OSError:
        return set()


def _stop_processes(before):
    """Stop (SIGKILL) each process of ours that did not exist before the learner's function ran
    (``before``: ``_processes()`` then) and that it left running (``os.fork()``, a
    ``subprocess.Popen`` not waited for, a double fork's grandchild: see ``_adopting_orphans``; an
    older process of the notebook's own, orphaned meanwhile, is left alone); return how many. Ours:
    its parent is this process, read from /proc/<pid>/stat (a child is listed under the thread that
    started it, and that thread, the learner's, may be ending just now); one that has ended is
    only collected."""
    import os
    import signal

    left = []
    for pid in sorted(_processes() - before):
        try:
            with open(f"/proc/{pid}/stat") as file:
                state, parent = file.read().rsplit(")", 1)[1].split()[:2]
        except (OSError, ValueError, IndexError):   # ended meanwhile
            continue
        if int(parent) != os.getpid():
            continue
        try:
            if state != "Z":
                os.kill(pid, signal.SIGKILL)
                left.append(pid)
            os.waitpid(pid, 0)
        except (OSError, ChildProcessError):   # ended meanwhile, or not ours to wait for
            pass
    return len(left)


class _Raised(Exception):
    """A learner's function raised a BaseException of its own (KeyboardInterrupt, GeneratorExit)."""


def _locks_let_go():
    """Let go of the process-wide locks a learner's code left taken when it ended, in the thread that ran it
    (``_Run.run``, once nothing more is raised in it): every later cell that logs, imports or starts a thread,
    and the check's own put-back (``process_state``: logging.root.setLevel) and its next call's thread, would wait
    for them for ever. Those of ``_process_locks`` (``_left_taken``), importlib's per-module locks
    (``_module_locks_let_go``) and the import lock (``_imp.acquire_lock()``, let go of as many times as this thread
    took it). Returns the names of those let go of."""
    import _imp

    let_go = [name for name, lock in _process_locks() if _left_taken(lock)] + _module_locks_let_go()
    taken = 0
    while _imp.lock_held():
        try:
            _imp.release_lock()
        except RuntimeError:   # another thread's (importing meanwhile): not left behind by this one
            break
        taken += 1
    if taken:
        let_go.append("the import lock (_imp.acquire_lock())")
    return let_go


def _locks_sentence(let_go, who="your code"):
    """What a check says of the locks ``_locks_let_go`` let go of (``who`` held them)."""
    them = "them" if len(let_go) > 1 else "it"
    named = " and ".join([", ".join(let_go[:-1]), let_go[-1]] if len(let_go) > 1 else let_go)
    return (f"{who} ended holding {named}: every later cell that needs {them}, and the check itself, would wait "
            f"for {them} for ever; the check let go of {them} (release each lock you take, or take it in a with block)")


class _Run(_Thread):
    """A learner's function in a thread of its own, with the caller's gradient mode; ``stop()``
    stops it (states.Stoppable: OutOfTime raised in it again and again, until it ends). A process-wide lock
    it left taken is let go of as it ends, and said (``_locks_let_go``): Wrong, put in ``box``."""

    def __init__(self, function, args, kwargs, screen=None):
        super().__init__(name="a learner's function in a check", daemon=True)
        _OWN_THREADS.add(self)   # (the course's: no check stops it as a thread a learner's code left)
        self.function, self.args, self.kwargs, self.screen, self.box = function, args, kwargs, screen, {}
        torch = sys.modules.get("torch")
        self.grad = torch.is_grad_enabled() if torch is not None else None
        self.stoppable = Stoppable(OutOfTime)

    def run(self):
        try:
            self.stoppable.call(self.call)
        except OutOfTime:   # one that arrived while handing over
            pass
        let_go = _locks_let_go()   # (in this thread, whose RLocks they are; its own end needs threading's)
        if let_go:
            self.box["raised"] = Wrong(_locks_sentence(let_go))

    def call(self):
        """The function called; what it returns, if ``screen`` takes it, goes in ``box`` ("out"), else the
        screen's Wrong ("raised"), and what it raises as ``_standing_for`` makes it. Everything of the
        learner's that is not handed over (a value refused, an exception, its traceback) is dropped here,
        and the garbage it left in cycles collected: their __del__ runs here, within the time limit (all of
        it while a check holds the older objects frozen: as quick, _garbage_fenced)."""
        try:
            if self.grad is not None:
                sys.modules["torch"].set_grad_enabled(self.grad)
            out = self.function(*self.args, **self.kwargs)
        except BaseException as exc:   # noqa: BLE001 — handed over as a stand-in of the course's own
            self.box["raised"] = _standing_for(exc)
        else:
            self.screened(out)
            del out
        _COLLECT(2 if _FROZEN else 1)

    def screened(self, out):
        """Put ``out`` in ``box`` if ``screen`` (None: anything) takes it, else the Wrong it raises."""
        try:
            if self.screen is not None:
                self.screen(out)
            self.box["out"] = out
        except Wrong as refused:
            self.box["raised"] = Wrong(str(refused))

    def stop(self, every=0.02, grace=ESCALATE_AFTER + 0.5):
        """Stop the function from a watchdog thread, raising OutOfTime every ``every`` s (the check goes on).
        True if it is still running after ``grace`` s (by default long enough to stop a bare ``except:`` too)."""
        self.stoppable.stop(every, start=own_thread)
        self.join(grace)
        return self.is_alive()


def _in_place_sentence(name, original, on):
    """The sentence for a function that changed its input ``name`` (``original``: what the caller
    passed) in place: written for dicts, for arrays and tensors, or for lists when it holds none."""
    if isinstance(original, dict):
        return (f"your function changed the {name} it was given in place{on} ({name}[key] = v, or an "
                f"operation like /= on a tensor it holds, changes the caller's own dict too): build a new "
                f"dict of new tensors instead, {{key: v / s for key, v in {name}.items()}}")
    if _holds_arrays(original):
        return (f"your function changed {name} in place{on} (an operation like {name} /= s or "
                f"{name}[...] = v writes into the tensor it was given, so the caller's own, such as a "
                f"model's weights, would change too): compute a new one instead, {name} = {name} / s")
    return (f"your function changed the {name} it was given in place{on} (a list method like append or "
            f"pop, or {name}[i] = v, changes the caller's own lists too): build new lists and return those")


def _holds_arrays(x):
    """True if ``x`` is an array or a tensor, or a tuple or list holding one at any depth."""
    if isinstance(x, (tuple, list)):
        return any(_holds_arrays(v) for v in x)
    return isinstance(x, np.ndarray) or hasattr(x, "detach")


def _changed_input(function, args, kwargs, given, given_kwargs):
    """(name, original) for the first input that ``function`` changed in place (its copy in
    ``given`` now differs from the original in ``args``), or None. Named by the function's parameter
    (``argument 2`` where its signature cannot say)."""
    names = _parameter_names(function) or []
    pairs = [(names[i] if i < len(names) else f"argument {i + 1}", a, b) for i, (a, b) in enumerate(zip(args, given))]
    pairs += [(name, kwargs[name], given_kwargs[name]) for name in kwargs]
    for name, original, copied in pairs:
        if _differs(original, copied):
            return name, original
    return None


def _differs(original, copy):
    """True if ``copy`` (made by ``_copies``) no longer equals ``original``; NaN equals NaN."""
    if isinstance(original, dict) and isinstance(copy, dict):
        return original.keys() != copy.keys() or any(_differs(original[k], copy[k]) for k in original)
    if isinstance(original, (tuple, list)) and isinstance(copy, (tuple, list)):
        return len(original) != len(copy) or any(_differs(a, b) for a, b in zip(original, copy))
    if isinstance(original, np.ndarray) and isinstance(copy, np.ndarray):
        if original.shape != copy.shape:
            return True
        same = original == copy
        if original.dtype.kind in "fc":
            same |= np.isnan(original) & np.isnan(copy)
        return not bool(np.all(same))
    if hasattr(original, "detach") and hasattr(copy, "detach") and hasattr(original, "shape"):
        a, b = original.detach(), copy.detach()
        if a.shape != b.shape or a.dtype != b.dtype:
            return True
        same = a == b
        if a.is_floating_point() or a.is_complex():
            same |= a.isnan() & b.isnan()
        return not bool(same.all())
    return False


def sealed(build):
    """Decorator for a check's cases (its inputs and reference outputs), which ``build()`` makes once:
    each call returns a fresh copy, so a learner's function that reaches them by import
    (``checks._cat_inputs()``) and changes them in place changes its own copy only, never a later
    verdict. Each copy is also compared with a fingerprint of what was built (``_fingerprint``: types,
    keys, plain values, every tensor's checksum; about 0.4 ms for a check's cases) and made afresh
    from a pickled copy (bytes, which cannot be changed) if the kept cases were changed some other way."""
    box = {}

    @functools.wraps(build)
    def cases():
        if "saved" not in box:
            made = build()
            box["saved"], box["print"] = pickle.dumps(made, 5), _fingerprint(made)
            box["live"] = made
        made = copy.deepcopy(box["live"])
        if _fingerprint(made) != box["print"]:   # changed where it is kept: made again from the bytes
            box["live"] = pickle.loads(box["saved"])
            made = copy.deepcopy(box["live"])
        return made
    return cases


_SEALED_READER = sealed(dict).__code__   # the code of every @sealed reader (``_check_function`` reads its build)
# called by code outside the checks, yet no check's own function: what a check puts in sys and gc while a
# learner's function runs, and a decorator a course module applies as it is imported (helpers.heads.compute)
_NOT_WATCHED = {function.__code__ for function in (_no_switch_interval, _watchdog, _no_audit_hook, _no_freeze, no_setsid,
                                                    sealed, guarded_setrlimit, guarded_prlimit, _program_refused)}


def _fingerprint(x):
    """What ``x`` (a check's cases: dicts, lists, tuples of plain values, arrays and tensors) holds, as a
    value equal to another's only when the two hold the same: each container's type and keys, each
    plain value, each array's and tensor's type, shape, dtype and SHA-256 (``_digest``), and whether a
    tensor requires grad. Anything else counts by its type alone (a case holds none)."""
    kind = type(x)
    if kind in (dict, collections.OrderedDict):
        return kind, tuple((key, _fingerprint(value)) for key, value in x.items())
    if kind in (tuple, list):
        return kind, tuple(_fingerprint(value) for value in x)
    if kind in _PLAIN_SCALARS:
        return kind, x
    if isinstance(x, np.ndarray) and x.dtype.kind != "O":
        return kind, x.shape, x.dtype.str, _checksum(x, strong=True)
    if hasattr(x, "detach") and hasattr(x, "requires_grad"):
        try:
            return kind, _digest(x, strong=True), x.requires_grad
        except (TypeError, RuntimeError):   # a dtype NumPy lacks (bfloat16): read as float32, which holds it exactly
            return kind, x.dtype, _digest(x.detach().float(), strong=True), x.requires_grad
    return (kind,)


def as_returned(got):
    """What a learner's function returned, ``got`` (plain values: ``call`` screened it), as it is at its return: its
    lists, tuples, dicts and sets copied, and its arrays and tensors too, so that a function that refills and returns
    one object on every call (a grid allocated once) is judged on what each call returned, as the grader records it.
    Numbers, texts and functions are kept as they are (copying them runs no code of the learner's). The arrays and
    tensors are counted before any is copied (an expanded view stands for more numbers than it stores): those past
    MAX_ANSWER_ENTRIES numbers in all are kept as they are (no answer the check takes is that large: it refuses
    them by their shape or size), and so is a tensor it refuses by its kind (``tensor_refusal``: nested, sparse,
    on the meta device)."""
    import torch
    memo, found, seen, left = {}, [got], set(), MAX_ANSWER_ENTRIES
    for value in found:   # (in order, breadth first: found grows as the walk goes)
        if id(value) in seen:
            continue
        seen.add(id(value))
        kind = type(value)
        if kind in (list, tuple, set, frozenset):
            found.extend(value)
        elif kind is dict:
            found.extend(v for pair in value.items() for v in pair)
        elif isinstance(value, (np.ndarray, torch.Tensor, array.array)):
            tensor = isinstance(value, torch.Tensor)
            refused = tensor and tensor_refusal(value, float8=True)
            size = 0 if refused else value.numel() if tensor else len(value) if kind is array.array else value.size
            if refused or size > left:   # (kept as it is: the check's sentence refuses it)
                memo[id(value)] = value
                continue
            left -= size
            if tensor:   # (detached: a tensor with a history refuses deepcopy)
                memo[id(value)] = value.detach().clone()
            elif value.dtype.kind == "O":   # (deepcopy copies the array and each of its entries)
                found.extend(value.flat)
        else:   # a number, a text, a function, a class, a torch.Size: nothing a later call can change
            memo[id(value)] = value
    return copy.deepcopy(got, memo)


def _copies(x):
    """Copies of the arrays and tensors in ``x`` (also inside tuples, lists and dicts), so a learner's
    function that changes its inputs in place cannot change the check's own test cases."""
    if type(x) is dict or type(x) is collections.OrderedDict:   # (a state_dict is an OrderedDict)
        return type(x)((key, _copies(value)) for key, value in x.items())
    if isinstance(x, np.ndarray):
        return x.copy()
    if hasattr(x, "detach") and hasattr(x, "clone"):
        return x.detach().clone()
    if isinstance(x, (tuple, list)):
        return type(x)(_copies(v) for v in x)
    return x


# --- Judging a learner's nn.Module class -------------------------------------------------------


def module_output(run, args, state, x, what, none, shape, error=None):
    """The output of a learner's module class (``run``, a Module run: built with ``args``, loaded
    with ``state``) on ``x``, or Wrong with one sentence: its stop (``error(sentence)`` if given),
    ``none`` when forward returned None, ``shape(its shape)`` when it does not keep x's shape."""
    try:
        out = call(run, args, state, x, what=f"on {what}")
    except Wrong as wrong:
        if error is None:
            raise
        raise Wrong(error(str(wrong))) from None
    if out is None:
        raise Wrong(none)
    if is_bool(out):   # (x > 0 would otherwise be judged as ones and zeros)
        raise Wrong(f"the output of forward on {what} should be numbers, but it holds True/False values")
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(out, torch.Tensor):   # a NumPy array: the GPT made of this piece would break
        raise Wrong(f"forward on {what} should return a torch tensor, as x is, but returns {type_name(out)}")
    found = answer_shape(out, f"the output of forward on {what}")   # (a nested tensor has no one shape: refused)
    if found != tuple(x.shape):
        raise Wrong(shape(found))
    return out


def module_problems(run, cases, name, example, empty, returns, differs, variants, atol, error=str, shape_note="",
                    misplaced=None):
    """Judge a learner's nn.Module class (``run``, a Module run) on ``cases``, [(what, args, state,
    x, expected)], each output against ``expected`` to ``atol``; one sentence for the first problem:
    an instance passed for the class (``example``: how one is built, "MLP(6, 8)"), the untouched
    skeleton (no parameters, forward returns None: ``empty`` says what to fill in), a stop
    (``error(sentence, args)``), a None output (``returns``: what forward should return), a
    shape that is not x's (``shape_note`` added), an output rounded by float16 (``narrow_float_problem``),
    ``misplaced(out, expected)`` if it gives a
    sentence, a known slip (``variants(state, x)``: [(its output, sentence)]), else ``differs(gap)``."""
    import torch

    if issubclass(type(run), torch.nn.Module):   # (by type: no __class__ of the learner's is read)
        yield f"pass the class {name} itself, not a module built from it ({name}, not {example})"
        return
    try:   # the untouched skeleton: no parameters, and forward returns None
        if call(run, cases[0][1], {}, cases[0][3], what="with no weights") is None:
            yield NOT_ANSWERED.split(":")[0] + f": {name} has no parameters yet and forward returns None; {empty}"
            return
    except Wrong:
        pass   # it has parameters (or stops without them): the cases below say what is wrong
    for what, args, state, x, expected in cases:
        out = module_output(run, args, state, x, what,
                            none=NOT_ANSWERED.split(":")[0] + f": forward returns None; return {returns}, same shape as x",
                            shape=lambda found: (f"on {what} forward returned shape {found}; it should keep x's shape "
                                                 f"{tuple(x.shape)}{shape_note}"),
                            error=lambda sentence: error(sentence, args) if error is not str else sentence)
        arr = as_array(out, f"the output on {what}", shape=tuple(expected.shape))
        want = expected.double().numpy()
        gap = float(np.abs(arr - want).max())
        if gap <= atol:
            continue
        hint = narrow_float_problem(out, arr, want, f"the output on {what}", atol) or \
            (misplaced and misplaced(arr, want)) or slip(arr, variants(state, x), atol=atol)
        yield f"on {what}: " + (hint or differs(gap))
        return


# --- Judging converted answers ----------------------------------------------------------------


def sum_shown(total):
    """A sum a check took of an answer's numbers (one that should be 1, say), as a sentence shows it: 3
    significant digits, more when 3 would round it to 1; one that overflowed (entries near 1e308) is said to be
    past float64's largest number, not printed as inf."""
    if np.isinf(total):
        return f"{'more' if total > 0 else 'less'} than float64's {'largest' if total > 0 else 'lowest'} number"
    for digits in range(3, 10):
        shown_total = f"{total:.{digits}g}"
        if total == 1 or float(shown_total) != 1:
            return shown_total
    return repr(float(total))


def number_problems(value, reference, name, atol=1e-3):
    """Yield a sentence if the number ``value`` is not within ``atol`` of ``reference``."""
    if not abs(value - reference) <= atol:
        direction = "too large" if value > reference else "too small"
        yield f"{name} = {value:.4g} is {direction} (it should agree to ±{atol:g})"


def close_problems(arr, reference, name, atol=1e-3):
    """Yield a sentence if the array ``arr`` is not within ``atol`` of ``reference`` everywhere.

    Infinite reference entries must be matched exactly (a masked -inf is -inf)."""
    ref = np.asarray(reference, dtype=float)
    arr = as_array(arr, name, shape=ref.shape, allow_inf=bool(np.isinf(ref).any()))
    same_inf = np.isinf(ref) & (arr == ref)
    bad = ~(same_inf | np.isclose(arr, ref, atol=atol, rtol=0))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        yield (f"{name} differs from the expected values in {int(bad.sum())} of {bad.size} entries "
               f"(the first at index {where})")


def slip(value, slips, atol=1e-3):
    """The hint of the first known slip that ``value`` equals (within ``atol``), else None.

    slips: [(the value that mistake gives, the hint), ...]; value and each may be arrays."""
    for wrong, hint in slips:
        wrong = np.asarray(wrong, dtype=float)
        if wrong.shape == np.shape(value) and np.allclose(value, wrong, atol=atol, rtol=0):
            return hint
    return None


grading.seal(putback)   # (what a check puts back, called by this module's functions: sealed with them)
grading.seal(sys.modules[__name__])   # last: what records an answer, as imported (grading.tampered)
