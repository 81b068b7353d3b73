"""Global states a learner's code may change for every later cell, saved and put back: the random
generators of Python, NumPy and torch, and torch's default dtype. The exercise checks keep them
around a learner's call (helpers.exercises), and so does the import of a kept piece (helpers.learner).
The time limit on a learner's code in a thread (``Stoppable``), which the same three keep, and the live
run (helpers.gpt.compute). A model's parts (modules, parameters, submodules: ``parts_of``), which a check
and a training run put back. And a tensor's state in short (``digest``), by which a check and an explorer tell a changed tensor
(a check with ``strong``, a hash a learner's code cannot match). And the process state a learner's function may
change for good (the builtins, resource limits, time zone, session, CPU affinity and priority, torch's switches),
each saved and put back by a check, with the guarded stand-ins (``guarded_setrlimit``, ``no_setsid``,
``no_interop_threads``) a check puts in place while the function runs."""
import contextlib
import ctypes
import functools
import _thread
import hashlib
import operator
import os
import random
import sys
import sysconfig
import threading
import time
import zlib

try:
    import resource
except ImportError:   # (Windows)
    resource = None

import numpy as np


def random_states():
    """The random states of ``random``, NumPy and torch (if imported), saved now; returns a function
    that puts them back (a learner's function that seeds them leaves later cells' draws alone)."""
    states = [(random.setstate, random.getstate()), (np.random.set_state, np.random.get_state())]
    torch = sys.modules.get("torch")
    if torch is not None:
        states.append((torch.set_rng_state, torch.get_rng_state()))

    def put_back():
        for put, state in states:
            put(state)
    return put_back


