"""helpers.exercises, the exercise framework: feedback never raises, grade raises with the same
words, answers are converted and gated once, NaN and inf are wrong, a learner's function is
stopped when it loops or exits."""
import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

from helpers import exercises
from helpers.exercises import (NOT_ANSWERED, Array, Function, Number, Verdict, Whole, Words, as_wholes, call,
                               close_problems, exercise, number_problems, slip)

from doubling import doubling_check


@exercise("rows of the weights", answer=Array(shape=(2, 2)))
def rows(answer):
    if not np.allclose(answer.sum(-1), 1):
        yield "each row should sum to 1"


@exercise("one probability", answer=Number())
def probability(answer, reference=0.25):
    yield from number_problems(answer, reference, "p")


@exercise("a count", answer=Whole())
def count(answer):
    if answer != 302:
        yield "not the count"


@exercise("a shape", answer=Whole(length=3))
def shape(answer, T):
    if answer != (2, T, T):
        yield "not the shape"


@exercise("a square of the given size", answer=Array(shape=lambda n: (n, n)))
def square(answer, n):
    yield from ()


def test_right_answer_passes_and_prints_a_tick(capsys):
    assert rows(np.array([[0.5, 0.5], [1.0, 0.0]]))
    assert capsys.readouterr().out.startswith("✓ rows of the weights")
    rows.grade(np.eye(2))


def test_wrong_answers_get_words_not_tracebacks(capsys):
    assert not rows(np.ones((2, 2)))
    assert "each row should sum to 1" in capsys.readouterr().out
    assert not rows(np.ones(3))
    assert "shape (2, 2)" in capsys.readouterr().out
    assert not rows("banana")
    assert "array of numbers" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="each row should sum to 1"):
        rows.grade(np.ones((2, 2)))


def test_none_means_not_answered(capsys):
    assert not rows(None)
    assert NOT_ANSWERED in capsys.readouterr().out
    with pytest.raises(AssertionError, match="not answered"):
        rows.grade(None)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), np.float32("nan"), torch.tensor(float("nan")),
                                 np.float32("inf") / np.float32("inf")])
def test_nan_and_inf_are_wrong_and_say_so(bad):
    found = probability.feedback(bad)
    assert found and ("NaN" in found[0] or "inf" in found[0])
    with pytest.raises(AssertionError):
        probability.grade(bad)
    assert rows.feedback(np.array([[0.5, np.nan], [1.0, 0.0]]))


@pytest.mark.parametrize("right", [0.25, np.float32(0.25), [0.25], np.array(0.25), torch.tensor(0.25),
                                   torch.tensor([0.25], requires_grad=True), torch.tensor(0.25, dtype=torch.float64)])
def test_a_right_number_is_accepted_in_any_reasonable_form(right):
    assert probability.feedback(right) == []


def test_tensors_with_grad_and_lists_are_accepted_as_arrays():
    assert rows.feedback(torch.eye(2, requires_grad=True)) == []
    assert rows.feedback([[0.5, 0.5], [0.0, 1.0]]) == []


def test_not_a_number_kinds_are_wrong():
    assert "truth value" in probability.feedback(True)[0]
    assert "one number" in probability.feedback([0.25, 0.75])[0]
    assert "real numbers" in probability.feedback(0.25 + 1j)[0]


def test_non_integers_are_wrong_where_a_whole_number_is_asked():
    assert count.feedback(302) == [] and count.feedback(np.int64(302)) == [] and count.feedback(302.0) == []
    assert count.feedback(torch.tensor(302)) == [] and count.feedback(torch.tensor([1, 302]).argmax() + 301) == []
    assert "whole number" in count.feedback(302.9)[0]
    assert shape.feedback((2, 5, 5), T=5) == [] and shape.feedback(torch.Size([2, 5, 5]), T=5) == []
    assert "whole numbers only" in shape.feedback((2.7, 5.2, 5.9), T=5)[0]
    assert "3 whole numbers" in shape.feedback((5, 5), T=5)[0]
    assert as_wholes({3, 1}, "positions", ordered=False) in ((1, 3), (3, 1))


def test_a_shape_can_depend_on_the_checks_arguments():
    assert square.feedback(np.eye(3), n=3) == []
    assert "shape (4, 4)" in square.feedback(np.eye(3), 4)[0]


def test_words():
    @exercise("words", answer=Words(length=2))
    def words(answer):
        yield from ()
    assert words.feedback(["a", "b"]) == []
    assert "list of words" in words.feedback("ab")[0] and "2 words" in words.feedback(["a"])[0]


def test_a_learners_function_that_raises_exits_or_loops_is_stopped_and_named():
    doubles = doubling_check(1)

    assert doubles.feedback(lambda x: 2 * x) == []
    assert "function of x" in doubles.feedback(3)[0]
    assert "ZeroDivisionError" in doubles.feedback(lambda x: 1 / 0)[0]

    def leaves(x):
        raise SystemExit(0)
    assert "exit()" in doubles.feedback(leaves)[0]

    def loops(x):
        while True:
            pass
    started = time.perf_counter()
    assert "more than 1 s" in doubles.feedback(loops)[0]
    assert time.perf_counter() - started < 60         # stopped, not left to run


