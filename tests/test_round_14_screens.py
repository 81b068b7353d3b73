"""Round 14 (reader B, entries 1, 2, 4, 5): the exercise screens and the grader's records agree.

* ``plain`` refuses a class made by a metaclass of the learner's (its ``__class__``, ``__iter__`` or
  ``__eq__`` would run inside the check, outside ``call``'s time limit), and compares types by
  identity only (``in`` would run a metaclass's ``__eq__``); NumPy types are NumPy's own, not a
  learner's class that says ``__module__ = "numpy"``; a masked array that hides entries is refused;
* ``Function.convert`` and ``Module.convert`` screen an answer by its type, never reading its own
  ``__class__``; so do ``isinstance(x, grading.Unknown)`` and ``isinstance(fn, grading.Replay)``;
* a class answer to a Function check (``class f: def __new__(cls, ...)``) is recorded through a
  Recorder, so the grade says ✓ where the live check said ✓;
* ``grading.encode`` records as unknown exactly what ``plain`` refuses (an OrderedDict, a namedtuple,
  an int subclass, a masked array with hidden entries, ...), so the grade says ✗ where the live check
  said ✗; a torch.Size is kept as a tuple (it was recorded as a set).
"""
import collections
import json

import numpy as np
import pytest
import torch

from helpers import grading
from helpers.exercises import Function, Module, Wrong, plain


def record_then_judge(exercise, answer, *args):
    """What the judge says of ``answer``: recorded as the student's kernel records it, sent as JSON."""
    recorded = json.loads(json.dumps(grading.record_answer(exercise, answer, args, {})))
    return recorded, list(exercise.feedback(grading.decode(recorded), *args))


def spying_metaclass(ran):
    """A metaclass whose every hook notes in ``ran`` that it ran (the learner's code)."""
    class Meta(type):
        @property
        def __class__(cls):
            ran.append("__class__")
            return list

        @property
        def __module__(cls):
            ran.append("__module__")
            return "numpy"

        def __iter__(cls):
            ran.append("__iter__")
            return iter(["a"])

        def __eq__(cls, other):
            ran.append("__eq__")
            return True

        def __hash__(cls):
            ran.append("__hash__")
            return 0
    return Meta


# ---------------------------------------------------------------- 1: classes in an output, types by identity

def test_plain_refuses_a_class_made_by_a_learners_metaclass_without_running_it():
    ran = []
    W = spying_metaclass(ran)("W", (), {})
    ran.clear()
    for value in (W, [W], {"a": (W,)}):
        with pytest.raises(Wrong, match="holds the class W, made by a metaclass of its own"):
            plain(value, "what your function returned")
    assert ran == []


def test_plain_compares_types_by_identity_never_running_a_metaclass():
    """``type(x) in (...)`` ran the metaclass's __eq__; ``kind.__module__`` its __module__ property."""
    ran = []
    Thing = spying_metaclass(ran)("Thing", (), {})
    ran.clear()
    with pytest.raises(Wrong, match="holds a Thing, but a check takes only plain values"):
        plain([1, Thing()], "your answer")
    assert ran == []


def test_plain_takes_numpy_types_only_as_numpys_own():
    """A learner's class that says __module__ = "numpy" passed as a NumPy scalar or array."""
    class Scalar(np.float64):
        __module__ = "numpy"

    class Array(np.ndarray):
        __module__ = "numpy"

    for value in (Scalar(1.0), np.zeros(3).view(Array)):
        with pytest.raises(Wrong, match="but a check takes only plain values"):
            plain(value, "your answer")
    for value in (np.float64(1.0), np.int8(3), np.bool_(True), np.zeros(3), np.matrix([[1.0]]), np.rec.array([(1, 2.0)])[0]):
        plain(value, "your answer")


