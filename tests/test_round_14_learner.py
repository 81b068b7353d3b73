"""Red team round 14 (reader A, entries 3, 8 and 21): importing a kept file (``learner.use`` in a later
chapter, ``learner.keep`` when a check keeps a right piece) runs the learner's whole cell. It left the
random states, torch's default dtype and the figures it drew changed for every later cell (and, kept by a
check, torch functions it replaced); and a kept file that uses itself (or two that use each other)
imported again and again, one thread more each time. (Since round 28, a torch or course function, switch or
constant a kept cell changes when a later chapter's ``use`` imports it is put back, as a check puts it back.)"""
import linecache
import pickle
import threading

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib._pylab_helpers import Gcf  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from helpers import learner  # noqa: E402
from helpers.exercises import Function, exercise  # noqa: E402

# a learner's cell: the piece, then a try-out that draws, seeds, switches dtype, patches torch and draws a figure
UNRULY = ("import matplotlib.pyplot as plt\n"
          "def {name}(x):\n    return 2 * x\n"
          "x = torch.randn(4, 8)\n"
          "np.random.seed(1)\n"
          "torch.set_default_dtype(torch.float64)\n"
          "F.softmax = lambda *args, **kwargs: 0\n"
          "plt.figure(); plt.plot([1, 2])\n")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    (tmp_path / "my_gpt").mkdir()
    plt.close("all")
    softmax = F.softmax
    yield tmp_path / "my_gpt"
    F.softmax = softmax   # (a kept cell's replacement, which ``use`` leaves as the cell's chapter had it)
    plt.close("all")


def state(functions=False):
    """What a kept file's import must leave as it was (``functions``: torch's too, as a check keeps them)."""
    return (torch.get_rng_state().clone(), np.random.get_state()[1].copy(), torch.get_default_dtype(),
            plt.get_fignums(), Gcf.get_active()) + ((F.softmax,) if functions else ())   # (the current figure)


def same(before, after):
    return (torch.equal(before[0], after[0]) and np.array_equal(before[1], after[1])
            and before[2:] == after[2:])


def cell(source, name, store):
    """Run ``source`` as a notebook cell would (its lines in linecache); return ``name`` from it."""
    filename = str(store.parent / f"cell_{name}_{abs(hash(source))}.py")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"torch": torch, "np": np, "F": F, "__name__": "cell"}
    put_back, softmax = state(), F.softmax
    exec(compile(source, filename, "exec"), namespace)
    torch.set_default_dtype(put_back[2])   # (the cell's own changes, as the notebook made them, undone here)
    F.softmax = softmax
    plt.close("all")
    return namespace[name]


def test_use_puts_back_what_the_kept_cell_changed(store, capsys):
    (store / "twice.py").write_text(learner.HEADER.format(name="twice", chapter="02") + UNRULY.format(name="twice"))
    torch.manual_seed(0)
    np.random.seed(0)
    plt.figure()   # the notebook's own figure: stays open and current
    before = state()
    mine = learner.use("twice", course=None)
    assert mine(3) == 6 and "twice: yours" in capsys.readouterr().out
    assert same(before, state()), "the import changed the notebook's state"


def test_use_puts_back_also_when_the_kept_file_fails(store, capsys):
    (store / "twice.py").write_text(learner.HEADER.format(name="twice", chapter="02")
                                    + UNRULY.format(name="twice") + "raise ValueError('broken')\n")
    before = state()
    assert learner.use("twice", course="course's") == "course's"
    assert "does not run (ValueError: broken)" in capsys.readouterr().out
    assert same(before, state())


def test_a_class_kept_and_used_still_pickles(store):
    """The import's module stays the one Python finds for the kept class (``sys.modules``)."""
    (store / "Scale.py").write_text("class Scale:\n    factor = 2\n")
    learner.use("Scale", course=None, quiet=True)
    Scale = learner.use("Scale", course=None, quiet=True)   # a second import replaces the first
    assert type(pickle.loads(pickle.dumps(Scale()))) is Scale


