"""What a check puts back after a learner's code, and the import of a kept piece after its cell: torch's and
Python's global state (``torch_globals``: the functions of the modules a learner's code might replace, torch's hooks,
switches and modes; ``process_state``: the builtins, sys's streams and hooks, the working directory, the environment,
resource limits, logging, ...) and the course's own constants and caches (``course_constants``), with what they
need (a tensor's state, ``_tensor_kept``; the containers a value reaches, ``_reachable``; the process-wide locks a
learner's thread left taken, ``_gone_owners_let_go``). Used by helpers.exercises (every check's fence,
``model_kept``) and helpers.learner (``_apart``: a kept file's import); below both, it imports neither (from
helpers.grading, below it, only how to read a class without running a learner's code)."""
import collections
import contextlib
import faulthandler
import functools
import importlib
import inspect
import itertools
import logging   # (here, not first in a check: importing it registers an exit function)
import operator
import os
import sys
import threading
import time
import types
import weakref

import numpy as np

from . import states
from .errors import class_name
from .grading import _is_courses, _one_of, _own_attribute
from .states import ESCALATE_AFTER, Stop, Stoppable
from .states import (builtins_kept, limits_kept, recursion_limit_put_back, scheduling_kept, session_kept, time_zone,
                     torch_flags_kept)


PATCHABLE = ("math", "random", "torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.linalg",
             "torch.optim", "torch.autograd", "torch.functional", "inspect", "zlib", "time", "functools",
             "operator", "copy", "json", "warnings", "contextlib", "faulthandler", "tqdm", "tqdm.auto", "ipywidgets",
             "threading", "_thread", "os", "itertools", "pickle", "copyreg", "weakref", "collections", "ctypes", "gc",
             "signal", "glob", "linecache", "pathlib", "importlib.util", "matplotlib", "matplotlib.pyplot",
             "matplotlib.figure", "_posixsubprocess")
# modules whose functions a learner's code might replace for every later cell (and every module of NumPy's,
# whose functions call one another by module name: numpy._core.numeric.isclose is what np.allclose calls);
# the check's own machinery calls some of them (threading, os, pickle), and so do the explorers (matplotlib)
PATCHABLE_CLASSES = (("threading", "Thread"), ("threading", "Event"), ("threading", "Condition"),
                     ("threading", "Semaphore"), ("threading", "_RLock"), ("weakref", "WeakSet"),
                     ("contextlib", "_GeneratorContextManager"), ("contextlib", "ExitStack"), ("pathlib", "Path"),
                     ("pathlib", "PurePath"), ("matplotlib.figure", "Figure"), ("matplotlib.figure", "FigureBase"),
                     ("matplotlib.axes._axes", "Axes"), ("matplotlib.axes._base", "_AxesBase"),
                     ("matplotlib.artist", "Artist"), ("matplotlib.backend_bases", "FigureCanvasBase"),
                     ("matplotlib.backends.backend_agg", "FigureCanvasAgg"))
# (module, class): classes whose methods a learner's code might replace (threading.Thread.join = ...), each
# once its module is imported


def torch_globals():
    """What a learner's code can change for every later cell, saved now: Python's warning filters
    and recursion limit; the functions of the modules in PATCHABLE, the methods of the classes in
    PATCHABLE_CLASSES (``threading.Thread.join``), torch.Tensor and nn.Module (``torch.softmax = ...`` is undone; a name added stays in a module, not in a
    class, where it would hide an inherited method); torch's global module hooks, deterministic and
    anomaly modes, and print options. Until then, torch's setters a process may call only once are refused
    (``states.torch_once_refused``: torch.set_num_interop_threads). Returns a function that puts them back. (The random states
    are put back by the whole check, ``random_states``: a check may watch them advance between calls.)"""
    import warnings

    put_back_process = process_state()
    filters, limit = list(warnings.filters), states.recursion_limit()   # (without a stop's headroom)
    owners, functions = _owners()
    kept = {owner: dict(vars(owner)) for owner in owners}
    parts = [(name, list(map(get, functions))) for name, get in _FUNCTION_PARTS]

    def put_back_python():
        put_back_process.builtins()   # builtins first: the rest calls them; then the modules' and classes' own
        _put_back_owners(kept)        # functions (os.getcwd, threading.settrace), which put_back_process calls
        put_back_process()
        _put_back_functions(functions, parts)
        if warnings.filters != filters:   # only then: resetting them would show every warning again, once a call
            warnings.filters[:] = filters
            getattr(warnings, "_filters_mutated", lambda: None)()   # the filters' cache, as simplefilter does
        recursion_limit_put_back(limit)   # (with a stop's headroom while one holds it: states)

    torch = sys.modules.get("torch")
    if torch is None:
        return put_back_python
    from torch.nn.modules import module as torch_module

    hooks = {name: dict(value) if isinstance(value, dict) else value   # the hooks, and whether they are "full"
             for name, value in vars(torch_module).items() if name.startswith("_global")}
    put_back_modes = states.torch_modes_kept()   # (anomaly mode among them)
    printing = dict(vars(torch._tensor_str.PRINT_OPTS))
    put_back_once = states.torch_once_refused()

    def put_back():
        put_back_python()
        put_back_once()
        for name, saved in hooks.items():
            target = getattr(torch_module, name)
            if isinstance(saved, dict):
                target.clear()
                target.update(saved)
            else:
                setattr(torch_module, name, saved)
        put_back_modes()
        vars(torch._tensor_str.PRINT_OPTS).update(printing)
    return put_back


def torch_globals_outside_fence():
    """``torch_globals()`` where no check's fence runs; inside one, a put-back that does nothing: the fence puts
    back that share itself (saved here, it would hold the fence's stand-ins, sys.setrecursionlimit refused, and
    code stopped at its time limit that unwinds after the fence has ended would put the stand-ins back for good).
    For course code a learner's code runs inside (a kept file's import, the live run's loop)."""
    return (lambda: None) if states.in_fence() else torch_globals()


_FUNCTION_PARTS = [(name, operator.attrgetter(name)) for name in ("__defaults__", "__kwdefaults__", "__code__")]
_IS = operator.is_   # (the fence's own: a learner's code may replace operator.is_)


def _put_back_functions(functions, parts):
    """Put back the defaults and code of each of ``functions`` (a list of Python functions) that were
    replaced in place since ``parts`` ([(attribute, [its value for each function])]) was saved
    (``F.layer_norm.__code__ = ...``). Compared in C (about 0.1 ms for 6,000 functions); only a
    function that differs is looked at one by one."""
    for name, saved in parts:
        if all(map(_IS, map(operator.attrgetter(name), functions), saved)):
            continue
        for function, value in zip(functions, saved):
            if getattr(function, name) is not value:
                setattr(function, name, value)