def test_a_bug_in_the_check_is_not_blamed_on_the_learner(capsys):
    @exercise("fragile")
    def fragile(answer):
        yield from ["x"][answer:]  # TypeError for a string answer
    assert not fragile("a")
    assert "the check itself failed" in capsys.readouterr().out


def test_close_number_and_slip():
    assert list(close_problems(np.array([1.0, -np.inf]), np.array([1.0, -np.inf]), "s")) == []
    assert "1 of 2 entries" in next(close_problems(np.array([1.0, 2.0]), np.array([1.0, 3.0]), "s"))
    assert "too large" in next(number_problems(0.5, 0.4, "p"))
    assert list(number_problems(0.4, 0.4, "p")) == []
    assert slip(0.5, [(0.4, "a"), (0.5, "b")]) == "b" and slip(0.7, [(0.4, "a")]) is None


def test_the_verdict_is_invisible_as_a_cells_last_value():
    """nbgrader's student version ends a check cell with the visible call; it must not print True/False."""
    import nbformat
    from nbclient import NotebookClient
    from nbformat.v4 import new_code_cell, new_notebook
    from chapters import run_client
    nb = new_notebook(cells=[new_code_cell("from helpers.exercises import Verdict\nVerdict(False)")])
    run_client(NotebookClient(nb, kernel_name="python3"))
    assert nb.cells[0].outputs == []
    assert repr(Verdict(True)) == "Verdict(True)"


def test_call_names_an_input_changed_in_place_and_the_caller_keeps_its_own():
    import torch

    from helpers.exercises import Wrong, call

    W_Q = torch.ones(2, 2)

    def scaled_in_place(x, W_Q):
        W_Q /= 2
        return x @ W_Q

    with pytest.raises(Wrong, match=r"changed W_Q in place on the toy .*W_Q = W_Q / s"):
        call(scaled_in_place, torch.ones(1, 2), W_Q, what="on the toy")
    assert torch.equal(W_Q, torch.ones(2, 2))          # the caller's tensor is untouched
    nan = np.array([np.nan, 1.0])
    assert call(lambda v: v.sum(), nan) != 0            # NaN in an input is not a change
    with pytest.raises(Wrong, match="changed argument 1 in place"):
        call(lambda *a: a[0].fill_(0), torch.ones(3))
    assert call(lambda x: x * 2, x=torch.ones(2)).tolist() == [2.0, 2.0]


def _bare_except_loop(x):
    while True:
        try:
            while True:
                pass
        except:   # noqa: E722 — the learner's bare except swallows everything it can
            pass


def _own_alarm_handler(x):
    import signal
    signal.signal(signal.SIGALRM, lambda *a: None)
    signal.alarm(0)
    while True:
        pass


def _disarms_the_alarm(x):
    import signal
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.alarm(0)
    while True:
        pass


def _sleeps_in_c(x):
    time.sleep(10**6)


def _sleeps_under_a_bare_except(x):
    while True:
        try:
            time.sleep(0.001)
        except:   # noqa: E722
            pass


HOSTILE_CHECK = """
import json, sys
sys.path.insert(0, {tests!r})
import test_exercises as te
from helpers.exercises import Function, call, exercise

@exercise("a function", answer=Function("a function of x"))
def doubles(answer):
    if call(answer, 2, what="on x=2", seconds=0.5) != 4:
        yield "not double"

print(json.dumps([doubles.feedback(te.{hostile}), doubles.feedback(lambda x: 2 * x)]))
"""


@pytest.mark.parametrize("hostile", ["_bare_except_loop", "_own_alarm_handler", "_disarms_the_alarm", "_sleeps_in_c",
                                     "_sleeps_under_a_bare_except"])