def test_plain_refuses_a_masked_array_that_hides_entries():
    with pytest.raises(Wrong, match="masked array with hidden entries"):
        plain([np.ma.array([1.0, 2.0], mask=[0, 1])], "your answer")
    with pytest.raises(Wrong, match="masked array with hidden entries"):
        plain(np.ma.masked, "your answer")
    plain(np.ma.array([1.0, 2.0]), "your answer")   # nothing hidden: an array as any other


def test_plain_still_takes_plain_values_functions_and_classes():
    class Plain:
        pass
    plain([None, 1, 2.5, "a", b"b", (1,), {1}, frozenset(), {"k": [np.float32(1)]}, torch.zeros(2),
           torch.nn.Parameter(torch.zeros(1)), torch.Size([2, 3]), len, Plain, lambda: 0, range(3)], "your answer")


def test_a_merge_step_returning_metaclass_classes_is_refused_before_any_of_their_code_runs():
    """Entry 1: merge_answer's isinstance(w, (list, tuple)) read the metaclass's __class__ (list), then
    iterated the class: the metaclass's __iter__ ran in the check's own thread, with no time limit."""
    from helpers.gpt import checks
    ran = []
    W = spying_metaclass(ran)("W", (), {})
    ran.clear()

    def merge_step(words):
        return ("a", "a"), [W] * len(words)

    said = checks.merge_step.feedback(merge_step, "the cat sat on the mat and the dog ran " * 10)
    assert said and "made by a metaclass of its own" in said[0], said
    assert ran == []


# ---------------------------------------------------------------- 2: an answer screened by its type

class Sneaky:
    """A callable whose __class__ property notes that it ran (the learner's code, before any limit)."""
    ran = []

    def __call__(self, *args):
        return args[0]

    @property
    def __class__(self):
        Sneaky.ran.append("__class__")
        return Sneaky


def test_function_and_module_answers_are_screened_by_type_never_by_their_own_class():
    Sneaky.ran.clear()
    with pytest.raises(Wrong, match="a Sneaky object that can be called"):
        Function("a function tempered(logits, T)").convert(Sneaky(), None, (), {})
    with pytest.raises(Wrong, match="a Sneaky object that can be called"):
        Module().convert(Sneaky(), None, (), {})
    assert Sneaky.ran == []


def test_a_function_check_takes_a_class_with_a_metaclass_without_running_the_metaclass():
    ran = []
    f = spying_metaclass(ran)("f", (), {"__new__": lambda cls, x: x})
    ran.clear()
    assert Function().convert(f, None, (), {}) is f
    assert ran == []


def test_the_graders_classes_are_tested_by_type_never_by_the_answers_own_class():
    """isinstance(answer, grading.Unknown) (every check) and isinstance(fn, grading.Replay) (ch09, ch12)
    read a learner's __class__ property outside any time limit."""
    Sneaky.ran.clear()
    assert not isinstance(Sneaky(), grading.Unknown) and not isinstance(Sneaky(), grading.Replay)
    assert Sneaky.ran == []
    assert isinstance(grading.Unknown("x"), grading.Unknown) and isinstance(grading.Replay([]), grading.Replay)


# ---------------------------------------------------------------- 4: a class answer, graded as it was checked

def test_a_function_written_as_a_class_is_graded_as_the_live_check_judged_it():
    """Entry 4: the live check said ✓ to ``class tempered: def __new__(...)``; the grader recorded
    {"unknown": "type"} and scored 0."""
    from helpers.sampling import checks

    class tempered:
        def __new__(cls, logits, T):
            logits = np.asarray(logits, dtype=float)
            if T == 0:
                top = (logits == logits.max()).astype(float)
                return top / top.sum()
            e = np.exp((logits - logits.max()) / T)
            return e / e.sum()

    assert checks.tempered_function.feedback(tempered) == []
    recorded, said = record_then_judge(checks.tempered_function, tempered)
    assert "function" in recorded and said == []

    class wrong:
        def __new__(cls, logits, T):
            return np.full(len(logits), 1 / len(logits))
    live = checks.tempered_function.feedback(wrong)
    assert live and record_then_judge(checks.tempered_function, wrong)[1] == live