def _put_back_owners(kept):
    """Put back the attributes of each module and class in ``kept`` ({owner: its saved dict}) that were
    replaced since; a method added to a class, where it would hide an inherited one, is removed."""
    for owner, saved in kept.items():
        now = vars(owner)
        if len(now) == len(saved) and all(map(operator.is_, now.values(), saved.values())) \
                and all(map(operator.is_, now, saved)):
            continue   # (the same names for the same objects, in the same order: nothing changed)
        for key, value in saved.items():
            if now.get(key, saved) is not value:
                setattr(owner, key, value)
        if isinstance(owner, type):
            for key in [key for key in now if key not in saved]:
                delattr(owner, key)


_OWNERS = ()   # (len(sys.modules), (owners, the course's functions)): found again only once modules are added; tuples
# rebound only by _owners (a learner's code cannot empty or fill them in place: the put-back's own list of what it keeps)


def _owners():
    """(owners, functions): the modules and classes whose functions a learner's code might replace
    for every later cell: PATCHABLE's modules, every NumPy module, torch.Tensor and torch.nn's layer
    and torch.optim's optimizer classes (nn.GELU.forward = ...), and the course's own modules and
    their classes (a check's reference, ``helpers.model.Transformer.forward``,
    ``helpers.exercises.TIME_LIMIT``); and the course's own functions among theirs, whose defaults
    and code could be changed in place."""
    global _OWNERS
    found = _OWNERS
    if found and found[0] == len(sys.modules):
        return found[1]
    owners = [sys.modules[name] for name in PATCHABLE if name in sys.modules]
    owners += [value for module, name in PATCHABLE_CLASSES
               if isinstance(value := getattr(sys.modules.get(module), "__dict__", {}).get(name), type)]
    course = []
    torch = sys.modules.get("torch")
    torch_modules = [module for name, module in list(sys.modules.items())
                     if name.startswith(TORCH_SUBMODULES) and isinstance(module, types.ModuleType)]
    owners += [module for module in torch_modules if module not in owners]
    if torch is not None:
        layers = {value for module in [torch.nn, torch.optim] + torch_modules for value in vars(module).values()
                  if isinstance(value, type) and issubclass(value, (torch.nn.Module, torch.optim.Optimizer))}
        owners += [torch.Tensor] + sorted(layers, key=lambda kind: (kind.__module__, kind.__qualname__))
    for name, module in list(sys.modules.items()):
        if module is None or not isinstance(module, types.ModuleType):
            continue
        if name == "numpy" or name.startswith("numpy."):
            owners.append(module)
        elif name == "helpers" or name.startswith("helpers."):
            course += [module] + [value for value in vars(module).values()
                                  if isinstance(value, type) and value.__module__ == name]
    functions = [value for owner in course for value in vars(owner).values()
                 if isinstance(value, types.FunctionType) and value.__module__.startswith("helpers")]
    for owner in owners:   # NumPy's own Python functions (np.allclose's is behind its dispatcher)
        if isinstance(owner, types.ModuleType) and owner.__name__.startswith("numpy"):
            for value in vars(owner).values():
                value = value if isinstance(value, types.FunctionType) else getattr(value, "_implementation", None) \
                    if type(value).__module__ == "numpy" or type(value).__name__ == "_ArrayFunctionDispatcher" else None
                if isinstance(value, types.FunctionType):
                    functions.append(value)
    functions += _torch_functions(owners)   # F.layer_norm, nn.LayerNorm.forward: code that can be replaced in place
    functions += [value.__wrapped__ for value in functions if isinstance(getattr(value, "__wrapped__", None),
                                                                         types.FunctionType)]
    exercises = sys.modules.get("helpers.exercises")   # (read, not imported: exercises imports this module)
    check = vars(exercises).get("Exercise") if exercises is not None else None
    checks = [value for owner in course if isinstance(owner, types.ModuleType) and check is not None
              for value in vars(owner).values() if isinstance(value, check)]   # a check's own .problems
    _OWNERS = (len(sys.modules), (tuple(owners + course + checks), tuple(functions)))
    return _OWNERS[1]


TORCH_SUBMODULES = ("torch.nn.modules.", "torch.nn.parameter", "torch.nn.init", "torch.nn.functional",
                    "torch.optim.", "torch._tensor", "torch.functional")
# torch's modules behind the layers and optimizers a course model uses: a name rebound in one
# (torch.nn.modules.normalization.F = ...) changes every nn.LayerNorm, so their globals are kept too


def _torch_functions(owners):
    """The Python functions of torch's modules and classes among ``owners`` (torch.nn.functional.layer_norm,
    nn.LayerNorm.forward, torch.Tensor.__rsub__), each once: their code and defaults are kept."""
    found, seen = [], set()
    for owner in owners:
        name = owner.__name__ if isinstance(owner, types.ModuleType) else _own_attribute(owner, "__module__")
        if not (isinstance(name, str) and name.startswith("torch")):
            continue
        for value in vars(owner).values():
            value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if type(value) is types.FunctionType and id(value) not in seen:
                seen.add(id(value))
                found.append(value)
    return found


def _hooks_kept():
    """The hooks through which a learner's code would run again later, saved now: sys's import
    machinery (``meta_path``, ``path_hooks``, the path importer cache), copyreg's reducers (every later
    pickle and copy), ``sys.breakpointhook``, and in a kernel IPython's event callbacks, input and AST
    transformers (every later cell) and display formatters (every later output). Returns a function that
    puts back what changed."""
    import copyreg

    lists = {name: (getattr(sys, name), list(getattr(sys, name))) for name in ("meta_path", "path_hooks")}
    importers, reducers, breakpoint_hook = dict(sys.path_importer_cache), dict(copyreg.dispatch_table), sys.breakpointhook
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    kept = []   # (owner, attribute, object, a copy of its contents): lists and dicts of the shell's
    if shell is not None:
        display = shell.display_formatter
        formatters = [display.ipython_display_formatter, display.mimebundle_formatter, *display.formatters.values()]
        kept = [(shell, name, getattr(shell, name), list(getattr(shell, name)))
                for name in ("input_transformers_post", "input_transformers_cleanup", "ast_transformers")]
        kept += [(shell.events.callbacks, name, callbacks, list(callbacks)) for name, callbacks in shell.events.callbacks.items()]
        kept += [(display, "formatters", display.formatters, dict(display.formatters))]
        kept += [(formatter, name, getattr(formatter, name), dict(getattr(formatter, name))) for formatter in formatters
                 for name in ("type_printers", "deferred_printers", "singleton_printers")]
        enabled = [(formatter, formatter.enabled) for formatter in formatters]

    def put_back():
        for name, (value, contents) in lists.items():
            if getattr(sys, name) is not value or value != contents:
                setattr(sys, name, value)
                value[:] = contents
        if sys.path_importer_cache != importers:
            sys.path_importer_cache.clear()
            sys.path_importer_cache.update(importers)
        if copyreg.dispatch_table != reducers:
            copyreg.dispatch_table.clear()
            copyreg.dispatch_table.update(reducers)
        sys.breakpointhook = breakpoint_hook
        for owner, name, value, contents in kept:
            current = owner.get(name) if isinstance(owner, dict) else getattr(owner, name)
            if current is not value or value != contents:
                if isinstance(owner, dict):
                    owner[name] = value
                else:
                    setattr(owner, name, value)
                if isinstance(value, dict):
                    value.clear()
                    value.update(contents)
                else:
                    value[:] = contents
        for formatter, on in (enabled if shell is not None else ()):
            formatter.enabled = on
    return put_back


