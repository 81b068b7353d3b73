"""Round 24 (issue 31): a recursion that catches the stop at every level was stopped only by luck. It runs at
Python's recursion limit, where the stop's own functions (Stop.__init__, the trace and profile functions) fail
at their first call, so a stop landed only when a poke happened to reach it a few calls above the limit: about
a second alone, over a minute beside a busy process (CI met it). Now the limit has RECURSION_HEADROOM more calls
while the code is raised at every line, and is put back once no thread is deep enough to be hurt by it."""
import sys
import threading
import time

import pytest

from helpers import states
from helpers.gpt import compute as gc

from doubling import doubling_check
from test_round_20_stops import nested_three_deep, recursing


@pytest.fixture
def recursion_limit():
    """Python's recursion limit, put back after the test."""
    before = sys.getrecursionlimit()
    yield before
    deadline = time.monotonic() + 30   # (a watchdog gives its headroom back after its code has ended)
    while states._recursion["base"] is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    sys.setrecursionlimit(before)


def stopped_in_a_thread(loop, seconds=60):
    """(what stopped_after raised in a thread of its own, seconds it took); None when it ran past ``seconds``."""
    said = {}

    def cell():
        try:
            gc.stopped_after(0.2, gc.LoopLate, loop)
        except BaseException as raised:   # (names only: a failure is one line)
            said["raised"] = (type(raised).__name__, raised.__suppress_context__)

    tick = time.monotonic()
    thread = threading.Thread(target=cell, daemon=True)
    thread.start()
    thread.join(seconds)
    return None if thread.is_alive() else (said.get("raised"), time.monotonic() - tick)


@pytest.mark.parametrize("limit", [150, 1000, 2500])
def test_a_recursion_that_catches_the_stop_at_every_level_is_stopped_every_time(recursion_limit, limit):
    sys.setrecursionlimit(limit)
    for _ in range(4):
        got = stopped_in_a_thread(recursing)
        assert got is not None, "still running after 60 s"
        assert got[0] == ("LoopLate", True), got
    # (alone it takes about 0.8 s: 0.2 s, then half a second catching the stop, then a few ms of unwinding)


MAIN_THREAD_RECURSION = """
import sys, time
sys.path.insert(0, "tests")
from test_round_20_stops import recursing
from helpers.gpt import compute as gc
sys.setrecursionlimit(LIMIT)
for _ in range(3):
    tick = time.monotonic()
    try:
        gc.stopped_after(0.2, gc.LoopLate, recursing)
    except gc.LoopLate:
        print(round(time.monotonic() - tick, 1))
"""