# ---------------------------------------------------------------- 5: what the live check refuses, the grader refuses

Point = collections.namedtuple("Point", "x y")


class Whole(int):
    pass


@pytest.mark.parametrize("value", [collections.OrderedDict(a=1), collections.defaultdict(int, a=1),
                                   collections.Counter("ab"), Whole(3), type("Text", (str,), {})("a"),
                                   type("Real", (float,), {})(1.0), Point(1, 2), np.ma.array([1.0, 2.0], mask=[0, 1]),
                                   [1, {"a": Point(1, 2)}]])
def test_encode_records_as_unknown_what_plain_refuses(value):
    with pytest.raises(Wrong) as live:
        plain(value, "your answer")
    assert grading.encode(value) == {"unknown": str(live.value)}
    assert isinstance(grading.decode(grading.encode(value)), grading.Unknown)


def test_an_ordered_dict_answer_is_graded_as_the_live_check_judged_it():
    """Entry 5 (ch08 ex5): live ✗ "holds a OrderedDict"; recorded as a plain dict and scored 1."""
    from helpers.normalization import checks, compute as nz
    curves = nz.load_curves()
    answer = {}
    for norm in ["pre", "post", "none"]:
        below = np.flatnonzero(nz.get_run(curves, norm, 8, 0.003)["loss"] < 1.0)
        answer[norm] = int(below[0]) if len(below) else None
    args = (curves, 8, 0.003, 1.0)
    assert checks.steps_to_threshold.feedback(answer, *args) == []
    assert record_then_judge(checks.steps_to_threshold, answer, *args)[1] == []
    ordered = collections.OrderedDict(answer)
    live = checks.steps_to_threshold.feedback(ordered, *args)
    assert live and "OrderedDict" in live[0]
    said = record_then_judge(checks.steps_to_threshold, ordered, *args)[1]
    assert said and "OrderedDict" in said[0]


def test_a_function_that_returns_what_plain_refuses_is_graded_wrong_too():
    """The Recorder encoded a learner function's OrderedDict / namedtuple output, which call() refuses live."""
    from helpers.sampling import checks

    def tempered(logits, T):
        return collections.OrderedDict(enumerate(np.full(len(logits), 1 / len(logits))))
    live = checks.tempered_function.feedback(tempered)
    assert live and "OrderedDict" in live[0]
    said = record_then_judge(checks.tempered_function, tempered)[1]
    assert said and "OrderedDict" in said[0], said


def test_a_torch_size_is_recorded_as_the_tuple_it_is():
    """torch.Size (a tuple subclass plain takes) was recorded as a set: (2, 5, 5) came back as {2, 5}. Since round
    26 it is recorded as the torch.Size it is (the judge sees what the live check saw)."""
    from helpers.tour import checks
    shape = torch.Size([2, 5, 5])
    assert checks.scores_shape.feedback(shape, 2, 5) == []
    recorded, said = record_then_judge(checks.scores_shape, shape, 2, 5)
    assert recorded == {"size": [2, 5, 5]} and said == []


def test_a_whole_check_never_reads_the_answers_own_class_nor_a_functions_odd_module():
    """The convert screens were by type, but keeping the models an answer reaches still asked
    isinstance(answer, type) and read its functions' __module__ with isinstance and str()."""
    from helpers.sampling import checks

    Sneaky.ran.clear()
    said = checks.tempered_function.feedback(Sneaky())
    assert said and "object that can be called" in said[0] and Sneaky.ran == []

    class Module:
        @property
        def __class__(self):
            Sneaky.ran.append("__module__'s __class__")
            return str

        def startswith(self, prefix):
            Sneaky.ran.append("startswith")
            return False

    class Tempered:
        def __new__(cls, logits, T):
            return logits / T

    def helper():
        pass

    helper.__module__ = Module()
    Tempered.helper = staticmethod(helper)
    checks.tempered_function.feedback(Tempered)
    assert Sneaky.ran == []