def process_state():
    """What a learner's code can change for the whole process, saved now: the builtins (``print``, ``len``), sys's
    streams and hooks, the working directory, the environment, ``sys.path``, the garbage collector and its
    callbacks, the modules imported (one replaced in ``sys.modules``), the digits an int may print, the thread
    switch interval, the locale, the file mode mask, logging's switch and the root logger's level and handlers,
    every resource limit (open files, memory, CPU time: ``limits_kept``), the C library's time zone
    (``time.tzset`` is redone when TZ changed), the threads' CPU affinity and priority (``scheduling_kept``), a
    timer that was not running (signal.alarm), the collector's thresholds, freeze and debug flags
    (gc.DEBUG_SAVEALL would keep all later garbage), sockets' default timeout, the dlopen flags, the kernel's
    session and process group (``session_kept``), threading's stack size, trace, profile and excepthook, sys's
    unraisablehook, faulthandler (enabled or not), torch's switches (``torch_flags_kept``), matplotlib's rcParams, and the hooks of
    ``_hooks_kept`` (imports, pickling, IPython's). Returns a function that puts back what changed (the builtins
    first, with dict methods only: the rest calls them; ``put_back.builtins`` does only that); what it cannot
    put back it notes in states.not_put_back, for the check to say (``call``)."""
    import gc
    import os

    import locale
    import signal
    import socket

    put_back_builtins, put_back_hooks = builtins_kept(), _hooks_kept()
    streams = {name: getattr(sys, name) for name in ("stdout", "stderr", "stdin", "displayhook", "excepthook",
                                                    "unraisablehook", "setswitchinterval", "addaudithook",
                                                    "setrecursionlimit")}
    cwd, environ, path, path_list = os.getcwd(), dict(os.environ), sys.path, list(sys.path)
    collecting, callbacks, digits = gc.isenabled(), list(gc.callbacks), sys.get_int_max_str_digits()
    modules, switch, places = dict(sys.modules), sys.getswitchinterval(), locale.setlocale(locale.LC_ALL)
    mask, logging_off = os.umask(0o022), logging.root.manager.disable
    os.umask(mask)
    trace, profile, thread_hook = threading.gettrace(), threading.getprofile(), threading.excepthook
    timers = [which for which in (signal.ITIMER_REAL, signal.ITIMER_VIRTUAL, signal.ITIMER_PROF)
              if signal.getitimer(which) == (0.0, 0.0)] if hasattr(signal, "setitimer") else []
    put_back_limits, put_back_scheduling, put_back_torch = limits_kept(), scheduling_kept(), torch_flags_kept()
    zone = time_zone()
    # (while a check holds the kernel's objects frozen, _garbage_fenced, counting them would take ms: not done)
    thresholds, frozen, stack = gc.get_threshold(), bool(_FROZEN) or gc.get_freeze_count(), threading.stack_size()
    debug, garbage, timeout = gc.get_debug(), len(gc.garbage), socket.getdefaulttimeout()
    faults = faulthandler.is_enabled()
    dlopen = sys.getdlopenflags() if hasattr(sys, "getdlopenflags") else None   # (Unix only)
    put_back_session = session_kept()
    root = logging.root.level, list(logging.root.handlers)
    matplotlib = sys.modules.get("matplotlib")
    rc = dict.copy(matplotlib.rcParams) if matplotlib is not None else None

    def put_back():
        put_back_builtins()
        put_back_hooks()
        for name, value in streams.items():
            if getattr(sys, name) is not value:
                setattr(sys, name, value)
        try:
            if os.getcwd() != cwd:
                os.chdir(cwd)
        except OSError:   # the learner's code removed the folder it moved to
            os.chdir(cwd)
        zone_changed = os.environ.get("TZ") != environ.get("TZ") or time_zone() != zone
        if dict(os.environ) != environ:
            for key in [key for key in os.environ if key not in environ]:
                del os.environ[key]
            os.environ.update(environ)
        if zone_changed:   # (time.tzset: the C library reads TZ again, and time.tzname with it)
            time.tzset()
        if sys.path is not path or sys.path != path_list:
            sys.path = path
            sys.path[:] = path_list
        if gc.isenabled() != collecting:
            (gc.enable if collecting else gc.disable)()
        if gc.callbacks != callbacks:   # one of the learner's would run at every later collection
            gc.callbacks[:] = callbacks
        for name in [name for name, module in modules.items() if sys.modules.get(name, modules) is not module]:
            sys.modules[name] = modules[name]   # a module replaced (or removed): imported anew from the fake
        if sys.getswitchinterval() != switch:
            sys.setswitchinterval(switch)
        if faulthandler.is_enabled() != faults:   # (enabled again to the process's own stderr, as a kernel enables it)
            try:
                faulthandler.enable(file=sys.__stderr__) if faults else faulthandler.disable()
            except (AttributeError, OSError, RuntimeError, ValueError):   # no stderr with a file descriptor
                states.not_put_back.append("faulthandler (enabled or disabled)")
        if locale.setlocale(locale.LC_ALL) != places:
            locale.setlocale(locale.LC_ALL, places)
        if os.umask(mask) != mask:   # (os.umask can only be read by setting it)
            os.umask(mask)
        _logging_put_back(logging_off, root)
        if sys.get_int_max_str_digits() != digits:
            sys.set_int_max_str_digits(digits)
        if threading.gettrace() is not trace:
            threading.settrace(trace)
        if threading.getprofile() is not profile:
            threading.setprofile(profile)
        threading.excepthook = thread_hook
        for which in timers:   # a timer the learner's code set (signal.setitimer, signal.alarm) would end the kernel
            if signal.getitimer(which) != (0.0, 0.0):
                signal.setitimer(which, 0)
        put_back_limits()
        put_back_scheduling()
        if gc.get_threshold() != thresholds:
            gc.set_threshold(*thresholds)
        if not frozen and gc.get_freeze_count():
            gc.unfreeze()
        if gc.get_debug() != debug:   # (and the garbage DEBUG_SAVEALL kept meanwhile is let go)
            gc.set_debug(debug)
            del gc.garbage[garbage:]
        if socket.getdefaulttimeout() != timeout:   # every later socket would time out after it
            socket.setdefaulttimeout(timeout)
        if dlopen is not None and sys.getdlopenflags() != dlopen:
            sys.setdlopenflags(dlopen)
        put_back_session()
        if threading.stack_size() != stack:
            threading.stack_size(stack)
        put_back_torch()
        if rc is not None:
            live_rc = matplotlib.rcParams
            for key, value in rc.items():
                if dict.get(live_rc, key, rc) is not value:
                    dict.__setitem__(live_rc, key, value)   # as it was, already validated
    put_back.builtins = put_back_builtins
    return put_back