def default_dtype(dtype):
    """torch's default dtype: set it to ``dtype`` (None: float32) and return the one before; None
    and nothing set when torch was never imported (the chapters without it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype or torch.float32)
    return before


def torch_modes_kept():
    """torch's default dtype, deterministic mode (with its warn_only) and anomaly mode (with its check_nan), saved
    now (nothing when torch was never imported); returns a function that puts back each one that changed (only
    then: setting the deterministic mode imports torch's compiler, 800 modules)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return lambda: None
    dtype = torch.get_default_dtype()
    deterministic = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    anomaly = torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()

    def put_back():
        if torch.get_default_dtype() != dtype:
            torch.set_default_dtype(dtype)
        if (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()) \
                != deterministic:
            torch.use_deterministic_algorithms(deterministic[0], warn_only=deterministic[1])
        if (torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()) != anomaly:
            torch.set_anomaly_enabled(*anomaly)
    return put_back


@contextlib.contextmanager
def course_modes(grad=True, name=None):
    """Within the block torch's ambient modes are the ones the course's code is written for, whatever cell
    wraps the call (``with torch.no_grad():``, ``torch.inference_mode()``, ``with torch.device("meta"):``,
    ``torch.set_default_device``, ``torch.autocast("cpu", ...)``): CPU autocast off, the default device the CPU
    (tensors the code makes land there), and with ``grad`` gradients on and inference mode off (without
    ``grad`` both left as they are: a measure under no_grad stays so). ``name``: a function that takes
    gradients, refused in one sentence inside torch.inference_mode() instead (the tensors made there cannot
    be saved for a backward pass). Each mode is entered only when it differs (no cost in a plain cell) and
    put back on exit, also after an error. Usable as a decorator. Nothing when torch was never imported."""
    torch = sys.modules.get("torch")
    with contextlib.ExitStack() as modes:
        if torch is not None:
            if grad and torch.is_inference_mode_enabled():
                if name is not None:
                    from .errors import fail
                    fail(f"{name} should be called outside torch.inference_mode() (it takes gradients), but it "
                         "was called inside it")
                modes.enter_context(torch.inference_mode(False))
            if grad and not torch.is_grad_enabled():
                modes.enter_context(torch.enable_grad())
            if torch.is_autocast_enabled("cpu"):
                modes.enter_context(torch.autocast("cpu", enabled=False))
            if _default_device_set(torch):
                modes.enter_context(torch.device("cpu"))
        yield


def on_the_cpu(function):
    """``function`` (a model's forward, a part's) run as ``course_modes(grad=False)`` runs it, the CPU and no autocast
    whatever cell wraps the call, and with float32 as torch's default dtype (a seeded draw gives the Book's numbers
    after a cell's ``torch.set_default_dtype``; the cell's dtype put back after, also after an error); at the cost of
    three flag reads (about a microsecond) when none is in force, as in a plain cell: a forward is called thousands
    of times, and a small model's pass takes well under a millisecond."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        torch = sys.modules["torch"]
        if torch.get_default_dtype() is torch.float32 and not torch.is_autocast_enabled("cpu") \
                and not _default_device_set(torch):
            return function(*args, **kwargs)
        dtype = default_dtype(None)
        try:
            with course_modes(grad=False):
                return function(*args, **kwargs)
        finally:
            default_dtype(dtype)
    return call


def _default_device_set(torch):
    """Whether a default device other than the CPU is in force (``with torch.device("meta"):``,
    ``torch.set_default_device``: a DeviceContext among torch's function modes), read from the modes themselves, not
    by calling torch (which a counting mode, ``sampling.op_count``, would count), and only when a mode is active."""
    device = sys.modules.get("torch.utils._device")   # (imported by torch the first time a default device is set)
    if device is None or not torch._C._len_torch_function_stack():
        return False
    if not hasattr(torch.overrides, "_get_current_function_mode_stack"):
        return torch.get_default_device().type != "cpu"   # (a torch without it: asked)
    for mode in reversed(torch.overrides._get_current_function_mode_stack()):   # the innermost one is in force
        if isinstance(mode, device.DeviceContext):
            return torch.device(mode.device).type != "cpu"
    return False


def parts_of(model):
    """[(owner, its class, its attributes)] for every module of ``model`` (an nn.Module) and its cfg: the
    dicts among the attributes (parameters, buffers, submodules, hooks) copied, so that a part swapped,
    deleted or added later, or a class changed, can be put back (``put_back_parts``). Values are not copied."""
    cfg = getattr(model, "cfg", None)
    owners = list(model.modules()) + ([cfg] if hasattr(cfg, "__dict__") else [])
    return [(owner, type(owner), {k: (v.copy() if isinstance(v, dict) else v) for k, v in vars(owner).items()})
            for owner in owners]


def put_back_parts(parts):
    """Put each owner of ``parts_of`` back: its class, and exactly the attributes it had (the same dict object)."""
    for owner, kind, attributes in parts:
        if type(owner) is not kind:
            owner.__class__ = kind
        held = vars(owner)
        held.clear()
        held.update(attributes)


def digest(tensor, strong=False):
    """A tensor's shape, dtype and a checksum of its bytes: equal digests, equal tensors. The checksum is
    CRC-32 (the real model's 538 MB in about 0.4 s), which code can fool on purpose (CRC is linear: changing
    4 bytes puts any CRC back), so a cache keyed on it trusts only the course's own code; ``strong``: SHA-256
    instead (about 1 s for those 538 MB), which no one can match with other bytes: for a check that guards
    its state against a learner's code."""
    shape, flipped, arr = _bytes_of(tensor)
    return shape, flipped, arr.dtype, checksum(arr, strong)


def _bytes_of(tensor):
    """(shape, flipped, arr): a tensor's bytes as ``digest`` and ``digests`` read them, without a copy: its NumPy
    array (a bfloat16's bits read as int16: NumPy has no bfloat16), transposed when it is stored transposed
    (``flipped``: a transposed weight is hashed as it is stored), else as it is (``checksum`` copies it when it is
    not in one piece)."""
    tensor = tensor.detach().cpu()
    if str(tensor.dtype) == "torch.bfloat16":
        tensor = tensor.view(sys.modules["torch"].int16)
    arr = tensor.numpy()
    shape, flipped = arr.shape, not arr.flags.c_contiguous and arr.T.flags.c_contiguous
    return shape, flipped, arr.T if flipped else arr


def checksum(arr, strong=False):
    """CRC-32, or with ``strong`` SHA-256, of a NumPy array's bytes (copied first if they are not in one piece)."""
    data = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    return hashlib.sha256(data).digest() if strong else zlib.crc32(data)


PARALLEL_BYTES = 2**25   # tensors holding more bytes than this in all are hashed by digests on several threads
_START_THREAD, _NEW_LOCK = _thread.start_new_thread, _thread.allocate_lock   # (the course's own, taken at import)


def usable_cpus():
    """How many CPUs this process may keep busy at once: those it may run on (``os.sched_getaffinity``), at most
    its control group's CPU quota (``cpu.max``, cgroup v2, or ``cpu.cfs_quota_us``, v1: a container such as
    Binder's may see every CPU of its host and have the time of one or two), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    for path, split in (("/sys/fs/cgroup/cpu.max", None), ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "period")):
        try:
            with open(path) as file:
                fields = file.read().split()
            if split:
                with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as file:
                    fields.append(file.read().strip())
            quota, period = int(fields[0]), int(fields[1])
        except (OSError, ValueError, IndexError):   # (no such file, "max", -1: no quota)
            continue
        if quota > 0 and period > 0:
            cpus = min(cpus, -(-quota // period))
    return max(1, cpus)


def _hashing_threads():
    """How many threads digests hashes on: the CPUs this process may keep busy (``usable_cpus``), at most 4."""
    return max(1, min(4, usable_cpus()))


def digests(tensors, strong=False):
    """{name: digest(tensor, strong)} of a dict {name: tensor}, the very values ``digest`` gives. Each tensor's
    bytes are read in this thread, as ``digest`` reads them (the same order, the same errors); with ``strong``
    and more than PARALLEL_BYTES in all (the real model's 538 MB), their SHA-256s are then taken on up to
    ``_hashing_threads()`` threads at once, this one among them (hashlib lets go of the GIL while it hashes a
    large buffer: on 2 cores about half the time). The other threads are started with ``_thread`` (the
    function taken when this module was imported), so neither a trace function set with threading.settrace
    nor a replaced threading.Thread runs in them; they run no code but this module's and hashlib's, and have
    ended their work when this returns."""
    if not strong:
        return {name: digest(t) for name, t in tensors.items()}
    read, sums, taken = {}, {}, _NEW_LOCK()
    for name, tensor in tensors.items():   # (digest's reading of the bytes, in this thread)
        shape, flipped, arr = _bytes_of(tensor)
        if not arr.flags.c_contiguous:   # (a copy: hashed now, as digest does, not held)
            read[name], sums[name] = (shape, flipped, arr.dtype, None), checksum(arr, strong=True)
            continue
        read[name] = (shape, flipped, arr.dtype, arr.reshape(-1).view(np.uint8))
    jobs = sorted((name for name in read if name not in sums), key=lambda name: -read[name][3].nbytes)
    helpers = _hashing_threads() - 1 if sum(read[name][3].nbytes for name in jobs) > PARALLEL_BYTES else 0
    # (the largest first: the threads end about together)

    def work(done=None):
        try:
            while True:
                with taken:
                    if not jobs:
                        return
                    name = jobs.pop(0)
                sums[name] = hashlib.sha256(read[name][3]).digest()
        finally:
            if done is not None:
                done.release()
    ends = []
    for _ in range(helpers):
        done = _NEW_LOCK()
        done.acquire()
        try:
            _START_THREAD(work, (done,))
        except RuntimeError:   # (no thread to be had: this thread hashes the rest)
            break
        ends.append(done)
    work()
    for done in ends:   # (a lock released as its thread's work ends)
        done.acquire()
    return {name: (*read[name][:3], sums[name]) for name in tensors}


# --- Stopping the code a thread runs: a time limit that a learner's ``except:`` cannot swallow ---------------

ESCALATE_AFTER = 0.5   # seconds a stopped call may go on catching its exception before it is raised at every line
RECURSION_HEADROOM = 30   # calls added to Python's recursion limit while a call is raised at every line (see Stoppable.stop):
# fewer than the 50 past the limit at which CPython aborts, so the limit can be put back whatever a thread did meanwhile
MAX_HEADROOM_LIMIT = 100_000   # no headroom above this limit (one a learner's code set: deeper, C's stack runs out first)
HEADROOM_AGAIN = 1.0   # seconds after which headroom that has not let the stop raise at every line is given back and taken
# again just after the next poke (the code can fill it first: see Stoppable.stop)


class Stop(BaseException):
    """What ``Stoppable.stop`` raises in a thread (a check's and an import's OutOfTime, a live run's
    LoopLate are its kinds). Not an Exception: ``except Exception`` does not keep it. A bare ``except:``
    catches it, so once a call has caught it for ESCALATE_AFTER s, a Stop made in that thread (it is made
    where it is caught) turns on ``Stoppable.raise_at_every_line``: the next line the thread runs raises it
    again, also the first line inside that ``except:``, and what a handler raises its own try does not
    catch, so it leaves the loop. One dropped (at the end of the ``except:`` that kept it) turns it on
    again too. Made anywhere else (``raise OutOfTime(...)`` in the course), nothing."""

    def __init__(self, *args):
        super().__init__(*args)
        self._escalate()

    def __del__(self):
        try:
            self._escalate()
        except BaseException:   # noqa: BLE001 (a stop raised meanwhile: __del__ may raise nothing, the next one comes)
            pass

    def _escalate(self):
        """Turn on raising at every line in this thread, if its Stoppable (of this kind) has escalated."""
        stoppable = _ESCALATED.get(threading.get_ident()) if _ESCALATED is not None else None   # (None: at exit)
        if stoppable is not None and isinstance(self, stoppable.exception):
            stoppable.raise_at_every_line()


class OutOfTime(Stop):
    """Raised in learner code whose time is up: a check's call of a learner's function, the import of a
    kept piece (helpers.learner)."""


_ESCALATED = {}   # thread ident -> its Stoppable, once that has been stopped for ESCALATE_AFTER s

_UNRAISABLE = sys.unraisablehook   # the hook there was when this module was imported


def _stops_unsaid(unraisable):
    """sys.unraisablehook from this module's import on: a Stop (its time was up, and the check or the live run said
    so) raised in a learner's ``__del__`` or weakref callback, which Python cannot raise further, ends silently
    instead of printing a traceback into a later cell; anything else goes to the hook there was. (Here, in this
    module, a stop that raises at every line does not raise in it: _frame_kind.)"""
    if not isinstance(unraisable.exc_value, Stop):
        _UNRAISABLE(unraisable)


sys.unraisablehook = _stops_unsaid


class Stoppable:
    """Code that one thread runs (``call``, or a thread's whole run when ``ident`` is given) and another
    thread stops (``stop``): ``exception`` (a Stop) is raised in it with PyThreadState_SetAsyncExc now and
    every ``every`` s from a watchdog thread until it ends, and at every line after ESCALATE_AFTER s (see
    Stop). Before a stop nothing is traced, so it costs nothing. A C call that never returns cannot be
    stopped. ``runs()``: whether the thread still runs (True, False, or None before it has begun)."""

    def __init__(self, exception, ident=None, runs=None):
        self.exception, self.ident, self.runs = exception, ident, runs
        self.lock, self.done, self.poked, self.below = threading.Lock(), False, False, None
        self.armed = 0.0   # time.monotonic() of the last raise_at_every_line: the watchdog does not poke meanwhile
        self.raised = 0    # how many times raise_at_every_line has run (once for each stop made or dropped in the thread)
        self.ended = threading.Event()   # set when ``call`` ends (a watchdog waiting to begin stops waiting)

    def call(self, function, *args, **kwargs):
        """``function(*args, **kwargs)`` in this thread, stoppable meanwhile: returns what it returns and raises
        what it raises (``exception`` once stopped). When it ends, nothing more is raised in it, one still on
        its way is caught here, and the thread's trace and profile functions are put back."""
        self.ident, self.below = threading.get_ident(), sys._getframe()
        trace, profile = sys.gettrace(), sys.getprofile()
        try:
            return function(*args, **kwargs)
        finally:
            try:   # (no call before ``done``: a pending exception is raised only at a call or a jump back)
                with self.lock:
                    self.done = True   # no more is raised after this: at most one is still on its way
                _ESCALATED.pop(self.ident, None)
                if self.poked:
                    for _ in range(1000):   # one on its way is raised at the loop's first jump back
                        pass
            except self.exception:
                pass
            sys.settrace(trace)
            sys.setprofile(profile)
            self.ended.set()

    def running(self):
        """True while the code runs, False once it has ended, None before it has begun."""
        if self.runs is not None:
            return self.runs()
        return None if self.ident is None else not self.done

    def poke(self):
        """Raise the exception in the thread once, unless the code has ended."""
        with self.lock:
            if self.done or self.running() is not True:
                return
            self.poked = True
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.ident), ctypes.py_object(self.exception))

    def withdraw(self):
        """Take back a poke the thread has not raised yet (it is in a long C call, ``time.sleep(10**6)``):
        while one is pending, CPython 3.11 keeps its eval breaker set for every thread, and a thread with a
        trace function (a check's tripwire) then spins at the first call it makes. The next poke comes
        ``every`` s later; the code is stopped by one of them once it is back in Python."""
        with self.lock:
            if self.done or self.running() is not True:
                return
            ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.ident), None)   # (None: NULL, cleared)
        _breaker_reset()

    def stop(self, every=0.02, after=0.0, start=None):
        """Start stopping it (after ``after`` s) from a watchdog thread, started by ``start(target, name)``
        (None: a daemon threading.Thread); returns that thread. Waits up to a second for code not begun.
        Once it raises at every line, Python's recursion limit is RECURSION_HEADROOM calls higher until the code
        has ended (for one stop at a time: ``_headroom_given``): a recursion that catches the stop at every level runs at the limit, where the stop's own
        functions (Stop.__init__, the trace and profile functions) would fail at their first call (a
        RecursionError the code catches, and CPython turns off a profile function that raised), so only a poke
        that happened to land a few calls above the limit would stop it (seconds, or minutes on a busy
        machine). The limit is raised just after a poke, which the code raises at its next call, before it
        can recurse into the room; once the code is raised at every line it cannot go deeper. When the thread
        takes the interpreter lock between the poke and the raise (a busy machine), it raises the poke at the old limit
        and then fills the room: so headroom that has not turned on raising at every line within HEADROOM_AGAIN s is
        given back and taken again after the next poke, until one lands in the room."""
        def watch():
            began, headroom = time.monotonic(), False   # headroom: whether this watchdog raised the recursion limit
            given = (0.0, 0)   # (when, self.raised then): the headroom's last giving
            if self.ended.wait(after):
                return
            while (running := self.running()) is not False and not self.done and \
                    (running or time.monotonic() - began < after + 1):
                escalated = running and time.monotonic() - began > after + ESCALATE_AFTER
                if escalated:
                    with self.lock:
                        if not self.done:
                            _ESCALATED[self.ident] = self
                if time.monotonic() - self.armed > every:   # (raising at every line already: a poke could land
                    self.poke()                              # in Stop.__del__, which may raise nothing)
                if escalated and not headroom:   # (after the poke: it is raised before the code takes the room)
                    headroom, given = _headroom_given(), (time.monotonic(), self.raised)
                elif headroom and self.raised == given[1] and time.monotonic() - given[0] > HEADROOM_AGAIN:
                    _headroom_returned()   # (the room filled before a poke landed in it: taken again after the next)
                    headroom = False
                time.sleep(every / 2)   # (a thread that runs Python raises it at once; one in a C call never does:
                self.withdraw()         # taken back, so that the other threads run on meanwhile)
                time.sleep(every / 2)
            with self.lock:
                if _ESCALATED.get(self.ident) is self:
                    del _ESCALATED[self.ident]
            if headroom:
                _headroom_returned()

        if start is not None:
            return start(watch, "stops a learner's code")
        watchdog = threading.Thread(target=watch, name="stops a learner's code", daemon=True)
        watchdog.start()
        return watchdog

    def raise_at_every_line(self):
        """(In the stopped thread.) Trace its frames above ``call`` and those it starts from now on, raising the
        exception at every line (at a loop's next round in Python's own modules, none in threading's: ``_frame_kind``). CPython
        turns a thread's tracing off when its trace function raises, so a profile function (which a raise
        does not turn off) turns it on again at every call and return: a learner's function that catches
        the stop at every level of a recursion and calls itself again is unwound level by level."""
        self.armed, self.raised = time.monotonic(), self.raised + 1   # (raised: how often, ``_LoopBreaker``)
        sys.settrace(self._new_frame)   # (first: the profile function, called for the calls below, sees it on)
        if sys.getprofile() != self._on_call_or_return:   # (not replaced while it runs)
            sys.setprofile(self._on_call_or_return)
        frame = sys._getframe()
        while frame is not None and frame is not self.below:
            kind = _frame_kind(frame)
            if kind != _KEPT_WHOLE:
                if frame.f_trace == self._every_line or isinstance(frame.f_trace, _LoopBreaker) and \
                        frame.f_trace.stoppable is self:   # traced, and so are those below it (a raise from
                    break                                   # the trace function turns off only its own frame's)
                frame.f_trace_lines, frame.f_trace = True, self._trace_for(kind)
            frame = frame.f_back

    def _stopping(self):
        """True while this Stoppable raises at every line of its thread."""
        return _ESCALATED.get(self.ident) is self

    def _every_line(self, frame, event, arg):
        """(Trace function of a frame.) Raise the exception at each line while stopping."""
        if self._stopping() and event == "line":
            raise self.exception
        return self._every_line if self._stopping() else None

    def _new_frame(self, frame, event, arg):
        """(The thread's trace function.) Trace a new frame's lines as its kind says (``_frame_kind``)."""
        return self._trace_for(_frame_kind(frame)) if self._stopping() else None

    def _trace_for(self, kind):
        """The trace function for a frame of that kind: raising at every line, at a loop's next round, or none."""
        return self._every_line if kind == _LEARNERS else _LoopBreaker(self) if kind == _PYTHONS_OWN else None

    def _on_call_or_return(self, frame, event, arg):
        """(The thread's profile function.) Tracing on again if a raise turned it off."""
        if self._stopping() and sys.gettrace() != self._new_frame:
            self.raise_at_every_line()


