"""Your own pieces of a GPT, carried from chapter to chapter.

In chapters 02 to 09 you write the piece each chapter teaches (a head, the mask, multi-head
attention, positions, the MLP, LayerNorm and the block, the generation loop). When a piece
passes its check, the check keeps it: it writes the code cell that defined it into a folder
of your own, ``my_gpt/`` beside the notebook, as ``my_gpt/<name>.py``. A later chapter
asks for it by name::

    MultiHeadAttention = learner.use("MultiHeadAttention", course=heads.MultiHeadAttention)

and gets yours if you wrote it, or the course's own, with one line saying which. Chapter 12
assembles your GPT from these files. They are plain Python files: open them, read them,
change them.

The folder is ``my_gpt/`` in the notebook's working directory, or the folder the
environment variable COURSE_MY_GPT names (the course's tests give each run a fresh one).
"""
import ast
import contextlib
import importlib.util
import inspect
import keyword
import linecache
import os
import re
import sys
import threading
from pathlib import Path

from .errors import check_switch, class_name, fail, message_of
from .errors import shown as _shown
from .putback import _NOT_BEFORE, _OWN_THREADS, _course_thread, _library_thread, _threads_started, course_constants, \
    own_thread, stop_threads, threads_now, torch_globals_outside_fence
from .states import OutOfTime, Stoppable, default_dtype, in_fence, random_states

HEADER = '''"""{name}: written by you in chapter {chapter}, kept by its check. Edit it freely."""
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from helpers import reference as ref

'''
MAX_NAME = 100   # the most characters a piece's name may have (its file is named for it)


def folder():
    """The folder your pieces are kept in (created when the first one is kept)."""
    return Path(os.environ.get("COURSE_MY_GPT") or "my_gpt")


def check_name(name, what="a piece"):
    """A name Python accepts for a function or a class (``str.isidentifier``, so letters of any alphabet
    too; not a keyword), of at most MAX_NAME characters; return it."""
    if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name) and len(name) <= MAX_NAME):
        fail(f"{what} should be named like a Python function or class (letters of any alphabet, digits and _; not "
             f"a keyword such as 'class'; at most {MAX_NAME} characters), but got {_shown(name)}")
    return name


def path(name):
    """my_gpt/<name>.py for a piece's name."""
    return folder() / f"{check_name(name)}.py"


def source_of(piece):
    """The code that defined ``piece`` (a function or a class written in a notebook cell or a file):
    the whole cell, so helpers it calls come along. Raises CourseInputError if it cannot be found."""
    if not (inspect.isfunction(piece) or inspect.isclass(piece)):
        fail(f"a piece to keep is a function or a class, but got {type(piece).__name__}")
    code = _code_of(piece)
    lines = linecache.getlines(code.co_filename) if code is not None else []
    if not lines:
        fail(f"the code of {piece.__name__} cannot be found (was it made with exec, or typed in a console?); "
             "define it with def or class in a code cell")
    text = "".join(lines)
    try:
        ast.parse(text)
    except SyntaxError:
        fail(f"the cell that defines {piece.__name__} holds IPython commands that are not Python; "
             "keep the piece in a cell of plain Python")
    return text


def _code_of(piece):
    """A code object defined where ``piece`` was: the function's own, or any method's of a class (a
    decorated one's own, not its decorator's: ``@torch.no_grad()`` wraps it in torch's code)."""
    if inspect.isfunction(piece):
        return _unwrapped(piece).__code__
    for value in vars(piece).values():
        value = _unwrapped(getattr(value, "__func__", value))
        if inspect.isfunction(value):
            return value.__code__
    return None


def _unwrapped(function):
    """The function a decorator made with functools.wraps wraps (itself if none; a broken chain: itself)."""
    try:
        return inspect.unwrap(function)
    except ValueError:   # a __wrapped__ that leads back to itself
        return function


