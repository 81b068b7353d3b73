"""Round 26 (stop 56): a call that keeps Python's interpreter lock past its limit, and the device in force.

Found by the red team: a learner's function whose one call into C never lets go of the interpreter lock
(``sum(range(10**9))``) could not be stopped (no other thread runs meanwhile), and when it ended, long past its
limit, the check took its answer as if it had come in time. It is now refused as late. And the survey of the
ambient devices found ``states.on_the_cpu`` reading every device context in torch's stack, not the innermost:
inside the course's own CPU context a forward entered it again (chapter 09's operation count grew).
"""
import time

import torch

from helpers import exercises, states
from helpers.exercises import Wrong


def c_call_of(seconds):
    """A function that spends about ``seconds`` in one call into C that keeps the interpreter lock (a sum of a range,
    sized from a short one timed here: the machine's own speed)."""
    started = time.perf_counter()
    sum(range(10**7))
    n = int(10**7 * seconds / max(time.perf_counter() - started, 1e-3))
    return lambda: sum(range(n))


def test_a_call_that_kept_the_interpreter_lock_past_its_limit_is_refused_as_late():
    function = c_call_of(1 + exercises.HELD_SLACK + 3)   # past 1 s and its slack, by 3 s
    started = time.monotonic()
    try:
        exercises.call(function, seconds=1)
    except Wrong as wrong:
        said = str(wrong)
    else:
        said = None
    assert time.monotonic() - started > 1 + exercises.HELD_SLACK   # (it could not be stopped sooner)
    assert said is not None and "ran for more than 1 s in one call into C that kept Python's interpreter lock" in said


def test_a_short_call_into_c_is_taken():
    assert exercises.call(lambda: sum(range(1000)), seconds=5) == 499500


def test_only_the_innermost_device_context_counts():
    assert not states._default_device_set(torch)
    with torch.device("meta"):
        assert states._default_device_set(torch)
        with torch.device("cpu"):   # (as course_modes puts it: the CPU again, inside)
            assert not states._default_device_set(torch)
        assert states._default_device_set(torch)
    assert not states._default_device_set(torch)