_recursion = {"base": None}   # the limit before the headroom while a stop holds it (then the limit is base +
# RECURSION_HEADROOM, unless something set it since), else None (a record, which no check puts back as a constant)
_recursion_lock = threading.Lock()
_set_recursion_limit = sys.setrecursionlimit   # (a check puts a stand-in that refuses in sys while a learner's code runs)


def _headroom_given():
    """Raise Python's recursion limit by RECURSION_HEADROOM for a Stoppable's watchdog; True. For one stop at a time (a
    second would take a thread more than 50 calls past the limit put back), and never above MAX_HEADROOM_LIMIT (one a
    learner's code set): else nothing is changed and False returned (the stop may then take longer)."""
    with _recursion_lock:
        now = sys.getrecursionlimit()
        if _recursion["base"] is not None or now + RECURSION_HEADROOM > MAX_HEADROOM_LIMIT:
            return False
        _set_recursion_limit(now + RECURSION_HEADROOM)   # (raising is always safe)
        _recursion["base"] = now
    return True


def _headroom_returned():
    """The watchdog that holds the headroom gives it back (its code has ended, or returned to ``call``): the limit is
    put back, unless something else set it meanwhile. Safe whatever another thread did with the room: at most
    RECURSION_HEADROOM calls past the limit, it meets a RecursionError there, as at any limit."""
    with _recursion_lock:
        if _recursion["base"] is not None and sys.getrecursionlimit() == _recursion["base"] + RECURSION_HEADROOM:
            _set_recursion_limit(_recursion["base"])
        _recursion["base"] = None