def _logging_put_back(off, root):
    """Put back logging's switch (``off``: logging.disable's level) and the root logger's (level, handlers),
    ``root`` (logging.basicConfig(level=DEBUG): every library talks). Both take logging's lock, waited for
    at most LOCK_WAIT s: one a learner's thread still holds is noted in states.not_put_back, for the check to
    say, unless the lock is free once its threads are stopped (``_logging_again``); one a thread that has ended holds
    is let go of (``_gone_owners_let_go``), as the lock its function's own thread held is already (``_locks_let_go``)."""
    if logging.root.manager.disable == off and (logging.root.level, logging.root.handlers) == root:
        return
    _gone_owners_let_go()   # (held by a learner's thread that has ended: let go of, said by _fenced)
    if not _LOGGING_LOCK.acquire(timeout=LOCK_WAIT):
        states.not_put_back.append(_LOGGING_HELD)
        _LOGGING_LATER.append((off, root))   # (tried again once its threads are stopped: _logging_again)
        return
    try:   # (an RLock: logging.disable and setLevel take it again)
        if logging.root.manager.disable != off:
            logging.disable(off)
        if (logging.root.level, logging.root.handlers) != root:
            logging.root.setLevel(root[0])
            logging.root.handlers[:] = root[1]
    finally:
        _LOGGING_LOCK.release()


_LOGGING_HELD = "the root logger's level or logging's switch (logging's lock is held by a thread it started)"
_LOGGING_LATER = []   # (off, root) of a logging put-back that waited for its lock in vain (_logging_again)


def _logging_again():
    """logging's put-back that waited for its lock in vain (``_LOGGING_LATER``), done again once the learner's threads
    are stopped and the locks they held as they ended let go of (``_fenced``): said only if it is in vain again."""
    later = list(_LOGGING_LATER)
    _LOGGING_LATER.clear()
    for off, root in later:
        if _LOGGING_HELD in states.not_put_back:
            states.not_put_back.remove(_LOGGING_HELD)
        _logging_put_back(off, root)
    _LOGGING_LATER.clear()


_CONSTANTS = {}   # (module name, name) -> (the constant, a pickled copy): as a check first saw it


def course_constants():
    """The course's own constants (a helpers module's UPPER_CASE lists, dicts, sets, arrays, tensors
    and tuples of them: a check's reference data, such as qkv.IT_SCORES) saved as first seen; any
    that was changed in place since (``qkv.IT_SCORES[0] = 9``, in a cell or in a learner's function)
    is put back now. Returns a function that does the same again (after a learner's call), and puts back
    the course's caches too (``_caches_kept``: ``model._ROTARY_TABLES``, the array
    ``geometry.compute.glove_arrays()`` returns), their entries as they are now."""
    import pickle

    for module_name, module in _new_course_modules():
        _CACHES.extend(cache for cache in _caches_of(module_name, module) if not any(cache is c for c in _CACHES))
        for name, value in list(vars(module).items()):
            if name.isupper() and not name.startswith("_") and (   # (a _NAME is a cache or a record: state)
                    isinstance(value, (list, dict, set, tuple, np.ndarray)) or hasattr(value, "detach")):
                key = (module_name, name)
                if key not in _CONSTANTS:
                    try:
                        _CONSTANTS[key] = (value, pickle.dumps(value, 5))
                    except Exception:   # noqa: BLE001 (a table of functions: no data to keep)
                        _CONSTANTS[key] = (value, None)
    kept = tuple(_CONSTANTS.items())   # (this put-back's own copy: a learner's code may empty _CONSTANTS meanwhile)

    def put_back_constants():
        for (module_name, name), (value, saved) in kept:
            if saved is None:
                continue
            try:
                same = pickle.dumps(value, 5) == saved
            except Exception:   # noqa: BLE001 (a learner put something in it that pickle cannot write)
                same = False
            if not same and not _in_place(value, pickle.loads(saved)):
                setattr(sys.modules[module_name], name, pickle.loads(saved))

    def put_back():
        put_back_constants()
        put_back_caches()
    put_back_constants()
    put_back_caches = _caches_kept()
    return put_back


_CACHES = []   # the course's caches, found as a check first saw their modules (``_caches_of``)
_CACHED = {}   # id(an array, tensor, dict or list a cache holds) -> (it, its state as a check first saw it): ``_seen``
_RECORDS = ("helpers.exercises", "helpers.putback", "helpers.states")   # the checks' own modules: their dicts and
# lists are records (of what a check saw, refused, ...), not caches (and helpers.grading's: ``_new_course_modules``
# leaves it out)


def _caches_of(module_name, module):
    """The course's caches in ``module`` (none in _RECORDS): its dicts and lists that are no constant, as (module, name)
    (``model._ROTARY_TABLES``, ``scaling.compute._pool``), and its lru_cache'd functions of no parameters
    (``geometry.compute.glove_arrays``). An lru_cache'd function with parameters is left out (its entries are out
    of Python's sight): the course's hold no data (``smollm2._read``'s file, ``exercises._torch_library_files``'
    names) or are a check's own, which the check's tripwire guards (``gpt.checks._loop_reference``)."""
    if module_name in _RECORDS:
        return []
    found = []
    for name, value in list(vars(module).items()):
        if type(value) in (dict, list) and not name.startswith("__") and not (name.isupper() and name[0] != "_"):
            found.append((module, name))
        elif type(value) is functools._lru_cache_wrapper and value.__dict__.get("__module__") == module_name:
            code = getattr(value.__dict__.get("__wrapped__"), "__code__", None)
            if code is not None and code.co_argcount == code.co_kwonlyargcount == 0 \
                    and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS):
                found.append(value)
    return found