def test_a_hostile_function_cannot_keep_the_check_going(hostile):
    """Issue 31: a bare except, its own SIGALRM handler, alarm(0) or a long C call: the check still
    answers (its sentence), and says when the function is still running in the background.

    Each runs in a Python of its own: a function whose bare except swallows every stop runs on in
    its thread until the process ends (Python cannot kill a thread), and a busy thread left in this
    worker would slow every later test on it tenfold (it holds the GIL for 5 ms each time a torch
    call hands it back), as it slows a learner's kernel until the restart its sentence asks for."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    code = HOSTILE_CHECK.format(tests=str(Path(__file__).parent), hostile=hostile)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found, after = json.loads(done.stdout.splitlines()[-1])
    assert len(found) == 1
    assert "more than 0.5 s and was stopped" in found[0] or "signal only works in main thread" in found[0], found
    if hostile == "_sleeps_in_c":   # a C call cannot be stopped; a bare except: is stopped line by line
        assert "still running in the background" in found[0]
    assert after == []      # the next check is not disturbed


def test_a_check_has_a_total_time_limit(monkeypatch):
    """All the calls of one check together stop at CHECK_TIME_LIMIT, each call at TIME_LIMIT."""
    monkeypatch.setattr(exercises, "CHECK_TIME_LIMIT", 1.0)
    calls = []

    @exercise("many calls", answer=Function())
    def many(answer):
        for i in range(100):
            calls.append(i)
            call(answer, i, seconds=5)   # more than the total, so only the total can stop it
        yield from ()

    def slow(x):
        time.sleep(0.3)
    found = many.feedback(slow)
    assert len(found) == 1 and f"its limit of 1.0 s" in found[0], found
    assert len(calls) <= 5


def test_the_checks_gradient_mode_reaches_the_learners_function():
    import torch
    with torch.no_grad():
        assert call(torch.is_grad_enabled) is False
    assert call(torch.is_grad_enabled) is True


def test_a_learners_own_keyboard_interrupt_is_its_stop_not_a_traceback():
    def interrupts(x):
        raise KeyboardInterrupt
    with pytest.raises(exercises.Wrong, match="stopped with KeyboardInterrupt"):
        call(interrupts, 1)


def test_a_huge_answer_is_refused_before_it_is_copied():
    found = square.feedback(np.zeros(10**8, dtype=np.int8), n=3)
    assert len(found) == 1 and "at most 10,000,000 numbers" in found[0], found


def test_a_check_cell_edited_or_given_bad_arguments_is_not_called_a_bug_of_the_check():
    from helpers.errors import fail

    @exercise("needs n")
    def needs_n(answer, n):
        if n < 1:
            fail(f"n should be at least 1, but got {n}")
        yield from ()
    assert "as it was given" in needs_n.feedback(1)[0]            # n dropped from the cell
    assert "as it was given" in needs_n.feedback(1, -12)[0]       # an argument the check cannot use
    assert "report it" not in needs_n.feedback(1, -12)[0]


def test_a_check_runs_with_a_profiler_or_debugger_attached():
    """With a profile or trace function set (cProfile, %prun, the debugger), a check's call still
    returns, and a function past its time is still stopped: the stop leaves nothing signalled."""
    import subprocess
    import sys
    code = ("import sys\n"
            "sys.setprofile(lambda *a: None)\n"
            "from helpers.exercises import Wrong, call\n"
            "print(call(lambda a: a + 1, 1))\n"
            "def forever(a):\n"
            "    while True:\n"
            "        try:\n"
            "            while True: pass\n"
            "        except: pass\n"
            "try:\n"
            "    call(forever, 1, seconds=0.5)\n"
            "except Wrong as wrong:\n"
            "    print('stopped' if 'was stopped' in str(wrong) else wrong)\n"
            "print(call(lambda a: a + 1, 2))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.split() == ["2", "stopped", "3"], done.stdout + done.stderr


# ---- issue 31, red team round 3: an answer is screened by type before any of its own code runs

class _RaisesOnFloat:
    def __float__(self):
        raise ZeroDivisionError("boom")

    def __array__(self, *args, **kwargs):
        raise RuntimeError("nope")


class _FloatNeverEnds:
    def __float__(self):
        while True:
            pass


@exercise("a number", answer=Number())
def _a_half(answer):
    if abs(answer - 0.5) > 1e-6:
        yield "not a half"


@pytest.mark.parametrize("answer", [_RaisesOnFloat(), _FloatNeverEnds(), [_RaisesOnFloat()],
                                    np.array([_FloatNeverEnds()], dtype=object), {"p": _RaisesOnFloat()},
                                    (0.5, [_FloatNeverEnds()])])
def test_an_answer_of_a_type_of_its_own_is_refused_before_its_code_runs(answer):
    start = time.monotonic()
    said = _a_half.feedback(answer)
    assert len(said) == 1 and "but a check takes only plain values" in said[0], said
    assert time.monotonic() - start < 1


def test_a_function_returning_a_type_of_its_own_is_refused_before_its_code_runs():
    with pytest.raises(exercises.Wrong, match="what your function returned holds a _FloatNeverEnds"):
        call(lambda: [1.0, _FloatNeverEnds()])


@pytest.mark.parametrize("answer, said", [
    (["0.5"], "holds text ('0.5')"), (np.array(["0.5"]), "holds text ('0.5')"),
    (np.array(["0.5", None], dtype=object), "holds text ('0.5')"),
    (torch.tensor(0.5, dtype=torch.bfloat16), None), (np.float32(0.5), None), (torch.Size([]), "one number"),
])
def test_text_is_no_number_and_every_float_dtype_is_one(answer, said):
    found = _a_half.feedback(answer)
    assert (found == []) if said is None else (len(found) == 1 and said in found[0]), found


def test_a_tuple_holding_a_tuple_is_no_shape():
    with pytest.raises(exercises.Wrong, match="should be an array of numbers"):
        as_wholes(((2,), 5, 5), "the shape")
    with pytest.raises(exercises.Wrong, match="tuple of whole numbers"):
        as_wholes(np.int64(3), "the shape")
    assert as_wholes(torch.Size([2, 5, 5]), "the shape") == (2, 5, 5)


def test_round_6_torch_globals_a_learner_sets_stay_inside_its_call():
    """Red team round 6: a global module hook, deterministic and anomaly modes and print options set
    by a learner's function outlived the check (a global hook zeroed every later model's output)."""
    from torch.nn.modules import module as torch_module

    from helpers.exercises import call

    hooks = len(torch_module._global_forward_hooks)
    full = torch_module._global_is_full_backward_hook

    def meddles(x):
        torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: o * 0)
        torch.nn.modules.module.register_module_full_backward_hook(lambda m, gi, go: None)
        torch.use_deterministic_algorithms(True)
        torch.autograd.set_detect_anomaly(True)
        torch.set_printoptions(precision=1)
        return x

    assert call(meddles, 3) == 3
    assert len(torch_module._global_forward_hooks) == hooks and not torch_module._global_backward_hooks
    assert torch_module._global_is_full_backward_hook is full
    assert not torch.are_deterministic_algorithms_enabled() and not torch.is_anomaly_enabled()
    assert torch._tensor_str.PRINT_OPTS.precision == 4


def test_round_6_putting_torch_back_imports_nothing_when_nothing_changed():
    """torch.use_deterministic_algorithms imports torch's compiler (about 800 modules, and a folder
    in /tmp the grader's fence cannot write): a call that changed nothing must not call it."""
    import subprocess
    import sys

    code = ("import sys, torch; from helpers.exercises import call; call(lambda x: x, 1); "
            "print('torch._inductor' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_round_7_a_long_range_is_measured_before_it_is_converted():
    """Red team round 7: a range is made lazily, so range(10**9) as an answer (or returned by a
    learner's function) filled the memory while the check converted it."""
    from helpers.geometry import checks as geometry_checks
    from helpers.tour import checks as tour_checks

    start = time.perf_counter()
    assert "at most 10,000,000" in geometry_checks.cosine_function.feedback(lambda a, b: range(10**9))[0]
    assert "range of 100,000,000" in tour_checks.scores_shape.feedback(range(10**8), n_heads=2, T=5)[0]
    huge = tour_checks.scores_shape.feedback(range(10**30), n_heads=2, T=5)[0]
    assert "range of 1000000000000000000000000000000" in huge
    assert "300,000,000" in tour_checks.next_prob.feedback(range(3 * 10**8), np.zeros(20), 3)[0]
    assert time.perf_counter() - start < 5


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")   # the SystemExit that stops it
def test_round_7_what_a_learners_function_changes_for_later_cells_is_put_back():
    """Red team round 7: warning filters, the recursion limit, a replaced torch or NumPy function, the
    random states and a thread left running outlived the check that called the learner's code."""
    import random
    import sys
    import threading
    import warnings

    from helpers.geometry import checks as geometry_checks

    filters, limit, softmax, norm = list(warnings.filters), sys.getrecursionlimit(), torch.softmax, np.linalg.norm
    torch_state, numpy_state, python_state = torch.get_rng_state(), np.random.get_state()[1].copy(), random.getstate()

    def meddles(x):   # (sys.setrecursionlimit: refused in a check since round 24, test_round_24_stops)
        warnings.simplefilter("error")
        torch.softmax = lambda t, dim=-1: t
        np.linalg.norm = lambda t: 1.0
        return x

    assert call(meddles, 3) == 3
    assert warnings.filters == filters and sys.getrecursionlimit() == limit
    assert torch.softmax is softmax and np.linalg.norm is norm

    def seeds(a, b):   # the random states are put back by the check as a whole (it may watch them advance)
        torch.manual_seed(123), np.random.seed(5), random.seed(3)
        return 0.5

    assert geometry_checks.cosine_function.feedback(seeds)
    assert torch.equal(torch.get_rng_state(), torch_state) and (np.random.get_state()[1] == numpy_state).all()
    assert random.getstate() == python_state

    def busy():
        while True:
            pass

    def leaves_a_thread(x):
        threading.Thread(target=busy, daemon=True).start()
        return x

    threads = threading.active_count()
    with pytest.raises(exercises.Wrong, match="left 1 thread of its own running"):
        call(leaves_a_thread, 3)
    deadline = time.monotonic() + 2   # its watchdog ends at its next look, 20 ms after the thread
    while threading.active_count() > threads and time.monotonic() < deadline:
        time.sleep(0.02)
    assert threading.active_count() == threads   # asked to stop, and stopped


def test_round_7_a_learners_exception_message_is_cut_and_may_fail_to_print():
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    def long_message(x):
        raise AssertionError("x" * 10**6)

    def unprintable(x):
        raise Unprintable()

    with pytest.raises(exercises.Wrong) as caught:
        call(long_message, 3)
    assert len(str(caught.value)) < 5_100
    with pytest.raises(exercises.Wrong, match="could not be read"):
        call(unprintable, 3)


def test_round_7b_what_putting_back_must_leave_alone():
    """The verification of round 7: tqdm's own monitor thread is no thread the learner left; a
    learner's warning shows once, not at every call; a method added to torch.Tensor is removed."""
    import subprocess
    import sys

    code = ("from tqdm.auto import tqdm\nfrom helpers.exercises import call\n"
            "print(call(lambda: sum(tqdm(range(3), disable=True))))\n"
            "import warnings\n"
            "def warns(x):\n    warnings.warn('learner warning')\n    return x\n"
            "for _ in range(3):\n    call(warns, 1.0)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "3", run.stderr   # a fresh process: tqdm starts its monitor inside the call
    assert run.stderr.count("learner warning") == 1, run.stderr

    softmax = torch.Tensor.softmax

    def patches(x):
        torch.Tensor.softmax = lambda self, dim: self
        return x

    call(patches, 1)
    assert torch.Tensor.softmax is softmax and "softmax" not in vars(torch.Tensor)


def _top_p_checks():
    from helpers.sampling import checks
    return checks


def test_round_8_a_learners_function_cannot_replace_the_checks_own_code():
    """Red team round 8: a learner's function that replaced the check's reference (or any name in
    the course's modules or classes, nn.GELU.forward, a builtin) made wrong answers pass, in that
    check and in every later one; the time limit itself could be lifted."""
    import builtins

    from helpers import exercises, model
    checks = _top_p_checks()
    reference, forward, gelu, length = checks.reference_top_p, model.Transformer.forward, torch.nn.GELU.forward, len

    def wrong(probs, p):
        return np.asarray(probs, float)

    def meddles(probs, p):
        checks.reference_top_p = lambda probs, p: np.asarray(probs, float)
        exercises.TIME_LIMIT = 10**6
        model.Transformer.forward = lambda self, ids, **k: None
        torch.nn.GELU.forward = lambda self, x: x * 0
        builtins.len = lambda x: 0
        return wrong(probs, p)

    assert checks.top_p_function.feedback(meddles)
    assert checks.top_p_function.feedback(wrong)
    assert (checks.reference_top_p, exercises.TIME_LIMIT, model.Transformer.forward, torch.nn.GELU.forward,
            builtins.len) == (reference, 10, forward, gelu, length)


def test_round_8_what_a_learners_function_changes_in_the_process_is_put_back():
    import builtins
    import gc
    import os

    import matplotlib

    from helpers.exercises import call
    before = (os.getcwd(), dict(os.environ), list(sys.path), gc.isenabled(), sys.get_int_max_str_digits(),
              threading.gettrace(), sys.stdout, builtins.print, torch.get_num_threads(),
              matplotlib.rcParams["lines.linewidth"])

    def meddles(x):
        os.chdir("/")
        os.environ["COURSE_ROUND_8"] = "1"
        sys.path.insert(0, "/nowhere")
        gc.disable()
        sys.set_int_max_str_digits(640)
        threading.settrace(lambda *a: None)
        sys.stdout = open(os.devnull, "w")
        builtins.print = lambda *a, **k: None
        torch.set_num_threads(torch.get_num_threads() + 1)
        matplotlib.rcParams["lines.linewidth"] = 9.0
        return x

    assert call(meddles, 3) == 3
    after = (os.getcwd(), dict(os.environ), list(sys.path), gc.isenabled(), sys.get_int_max_str_digits(),
             threading.gettrace(), sys.stdout, builtins.print, torch.get_num_threads(),
             matplotlib.rcParams["lines.linewidth"])
    assert after == before


@pytest.mark.parametrize("how", ["_thread", "named like tqdm", "catches SystemExit"])
def test_round_8_every_thread_a_learners_function_leaves_is_stopped(how):
    """Threads started with _thread are not in threading.enumerate(); a class named like tqdm's was
    taken for tqdm's; a thread that caught SystemExit ran on. Each is found and stopped."""
    import _thread

    from helpers.exercises import Wrong, call
    stopped = threading.Event()

    def spin():
        try:
            while True:
                try:
                    time.sleep(0.005)
                except BaseException:   # noqa: BLE001
                    if how != "catches SystemExit":
                        raise
                    if stopped.is_set():
                        raise
                    stopped.set()
        finally:
            stopped.set()

    def leaves(x):
        if how == "_thread":
            _thread.start_new_thread(spin, ())
        else:
            kind = type("TMonitor", (threading.Thread,), {"__module__": "tqdm._monitor"})
            kind(target=spin, daemon=True).start() if how == "named like tqdm" else \
                threading.Thread(target=spin, daemon=True).start()
        return x

    frames = set(sys._current_frames())
    with pytest.raises(Wrong, match="left 1 thread of its own running") as caught:
        call(leaves, 3)
    assert "now stopped" in str(caught.value)
    deadline = time.monotonic() + 5
    while set(sys._current_frames()) - frames and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not [i for i in set(sys._current_frames()) - frames
                if not getattr(threading._active.get(i), "name", "").startswith("stops")]


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="child processes are listed from Linux's /proc")
def test_round_8_a_process_a_learners_function_leaves_is_stopped():
    from helpers.exercises import Wrong, _children, call

    def forks(x):   # (a fork: since round 31 a check refuses starting another program, subprocess's way)
        if os.fork() == 0:
            while True:
                time.sleep(0.1)
        return x

    before = _children()
    with pytest.raises(Wrong, match="left 1 process of its own running"):
        call(forks, 3)
    assert _children() == before


def test_round_31_a_program_a_learners_function_starts_is_refused():
    from helpers.exercises import Wrong, _children, call

    def starts(x):
        import subprocess
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        return x

    before = _children()
    with pytest.raises(Wrong, match="does not allow starting another program"):
        call(starts, 3)
    assert _children() == before


def test_round_8_a_message_that_never_ends_is_stopped_by_the_time_limit():
    from helpers.exercises import Wrong, call

    class Endless(Exception):
        def __str__(self):
            while True:
                pass

    def raises(x):
        raise Endless()

    start = time.monotonic()
    with pytest.raises(Wrong, match="ran for more than 1 s"):
        call(raises, 3, seconds=1)
    assert time.monotonic() - start < 5


def test_round_8_a_thread_that_catches_every_exception_is_stopped_all_the_same():
    """Its except: catches every SystemExit sent to it, so it is stopped line by line (states.Stoppable)
    and the sentence says it was."""
    from helpers.exercises import Wrong, call
    done = threading.Event()

    def leaves(x):
        def loop():
            while not done.is_set():
                try:
                    time.sleep(0.01)
                except BaseException:   # noqa: BLE001
                    pass
        threading.Thread(target=loop, daemon=True).start()
        return x

    with pytest.raises(Wrong, match="now stopped"):
        call(leaves, 3)
    done.set()


def test_round_8_a_number_answer_is_a_number():
    """Dates, records, a masked array, a bool tensor, an int past float's range and a float16 that
    overflowed were taken as numbers (or named wrongly)."""
    from helpers.sampling import checks
    right = 2 * 12 * 1024 * 12 * 64 * 2
    cases = [(np.datetime64(right, "s"), "dates or times"), (np.timedelta64(right), "dates or times"),
             (np.array([(right,)], dtype=[("a", "i8")]), "records"), (np.ma.masked_array([right], [True]), "masked"),
             (torch.tensor(True), "truth value"), (10**100000, "a float can hold"),
             (torch.tensor(float(right), dtype=torch.float16), "float16 holds numbers only up to 65,504")]
    for answer, words in cases:
        problems = checks.kv_bytes.feedback(answer, 12, 1024, 12, 64, 2)
        assert problems and words in problems[0], (words, problems)
    assert checks.kv_bytes.feedback(right, 12, 1024, 12, 64, 2) == []


def test_round_8_a_stopped_thread_is_not_confused_with_a_later_one():
    """Round 8's review: an ident is reused as soon as its thread ends, and the watchdog that stops a
    learner's leftover thread went on raising SystemExit at that ident, in the next check's own thread."""
    from helpers.exercises import Wrong, call

    def busy(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        return 7

    def leaves_a_thread():
        threading.Thread(target=busy, args=(0.03,)).start()
        return 1

    for _ in range(6):
        try:
            call(leaves_a_thread)
        except Wrong:
            pass
        assert call(busy, 0.2) == 7


# ---- red team round 9: what a learner's function changes is put back, whatever it is -----------


def right_cosine(a, b):
    a, b = np.asarray(a, float), np.asarray(b, float)
    return a @ b / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b))