def recursion_limit():
    """Python's recursion limit without a stop's headroom: what a check saves to put back."""
    with _recursion_lock:
        return sys.getrecursionlimit() if _recursion["base"] is None else _recursion["base"]


def recursion_limit_put_back(limit):
    """Python's recursion limit back to ``limit`` (a check's put-back): while a stop holds headroom (its code may still
    be unwinding), ``limit`` plus the headroom until the stop ends, then ``limit``."""
    with _recursion_lock:
        if _recursion["base"] is None:
            if sys.getrecursionlimit() != limit:
                _set_recursion_limit(limit)
            return
        _recursion["base"] = limit
        if sys.getrecursionlimit() != limit + RECURSION_HEADROOM:
            _set_recursion_limit(limit + RECURSION_HEADROOM)


class _Reset(Exception):
    """Raised and caught in the thread that calls ``_breaker_reset``."""


def _breaker_reset():
    """Raise an exception in this thread from outside it (PyThreadState_SetAsyncExc) and catch it: raising
    one is what clears the interpreter's note that one is pending (set again by every poke, and by a
    withdrawal), so that the eval breaker of the other threads is off again."""
    try:
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), ctypes.py_object(_Reset))
        for _ in range(1000):   # (raised at the loop's first jump back)
            pass
    except _Reset:
        pass