def _caches_kept():
    """The course's caches (``_CACHES``), saved now: the entries of each dict and list, and whether each lru_cache
    holds its result; and what they hold (arrays, tensors, and the dicts and lists in an lru_cache's result) as
    a check first saw it (``_seen``: a copy; read-only flags are no protection, a learner's code may turn them
    off). Returns a function that puts back an entry replaced, added or removed, and what each holds: an array's
    values and flags, a tensor's values and state (``_tensor_kept``), a dict's or list's entries. A cache whose
    contents cannot be put back in place, or that was filled meanwhile (what it holds was never seen), is emptied
    instead: the course's code fills it again when asked."""
    saved = [(cache, _cache_state(cache)) for cache in _CACHES]
    held = {}
    for cache, _ in saved:
        for part in _cache_parts(cache):
            seen = _CACHED.get(id(part))
            held[id(part)] = seen if seen is not None and seen[0] is part else _seen(part)
    _CACHED.clear()   # (what no cache holds any more is let go)
    _CACHED.update(held)

    def put_back():
        for cache, state in saved:
            _put_back_cache(cache, state)
    return put_back


def _cache_state(cache):
    """What ``_put_back_cache`` puts back of ``cache`` (one of ``_CACHES``): a module's dict or list and its entries
    (the object and a shallow copy), or whether an lru_cache holds its result."""
    if type(cache) is tuple:
        value = vars(cache[0]).get(cache[1])
        return value, _shallow(value) if type(value) in (dict, list) else None
    return cache.cache_info().currsize > 0


def _cache_values(cache):
    """The entries ``cache`` (one of ``_CACHES``) holds now: a dict's values, a list's entries, an lru_cache's
    result (read from it: a function of no parameters that has run returns it from its cache, running nothing)."""
    if type(cache) is tuple:
        value = vars(cache[0]).get(cache[1])
        return list(dict.values(value)) if type(value) is dict else list(value) if type(value) is list else []
    return [cache()] if cache.cache_info().currsize > 0 else []


def _cache_parts(cache):
    """What ``cache`` holds that can change in place: the arrays (but of Python objects), the tensors in the CPU's
    memory, and the dicts and lists among its entries and in them (``_reachable``'s bounds)."""
    torch = sys.modules.get("torch")
    tensor = torch.Tensor if torch is not None else ()
    return [value for value in _reachable(_cache_values(cache), object)
            if type(value) in (dict, list) or type(value) is np.ndarray and not value.dtype.hasobject
            or tensor and issubclass(type(value), tensor) and value.device.type == "cpu"
            and value.layout == torch.strided and not value.is_quantized]


def _seen(part):
    """(``part``, its state now), for ``_CACHED``: an array's copy, its flag ``writeable`` and its layout; a
    tensor's copy and ``_tensor_kept``; a dict's or list's entries."""
    if type(part) in (dict, list):
        return part, _shallow(part)
    if type(part) is np.ndarray:
        return part, part.copy(), part.flags.writeable, (part.shape, part.dtype, part.strides)
    return part, part.detach().clone(), _tensor_kept(part)


def _put_back_cache(cache, state):
    """Put back ``cache`` (one of ``_CACHES``) as ``_cache_state`` saw it (``state``), and what it holds as a check
    first saw it (``_put_back_part``); empty it where that cannot be done."""
    if type(cache) is tuple:
        module, name = cache
        value, entries = state
        if vars(module).get(name, state) is not value:
            setattr(module, name, value)
        if entries is not None and not _same_entries(value, entries):
            _in_place(value, entries)
        forget = value.clear if type(value) in (dict, list) else None
    else:
        if not state and cache.cache_info().currsize:   # filled while the learner's code ran: never seen
            cache.cache_clear()
        forget = cache.cache_clear
    if forget is not None:
        restored = [_put_back_part(part) for part in _cache_parts(cache)]   # (every one: a view made of it holds it too)
        if not all(restored):
            forget()


def _put_back_part(part):
    """Put back ``part`` (what a cache holds) as a check first saw it (``_CACHED``); False where that cannot be
    done in place (never seen, or an array's layout or a tensor's shape changed)."""
    seen = _CACHED.get(id(part))
    if seen is None or seen[0] is not part:
        return False
    if type(part) in (dict, list):
        return _same_entries(part, seen[1]) or _in_place(part, seen[1])
    if type(part) is np.ndarray:
        _, copy, writeable, layout = seen
        if (part.shape, part.dtype, part.strides) != layout or not (_same(part, copy) or _in_place(part, copy)):
            return False
        if part.flags.writeable != writeable:
            with contextlib.suppress(ValueError):   # (a view of memory that cannot be written: it was never writeable)
                part.setflags(write=writeable)
        return part.flags.writeable == writeable
    _, copy, put_back_state = seen
    put_back_state.kind()
    if not (_same(part, copy) or _in_place(part, copy)):
        return False
    put_back_state()
    return True


_SEEN_MODULES = set()   # the course's modules whose constants are in _CONSTANTS


def _new_course_modules():
    """The course's modules (but grading, whose STATE is its state) not yet in _SEEN_MODULES, now in it."""
    if len(_SEEN_MODULES) == sum(1 for name in sys.modules if name.startswith("helpers")):
        return []
    found = [(name, module) for name, module in list(sys.modules.items())
             if name.startswith("helpers") and name not in _SEEN_MODULES and module is not None]
    _SEEN_MODULES.update(name for name, _ in found)
    return [(name, module) for name, module in found if name != "helpers.grading"]


def _in_place(live, saved):
    """Make ``live`` equal ``saved`` again without replacing it (other modules hold it too); False
    where that cannot be done (a tuple's own entries, an array of another shape)."""
    if isinstance(live, (str, bytes, int, float, complex, type(None))):
        return type(live) is type(saved) and live == saved
    if isinstance(live, list):
        live[:] = saved
    elif isinstance(live, (dict, set)):
        live.clear()
        live.update(saved)
    elif isinstance(live, np.ndarray) and live.shape == saved.shape and live.dtype == saved.dtype:
        try:
            if not live.flags.writeable:   # (only then: NumPy refuses to set it on a view of torch's memory)
                live.setflags(write=True)
        except ValueError:   # a view of memory that cannot be written: replaced instead
            return False
        np.copyto(live, saved)
    elif hasattr(live, "detach") and tuple(live.shape) == tuple(saved.shape) and live.dtype == saved.dtype:
        live.detach().copy_(saved)
    elif isinstance(live, tuple) and len(live) == len(saved):
        return all(_in_place(a, b) for a, b in zip(live, saved))
    else:
        return False
    return True