def test_round_9_the_modules_a_check_calls_are_put_back():
    """inspect.signature, zlib.crc32 (model_kept's), NumPy's inner functions (ndarray.mean calls
    numpy._core._methods._mean), torch.optim's step and torch.nn.init were left replaced."""
    import inspect
    import zlib

    import numpy._core._methods as methods

    from helpers.geometry import checks

    before = inspect.signature, zlib.crc32, methods._mean, torch.optim.SGD.step, torch.nn.init.normal_

    def vandal(a, b):
        inspect.signature = None
        zlib.crc32 = lambda *args: 0
        methods._mean = lambda *args, **kwargs: 0.0
        torch.optim.SGD.step = lambda self: None
        torch.nn.init.normal_ = lambda t, *args, **kwargs: t
        return right_cosine(a, b)

    assert checks.cosine_function.feedback(vandal) == []
    assert (inspect.signature, zlib.crc32, methods._mean, torch.optim.SGD.step, torch.nn.init.normal_) == before
    assert np.array([1.0, 3.0]).mean() == 2.0
    assert checks.cosine_function.feedback(right_cosine) == []


def test_round_9_a_course_function_changed_in_place_is_put_back():
    """A function's defaults changed in place (number_problems' tolerance) made a wrong cosine
    right, then and in every later check."""
    from helpers.geometry import checks

    defaults = number_problems.__defaults__

    def cheat(a, b):
        exercises.number_problems.__defaults__ = (10.0,)
        exercises.close_problems.__code__ = (lambda *args, **kwargs: iter(())).__code__
        return right_cosine(a, b) if np.ndim(a) == 2 else 0.5

    assert checks.cosine_function.feedback(cheat)
    assert number_problems.__defaults__ == defaults
    assert checks.cosine_function.feedback(lambda a, b: right_cosine(a, b) if np.ndim(a) == 2 else 0.5)
    assert checks.cosine_function.feedback(right_cosine) == []