def keep(piece, chapter, name=None):
    """Write the cell that defined ``piece`` to my_gpt/<name>.py; return the path. ``name``: the name a
    later chapter asks for (``use``); None: the piece's own. When the two differ (a head written as
    ``def my_head``, kept as attention_head), the file ends with ``attention_head = my_head``.

    Called by a check once the piece is right; a learner may call it too."""
    if not (inspect.isfunction(piece) or inspect.isclass(piece)):
        fail(f"a piece to keep is a function or a class, but got {type(piece).__name__}")
    if not (isinstance(chapter, str) and re.fullmatch(r"\d\d", chapter)):
        fail(f"chapter should be the chapter's two digits as text, such as '05', but got {chapter!r:.40}")
    own = class_name(piece) if inspect.isclass(piece) else piece.__name__
    if own == "<lambda>":
        fail(f"a piece to keep should be written with def, which gives its file a name to define, but got a lambda: "
             f"write it as def {name or 'its_name'}(...) and run its check again")
    check_name(own, "the piece (its file's last line names it)")
    name = own if name is None else name
    target = path(name)
    _not_being_imported(name)
    header = HEADER.format(name=name, chapter=chapter)
    text = header + source_of(piece)
    if name != own:
        alias = f"{name} = {own}   # the name the chapters ahead ask for (learner.use)"
        text += ("" if text.endswith("\n") else "\n") + f"\n{alias}\n"
    target.parent.mkdir(parents=True, exist_ok=True)
    earlier = target.read_bytes() if target.is_file() else None   # a good piece kept before
    temporary = target.with_suffix(".py.tmp")
    temporary.write_text(text, encoding="utf-8")
    temporary.replace(target)   # whole or not at all
    checks = getattr(_loading, "checks", 0)
    try:
        with _apart(target):
            module = _load(target)
        kept = getattr(module, name)
    except BaseException as error:   # also exit(), or a stop from outside: a check's time limit
        if isinstance(error, Exception) or threading.current_thread() is threading.main_thread():
            put_back(target, earlier)   # (a check that stopped this thread puts back itself: this one may end late)
        if not isinstance(error, Exception):
            raise
        fail(f"the cell that defines {own} does not run on its own as my_gpt/{name}.py "
             f"({type(error).__name__}: {message_of(error, 100)}); use only np, torch, nn, F, math and ref in it")
    if getattr(_loading, "checks", 0) != checks:
        put_back(target, earlier)
        fail(f"the cell that defines {own} also calls a check, which would run again each time my_gpt/{name}.py "
             f"is imported; keep the check call in a cell of its own, below, and run both again")
    if not _same_definition(piece, kept, module, header.count("\n")):
        put_back(target, earlier)
        fail(f"the cell that defines {own} makes another {own} after the one the check passed (a second def "
             f"or class, or an assignment), and a later chapter would use that one; keep only the checked one "
             f"in its cell and run the check again")
    missing = missing_globals(kept, module)
    if missing:
        put_back(target, earlier)
        listed, one = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else ""), len(missing) == 1
        fail(f"the cell that defines {own} should define or import every name its code reads, but its code reads "
             f"{listed}, which the cell neither defines nor imports (made in another cell of the notebook?), so "
             f"my_gpt/{name}.py would stop with NameError in the chapters ahead: define or import "
             f"{'it' if one else 'them'} in that cell (or inside the class) and run the check again")
    return target