_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep   # where Python's own modules' files are
_SITE = tuple({sysconfig.get_paths()[kind] + os.sep for kind in ("purelib", "platlib")})   # (inside it in some installs)
_WHOLE_MODULES = frozenset({"threading", "weakref", "_weakrefset", "importlib._bootstrap", "importlib._bootstrap_external"})
# Python's own modules whose frames a stop never raises in: a thread ending must still leave threading's lists, a weakref
# callback must finish its removal, an import must let go of its module lock

_LEARNERS, _PYTHONS_OWN, _KEPT_WHOLE = "learner's", "Python's own", "kept whole"   # the kinds of frame (``_frame_kind``)


def _frame_kind(frame):
    """How a stop treats ``frame``'s lines: _KEPT_WHOLE (never raised in: this module's frames and those of
    _WHOLE_MODULES), _PYTHONS_OWN (a frame of a module of Python's standard library as loaded: raised in only where it goes
    round a loop again, ``_LoopBreaker``, so that its cleanup runs) or _LEARNERS (raised in at every line: also the
    course's, third-party code's, and code compiled under a standard-library file name or run with globals named
    like one of these modules, which is not a loaded module's own)."""
    namespace = frame.f_globals
    if namespace is globals():
        return _KEPT_WHOLE
    spec = namespace.get("__spec__")
    for name in (namespace.get("__name__"), getattr(spec, "name", None)):   # (_collections_abc calls itself
        module = sys.modules.get(name) if isinstance(name, str) else None      # collections.abc)
        if module is not None and getattr(module, "__dict__", None) is namespace:
            origin, filename = getattr(module.__spec__, "origin", None), frame.f_code.co_filename
            if origin == "frozen" and filename.startswith("<frozen ") or isinstance(origin, str) and \
                    origin == filename and origin.startswith(_STDLIB) and not origin.startswith(_SITE):
                return _KEPT_WHOLE if module.__name__ in _WHOLE_MODULES else _PYTHONS_OWN
            return _LEARNERS
    return _LEARNERS


_COURSE = os.path.dirname(os.path.abspath(__file__)) + os.sep   # the course's package (helpers/)


def learners_function(traceback):
    """The qualified name ("MyGPT.parameters") of the outermost function in ``traceback`` whose file is neither the
    course's (helpers/), Python's own nor an installed library's: the learner's code a stop landed in, which the
    sentence names; None when there is none (the stop landed in the course's or a library's code)."""
    while traceback is not None:
        code = traceback.tb_frame.f_code
        if not code.co_filename.startswith((_COURSE, _STDLIB, "<frozen ") + _SITE):
            return code.co_qualname
        traceback = traceback.tb_next
    return None