def test_round_9_the_course_s_constants_changed_in_place_are_put_back():
    """qkv.IT_SCORES[0] = 999 in a learner's function, or in a cell before a check, stayed."""
    import helpers.qkv.compute as qkv
    from helpers.geometry import checks

    scores, printed = list(qkv.IT_SCORES), dict(qkv.BOOK_THREE_WORDS_PRINTED)

    def vandal(a, b):
        qkv.IT_SCORES[0] = 999.0
        qkv.BOOK_THREE_WORDS_PRINTED.clear()
        return right_cosine(a, b)

    assert checks.cosine_function.feedback(vandal) == []
    assert list(qkv.IT_SCORES) == scores and qkv.BOOK_THREE_WORDS_PRINTED == printed
    qkv.IT_SCORES[1] = -1.0   # a cell's: the next check's first call puts it back
    assert checks.cosine_function.feedback(right_cosine) == []
    assert list(qkv.IT_SCORES) == scores


def test_round_9_process_state_a_learners_function_changes_is_put_back():
    import gc
    import logging
    import resource
    import signal

    mask = os.umask(0o022)
    os.umask(mask)
    before = dict(callbacks=list(gc.callbacks), json=sys.modules["json"], logging=logging.root.manager.disable,
                  precision=torch.get_float32_matmul_precision(), mkldnn=torch._C._get_mkldnn_enabled(),
                  hook=threading.excepthook, unraisable=sys.unraisablehook,
                  files=resource.getrlimit(resource.RLIMIT_NOFILE), switch=sys.getswitchinterval())

    def changes(x):
        os.umask(0o777)
        gc.callbacks.append(lambda phase, info: None)
        sys.modules["json"] = None
        logging.disable(logging.CRITICAL)
        torch.set_float32_matmul_precision("medium")
        torch._C._set_mkldnn_enabled(False)
        threading.excepthook = sys.unraisablehook = lambda *args: None
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, before["files"][1]))
        signal.setitimer(signal.ITIMER_REAL, 0.5)   # SIGALRM would end the kernel half a second later
        return x

    assert call(changes, 3) == 3
    now = os.umask(0o022)
    os.umask(now)
    assert now == mask and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert dict(callbacks=list(gc.callbacks), json=sys.modules["json"], logging=logging.root.manager.disable,
                precision=torch.get_float32_matmul_precision(), mkldnn=torch._C._get_mkldnn_enabled(),
                hook=threading.excepthook, unraisable=sys.unraisablehook,
                files=resource.getrlimit(resource.RLIMIT_NOFILE), switch=sys.getswitchinterval()) == before