def missing_globals(piece, module):
    """The names (sorted) that the code of ``piece`` (a function or class of ``module``, a kept file) reads as
    globals and that neither ``module`` nor Python's builtins define: each would raise NameError when the piece
    runs from the file (``ACT = nn.GELU()`` made in an earlier notebook cell, read in forward). Followed into
    the file's own functions and classes that the piece reads by name; read from the compiled code
    (LOAD_GLOBAL, and LOAD_NAME in a class body written in a function), running none of it."""
    import builtins
    import dis
    defined, read, assigned, seen = vars(module), set(), set(), set()
    codes = _codes_in(piece, module.__file__)
    while codes:
        code = codes.pop()
        if id(code) in seen:
            continue
        seen.add(id(code))
        instructions = list(dis.get_instructions(code))
        local = {i.argval for i in instructions if i.opname == "STORE_NAME"}   # a class body's own names
        assigned |= {i.argval for i in instructions if i.opname == "STORE_GLOBAL"}   # (``global X; X = ...``)
        for name in {i.argval for i in instructions if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")} - local:
            if name in defined:
                codes += _codes_in(defined[name], module.__file__)   # the file's own helper: what it reads too
            elif not hasattr(builtins, name):
                read.add(name)
        codes += [const for const in code.co_consts if isinstance(const, type(code))]   # nested functions, lambdas
    return sorted(read - assigned)


def _codes_in(value, filename):
    """The code objects of ``value`` written in the file ``filename``: a function's own (looked through its
    decorators), a class's methods' (staticmethods', classmethods', properties' too); [] for anything else."""
    if inspect.isclass(value):
        found = []
        for attribute in vars(value).values():
            if isinstance(attribute, property):
                found += [attribute.fget, attribute.fset, attribute.fdel]
            else:
                found.append(attribute.__func__ if isinstance(attribute, (staticmethod, classmethod)) else attribute)
        return [code for function in found if inspect.isfunction(function) for code in _codes_in(function, filename)]
    if inspect.isfunction(value):
        code = _unwrapped(value).__code__
        return [code] if code.co_filename == filename else []
    return []


def _same_definition(piece, kept, module, header_lines):
    """True if ``kept`` (``name`` in the kept file, ``module``) is the definition the check passed:
    the same lines of the cell, ``header_lines`` further down. (Compared by where the code starts,
    not by its bytecode: Python 3.11 rewrites the bytecode of a function that has run.)"""
    ours = _code_of(piece)
    if ours is None or not linecache.getlines(ours.co_filename):   # nothing to compare (source_of said so)
        return True
    theirs = _code_of(kept) if inspect.isfunction(kept) or inspect.isclass(kept) else None
    return (theirs is not None and theirs.co_filename == module.__file__
            and theirs.co_firstlineno == ours.co_firstlineno + header_lines)


def put_back(target, earlier):
    """A failed keep leaves the earlier kept piece as it was: write ``earlier`` (its bytes) back to
    ``target``, or remove ``target`` when there was none."""
    if earlier is None:
        target.unlink(missing_ok=True)   # (the cell may have removed it itself)
    else:
        temporary = target.with_suffix(".py.tmp")
        temporary.write_bytes(earlier)
        temporary.replace(target)


def shown(target):
    """How messages name a kept file: my_gpt/<name>.py, the folder beside your notebook. (The
    course's own runs keep pieces in a stand-in folder, COURSE_MY_GPT, so their saved outputs
    read the same as yours.)"""
    return f"my_gpt/{Path(target).name}"


def has(name):
    """True if my_gpt/<name>.py exists."""
    return path(name).is_file()


def use(name, course, quiet=False):
    """Your piece ``name`` from my_gpt/<name>.py if you kept one, else ``course`` (the course's own),
    with one line saying which (none when quiet, or while a kept file that calls use is being
    imported: the notebook cell that wrote it has said it already). A kept file that no longer
    runs (an error, exit(), an import past LOAD_TIME_LIMIT seconds) or whose ``name`` is no function
    or class is reported and the course's used. The import is kept apart from the notebook (``_apart``);
    a kept file that asks for a piece being imported (itself, or one that uses it) is refused."""
    target = path(name)
    quiet = check_switch(quiet, "quiet") or getattr(_loading, "depth", 0) > 0
    _not_being_imported(name)
    if not target.is_file():
        if not quiet:
            print(f"{name}: the course's own (no {shown(target)} yet: write yours where its chapter teaches it)")
        return course
    try:
        with _apart(target):
            module = _bounded_load(target)
        piece = getattr(module, name)
    except (Exception, SystemExit) as error:   # a learner's file: any error is theirs to read, in one line (exit() too)
        said = message_of(error, 120)   # (exit() says nothing)
        print(f"{name}: the course's own, because {shown(target)} does not run ({type(error).__name__}"
              f"{': ' + said if said else ''})")
        return course
    if not (inspect.isfunction(piece) or inspect.isclass(piece)):
        print(f"{name}: the course's own, because {shown(target)} defines {name} as {type(piece).__name__} "
              f"{_shown(piece)}, not as a function or a class")
        return course
    if not quiet:
        print(f"{name}: yours, from {shown(target)}")
    return piece


THREAD_STOP_LIMIT = 5   # seconds use() waits for the threads a kept file left to stop, before putting back what they changed
LOAD_TIME_LIMIT = 10   # seconds importing a kept file may take in use() (as a check's TIME_LIMIT for a learner's call)


class _Import(threading.Thread):
    """``_load(target)`` in a thread of its own; ``box`` gets the module or what it raised. The thread
    goes on the caller's chain of kept files being imported (``_loading.chain``)."""

    def __init__(self, target):
        super().__init__(name="importing a kept piece", daemon=True)
        _OWN_THREADS.add(self)   # (the course's: not a thread the kept file left, _apart)
        self.target, self.box, self.stoppable = target, {}, Stoppable(OutOfTime)
        self.chain = getattr(_loading, "chain", ())

    def run(self):
        try:
            self.stoppable.call(self.load)
        except OutOfTime:   # one that arrived while handing over
            pass

    def load(self):
        """The import; the module or what it raised goes in ``box``."""
        try:
            _loading.chain = self.chain
            self.box["module"] = _load(self.target)
        except BaseException as error:   # noqa: BLE001 — handed to use()'s thread as it is
            self.box["raised"] = error

    def stop(self, every=0.02):
        """Stop the import from a watchdog thread (states.Stoppable), raising states.OutOfTime every ``every`` s."""
        self.stoppable.stop(every, start=own_thread)


def _bounded_load(target):
    """``_load(target)`` waited for at most LOAD_TIME_LIMIT seconds: a kept file that loops is stopped and
    raises TimeoutError here; what the import raises (exit() as SystemExit too) is raised here."""
    seconds = LOAD_TIME_LIMIT
    run = _Import(target)
    run.start()
    try:
        run.join(seconds)
    except BaseException:   # Ctrl-C while waiting: stop the import too
        run.stop()
        raise
    if run.is_alive():
        run.stop()
        raise TimeoutError(f"importing it did not end within {seconds} s (a loop that never ends?)")
    if "raised" in run.box:
        raised = run.box["raised"]
        if not isinstance(raised, (Exception, SystemExit)):   # its own KeyboardInterrupt or the like
            raise RuntimeError(f"{type(raised).__name__} raised while importing it")
        raise raised
    return run.box["module"]


_loading = threading.local()   # .depth: how many kept files this thread is importing now (one may use another;
                               # a check's thread stopped in the middle of one leaves no other thread quiet);
                               # .checks: how many checks were called meanwhile (see importing);
                               # .chain: the names of the kept files being imported, outermost first, also
                               # those of the threads that started this one (use imports in a thread: _Import)


def _not_being_imported(name):
    """Refuse to use or keep ``name`` while my_gpt/<name>.py is being imported on this chain: a kept file
    that uses itself (its cell also holds a later chapter's ``learner.use`` line), or two that use each
    other, would import again and again, one thread more each time."""
    chain = getattr(_loading, "chain", ())
    if name in chain:
        fail(f"a kept file should ask for pieces other than the ones being imported ({', '.join(chain[-3:])}), "
             f"but got {name!r}")


@contextlib.contextmanager
def _apart(target):
    """Import the kept file ``target`` (its whole cell) inside this: afterwards, also when it raised, the random
    states (``states.random_states``) and torch's default dtype (float32 meanwhile, the course's, as in
    a check's call) are as they were, the pyplot figures it opened are closed, and what a check puts back
    after a learner's code is put back too (``putback.torch_globals``: torch's switches and modes, the
    course's and torch's functions, the process's state; ``putback.course_constants``): a cell that tried its
    piece on ``torch.randn``, drew a figure, turned on torch.use_deterministic_algorithms or replaced
    ``ref.softmax`` leaves the later cells alone, at every ``use`` as when its check kept it. Inside a check's
    fence (``Exercise.kept`` keeps the piece) those two are the fence's to put back: saved here, they would hold the
    fence's stand-ins (sys.setrecursionlimit refused), and an import stopped at its time limit that unwinds after
    the fence has ended would put the stand-ins back for good. A thread the file started and left running
    (which could replace a course function after ``use`` returned) is stopped first, and the import raises
    RuntimeError saying so (a check's fence stops a learner's threads itself)."""
    sys.modules.pop(module_name(target), None)   # (imported anew: the earlier module is no state to put back)
    put_back_random, dtype, figures = random_states(), default_dtype(None), _figures()
    fenced = in_fence()
    put_back_globals = torch_globals_outside_fence()
    put_back_constants = (lambda: None) if fenced else course_constants()
    before, started = (None, None) if fenced else (threads_now(), [])
    raised = True
    try:
        with contextlib.nullcontext() if fenced else _threads_started(started, _importing(before)):
            yield
        raised = False
    finally:
        left = stop_threads(before, started, wait=THREAD_STOP_LIMIT)[0] if not fenced else 0
        put_back_globals()
        put_back_constants()
        default_dtype(dtype)
        put_back_random()
        _close_new_figures(figures)
    if left and not raised:
        raise RuntimeError(f"it left {left} thread{'s' if left > 1 else ''} of its own running after its import "
                           "(now stopped): a kept file should only define its piece")


def _importing(before):
    """A function saying whether a thread (a threading.Thread) runs a kept file's code while it is imported
    (``_apart``, which began with the threads ``before``, ``threads_now``): the caller's (``keep`` imports in
    it), an ``_Import``, or one that did not run then and is neither the course's nor a kernel library's."""
    caller = threading.current_thread()

    def importing(thread):
        return thread is caller or isinstance(thread, _Import) or before.get(thread.ident, _NOT_BEFORE) is not thread \
            and not _course_thread(thread) and not _library_thread(thread)
    return importing


def _figures():
    """(the pyplot figure managers open now, the active one): none when pyplot was never imported."""
    if "matplotlib.pyplot" not in sys.modules:
        return [], None
    from matplotlib._pylab_helpers import Gcf
    return Gcf.get_all_fig_managers(), Gcf.get_active()


def _close_new_figures(before):
    """Close the pyplot figures opened since ``before`` (``_figures()``) and make its active one active again."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    from matplotlib._pylab_helpers import Gcf
    managers, active = before
    for manager in Gcf.get_all_fig_managers():
        if not any(manager is old for old in managers):
            pyplot.close(manager.canvas.figure)
    if active is not None and Gcf.figs.get(active.num) is active:
        Gcf.set_active(active)


def importing():
    """True while this thread imports a kept file (keep, use): a check called then (the cell that defines
    a piece also calls its check) returns at once, silent, without running: else keeping that cell would
    run the check again, which would keep it again, and so on. The call is counted, so that ``keep``
    refuses such a cell (``use`` of a file kept before just skips the call)."""
    if getattr(_loading, "depth", 0) <= 0:
        return False
    _loading.checks = getattr(_loading, "checks", 0) + 1
    return True


def module_name(target):
    """The name my_gpt/<name>.py is imported as (``_load``), in sys.modules."""
    return f"my_gpt_{target.stem}"


def _load(target):
    """Import my_gpt/<name>.py afresh as a module named for it."""
    imported_as = module_name(target)
    spec = importlib.util.spec_from_file_location(imported_as, target)
    module = importlib.util.module_from_spec(spec)
    sys.modules[imported_as] = module
    chain = getattr(_loading, "chain", ())
    _loading.depth, _loading.chain = getattr(_loading, "depth", 0) + 1, chain + (target.stem,)
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(imported_as, None)
        raise
    finally:
        _loading.depth, _loading.chain = _loading.depth - 1, chain
    return module
