"""Round 25 (issue 31, round 24's leftovers): a stop never raised in Python's own frames, told apart by their file
name and their globals' ``__name__``, both of which a learner's code can choose. So a catch-all loop hosted by the
standard library (unittest's runner, code.InteractiveConsole), or one compiled under a standard-library file name or
run with globals named ``helpers.states``, was never stopped. Now a frame is Python's own only when its globals are a
loaded standard-library module's own (states._frame_kind), and such a frame is raised in where it goes round a loop
again after a stop was raised in the round (states._LoopBreaker)."""
import code
import contextlib
import os
import pathlib
import subprocess
import sys
import sysconfig
import threading

import pytest

from test_round_24_stops import stopped_in_a_thread

CATCH_ALL = "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass\n"


UNITTEST_RUNNER = """
import functools, itertools, sys, time, unittest
from helpers import states

def loop():   # unittest's loop catches every stop, around C work: no Python frame of the learner's at all
    test = unittest.FunctionTestCase(functools.partial(time.sleep, 0.01))
    suite = unittest.TestSuite()
    suite._tests = itertools.repeat(test)
    suite.run(unittest.TestResult())

stoppable = states.Stoppable(states.OutOfTime)
stoppable.stop(every=0.1, after=0.2)
try:
    stoppable.call(loop)
except states.OutOfTime:
    print("stopped")
"""


def test_a_loop_of_unittests_runner_that_catches_every_stop_is_stopped():
    """(In a process of its own: under pytest the same loop is stopped even without the fix.)"""
    done = subprocess.run([sys.executable, "-c", UNITTEST_RUNNER], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).parents[1])})
    assert done.stdout.strip() == "stopped", done.stderr[-2000:]


def interactive_console():
    """code.InteractiveConsole running ``while True: pass``: its runcode catches the stop, and its interact reads
    the loop again, from C callables."""
    console = code.InteractiveConsole()
    console.showtraceback = int
    console.raw_input = {">>> ": "while True: pass", "... ": ""}.get
    console.interact(banner="", exitmsg="")


def under_a_stdlib_file_name():
    exec(compile(CATCH_ALL, os.path.join(sysconfig.get_paths()["stdlib"], "anything.py"), "exec"), {})


def under_a_frozen_file_name():
    exec(compile(CATCH_ALL, "<frozen threading>", "exec"), {})


def with_globals_named_like_states():
    exec(CATCH_ALL, {"__name__": "helpers.states"})


def with_globals_named_like_threading():
    exec(CATCH_ALL, {"__name__": "threading"})


@pytest.mark.parametrize("loop", [interactive_console, under_a_stdlib_file_name,
                                  under_a_frozen_file_name, with_globals_named_like_states,
                                  with_globals_named_like_threading], ids=lambda loop: loop.__name__)
def test_a_catch_all_loop_hosted_or_disguised_as_pythons_own_code_is_stopped(loop):
    got = stopped_in_a_thread(loop, seconds=30)
    assert got is not None, "still running after 30 s"
    assert got[0] == ("LoopLate", True), got


def test_a_loop_of_pythons_own_that_meets_no_stop_in_its_rounds_runs_whole():
    """An ExitStack letting go of two locks as a stopped loop leaves it: its exit goes round its loop once per lock,
    and no stop is raised in those rounds, so both are let go (a loop breaker raising at any round would keep one)."""
    locks = [threading.Lock() for _ in range(3)]

    def loop():
        with contextlib.ExitStack() as stack:
            for lock in locks:
                stack.enter_context(lock)
            while True:
                pass

    got = stopped_in_a_thread(loop, seconds=30)
    assert got is not None and got[0] == ("LoopLate", True), got
    assert not any(lock.locked() for lock in locks)


def test_a_loop_of_pythons_own_runs_as_before_when_nothing_is_stopped():
    seen = []
    with contextlib.ExitStack() as stack:
        for k in range(5):
            stack.callback(seen.append, k)
    assert seen == [4, 3, 2, 1, 0]