@pytest.mark.parametrize("limit", [150, 1000])
def test_a_recursion_in_the_main_thread_is_stopped_too(limit):
    """In the main thread stopped_after also sends the kicks that end a sleep (gpt.sleeps_ended): its frames must not
    keep a recursion at the limit from being stopped (in a fresh process: a hang is a time-out, not a stuck worker)."""
    import subprocess
    from pathlib import Path

    done = subprocess.run([sys.executable, "-c", MAIN_THREAD_RECURSION.replace("LIMIT", str(limit))], timeout=120,
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert done.returncode == 0 and len(done.stdout.split()) == 3, done.stderr[-2000:]


def test_the_recursion_limit_is_put_back_after_the_stop(recursion_limit):
    sys.setrecursionlimit(700)
    assert stopped_in_a_thread(recursing) is not None
    deadline = time.monotonic() + 10
    while sys.getrecursionlimit() != 700 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sys.getrecursionlimit() == 700
    assert states._recursion == {"base": None}


def test_the_limit_is_raised_while_the_code_is_raised_at_every_line(recursion_limit):
    seen, thread = set(), threading.Thread(target=stopped_in_a_thread, args=(recursing,), daemon=True)
    thread.start()
    while thread.is_alive():   # (watched from here every millisecond)
        seen.add(sys.getrecursionlimit())
        time.sleep(0.001)
    assert recursion_limit + states.RECURSION_HEADROOM in seen


def test_what_a_stopped_loop_raises_on_its_way_out_is_the_stop_without_its_chain():
    def raises_its_own(*args):
        try:
            while True:
                pass
        except BaseException:
            time.sleep(0.01)
            raise ValueError("mine")

    assert stopped_in_a_thread(raises_its_own)[0] == ("LoopLate", True)


def test_a_loop_not_stopped_raises_its_own_error_as_it_was():
    def fails(*args):
        raise ValueError("mine")

    with pytest.raises(ValueError, match="mine"):
        gc.stopped_after(5, gc.LoopLate, fails)


def test_a_checks_put_back_during_a_stop_keeps_the_headroom_until_the_stop_has_ended(recursion_limit):
    # (a check that gave up on a function still being stopped puts its recursion limit back)
    assert states._headroom_given() is True
    try:
        assert sys.getrecursionlimit() == recursion_limit + states.RECURSION_HEADROOM
        assert states.recursion_limit() == recursion_limit   # (what the next check saves: not the headroom)
        assert states._headroom_given() is False   # (one stop at a time)
        states.recursion_limit_put_back(600)
        assert sys.getrecursionlimit() == 600 + states.RECURSION_HEADROOM
    finally:
        states._headroom_returned()
    assert sys.getrecursionlimit() == 600
    states.recursion_limit_put_back(recursion_limit)
    assert sys.getrecursionlimit() == recursion_limit


def test_checks_in_a_row_on_such_a_recursion_leave_the_limit_as_it_was(recursion_limit):
    doubles = doubling_check(0.5)
    for _ in range(3):
        found = doubles.feedback(recursing)
        assert len(found) == 1 and "was stopped" in found[0], found
    deadline = time.monotonic() + 30
    while states._recursion["base"] is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sys.getrecursionlimit() == recursion_limit


def test_a_thread_that_used_the_headroom_meets_a_recursion_error_when_it_is_taken_back(recursion_limit):
    # (C's own recursion, which no frame shows: a repr of a list nested past the limit, in a thread begun while the
    # headroom was held; taken back, the thread is at most RECURSION_HEADROOM calls past the limit, where CPython
    # raises RecursionError; past 50 it would abort the process)
    started, said = threading.Event(), {}

    def nested_repr():
        deep = []
        for _ in range(recursion_limit + states.RECURSION_HEADROOM - 10):
            deep = [deep]
        started.set()
        for _ in range(200):
            try:
                repr(deep)
            except RecursionError:
                said["raised"] = "RecursionError"
                return
        said["raised"] = "nothing"

    assert states._headroom_given() is True
    try:
        thread = threading.Thread(target=nested_repr, daemon=True)
        thread.start()
        assert started.wait(30)
        time.sleep(0.05)
    finally:
        states._headroom_returned()
    thread.join(30)
    assert said == {"raised": "RecursionError"}


def test_a_learners_function_may_not_set_the_recursion_limit_in_a_check(recursion_limit):
    doubles = doubling_check(0.5)

    def lowers(x):
        sys.setrecursionlimit(50)
        return 2 * x

    found = doubles.feedback(lowers)
    assert len(found) == 1 and "does not allow sys.setrecursionlimit" in found[0], found
    assert sys.getrecursionlimit() == recursion_limit and sys.setrecursionlimit is states._set_recursion_limit


def test_a_loop_that_sets_a_huge_limit_is_stopped_and_its_limit_left_as_it_set_it(recursion_limit):
    def huge(*args):
        sys.setrecursionlimit(2**31 - 1)
        nested_three_deep()

    assert stopped_in_a_thread(huge)[0] == ("LoopLate", True)
    assert states._recursion == {"base": None}
    assert sys.getrecursionlimit() == 2**31 - 1   # (the loop's own doing, in a live run: not the stop's)


def test_a_stop_raised_in_a_learners_del_while_it_is_stopped_is_not_printed(capsys):
    class Dropped:
        def __del__(self):
            sum(range(50))

    def drops(*args):
        while True:
            try:
                while True:
                    Dropped()
            except BaseException:
                pass

    assert stopped_in_a_thread(drops)[0] == ("LoopLate", True)
    assert "Exception ignored" not in capsys.readouterr().err
