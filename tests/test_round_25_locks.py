"""Round 25 (reader A, entries 16 and 17): positions.diagonal_spread had no memory bound (a 9,000 x 9,000 S used
+1.9 GB) and masking.mask_after_softmax refused a large table by its size only after copying it (+0.6 GB): both now
count from the shape, before any copy. A learner's function that returned holding a process-wide lock (logging's,
a logging handler's, the import lock, threading's lock of the threads being started) hung the check for good (its
put-back, logging.root.setLevel, or its next call's thread waited for it): the lock is let go of in the thread that
ran the function, and the check says so; the put-back waits for logging's lock at most LOCK_WAIT s."""
import json
import os
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest
import torch

from helpers.masking import compute as masking
from helpers.positions import compute as positions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = 10 * 2**20   # bytes a refusal from the shape may allocate at most (nothing of the table's size)


def refused_within(refused, call, *words):
    """refused(call, *words), and the most Python and NumPy allocated meanwhile (tracemalloc)."""
    tracemalloc.start()
    try:
        refused(call, *words)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------ entry 16: counted from the shape

@pytest.mark.parametrize("S", [np.broadcast_to(np.float32(0.5), (9000, 9000)),
                               torch.full((1,), 0.5).expand(9000, 9000)], ids=["numpy", "torch"])
def test_diagonal_spread_refuses_a_large_S_before_copying_it(refused, S):
    peak = refused_within(refused, lambda: positions.diagonal_spread(S), "diagonal_spread on S of shape (9000, 9000)",
                          "1.5 GiB", "8,192 x 8,192")
    assert peak < SMALL, peak


def test_diagonal_spread_counts_no_copy_of_a_float64_S(refused):
    refused(lambda: positions.diagonal_spread(np.broadcast_to(0.5, (10_100, 10_100))), "10,033 x 10,033")
    assert positions.diagonal_spread(np.broadcast_to(0.5, (3, 3))) == 0.0


def test_diagonal_spread_still_answers():
    assert positions.diagonal_spread([[0.0, -np.inf], [1.0, 3.0]]) == 3.0   # a list: converted, then counted
    assert positions.diagonal_spread(torch.arange(9.0).reshape(3, 3)) == 8.0


@pytest.mark.parametrize("shape, words", [((9000, 9000), ("mask_after_softmax on scores of T=9,000", "T <=")),
                                          ((9000, 9001), ("should be a square (T, T) table", "(9000, 9001)"))])
def test_mask_after_softmax_refuses_from_the_shape(refused, shape, words):
    scores = np.broadcast_to(np.float32(0.5), shape)   # a float32 table: the old code copied it to float64 first
    assert refused_within(refused, lambda: masking.mask_after_softmax(scores), *words) < SMALL


def test_mask_after_softmax_still_answers(refused):
    after = masking.mask_after_softmax([[0.0, 1.0], [2.0, 3.0]])
    assert torch.allclose(after["before"][0], torch.tensor([1.0, 0.0]))
    refused(lambda: masking.mask_after_softmax(np.ones(3)), "2-D")
    refused(lambda: masking.mask_after_softmax(np.ones((0, 0))), "square")


# ------------------------------------------------------------------ entry 17: locks left taken

CHILD = r"""
import _imp, io, json, logging, sys, threading, time
import numpy as np
from helpers import exercises
from helpers.exercises import Wrong, call
from helpers.geometry import checks

handler = logging.StreamHandler(io.StringIO())
level = logging.root.level


def cosine(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def leaving(take):
    def function(a, b):
        logging.root.setLevel(5)   # (so that the put-back calls logging.root.setLevel)
        take()
        return cosine(a, b)
    return function


def taken_thrice(lock):
    return lambda: [lock.acquire() for _ in range(3)]


def in_a_thread():   # a thread of the function's own ends holding logging's lock: no thread of the check's holds it
    thread = threading.Thread(target=logging._lock.acquire)
    thread.start()
    thread.join()


CASES = {"logging": taken_thrice(logging._lock), "handler": taken_thrice(handler.lock),
         "import": lambda: [_imp.acquire_lock() for _ in range(2)], "limbo": threading._active_limbo_lock.acquire,
         "nothing": lambda: None}
for name, take in CASES.items():
    began = time.monotonic()
    try:
        said = repr(call(leaving(take), [3, 1], [1, 2]))
    except Wrong as wrong:
        said = "WRONG " + str(wrong)
    free = logging._lock.acquire(timeout=2) and handler.lock.acquire(timeout=2)
    logging._lock.release(), handler.lock.release()
    started = threading.Thread(target=lambda: None)
    started.start()
    started.join(2)
    print(json.dumps(dict(case=name, said=said, seconds=time.monotonic() - began, free=free, imports=not _imp.lock_held(),
                          threads=not started.is_alive(), level=logging.root.level == level)), flush=True)
verdict = checks.cosine_function.feedback(leaving(logging._lock.acquire))   # the repro's: a check of chapter 01
print(json.dumps(dict(case="check", said=" ".join(verdict), free=logging._lock.acquire(timeout=2))), flush=True)
logging._lock.release()
began = time.monotonic()
try:
    said = repr(call(leaving(in_a_thread), [3, 1], [1, 2]))
except Wrong as wrong:
    said = "WRONG " + str(wrong)
print(json.dumps(dict(case="thread", said=said, seconds=time.monotonic() - began)), flush=True)
import os
os._exit(0)   # (logging.shutdown at exit would wait for the lock the ended thread holds)
"""


@pytest.fixture(scope="module")
def lock_cases(tmp_path_factory):
    """What a check said, and what held afterwards, per lock a learner's function left taken (a child process:
    without the fix it hangs, and its locks would hang this one)."""
    env = dict(os.environ, PYTHONPATH=ROOT, COURSE_MY_GPT=str(tmp_path_factory.mktemp("my_gpt")))
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=25, env=env, cwd=ROOT)
    cases = {line["case"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert "thread" in cases, done.stderr[-3000:]
    return cases


@pytest.mark.parametrize("case, named", [("logging", "logging's module lock (logging._lock)"),
                                         ("handler", "the lock of logging's handler StreamHandler"),
                                         ("import", "the import lock (_imp.acquire_lock())"),
                                         ("limbo", "threading's lock of the threads being started (threading._active_limbo_lock)")])
def test_a_lock_left_taken_is_let_go_of_and_said(lock_cases, case, named):
    found = lock_cases[case]
    assert found["said"].startswith(f"WRONG your code ended holding {named}: "), found["said"]
    assert "the check let go of it" in found["said"] and found["said"].count(". ") == 0, found["said"]
    assert found["free"] and found["imports"] and found["threads"] and found["level"], found
    assert found["seconds"] < 10, found   # (not a timing test: the check's own limit, not hung)


def test_a_function_that_leaves_nothing_taken_is_right(lock_cases):
    found = lock_cases["nothing"]
    assert found["said"] == repr(0.7071067811865475) and found["free"] and found["level"], found


def test_the_chapter_check_answers_and_says_so(lock_cases):
    assert "logging's module lock" in lock_cases["check"]["said"] and lock_cases["check"]["free"], lock_cases["check"]


def test_a_lock_a_thread_of_the_function_keeps_is_waited_for_a_bounded_time(lock_cases):
    said = lock_cases["thread"]["said"]   # (round 26: the lock of a thread that has ended is let go of, and said)
    assert said.startswith("WRONG a thread of your function ended holding logging's module lock"), said
    assert "the check let go of it" in said, said