MAX_REACH_DEPTH = 4   # containers in containers a check looks into for a notebook's models (chapter 04's ``runs``, a
# list of dicts of models, is 2 deep)
MAX_REACH_ENTRIES = 100   # the entries of each container it looks at (the first ones)
MAX_REACH_VALUES = 10_000   # the values it looks at in all (a few ms)
_DICTS = (dict, collections.OrderedDict, collections.defaultdict)


def _reachable(values, leaf):
    """``values`` and what the containers among them hold, breadth first (those nearest first): the values of dicts,
    the entries of lists and tuples, and the attributes of the course's own objects (an explorer's models), up to
    MAX_REACH_DEPTH containers deep, the first MAX_REACH_ENTRIES entries of each and MAX_REACH_VALUES values in all,
    each container once; an instance of ``leaf`` (a class: nn.Module) is not looked into. Read by type, with dict's
    own methods and the course's classes' own ``__dict__`` (no code of the learner's runs)."""
    level, seen, left = list(values), set(), MAX_REACH_VALUES
    for depth in range(MAX_REACH_DEPTH + 1):
        inner = []
        for value in level[:left]:
            yield value
            entries = None if depth == MAX_REACH_DEPTH or id(value) in seen else _entries_of(value, leaf)
            if entries is not None:
                seen.add(id(value))
                inner += itertools.islice(entries, MAX_REACH_ENTRIES)
        left -= min(len(level), left)
        level = inner
        if not level or left <= 0:
            return


def _entries_of(value, leaf):
    """What the container ``value`` holds (``_reachable``), or None when it is none (or an instance of ``leaf``)."""
    kind = type(value)
    if _one_of(kind, _DICTS):
        return dict.values(value)
    if kind is list or kind is tuple:
        return value
    if issubclass(kind, leaf) or not _is_courses(kind):
        return None
    slot = _own_attribute(kind, "__dict__")   # (the course's class's own: a property put there would run code)
    held = slot.__get__(value) if type(slot) is types.GetSetDescriptorType else None
    return dict.values(held) if type(held) is dict else None


_TENSOR_HOOKS = ("_backward_hooks", "_post_accumulate_grad_hooks")   # where a tensor holds its hooks (``_tensor_kept``)


def _tensor_kept(t):
    """What a learner's code can change on the tensor ``t`` (a model's weight, a cached table) besides its values,
    saved now: its class, requires_grad, .grad, the hooks registered on it (``t.register_hook``,
    ``register_post_accumulate_grad_hook``: held in the tensor itself, in no module's dict; each would run in every
    later backward pass) and the attributes set on it (``cat.E.foo = 1``). Returns a function that puts them back,
    the gradient last (put the values back first: it must fit them); ``put_back.kind`` puts back the class alone
    (first of all: a tensor class of the learner's runs its own code in any torch call on the tensor)."""
    kind, requires_grad, grad = type(t), t.requires_grad, t.grad
    hooks = [(name, getattr(t, name), _shallow(getattr(t, name))) for name in _TENSOR_HOOKS if hasattr(t, name)]
    attributes = vars(t).copy()

    def put_back_kind():
        if type(t) is not kind:
            t.__class__ = kind

    def put_back():
        put_back_kind()
        for name, held, contents in hooks:
            _put_back_hooks(t, name, held, contents)
        if not _same_entries(vars(t), attributes):
            vars(t).clear()
            vars(t).update(attributes)
        if t.requires_grad != requires_grad:
            t.requires_grad_(requires_grad)
        if t.grad is not grad:   # a backward() in the learner's code: its gradients go, and their memory
            t.grad = grad
    put_back.kind = put_back_kind
    return put_back


def _put_back_hooks(t, name, held, contents):
    """Put back the hooks of the tensor ``t`` in its attribute ``name`` (``_TENSOR_HOOKS``): ``held`` (their dict,
    or None) with ``contents`` (its entries then). A dict put in its place is emptied first: torch's C++ side keeps
    calling the hooks of the last dict it was given (setting None does not let go of a post-accumulate one), so
    emptied, that one calls none."""
    now = getattr(t, name)
    if now is held and (held is None or _same_entries(held, contents)):
        return
    if now is not held and issubclass(type(now), dict):
        _dict_methods(now).clear(now)
    if held is None:
        setattr(t, name, collections.OrderedDict())   # (torch's C++ side then holds this empty one; the tensor, None)
        setattr(t, name, None)
    else:
        _dict_methods(held).clear(held)
        for key, value in contents.items():
            _dict_methods(held).__setitem__(held, key, value)
        setattr(t, name, held)


def _shallow(entries):
    """A shallow copy of the dict or list ``entries`` (its entries, not copied themselves); None as it is."""
    if entries is None:
        return None
    return dict(_dict_methods(entries).items(entries)) if issubclass(type(entries), dict) else list(entries)


def _dict_methods(entries):
    """The class whose methods read and write the dict ``entries``: OrderedDict's for one (dict's own would miss
    its order, and leave it half cleared), else dict's (so that no method of a dict class of the learner's runs)."""
    return collections.OrderedDict if issubclass(type(entries), collections.OrderedDict) else dict


def _same_entries(live, saved):
    """Whether the dict or list ``live`` holds exactly ``saved``'s entries (the same objects, in the same order:
    compared by identity, so no entry's own ``__eq__`` runs)."""
    if len(live) != len(saved):
        return False
    if issubclass(type(live), dict):
        kind = _dict_methods(live)
        return all(map(_IS, kind.keys(live), saved)) and all(map(_IS, kind.values(live), saved.values()))
    return all(map(_IS, live, saved))


def _same(tensor, copy):
    """True if ``tensor`` (or a NumPy array) equals its copy (same shape and dtype, every entry equal, NaN where both
    are NaN): compared directly, as the copy is at hand (no hash of either is needed)."""
    import torch

    if isinstance(tensor, np.ndarray):
        return tensor.shape == copy.shape and tensor.dtype == copy.dtype and (bool(np.array_equal(tensor, copy)) or
                                                                              tensor.dtype.kind in "fc" and bool(np.array_equal(tensor, copy, equal_nan=True)))
    if tensor.shape != copy.shape or tensor.dtype != copy.dtype:
        return False
    tensor = tensor.detach()
    if torch.equal(tensor, copy):
        return True
    return tensor.is_floating_point() and bool(((tensor == copy) | (tensor.isnan() & copy.isnan())).all())


LOCK_WAIT = 0.5   # seconds the check waits for a process-wide lock another thread holds (threading and logging hold
# theirs for microseconds) before taking it as left behind
_LOGGING_LOCK = logging._lock   # logging's module lock, as the course found it (a learner may rebind the name)
_THREADING_LOCKS = tuple((f"threading's lock of the threads {what} (threading.{name})", vars(threading)[name])
                         for what, name in (("being started", "_active_limbo_lock"),
                                            ("ending", "_shutdown_locks_lock"))
                         if name in vars(threading))   # (an RLock or a plain lock, or none, by Python's version)
