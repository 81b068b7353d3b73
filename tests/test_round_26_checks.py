"""Round 26 (checks): a figure a learner's function showed in a check was cut by the 20,000 characters of printing
(one PNG is past them): images are counted apart, MAX_IMAGES of at most MAX_IMAGE_SIZE each; work handed to a
thread pool made before the check ran after it answered, outside its limit: refused; importlib's per-module locks a
learner's function left taken, and logging's locks held by a learner's thread that ended or was stopped, hung every
later import or log: let go of, and said."""
import asyncio
import concurrent.futures
import json
import os
import subprocess
import sys
import time
import types

import IPython
import pytest

from helpers.exercises import MAX_IMAGE_SIZE, MAX_IMAGES, MAX_PRINTED, Wrong, call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b))


# ------------------------------------------------------------------ entry 1: images counted apart from printing

class Publisher:
    """IPython's display publisher, as a kernel has one: what it was handed."""

    def __init__(self):
        self.published = []

    def publish(self, data, metadata=None, **kwargs):
        self.published.append(data)


@pytest.fixture
def kernel(monkeypatch):
    """A kernel's shell (IPython.get_ipython()), with a publisher that keeps what it was handed."""
    def formatter():
        return types.SimpleNamespace(type_printers={}, deferred_printers={}, singleton_printers={}, enabled=True)
    shell = types.SimpleNamespace(kernel=object(), display_pub=Publisher(), input_transformers_post=[],
                                  input_transformers_cleanup=[], ast_transformers=[],
                                  events=types.SimpleNamespace(callbacks={}),
                                  display_formatter=types.SimpleNamespace(ipython_display_formatter=formatter(),
                                                                          mimebundle_formatter=formatter(),
                                                                          formatters={"text/plain": formatter()}))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    return shell.display_pub


def figure(i, size=30_000):   # what plt.show() hands the publisher: base64 PNG past MAX_PRINTED, and its text
    return {"image/png": chr(65 + i) * size, "text/plain": "<Figure size 640x480 with 1 Axes>"}


def test_figures_are_shown_apart_from_the_printing(kernel, capsys):
    def draws(x):
        for i in range(MAX_IMAGES + 3):
            IPython.get_ipython().display_pub.publish(figure(i))
        print("z" * 30_000)
        return x

    assert call(draws, 3) == 3
    assert [data["image/png"][0] for data in kernel.published] == list("ABCDE")   # the first MAX_IMAGES
    out = capsys.readouterr().out
    assert out.count("z") == MAX_PRINTED   # (its printing keeps its whole budget)
    assert out.count("went past the 5 images of at most 2 MB each a check shows: the rest was left out") == 1
    assert out.count("went past the 20,000 characters a check shows") == 1
    assert type(kernel).publish is Publisher.publish and "publish" not in vars(kernel)   # (put back)


def test_an_image_past_its_size_is_left_out_and_text_displays_keep_their_budget(kernel, capsys):
    def shows(x):
        publish = IPython.get_ipython().display_pub.publish
        publish(figure(0, MAX_IMAGE_SIZE + 1))
        publish(figure(1))
        publish({"text/plain": "t" * 15_000})
        publish({"text/plain": "u" * 15_000})   # (past what is left of the 20,000 characters)
        return x

    assert call(shows, 4) == 4
    assert [sorted(data)[0] for data in kernel.published] == ["image/png", "text/plain"]
    assert kernel.published[0]["image/png"][0] == "B" and kernel.published[1]["text/plain"][0] == "t"
    out = capsys.readouterr().out
    assert "the rest was left out" in out and "images your function displayed" in out


def test_one_figure_is_shown_whole(kernel, capsys):
    def draws(x):
        IPython.get_ipython().display_pub.publish(figure(0))
        return x
    assert call(draws, 5) == 5 and len(kernel.published) == 1 and "left out" not in capsys.readouterr().out


# ------------------------------------------------------------------ entry 2: thread pools made before the check

@pytest.fixture
def pool():
    with concurrent.futures.ThreadPoolExecutor(2) as made:
        made.submit(int).result()   # its worker started before the check
        yield made


def test_work_handed_to_an_older_pool_is_refused(pool):
    ran, loop = [], asyncio.new_event_loop()
    submit = concurrent.futures.ThreadPoolExecutor.submit

    def late():
        time.sleep(0.2)
        ran.append(True)

    def quietly(x):
        try:
            pool.submit(late)
        except RuntimeError:
            pass
        return x
    try:
        for hands in (lambda x: pool.submit(late).result(), lambda x: list(pool.map(abs, [x])),
                      lambda x: loop.run_in_executor(pool, late)):
            with pytest.raises(Wrong, match="^your function stopped with RuntimeError: a check does not allow work "
                                            "handed to a thread pool made before it while it runs your function: it "
                                            "would run after the check, outside its time limit$"):
                call(hands, 1)
        with pytest.raises(Wrong, match=r"^your function handed work to a thread pool made before the check \("
                                        r"ThreadPoolExecutor.submit, map or run_in_executor\), which would run in "
                                        r"later cells, outside the check, so a check does not allow it"):
            call(quietly, 1)
    finally:
        loop.close()
    time.sleep(0.3)
    assert ran == [] and concurrent.futures.ThreadPoolExecutor.submit is submit   # (nothing ran; put back)
    assert pool.submit(abs, -2).result(timeout=5) == 2   # the notebook's pool still works