class _LoopBreaker:
    """(Trace function of a frame of Python's own in a stopped thread: ``_frame_kind``.) Raise the stop where the frame
    jumps back to go round a loop again after a stop was raised in the round: a loop of the standard library's that
    catches the stop in each round (unittest's runner, code.InteractiveConsole) is left, while the frame's other lines
    run, and so does a loop whose rounds meet no stop (an ExitStack's exit letting go of a lock)."""

    def __init__(self, stoppable):
        self.stoppable, self.last, self.seen = stoppable, -1, stoppable.raised   # the offset of the frame's last
        # line; how many stops the thread had raised when this round began

    def __call__(self, frame, event, arg):
        if not self.stoppable._stopping():
            return None
        if event == "line":
            back, self.last = frame.f_lasti <= self.last, frame.f_lasti
            if back and self.stoppable.raised != self.seen:
                raise self.stoppable.exception
            if back:
                self.seen = self.stoppable.raised
        return self


# Process state a learner's function may change for good, kept and put back by a check (helpers.exercises:
# ``process_state`` gathers them), and the guarded stand-ins a check puts in place while the function runs.

changes_refused = []   # (event, what it would change) per change a learner's function was refused (said by a check;
# a record, not a constant: lower case, so that no check puts it back as it was)


def builtins_kept():
    """The builtins (``print``, ``len``), saved now; returns a function that puts back any replaced, with
    dict methods only (everything else calls them)."""
    import builtins

    names = dict(builtins.__dict__)

    def put_back():
        live = builtins.__dict__
        for key, value in names.items():
            if live.get(key, names) is not value:
                live[key] = value
    return put_back


not_put_back = []   # one entry per piece of process state a put-back could not restore (its name, for ``call`` to say)


def limits_kept():
    """Every resource limit of this system (RLIMIT_NOFILE, RLIMIT_AS, RLIMIT_CPU, ...: none without the ``resource``
    module, on Windows) and resource's setrlimit and prlimit (a check replaces them while a learner's function runs:
    ``guarded_setrlimit``), saved now; returns a function that puts back any changed."""
    if resource is None:
        return lambda: None
    names = {}   # which -> its first name (RLIMIT_OFILE is RLIMIT_NOFILE)
    for name in vars(resource):
        if name.startswith("RLIMIT_"):
            names.setdefault(getattr(resource, name), name)
    limits = {which: resource.getrlimit(which) for which in names}
    functions = resource.setrlimit, resource.prlimit

    def put_back():
        resource.setrlimit, resource.prlimit = functions
        for which, limit in limits.items():
            if resource.getrlimit(which) != limit:
                try:
                    resource.setrlimit(which, limit)
                except (ValueError, OSError):
                    now = resource.getrlimit(which)
                    not_put_back.append(f"the resource limit {names[which]} (now {now}, was {limit})")
    return put_back


def time_zone():
    """The C library's time zone, as its local time of two moments shows it (a winter's and a summer's day of
    1970: daylight saving). Not ``time.tzname``: the time module's names are put back with its other names
    (``torch_globals``), while the C library keeps the zone ``time.tzset`` last read."""
    return time.localtime(0), time.localtime(200 * 86400)


def session_kept():
    """The kernel's session and process group, saved now; returns a function that puts back its group
    (``os.setpgrp``) and notes in not_put_back a session it left (``os.setsid``, which a check refuses:
    ``no_setsid``; the system allows no way back). Nothing where the system has neither (Windows)."""
    if not hasattr(os, "getsid"):
        return lambda: None
    session, group = os.getsid(0), os.getpgrp()

    def put_back():
        if os.getsid(0) != session:
            not_put_back.append("the kernel's session (os.setsid)")
        elif os.getpgrp() != group:
            try:
                os.setpgid(0, group)
            except OSError:
                not_put_back.append("the kernel's process group (os.setpgrp)")
    return put_back


_SETSID = os.setsid   # (the real one: a process the learner's code forks may leave the session)
fenced_pids = []   # the process (the kernel's) of each fence running now (``_fenced``): a forked child is another


def in_fence():
    """Whether this process runs inside a check's fence now (``exercises._fenced``; a process it forked does not)."""
    return os.getpid() in fenced_pids


def no_setsid():
    """os.setsid while a learner's function runs in a check: in the kernel's process refused, noted in
    changes_refused (the kernel could never go back to its session); in a process it forked (a daemon's double
    fork), done."""
    if not in_fence():
        return _SETSID()
    changes_refused.append(("os.setsid", "the kernel's session, which it could never go back to"))
    raise RuntimeError("a check does not allow os.setsid() while it runs your function: the kernel could never go "
                       "back to its session")


def scheduling_kept():
    """The CPU affinity and priority (nice) of each of the process's threads (``os.sched_setaffinity(os.getpid(),
    {0})`` pins the kernel's main thread to one core for good), saved now; returns a function that puts back any
    changed (a priority lowered cannot always be raised again). Nothing where the system has neither (macOS,
    Windows)."""
    if not (hasattr(os, "sched_getaffinity") and os.path.isdir("/proc/self/task")):
        return lambda: None
    saved = {}
    for thread in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):   # (a thread that ended meanwhile)
            saved[int(thread)] = os.sched_getaffinity(int(thread)), os.getpriority(os.PRIO_PROCESS, int(thread))

    def put_back():
        for thread, (cpus, priority) in saved.items():
            try:
                if os.sched_getaffinity(thread) != cpus:
                    os.sched_setaffinity(thread, cpus)
                if os.getpriority(os.PRIO_PROCESS, thread) != priority:
                    os.setpriority(os.PRIO_PROCESS, thread, priority)
            except ProcessLookupError:   # (the thread has ended since)
                continue
            except OSError:
                not_put_back.append(f"the CPU affinity or priority of thread {thread}")
    return put_back


