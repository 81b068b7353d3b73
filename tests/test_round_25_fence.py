"""Round 25 (reader A, entries 5, 8, 9): the check's fence took pyzmq's garbage-collector thread, started inside a
learner's call by a large output, for the learner's (✗ for a right answer, and stopping it broke every later large
output); IPython's display() passed by the cap on printing; work left on the kernel's event loop, and observers added
to a widget made before the check, ran in later cells outside every put-back. Also: a learner's thread with the ident
of a thread that ran before is stopped, and ``_threads_started`` watches the thread it is given."""
import _thread
import os
import threading
import time

import nbformat
import pytest

from helpers import exercises
from helpers.exercises import Wrong, call

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

KERNEL_CELLS = ["""
import sys, torch, zmq.utils.garbage
from IPython.display import display
from helpers.exercises import call, Wrong, MAX_PRINTED
def verdict(function, *args):
    try:
        return repr(call(function, *args))
    except Wrong as wrong:
        return 'WRONG ' + str(wrong)
""", """
import ipywidgets
print('GC BEFORE', zmq.utils.garbage.gc.is_alive())
def shows_large(x):   # a right function that shows a large widget: pyzmq starts its thread for the large message
    display(ipywidgets.Image(value=b'x' * 200_000))
    sys.stdout.flush()   # (waits for the kernel's IOPub thread to send it)
    return x
print('LARGE', verdict(shows_large, 3))
print('GC AFTER', zmq.utils.garbage.gc.is_alive())
""", """
display(ipywidgets.Image(value=b'y' * 200_000)); display(ipywidgets.Image(value=b'z' * 300_000))
sys.stdout.flush(); print('after')
""", """
def floods(x):
    for _ in range(50):
        display('x' * 3_000)
    return x
print('FLOODS', verdict(floods, 4))
""", """
def small(x):
    display('a small display'); print('a small print')
    return x
print('SMALL', verdict(small, 5))
""", """
loop = get_ipython().kernel.io_loop
def later():
    torch.set_default_dtype(torch.float64)
    loop.asyncio_loop.call_later(0.05, later)
def leaves(x):
    loop.asyncio_loop.call_soon_threadsafe(later)
    return x
def leaves_quietly(x):
    try:
        loop.add_callback(later)
    except RuntimeError:
        pass
    return x
print('LOOP', verdict(leaves, 6))
print('QUIET', verdict(leaves_quietly, 7))
print('PUT BACK', [name for name in ('call_soon', 'call_soon_threadsafe', 'call_later') if name in vars(loop.asyncio_loop)])
""", """
import time; time.sleep(0.3)
print('DTYPE', torch.get_default_dtype())
"""]


@pytest.fixture(scope="module")
def kernel_run():
    """The cells above run in a Jupyter kernel: {cell index: (stdout, stderr, the characters it displayed)}."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in KERNEL_CELLS]
    env_path = {"metadata": {"path": ROOT}}
    NotebookClient(nb, timeout=60, kernel_name="python3", resources=env_path).execute()

    def outputs(cell):
        stream = {name: "".join(o.get("text", "") for o in cell.outputs
                                if o.get("output_type") == "stream" and o.get("name") == name)
                  for name in ("stdout", "stderr")}
        shown = sum(len(o.get("data", {}).get("text/plain", "")) for o in cell.outputs
                    if o.get("output_type") == "display_data")
        return stream["stdout"], stream["stderr"], shown
    return {index: outputs(cell) for index, cell in enumerate(nb.cells)}


def line(out, key):
    return next(row for row in out.splitlines() if row.startswith(key))


def test_pyzmqs_thread_started_by_a_large_output_is_neither_the_learners_nor_stopped(kernel_run):
    out, err, _ = kernel_run[1]
    assert "GC BEFORE False" in out   # (the call is the first to send a large message)
    assert line(out, "LARGE") == "LARGE 3" and "GC AFTER True" in out
    later, later_err, _ = kernel_run[2]
    assert "after" in later and "Exception in thread" not in later + later_err + err


def test_what_a_learners_function_displays_is_cut_as_its_printing_is(kernel_run):
    out, _, shown = kernel_run[3]
    assert line(out, "FLOODS") == "FLOODS 4"
    assert shown == 6 * 3_002 and "printed or displayed went past the 20,000 characters" in out
    out, _, shown = kernel_run[4]
    assert line(out, "SMALL") == "SMALL 5" and "a small print" in out and shown == len("'a small display'")


def test_work_left_on_the_kernels_event_loop_is_refused(kernel_run):
    out, _, _ = kernel_run[5]
    assert "does not allow call_soon_threadsafe on the kernel's event loop" in line(out, "LOOP")
    assert line(out, "QUIET").startswith("QUIET WRONG your function left work on the kernel's event loop")
    assert "PUT BACK []" in out
    assert "DTYPE torch.float32" in kernel_run[6][0]


def test_observers_on_a_widget_made_before_the_check_are_refused():
    import ipywidgets
    import traitlets

    slider, ran = ipywidgets.IntSlider(), []
    before = {name: dict(kinds) for name, kinds in slider._trait_notifiers.items()}

    def observes(x):
        slider.observe(ran.append, "value")
        return x

    def clicks(x):
        try:
            ipywidgets.Button().on_click(ran.append)   # (a widget of its own: allowed)
            own = ipywidgets.IntSlider()
            own.observe(ran.append, "value")
            own.value = 3
        except RuntimeError as refused:
            return str(refused)
        return x

    with pytest.raises(Wrong, match="RuntimeError: a check does not allow observers added"):
        call(observes, 1)
    assert {name: dict(kinds) for name, kinds in slider._trait_notifiers.items()} == before
    slider.value = 5
    assert ran == []
    assert call(clicks, 2) == 2 and len(ran) == 1
    assert traitlets.HasTraits._add_notifiers.__module__ == traitlets.HasTraits.__module__   # (put back)


def test_a_kernel_librarys_thread_is_told_by_its_class_and_code():
    from zmq.utils import garbage

    library = garbage.GarbageCollectorThread(garbage.GarbageCollector())
    assert exercises._library_thread(library)

    class Mine(garbage.GarbageCollectorThread):
        def run(self):
            pass

    assert not exercises._library_thread(Mine(garbage.GarbageCollector()))
    library.run = lambda: None
    assert not exercises._library_thread(library)
    assert not exercises._library_thread(threading.Thread(target=garbage.GarbageCollector().start))


def test_a_learners_thread_with_the_ident_of_an_earlier_one_is_stopped():
    stop = threading.Event()

    def waits():
        while not stop.is_set():
            time.sleep(0.01)
    thread = threading.Thread(target=waits, daemon=True)
    thread.start()
    try:
        before = exercises.threads_now()
        assert exercises.stop_threads(before, []) == (0, 0)
        before[thread.ident] = object()   # (another thread had its ident then)
        assert exercises.stop_threads(before, [])[0] == 1
        thread.join(5)
        assert not thread.is_alive()
    finally:
        stop.set()


def test_threads_started_watches_the_thread_it_is_given():
    started, stop = [], threading.Event()
    with exercises._threads_started(started, threading.current_thread()):
        _thread.start_new_thread(stop.wait, (30,))
    assert len(started) == 1
    stop.set()
    deadline = time.monotonic() + 5
    while started[0][1]() is not False and time.monotonic() < deadline:
        time.sleep(0.01)
    assert started[0][1]() is False