def test_round_9_a_long_switch_interval_cannot_hold_off_the_time_limit(refused):
    def slow_switch(x):
        sys.setswitchinterval(40.0)
        while True:
            pass

    start = time.monotonic()
    with pytest.raises(exercises.Wrong, match="does not allow sys.setswitchinterval"):
        call(slow_switch, 1)
    assert time.monotonic() - start < 5 and sys.getswitchinterval() < 1


def test_round_9_an_audit_hook_is_refused():
    """An audit hook can never be removed: one added by a learner's function re-patched the check's
    functions after they were put back, and a wrong cosine was called correct."""
    from helpers.geometry import checks

    added = []

    def hooked(a, b):
        sys.addaudithook(lambda event, args: added.append(event))
        return 0.5 if np.ndim(a) == 1 else right_cosine(a, b)

    said = " ".join(checks.cosine_function.feedback(hooked))
    assert "audit hook" in said
    open(os.devnull).close()
    assert added == []


def test_round_9_printing_is_cut_at_the_check_s_limit(capsys):
    from helpers.geometry import checks

    def chatty(a, b):
        print("x" * 1_000_000)
        return right_cosine(a, b)

    assert checks.cosine_function(chatty)
    out = capsys.readouterr().out
    assert len(out) < exercises.MAX_PRINTED + 1_000 and "went past the 20,000 characters" in out