TORCH_FLAGS = (
    "_mkldnn_enabled", "_mkldnn_deterministic", "_onednn_allow_tf32", "_cudnn_enabled", "_cudnn_benchmark",
    "_cudnn_deterministic", "_cudnn_allow_tf32", "_cudnn_depthwise_kernel", "_cublas_allow_tf32",
    "_cublas_allow_fp16_reduced_precision_reduction", "_cublas_allow_bf16_reduced_precision_reduction",
    "_cublas_allow_fp16_accumulation", "_cpu_allow_fp16_reduced_precision_reduction",
    "_math_sdp_allow_fp16_bf16_reduction", "_sdp_priority_order", "_linalg_preferred_backend",
    "_blas_preferred_backend", "_rocm_fa_preferred_backend", "_nnpack_enabled", "_miopen_immediate", "_qengine",
    "_deterministic_fill_uninitialized_memory", "_warnAlways", "_backcompat_broadcast_warn",
    "_backcompat_keepdim_warn", "_autograd_fallback_mode")
# torch's process-wide switches behind torch.backends (mkldnn, cudnn, cuda.matmul, nnpack, quantized ...),
# torch.utils.deterministic and torch.set_warn_always: each read with torch._C._get<name>, set with _set<name>
TORCH_SWITCHES = (("_get_flash_sdp_enabled", "_set_sdp_use_flash"),
                  ("_get_mem_efficient_sdp_enabled", "_set_sdp_use_mem_efficient"),
                  ("_get_math_sdp_enabled", "_set_sdp_use_math"), ("_get_cudnn_sdp_enabled", "_set_sdp_use_cudnn"),
                  ("_get_overrideable_sdp_enabled", "_set_sdp_use_overrideable"),
                  ("_get_fa3_sdp_enabled", "_set_sdp_use_fa3"),
                  ("_check_sparse_tensor_invariants", "_set_check_sparse_tensor_invariants"),
                  ("_warn_on_accumulate_grad_stream_mismatch", "_set_warn_on_accumulate_grad_stream_mismatch"),
                  ("_jit_texpr_fuser_enabled", "_jit_set_texpr_fuser_enabled"),
                  ("_jit_texpr_dynamic_shape_enabled", "_jit_set_texpr_dynamic_shape_enabled"),
                  ("_jit_texpr_reductions_enabled", "_jit_set_texpr_reductions_enabled"),
                  ("_jit_texpr_fallback_allowed", "_jit_texpr_set_fallback_allowed"),
                  ("_jit_llga_enabled", "_jit_set_llga_enabled"),
                  ("_jit_can_fuse_on_cpu", "_jit_override_can_fuse_on_cpu"),
                  ("_jit_can_fuse_on_cpu_legacy", "_jit_override_can_fuse_on_cpu_legacy"),
                  ("_jit_can_fuse_on_gpu", "_jit_override_can_fuse_on_gpu"),
                  ("_jit_get_num_profiled_runs", "_jit_set_num_profiled_runs"),
                  ("_jit_get_tracer_state_warn", "_jit_set_tracer_state_warn"),
                  ("_jit_symbolic_shapes_test_mode_enabled", "_jit_set_symbolic_shapes_test_mode"),
                  ("_jit_get_logging_option", "_jit_set_logging_option"),
                  ("_jit_is_onnx_log_enabled", "_jit_set_onnx_log_enabled"),
                  ("_jit_get_te_must_use_llvm_cpu", "_jit_set_te_must_use_llvm_cpu"),
                  ("_jit_get_te_generate_block_code", "_jit_set_te_generate_block_code"))
# torch's process-wide switches named apart, each a (getter, setter) in torch._C: torch.backends.cuda's attention
# switches (enable_flash_sdp ...), torch.sparse.check_sparse_tensor_invariants.enable(), the accumulate-grad stream
# warning, and the TorchScript fusers' (torch.jit.enable_onednn_fusion, torch._C._jit_set_texpr_fuser_enabled ...)
TORCH_ONCE = (("torch", "set_num_interop_threads"), ("torch._C", "set_num_interop_threads"))
# torch's setters of process-wide state that a process may call only once (torch refuses every later call, so no
# put-back could undo one): (module, name), each refused while a learner's code runs (``torch_once_refused``)
TORCH_PYTHON_FLAGS = (("torch.backends.mha", "get_fastpath_enabled", "set_fastpath_enabled"),
                      ("torch.backends.opt_einsum", "_get_enabled", "_set_enabled"),
                      ("torch.backends.opt_einsum", "_get_strategy", "_set_strategy"),
                      ("torch", "get_num_threads", "set_num_threads"))
# torch's switches kept in Python: (module, getter, setter)
FP32_PRECISIONS = (("generic", "all"), ("mkldnn", "all"), ("cuda", "all"), ("mkldnn", "matmul"), ("mkldnn", "conv"),
                   ("mkldnn", "rnn"), ("cuda", "matmul"), ("cuda", "conv"), ("cuda", "rnn"))
# the float32 precisions (torch.backends.fp32_precision, torch.backends.mkldnn.matmul.fp32_precision, ...;
# torch.set_float32_matmul_precision sets the matmul ones), each a (backend, operation) pair, a whole before its
# parts: setting a whole sets its parts too


