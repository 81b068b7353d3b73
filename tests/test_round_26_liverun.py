"""Round 26 (fix 56, liverun): the live run bounds every call into the learner's model, not only the loop.

live_run read the learner's model unbounded: its cfg property, parameters() (counting the copies), the plan's
state_dict() and deepcopy, and put_back_on_error's state_dict() before the loop and in the put-back. A model whose
method ran 1000 s kept the call going 1000 s. Each is now a ``learner_call``, refused in one sentence that names
the learner's method it was stopped in. Also: threads_stopped's before-record is ``exercises.threads_now()``, and
the thread helpers gpt uses are public (``exercises.own_thread``, ``stop_threads``, ``threads_now``).
"""
import ast
import pathlib
import subprocess
import sys
import threading
import time

import pytest

from helpers import exercises, states
from helpers.gpt import compute as gc
from helpers.gpt import corpus
from learner_loops import LATE, LIVE, MARGIN, SLOW, same_weights, small_gpt, weights_of

pytestmark = pytest.mark.usefixtures("late")   # LATE_SECONDS = LATE in every test


@pytest.fixture(scope="module")
def ids():
    ids = corpus.CharTokenizer().encode(corpus.load_text()[:5000])
    gc.step_seconds(small_gpt(), ids, 2, 8)   # warm-up: a fresh process's first passes are slow on a loaded machine
    return ids


def slow(sleeps=False):
    """Run Python for SLOW seconds, busy or in short sleeps (a learner's slow code: a stop lands at once)."""
    end = time.perf_counter() + SLOW
    while time.perf_counter() < end:
        if sleeps:
            time.sleep(0.01)


class SlowCfg(gc.GPT):
    @property
    def cfg(self):
        slow()
        return self.__dict__["cfg"]


class SlowParameters(gc.GPT):
    def parameters(self, recurse=True):
        slow(sleeps=True)
        return super().parameters(recurse)


class SlowCopy(gc.GPT):
    def __deepcopy__(self, memo):
        slow()
        return self


class SlowStateDict(gc.GPT):
    def state_dict(self, *args, **kwargs):
        slow()
        return super().state_dict(*args, **kwargs)


class SlowLater(gc.GPT):
    """A state_dict that runs long once the loop has set ``later`` (on the class, which the put-back keeps)."""
    later = False

    def state_dict(self, *args, **kwargs):
        if type(self).later:
            slow()
        return super().state_dict(*args, **kwargs)


def timed(refused, model, loop, ids, *words, live=LIVE):
    start = time.perf_counter()
    said = refused(lambda: gc.live_run(loop, model, ids, ids, corpus.CharTokenizer(), **live), *words)
    return said, time.perf_counter() - start


SHORT = dict(LIVE, seconds=3)   # a run whose plan is given (``planned``): the put-back's bound comes sooner


@pytest.fixture
def planned(monkeypatch):
    """The plan given (20 steps, 2 s of training) without the timed passes, which a loaded machine may slow."""
    monkeypatch.setattr(gc, "plan_live_run", lambda *args: (20, 2.0))


# ------------------------------------------------------------ 1. the learner's model methods, bounded and named

@pytest.mark.parametrize("kind, what", [
    (SlowCfg, "reading model.cfg"),
    (SlowParameters, "counting the model's copies"),
    (SlowCopy, "planning the run"),
    (SlowStateDict, "planning the run"),
])
def test_a_slow_model_method_is_stopped_and_named(refused, ids, kind, what):
    model = small_gpt()
    before = weights_of(model)   # (before the class is the learner's: its own methods would run long)
    model.__class__ = kind
    method = {SlowCfg: "cfg", SlowParameters: "parameters", SlowCopy: "__deepcopy__", SlowStateDict: "state_dict"}[kind]
    said, took = timed(refused, model, gc.train_loop, ids, what, f"but your {kind.__name__}.{method} ran longer and "
                       f"was stopped")
    assert took < LIVE["seconds"] + LATE + MARGIN, (took, said)
    model.__class__ = gc.GPT
    assert same_weights(model, before)


def test_a_state_dict_slow_in_the_put_back_is_stopped_and_said_not_put_back(refused, ids, planned):
    model = small_gpt()
    model.__class__ = SlowLater

    def loop(model, *args):
        type(model).later = True
        raise ValueError("a slip in my loop")

    try:
        said, took = timed(refused, model, loop, ids, "putting the model back after the training loop stopped",
                           "your SlowLater.state_dict ran longer and was stopped", "the model could not be put back",
                           live=SHORT)
    finally:
        SlowLater.later = False
    assert took < SHORT["seconds"] + LATE + MARGIN, (took, said)
    assert "as it was before the call" not in said


def test_a_slow_method_the_loop_set_on_the_model_is_put_back_first(refused, ids, planned):
    model = small_gpt()
    before = weights_of(model)

    def loop(model, *args):
        model.state_dict = lambda *a, **k: slow()   # (an attribute of the model's: put back before it is read)
        raise ValueError("a slip in my loop")

    said, took = timed(refused, model, loop, ids, "ValueError: a slip in my loop",
                       "the model was left as it was before the call", live=SHORT)
    assert took < SHORT["seconds"] + LATE + MARGIN, (took, said)
    assert "state_dict" not in vars(model) and same_weights(model, before)


def test_the_learners_function_is_the_outermost_outside_the_course():
    def mine():
        raise ValueError("here")

    try:
        gc.learner_call(5.0, "a call", mine, put_back=False)
    except ValueError as error:   # (from learner_call's frame on: the course's, then mine)
        assert states.learners_function(error.__traceback__.tb_next) == \
            "test_the_learners_function_is_the_outermost_outside_the_course.<locals>.mine"
    try:
        gc.check_new(0)
    except Exception as error:   # noqa: BLE001 (the course's own sentence: no learner's code in it)
        assert states.learners_function(error.__traceback__.tb_next) is None


# ------------------------------------------------------------ 2. threads_stopped's record: exercises.threads_now()

def test_threads_stopped_stops_a_thread_the_block_left_and_not_one_from_before(refused):
    stop = threading.Event()
    earlier = threading.Thread(target=stop.wait, daemon=True)
    earlier.start()
    ticks = []

    def keep():
        while True:
            ticks.append(1)
            time.sleep(0.01)

    def block():
        with gc.threads_stopped("the block", put_back=False):
            threading.Thread(target=keep, daemon=True).start()

    try:
        refused(block, "the block should end and leave nothing running", "1 thread of its own running (now stopped)")
        counted = len(ticks)
        time.sleep(0.3)
        assert len(ticks) == counted and earlier.is_alive()
    finally:
        stop.set()


# ------------------------------------------------------------ 3. the thread helpers gpt uses are public

def test_gpt_imports_no_private_name_of_exercises():
    tree = ast.parse(pathlib.Path(gc.__file__).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("exercises", "helpers.exercises"):
            assert not [alias.name for alias in node.names if alias.name.startswith("_")]
    for name in ("own_thread", "stop_threads", "threads_now"):
        assert callable(getattr(exercises, name)) and not hasattr(exercises, "_" + name)


def test_helpers_gpt_imports_first_in_a_fresh_process():
    subprocess.run([sys.executable, "-c", "import helpers.gpt.compute, helpers.exercises"], check=True,
                   cwd=pathlib.Path(gc.__file__).parents[2], timeout=120)
