"""Red team, named at stop 45: a cell that defines a checked piece twice was kept whole, so later
chapters loaded the last definition, not the one the check passed; and a decorated piece
(``@torch.no_grad()``) was kept as torch's own file."""
import linecache

import pytest
import torch

from helpers import learner


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_MY_GPT", str(tmp_path / "my_gpt"))
    return tmp_path / "my_gpt"


def cell(source, name, store):
    """Run ``source`` as a notebook cell would (its lines in linecache); return what it calls
    ``first`` (the first of two definitions) if it names one, else ``name``."""
    filename = str(store.parent / f"cell_{abs(hash(source))}.py")
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"torch": torch, "__name__": "cell"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace.get("first", namespace[name])


RIGHT = "def double(x):\n    return 2 * x\n"
AGAIN = "\ndef double(x):\n    return 3 * x\n"


def test_a_cell_defining_the_piece_twice_is_not_kept_and_the_earlier_file_stays(store, refused):
    first = cell(RIGHT + "first = double\n" + AGAIN, "double", store)
    assert first(1) == 2
    refused(lambda: learner.keep(first, "02"), "another double after the one the check passed")
    assert not (store / "double.py").exists()
    learner.keep(cell(RIGHT, "double", store), "02")
    kept = (store / "double.py").read_text()
    refused(lambda: learner.keep(first, "02"), "another double")
    assert (store / "double.py").read_text() == kept and learner.use("double", course=None)(1) == 2


def test_an_assignment_after_the_piece_is_caught_too(store, refused):
    piece = cell(RIGHT + "first = double\ndouble = lambda x: 3 * x\n", "double", store)
    refused(lambda: learner.keep(piece, "02"), "another double")
    klass = cell("class Scale:\n    def f(self):\n        return 1\nfirst = Scale\n"
                 "class Scale:\n    def f(self):\n        return 2\n", "Scale", store)
    refused(lambda: learner.keep(klass, "05"), "another Scale")


def test_the_last_of_two_definitions_and_a_lone_one_are_kept(store):
    last = cell(RIGHT + AGAIN, "double", store)
    learner.keep(last, "02")
    assert learner.use("double", course=None, quiet=True)(1) == 3
    klass = cell("import torch\n\nclass Scale(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
                 "Scale", store)
    learner.keep(klass, "05")
    assert learner.use("Scale", course=None, quiet=True).__name__ == "Scale"


def test_a_decorated_piece_keeps_its_own_cell_not_the_decorator_s_file(store):
    piece = cell("@torch.no_grad()\ndef double(x):\n    return 2 * x\n", "double", store)
    learner.keep(piece, "02")
    text = (store / "double.py").read_text()
    assert "@torch.no_grad()" in text and "_contextlib" not in text and len(text) < 1000
    assert learner.use("double", course=None, quiet=True)(torch.ones(1)).item() == 2
    klass = cell("class Twice(torch.nn.Module):\n    @torch.no_grad()\n    def forward(self, x):\n"
                 "        return 2 * x\n", "Twice", store)
    learner.keep(klass, "05")
    assert "class Twice" in (store / "Twice.py").read_text()