_RLOCKS = (type(threading.RLock()), threading._PyRLock)   # (the real ones: a learner's look-alike is not called)
_PLAIN_LOCK = type(threading.Lock())


def _process_locks():
    """(name, lock) for the process-wide locks the course's code and every later cell take: threading's, logging's
    module lock and the lock of every logging handler made (logging's own list of them), read without running a
    learner's code (a handler of theirs: its class's name only)."""
    yield from _THREADING_LOCKS
    yield "logging's module lock (logging._lock)", _LOGGING_LOCK
    handlers = logging.__dict__.get("_handlerList")
    for ref in list(handlers) if type(handlers) is list else ():
        handler = ref() if type(ref) is weakref.ref else None
        lock = inspect.getattr_static(handler, "lock", None)
        if type(lock) in _RLOCKS:
            yield f"the lock of logging's handler {class_name(type(handler))}", lock


def _left_taken(lock):
    """Let go of ``lock`` if this thread's ended call left it taken; whether it did. An RLock says whether this
    thread holds it (let go of as many times as it was taken, at once); a plain lock does not: one still taken
    LOCK_WAIT s later is taken as left behind (any thread may let go of a plain lock)."""
    if type(lock) in _RLOCKS:
        if not lock._is_owned():
            return False
        lock._release_save()
        return True
    if type(lock) is not _PLAIN_LOCK or not lock.locked():
        return False
    if lock.acquire(timeout=LOCK_WAIT):   # another thread's, let go of meanwhile: given back
        lock.release()
        return False
    with contextlib.suppress(RuntimeError):   # (let go of by its holder just now)
        lock.release()
    return True


_MODULE_LOCK = importlib._bootstrap._ModuleLock   # importlib's per-module lock, and its own release (a learner's
_MODULE_LOCK_RELEASE = _MODULE_LOCK.release      # code may replace either)


def _module_locks_let_go(gone=None):
    """Let go of importlib's per-module locks (``importlib._bootstrap._module_locks``: an ``import x`` takes x's, and a
    learner's code may take one itself, ``_get_module_lock(name).acquire()``) held by this thread, by importlib's own
    release, as many times as it took each; with ``gone`` (the idents of the threads running now), those held by a
    thread that no longer runs instead (their count set to 0 as release does, where importlib keeps it as a number).
    Every later import of that module would wait for it for ever. Returns their names."""
    locks = vars(importlib._bootstrap).get("_module_locks")
    me, let_go = threading.get_ident(), []
    for ref in list(dict.values(locks)) if type(locks) is dict else ():
        lock = ref() if type(ref) is weakref.ref else None
        if type(lock) is not _MODULE_LOCK:
            continue
        owner = vars(lock).get("owner")
        if gone is None and owner == me:
            with contextlib.suppress(RuntimeError):   # (let go of as many times as it was taken)
                while vars(lock).get("owner") == me:
                    _MODULE_LOCK_RELEASE(lock)
        elif gone is not None and type(owner) is int and owner not in gone and type(vars(lock).get("count")) is int:
            with lock.lock:   # (as importlib's release does, for a thread that cannot call it any more)
                if lock.owner != owner:
                    continue
                lock.count, lock.owner = 0, None
                if lock.waiters:
                    lock.waiters -= 1
                    lock.wakeup.release()
        else:
            continue
        let_go.append(f"importlib's lock of the module {vars(lock).get('name')!s:.80} "
                      "(importlib._bootstrap._ModuleLock)")
    return let_go


_LOCKS_LET_GO = []   # (name, ident of the ended thread that held it): locks _gone_owners_let_go let go of, for _fenced


def _rlock_owner(lock):
    """The ident of the thread holding the RLock ``lock`` (0 or None: none), read without calling it (the C one's repr
    says it); None for any other lock."""
    if type(lock) is threading._PyRLock:
        return lock._owner
    if type(lock) is _RLOCKS[0]:
        owner = repr(lock).partition(" owner=")[2].partition(" ")[0]
        return int(owner) if owner.isdigit() else None
    return None


def _gone_owners_let_go():
    """Let go of the RLocks of ``_process_locks`` (logging's, its handlers') and importlib's per-module locks held by a
    thread that no longer runs: a learner's thread that ended, or was stopped, holding one (``threading.Thread(
    target=logging._lock.acquire)``); every later cell that logs would wait for it for ever, and no thread can let go
    of it but by ``_release_save`` (which the C RLock allows from any thread). Each is noted in ``_LOCKS_LET_GO``, with
    its holder's ident, for ``_fenced`` to say."""
    running = sys._current_frames().keys()
    for name, lock in _process_locks():
        owner = _rlock_owner(lock)
        if owner and owner not in running:   # (its ident reused by a new thread meanwhile: left, as running)
            with contextlib.suppress(RuntimeError):
                lock._release_save()
                _LOCKS_LET_GO.append((name, owner))
    _LOCKS_LET_GO.extend((name, None) for name in _module_locks_let_go(gone=running))


_FROZEN = []   # not empty while a check holds the objects made before it frozen (helpers.exercises._garbage_fenced)


# ------------------------------------------------------------ threads: which are the course's, and stopping the others


class _ThreadLeft(Stop, SystemExit):
    """Raised in a thread a learner's function left running (a SystemExit: its thread ends without a traceback)."""


def threads_now():
    """{ident: its threading.Thread (None: a ``_thread`` one)} of every Python thread running now: what ran before
    a learner's code, told apart afterwards by the very thread object (an ident is reused as soon as its thread
    ends, so a learner's thread may have the ident of one that ran before)."""
    return {ident: threading._active.get(ident) for ident in sys._current_frames()}


_NOT_BEFORE = object()   # (no thread of ``before``)


def _installed_places():
    """The folders of the Python installation: its standard library and installed packages (a venv's too)."""
    import site
    import sysconfig

    places = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sysconfig.get_paths().values()}
    user = getattr(site, "USER_SITE", None)
    return tuple(sorted({os.path.join(place, "") for place in places | ({user} if user else set()) if place}))


_INSTALLED = _installed_places() + ("<frozen ",)   # (a frozen module of the standard library: importlib's own)


_KERNEL_LIBRARIES = frozenset({"zmq", "ipykernel", "tornado", "IPython", "matplotlib", "matplotlib_inline",
                               "jupyter_client", "comm", "ipywidgets", "traitlets"})
# the libraries of the kernel, which may start a thread of their own while a learner's function runs (on its behalf)