def test_a_pool_made_in_the_call_still_works(pool):
    def own(x):
        with concurrent.futures.ThreadPoolExecutor(2) as made:
            return sum(made.map(abs, [x, -x]))

    def own_loop(x):
        loop = asyncio.new_event_loop()
        try:
            return loop.run_until_complete(loop.run_in_executor(None, abs, x))
        finally:
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()
    assert call(own, 2) == 4 and call(own_loop, -3) == 3


# ------------------------------------------------------------------ entries 3 and 4: locks left held

CHILD = r"""
import importlib._bootstrap as bootstrap, io, json, logging, os, sys, threading, time
from helpers.exercises import Wrong, call

handler = logging.StreamHandler(io.StringIO())
logging.getLogger("x").addHandler(handler)
kept = []


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b))


def module_lock(name, forever=False):
    def function(a, b):
        lock = bootstrap._get_module_lock(name)
        kept.append(lock)
        lock.acquire(), lock.acquire()
        while forever:
            pass
        return cosine(a, b)
    return function


def thread_ends_holding(lock, level=None):
    def function(a, b):
        if level:
            logging.root.setLevel(level)
        thread = threading.Thread(target=lock.acquire)
        thread.start()
        thread.join()
        return cosine(a, b)
    return function


def thread_stopped_holding(a, b):
    def hold():
        logging._lock.acquire()
        while True:
            pass
    logging.root.setLevel(5)
    threading.Thread(target=hold).start()
    time.sleep(0.05)
    return cosine(a, b)


def works(action):
    thread = threading.Thread(target=action, daemon=True)
    thread.start()
    thread.join(3)
    return not thread.is_alive()


def warns():
    logging.getLogger("x").warning("y")


def report(case, function, imported=None, seconds=5):
    try:
        said = repr(call(function, [3, 1], [1, 2], seconds=seconds))
    except Wrong as wrong:
        said = "WRONG " + str(wrong)
    print(json.dumps(dict(case=case, said=said, logs=works(warns), level=logging.root.level,
                          imports=works(lambda: __import__(imported)) if imported else None)), flush=True)


report("module", module_lock("colorsys"), "colorsys")
report("module stopped", module_lock("wave", forever=True), "wave", seconds=0.5)
report("logging", thread_ends_holding(logging._lock, level=5))
report("handler", thread_ends_holding(handler.lock))
report("stopped", thread_stopped_holding)
before = threading.Thread(target=handler.lock.acquire)   # a thread that ran before the check: not the learner's
before.start()
before.join()
report("before", cosine)
os._exit(0)
"""


@pytest.fixture(scope="module")
def lock_cases(tmp_path_factory):
    """What a check said, and whether logging and imports work afterwards, per case (a child process: without the fix
    it hangs)."""
    env = dict(os.environ, PYTHONPATH=ROOT, COURSE_MY_GPT=str(tmp_path_factory.mktemp("my_gpt")))
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, env=env, cwd=ROOT)
    cases = {line["case"]: line for line in map(json.loads, done.stdout.splitlines())}
    assert "before" in cases, done.stderr[-3000:]
    return cases


def test_a_module_lock_left_taken_is_let_go_of_and_said(lock_cases):
    found = lock_cases["module"]
    assert found["said"] == ("WRONG your code ended holding importlib's lock of the module colorsys "
                             "(importlib._bootstrap._ModuleLock): every later cell that needs it, and the check itself, "
                             "would wait for it for ever; the check let go of it (release each lock you take, or take "
                             "it in a with block)"), found
    assert found["imports"] and found["logs"], found


def test_a_module_lock_held_when_the_function_is_stopped_is_let_go_of(lock_cases):
    found = lock_cases["module stopped"]
    assert found["said"].startswith("WRONG your function: it ran for more than 0.5 s and was stopped"), found
    assert found["imports"], found


@pytest.mark.parametrize("case, named", [("logging", "logging's module lock (logging._lock)"),
                                         ("handler", "the lock of logging's handler StreamHandler")])
def test_a_logging_lock_a_thread_ended_holding_is_let_go_of(lock_cases, case, named):
    found = lock_cases[case]
    assert found["said"] == (f"WRONG a thread of your function ended holding {named}: every later cell that needs it, "
                             "and the check itself, would wait for it for ever; the check let go of it (release each "
                             "lock you take, or take it in a with block)"), found
    assert found["logs"] and found["level"] == 30, found   # logging works, and its level was put back


def test_a_logging_lock_a_stopped_thread_held_is_let_go_of_and_the_level_put_back(lock_cases):
    found = lock_cases["stopped"]
    assert found["said"] == ("WRONG your function should return its answer and leave nothing running, but it left "
                             "1 thread of its own running (now stopped)"), found
    assert found["logs"] and found["level"] == 30, found


def test_a_lock_a_thread_that_ran_before_the_check_held_is_not_the_learners(lock_cases):
    found = lock_cases["before"]
    assert found["said"] == "5" and found["logs"], found