def test_keep_puts_back_what_the_cell_changed_and_closes_its_figures(store, capsys):
    softmax = F.softmax
    piece = cell(UNRULY.format(name="twice"), "twice", store)
    plt.figure()
    before = state()
    learner.keep(piece, "02")
    assert same(before, state())

    @exercise("doubling", answer=Function(), keeps="02")
    def check(f):
        if f(torch.tensor(1.0)) != 2.0:
            yield "it does not double"

    F.softmax = softmax   # (learner.keep on its own leaves the cell's replacement; a check's keeping does not)
    piece = cell(UNRULY.format(name="double"), "double", store)
    plt.figure()
    before = state(functions=True)
    check(piece)
    assert "kept in my_gpt/double.py" in capsys.readouterr().out
    assert same(before, state(functions=True))


def counting_file(store, name, uses, log):
    """my_gpt/<name>.py that writes a line to ``log`` each time it is imported, then uses ``uses``."""
    (store / f"{name}.py").write_text(
        f"with open({str(log)!r}, 'a') as log:\n    log.write('{name}\\n')\n"
        f"from helpers import learner\nother = learner.use({uses!r}, course=None)\n"
        f"def {name}(x):\n    return x\n")


def test_a_kept_file_that_uses_itself_is_refused_once(store, tmp_path, capsys):
    log = tmp_path / "imports.txt"
    counting_file(store, "MultiHeadAttention", "MultiHeadAttention", log)
    threads = threading.active_count()
    assert learner.use("MultiHeadAttention", course="course's") == "course's"
    out = capsys.readouterr().out
    assert log.read_text() == "MultiHeadAttention\n"   # imported once, not again from within
    assert out.count("\n") == 1 and "yours" not in out, out
    assert "should ask for pieces other than the ones being imported" in out and "can't start" not in out
    assert threading.active_count() <= threads + 1


def test_two_kept_files_that_use_each_other_are_refused_where_the_chain_comes_back(store, tmp_path, capsys):
    log = tmp_path / "imports.txt"
    counting_file(store, "Ping", "Pong", log)
    counting_file(store, "Pong", "Ping", log)
    Ping = learner.use("Ping", course=None)   # Pong's use of Ping is refused: Ping's file gets the course's Pong
    assert Ping(1) == 1 and log.read_text() == "Ping\nPong\n"
    assert capsys.readouterr().out == (
        "Pong: the course's own, because my_gpt/Pong.py does not run (CourseInputError: a kept file should ask "
        "for pieces other than the ones being imported (Ping, Pong), but got 'Ping')\nPing: yours, from my_gpt/Ping.py\n")


def test_the_refusal_is_one_sentence_and_a_chain_without_a_repeat_runs(store, tmp_path, refused, capsys):
    (store / "twice.py").write_text("def twice(x):\n    return 2 * x\n")
    (store / "Outer.py").write_text(
        "from helpers import learner\n"
        "twice = learner.use('twice', course=None)\n"   # another piece: fine, however deep
        "try:\n    learner.use('Outer', course=None)\nexcept Exception as error:\n    refusal = error\n"
        "def Outer(x):\n    return twice(x)\n")
    Outer = learner.use("Outer", course=None)
    assert Outer(2) == 4 and capsys.readouterr().out == "Outer: yours, from my_gpt/Outer.py\n"

    def again():
        raise __import__("sys").modules["my_gpt_Outer"].refusal
    refused(again, "a kept file should ask for pieces other than the ones being imported (Outer)", "'Outer'")


def test_a_kept_cell_that_keeps_itself_is_refused(store, refused):
    source = "def looped(x):\n    return x\nfrom helpers import learner\nlearner.keep(looped, '02')\n"
    piece = cell(source.replace("learner.keep(looped, '02')", "pass"), "looped", store)
    linecache.cache[piece.__code__.co_filename] = (len(source), None, source.splitlines(True),
                                                   piece.__code__.co_filename)
    refused(lambda: learner.keep(piece, "02"), "does not run on its own", "being imported (looped)")
    assert not (store / "looped.py").exists()