def test_round_9_a_double_fork_s_grandchild_is_stopped():
    def daemon(x):
        child = os.fork()
        if child == 0:
            if os.fork() == 0:
                os.setsid()
                time.sleep(60)
            os._exit(0)
        os.waitpid(child, 0)
        return x

    before = exercises._children()
    with pytest.raises(exercises.Wrong, match="left 1 process of its own running"):
        call(daemon, 3)
    assert exercises._children() == before


def test_round_9_an_answer_s_own_code_does_not_run_outside_the_time_limit():
    """A callable object whose __signature__ or __name__ never returns, or a class whose metaclass
    loops on __name__ or raises on forward, hung the check or was blamed on it."""
    from torch import nn

    from helpers.geometry import checks
    from helpers.heads import checks as head_checks

    class Cosine:
        def __call__(self, a, b):
            return right_cosine(a, b)

        @property
        def __signature__(self):
            while True:
                time.sleep(0.01)

    class Meta(type):
        @property
        def __name__(cls):
            while True:
                time.sleep(0.01)

        def __getattribute__(cls, name):
            if name == "forward":
                raise RuntimeError("forward?")
            return super().__getattribute__(name)

    class MultiHeadAttention(nn.Module, metaclass=Meta):
        def forward(self, x):
            return x

    start = time.monotonic()
    assert "object that can be called: write it as a function" in " ".join(checks.cosine_function.feedback(Cosine()))
    said = " ".join(head_checks.multi_head.feedback(MultiHeadAttention))
    assert time.monotonic() - start < 20 and "check itself failed" not in said and said