def torch_flags_kept():
    """torch's process-wide switches (TORCH_FLAGS, TORCH_SWITCHES, TORCH_PYTHON_FLAGS) and float32 precisions
    (FP32_PRECISIONS), saved now; returns a function that puts back any changed, the precisions last (some
    switches are set through them) and all of them in order when one changed. Each is read guarded: one this
    torch lacks, or cannot read, is left alone (``torch.get_float32_matmul_precision`` is not read: it raises once
    a per-backend precision was set). Nothing when torch was never imported."""
    torch = sys.modules.get("torch")
    if torch is None:
        return lambda: None
    switches = [(getattr(torch._C, "_get" + name, None), getattr(torch._C, "_set" + name, None), "torch._C._set" + name)
                for name in TORCH_FLAGS]
    switches += [(getattr(torch._C, get, None), getattr(torch._C, put, None), "torch._C." + put)
                 for get, put in TORCH_SWITCHES]
    switches += [(getattr(sys.modules.get(module), get, None), getattr(sys.modules.get(module), put, None),
                  f"{module}.{put}") for module, get, put in TORCH_PYTHON_FLAGS]
    get_precision = getattr(torch._C, "_get_fp32_precision_getter", None)
    set_precision = getattr(torch._C, "_set_fp32_precision_setter", None)
    precisions = [(functools.partial(get_precision, *pair), functools.partial(set_precision, *pair),
                   f"torch's fp32_precision of {pair[0]} {pair[1]}")
                  for pair in FP32_PRECISIONS if get_precision and set_precision]
    flags, precisions = _flags_read(switches), _flags_read(precisions)

    def put_back():
        _put_back_flags([flag for flag in flags if _read_flag(flag[0]) != flag[3]])
        if any(_read_flag(get) != value for get, _, _, value in precisions):
            _put_back_flags(precisions)   # (every one, in order: a whole sets its parts)
    return put_back


def _flags_read(switches):
    """[(getter, setter, name, value)] for each of ``switches`` ([(getter, setter, name)]) that has both and
    whose getter answers now."""
    flags = []
    for get, put, name in switches:
        value = _read_flag(get) if get is not None and put is not None else _UNREADABLE
        if value is not _UNREADABLE:
            flags.append((get, put, name, value))
    return flags


def _put_back_flags(flags):
    """Set each of ``flags`` ([(getter, setter, name, value)]) to its value; one torch refuses is noted in
    not_put_back."""
    for _, put, name, value in flags:
        try:
            put(*value) if isinstance(value, tuple) else put(value)   # (cuBLAS's reduced-precision pairs)
        except Exception:   # noqa: BLE001 (torch refuses a value it gave: onednn_allow_tf32's None)
            not_put_back.append(f"torch's switch {name}")


_UNREADABLE = object()   # a switch ``_read_flag`` could not read


def _read_flag(get):
    """What ``get()`` returns, or _UNREADABLE when it raises."""
    try:
        return get()
    except Exception:   # noqa: BLE001 (torch raises on some reads: the legacy precision after the new one was set)
        return _UNREADABLE


def torch_once_refused():
    """Each of torch's setters that a process may call only once (TORCH_ONCE: torch.set_num_interop_threads), replaced
    now by ``no_interop_threads``, which refuses; returns a function that puts them back (a check holds them so while
    a learner's code runs: ``helpers.putback.torch_globals``). Nothing when torch was never imported."""
    saved = [(module, name, getattr(module, name)) for module_name, name in TORCH_ONCE
             if (module := sys.modules.get(module_name)) is not None and hasattr(module, name)]
    for module, name, _ in saved:
        setattr(module, name, no_interop_threads)

    def put_back():
        for module, name, value in saved:
            setattr(module, name, value)
    return put_back


def no_interop_threads(*args, **kwargs):
    """torch.set_num_interop_threads while a learner's code runs in a check: refused, noted in changes_refused (a
    process may set its number of inter-op threads only once: no put-back could undo it)."""
    changes_refused.append(("torch.set_num_interop_threads", "the number of torch's inter-op threads, which a "
                                                             "process can set only once"))
    raise RuntimeError("a check does not allow torch.set_num_interop_threads() while it runs your function: a process "
                       "can set it only once, so it could never be put back")


_SETRLIMIT, _PRLIMIT, _GETRLIMIT = \
    (resource.setrlimit, resource.prlimit, resource.getrlimit) if resource else (None, None, None)   # (resource's own)


def guarded_setrlimit(which, limits):
    """resource.setrlimit while a learner's function runs in a check: refused when it would lower a hard limit
    (``_hard_limit_kept``); a soft limit is set, and put back after the call (``limits_kept``)."""
    _hard_limit_kept("resource.setrlimit", _GETRLIMIT(which), limits)
    return _SETRLIMIT(which, limits)


def guarded_prlimit(pid, which, *limits):
    """resource.prlimit while a learner's function runs in a check: refused when it would lower a hard limit
    (``_hard_limit_kept``); reading a limit, or setting a soft one, goes through."""
    if limits:
        _hard_limit_kept("resource.prlimit", _PRLIMIT(pid, which), limits[0])
    return _PRLIMIT(pid, which, *limits)


def _hard_limit_kept(event, now, limits):
    """Raise RuntimeError, noted in changes_refused, when ``limits`` (soft, hard) would lower the hard limit of
    ``now`` (soft, hard): an unprivileged process can never raise it again. Limits that are no pair of whole numbers
    are left to resource to refuse."""
    try:
        hard, infinite = operator.index(limits[1]), resource.RLIM_INFINITY
    except (TypeError, IndexError, KeyError):
        return
    if hard != now[1] and (now[1] == infinite or hard != infinite and hard < now[1]):
        changes_refused.append((event, "a hard resource limit, which could never be raised again"))
        raise RuntimeError(f"a check does not allow {event}() to lower a hard limit while it runs your function: "
                           "it could never be raised again")