def _library_thread(thread):
    """Whether ``thread`` is one of a kernel's library's own (``_KERNEL_LIBRARIES``), which a check neither takes
    for the learner's nor stops: pyzmq starts its garbage collector's thread the first time the kernel sends a
    message over its copy threshold (a large display, a plot), which may be inside a learner's call; stopped, it
    breaks every later large output. Told by the thread's class and code, not its name (a learner's may take any):
    its class is the one its module (an installed file of such a library) holds under its name, and its ``run`` the
    library's own code (not threading.Thread's, which runs any target, nor a run set on the thread itself). A
    learner's subclass of it is the learner's class (caught); a learner's code that starts such a thread itself
    runs the library's code, not its own; one that puts a class of its own into a library's module, or a run of
    its own into the library's class under the library's name, is out of reach (as a changed library is)."""
    cls = type(thread)
    name = getattr(cls, "__module__", None)
    module = sys.modules.get(name) if type(name) is str else None
    run = vars(cls).get("run") if "run" not in vars(thread) else None
    code = getattr(run, "__code__", None)
    return module is not None and name.partition(".")[0] in _KERNEL_LIBRARIES and \
        getattr(module, cls.__qualname__, None) is cls and \
        str(getattr(module, "__file__", "")).startswith(_INSTALLED) and \
        code is not None and code.co_filename == getattr(module, "__file__", None)


def stop_threads(before, started, wait=ESCALATE_AFTER + 0.5):
    """Stop each thread the learner's function left running (it would keep the CPU busy for every later
    cell): every Python thread that did not run ``before`` (``threads_now()`` then: compared by thread object;
    a collection of idents: the threads that have them now count as before), but the check's own and a kernel's
    library's (``_library_thread``), also one started with ``_thread``, which ``threading`` does not list
    (``started``). Each is stopped (states.Stoppable, with _ThreadLeft), and ends silently (``_quiet``).
    Returns (how many were left, how many still run after ``wait`` seconds), for ``_no_threads_left`` to say."""
    learners = dict(started)
    if not isinstance(before, dict):
        before = {ident: threading._active.get(ident) for ident in before}
    left = {}   # ident -> a function saying whether that very thread still runs (an ident is reused at once)
    for ident in sys._current_frames():   # (a thread threading does not know, nor the learner's function
        thread = threading._active.get(ident)   # started, is another library's: left alone)
        if before.get(ident, _NOT_BEFORE) is not thread and ident not in learners and thread is not None and \
                not _course_thread(thread) and not _library_thread(thread):
            left[ident] = lambda thread=thread, ident=ident: threading._active.get(ident) is thread and thread.is_alive()
    left.update({ident: runs for ident, runs in learners.items() if runs() is not False})
    for ident, runs in left.items():
        _quiet(threading._active.get(ident))
        Stoppable(_ThreadLeft, ident, runs).stop(start=own_thread)
    deadline = time.monotonic() + wait if left else 0   # (a bare except: is stopped too)
    while time.monotonic() < deadline and any(runs() is not False for runs in left.values()):
        time.sleep(0.02)
    return len(left), sum(runs() is not False for runs in left.values())


def _quiet(thread):
    """Make the threading.Thread ``thread`` (None: a ``_thread`` one, which ends silently on a SystemExit) end
    without a traceback when _ThreadLeft stops it: threading prints any exception but SystemExit itself
    (compared by identity) through the thread's own ``_invoke_excepthook``, which is wrapped to pass over
    a _ThreadLeft and hand anything else on."""
    hook = getattr(thread, "_invoke_excepthook", None)
    if hook is None:
        return

    def invoke(thread):
        if not isinstance(sys.exc_info()[1], _ThreadLeft):
            hook(thread)
    thread._invoke_excepthook = invoke


def _course_thread(thread):
    """Whether ``thread`` (a threading.Thread, or None) is the course's own (a check's ``_Run``, a kept file's
    import, a watchdog) or tqdm's progress-bar monitor, the one library thread a right answer may start
    (its exact class: a learner's class named like it is not it)."""
    monitor = getattr(sys.modules.get("tqdm._monitor"), "TMonitor", None)
    return thread in _OWN_THREADS or \
        monitor is not None and type(thread) is monitor


_OWN_THREADS = weakref.WeakSet()   # the checks' own threads (not told apart by name: a learner's may take any)


class _Thread(threading.Thread):
    """threading.Thread with its own copy of every method Thread has now: a learner's function that
    replaces one (``threading.Thread.join = ...``) cannot change how the check waits for it, or for its
    own threads, before that is put back (PATCHABLE_CLASSES)."""


for _name, _method in vars(threading.Thread).items():
    if isinstance(_method, types.FunctionType):
        setattr(_Thread, _name, _method)
del _name, _method


def own_thread(target, name):
    """Start a daemon thread of the check's own, running ``target()``; return it."""
    thread = _Thread(target=target, name=name, daemon=True)
    _OWN_THREADS.add(thread)
    thread.start()
    return thread


@contextlib.contextmanager
def _threads_started(started, learner):
    """While the learner's function runs, ``_thread.start_new_thread`` (which ``threading`` does not
    see, and whose thread may not have begun when the function returns) notes in ``started`` each
    thread's ident and a function saying whether it runs: None before it has begun, then whether the
    lock Python releases when that very thread ends (its sentinel, as threading's own) is held.
    Only a thread the learner's code starts is noted: one started from ``learner``, the thread that runs it
    (a threading.Thread: the live run's loop runs in its caller's), or a function of the current thread
    saying whether it runs a learner's code (``exercises._learners_thread``, ``learner._importing``)."""
    import _thread

    original = _thread.start_new_thread
    if not hasattr(_thread, "_set_sentinel"):   # (Python 3.13 has none: such threads are not watched)
        yield
        return
    if isinstance(learner, threading.Thread):
        learner = functools.partial(_IS, learner)

    def start(function, args=(), kwargs=None):
        if not learner(_CURRENT_THREAD()):   # another thread's, meanwhile: not the learner's
            return original(function, args, kwargs or {})
        sentinel = []

        def run(*args, **kwargs):
            lock = _thread._set_sentinel()   # released by Python when this thread's state is cleared
            lock.acquire()
            sentinel.append(lock)
            return function(*args, **kwargs)
        ident = original(run, args, kwargs or {})
        started.append((ident, lambda: sentinel[0].locked() if sentinel else None))
        return ident

    _thread.start_new_thread = _thread.start_new = start
    try:
        yield
    finally:
        _thread.start_new_thread = _thread.start_new = original


_CURRENT_THREAD = threading.current_thread   # (the check's own: a learner's code may replace threading.current_thread)