def test_round_9_an_answer_too_big_to_screen_is_refused_before_it_is_walked():
    import resource

    start, peak = time.monotonic(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    found = count.feedback([0] * 3 * 10**7)
    assert "at most 1,000,000 values" in found[0]
    assert time.monotonic() - start < 5 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 500_000


def test_round_9_an_interrupt_is_said_and_let_through(capsys):
    """A learner's function that interrupted the kernel raised out of the check with no word; the
    stop button must still stop Run All: the check says so, then lets the interrupt through."""
    import _thread

    from helpers.geometry import checks

    def interrupts(a, b):
        _thread.interrupt_main()
        time.sleep(1)
        return right_cosine(a, b)

    with pytest.raises(KeyboardInterrupt):
        checks.cosine_function(interrupts)
    assert "interrupted before it finished" in capsys.readouterr().out
    assert checks.cosine_function.feedback(right_cosine) == []


def test_round_9_the_learner_s_own_wrong_is_the_learner_s():
    from helpers.geometry import checks

    def raises(a, b):
        raise exercises.Wrong()

    assert checks.cosine_function.feedback(raises)[0].startswith("your function stopped")


def test_round_9_a_state_dict_is_copied_for_the_learner():
    """A module check hands the learner's class an OrderedDict (a state_dict): it was not copied,
    and a class that scaled it in place changed the shipped model."""
    from collections import OrderedDict

    state = OrderedDict(w=torch.ones(3))

    def scales(state):
        state["w"].mul_(0.5)
        return 1.0

    with pytest.raises(exercises.Wrong, match="changed the state it was given in place"):
        call(scales, state)
    assert torch.equal(state["w"], torch.ones(3))


def test_round_9_keeping_a_piece_puts_back_the_random_states(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    cell = tmp_path / "cell.py"
    cell.write_text("import math, torch\nnoise = torch.rand(3)\n"
                    "def causal_attention(q, k, v):\n"
                    "    T_q, T_k = q.shape[-2], k.shape[-2]\n"
                    "    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
                    "    mask = torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q + 1)\n"
                    "    weights = torch.softmax(scores.masked_fill(mask, float('-inf')), -1)\n"
                    "    return weights @ v, weights\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from cell import causal_attention

    from helpers.masking import checks
    torch.manual_seed(0)
    state = torch.get_rng_state().clone()
    assert checks.causal_attention(causal_attention)
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("answer, words", [
    ({2, 5, 7}, "a set, which keeps no order"),
    ((True, 5, 5), "truth value"),
    ((2, 5, 5, None), "holds None"),
    ((2.0000000001, 5, 5), "2.0000000001"),
    ("huge", "an integer of 16,610 bits"),
])
def test_round_9_odd_shapes_get_their_own_sentence(answer, words):
    answer = 10**5000 if answer == "huge" else answer   # (pytest cannot name a test after it)
    with pytest.raises(exercises.Wrong, match=words):
        as_wholes(answer, "the shape", length=3)


def test_round_9_a_collected_object_cannot_patch_the_next_cell():
    from helpers.geometry import checks

    allclose = np.allclose

    def sneaky(a, b):
        class Later:
            def __del__(self):
                np.allclose = lambda *args, **kwargs: True
        later = Later()
        later.me = later   # a cycle: collected by the garbage collector, not at once
        return right_cosine(a, b)

    assert checks.cosine_function.feedback(sneaky) == []
    assert np.allclose is allclose


def test_round_9_a_module_that_returns_true_and_false_is_told_so(cat):
    from torch import nn

    from helpers.normalization import checks

    class LayerNorm(nn.Module):
        def __init__(self, d, eps=1e-5):
            super().__init__()
            self.weight, self.bias, self.eps = nn.Parameter(torch.ones(d)), nn.Parameter(torch.zeros(d)), eps

        def forward(self, x):
            return x > 0

    assert "holds True/False values" in " ".join(checks.layer_norm_module.feedback(LayerNorm, cat))


def test_round_9_an_older_process_of_the_notebook_s_own_is_not_blamed():
    """A process the notebook started before the check, orphaned while the learner's function ran,
    was adopted, stopped and blamed on a right answer; the subreaper flag is put back as it was."""
    import ctypes
    import subprocess

    older = subprocess.Popen(["sh", "-c", "sleep 2 & sleep 0.3; exit 0"])
    time.sleep(0.1)   # (its sleep 2 started before the check: the notebook's own)
    assert call(lambda x: (time.sleep(0.6), x)[1], 3) == 3
    older.wait()
    flag = ctypes.c_int(7)
    ctypes.CDLL(None).prctl(37, ctypes.byref(flag), 0, 0, 0)
    assert flag.value == 0


def test_round_9_a_wrapped_function_s_parameters_are_named_and_writelines_is_capped(capsys):
    import functools

    def decorated(function):
        @functools.wraps(function)
        def inner(*args, **kwargs):
            return function(*args, **kwargs)
        return inner

    @decorated
    def scales(weights):
        weights /= 2
        return weights

    with pytest.raises(exercises.Wrong, match="changed weights in place"):
        call(scales, np.ones(3))

    def lines(x):
        sys.stdout.writelines(["y" * 1000 + "\n"] * 100)
        return x

    call(lines, 1)
    assert len(capsys.readouterr().out) < exercises.MAX_PRINTED + 1_000


def test_round_10_numpy_s_own_functions_and_a_check_s_attributes_are_put_back():
    """np.allclose's Python function given lax defaults, and a check object's own .problems
    replaced, outlived the check (every later answer was called right)."""
    from helpers.geometry import checks

    defaults, problems = np.allclose._implementation.__defaults__, checks.cosine_function.problems

    def cheat(a, b):
        np.allclose._implementation.__defaults__ = (10.0, 10.0, False)
        checks.cosine_function.problems = lambda *args: iter(())
        return right_cosine(a, b)

    assert checks.cosine_function.feedback(cheat) == []
    assert np.allclose._implementation.__defaults__ == defaults and checks.cosine_function.problems is problems
    assert checks.cosine_function.feedback(lambda a, b: 42.0)


def test_round_10_the_check_s_reference_cases_are_out_of_reach():
    from helpers.masking import checks

    def vandal(q, k, v):
        for case in checks.attention_cases().values():
            case["out"].zero_()
        return right_attention(q, k, v)

    checks.causal_attention.feedback(vandal)
    assert checks.attention_cases()["one"]["out"].abs().sum() > 0


def right_attention(q, k, v):
    import math

    T_q, T_k = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(T_q, T_k, dtype=torch.bool).triu(T_k - T_q + 1)
    weights = torch.softmax(scores.masked_fill(mask, float("-inf")), -1)
    return weights @ v, weights
