"""The exercise-check framework.

An exercise check is a generator of problems: it yields one sentence for each
thing wrong with the learner's answer and yields nothing when the answer is
right. The ``@exercise`` decorator turns it into an object that

* called as ``check(answer, ...)`` prints feedback in words and returns a
  Verdict (true or false, but invisible as a cell's last value, so a learner sees
  only the feedback); it never raises, so an unfinished exercise still runs;
* called as ``check.grade(answer, ...)`` raises AssertionError with the same
  sentences, which is what nbgrader's hidden tests use to score.

Example::

    @exercise("softmax of the scores")
    def weights(answer, scores):
        yield from array_problems(answer, "weights", shape=scores.shape)
        ...

Chapter checks live in ``helpers/checks/chNN.py``; import them as
``from helpers import checks`` and call ``checks.ch02.weights(answer)``.
"""
import importlib

import numpy as np

NOT_ANSWERED = "not answered yet: replace None in the answer cell above with your answer"


class Verdict:
    """True or False for code and tests; shows nothing when it is a cell's last value."""

    def __init__(self, ok):
        self.ok = ok

    def __bool__(self):
        return self.ok

    def __repr__(self):
        return f"Verdict({self.ok})"

    def _ipython_display_(self):
        pass  # the printed feedback is all a learner should see


class Exercise:
    """A check that gives feedback (call) or grades (``.grade``)."""

    def __init__(self, title, problems):
        self.title = title
        self.problems = problems
        self.__doc__ = problems.__doc__

    def feedback(self, answer, *args, **kwargs):
        """The list of problem sentences (empty when the answer is right)."""
        if answer is None:
            return [NOT_ANSWERED]
        try:
            return list(self.problems(answer, *args, **kwargs))
        except Exception as exc:  # a malformed answer must never crash the check
            return [f"the check could not use your answer ({type(exc).__name__}: {exc})"]

    def __call__(self, answer, *args, **kwargs):
        found = self.feedback(answer, *args, **kwargs)
        if found:
            print(f"✗ {self.title}: " + "; ".join(found))
        else:
            print(f"✓ {self.title}: correct")
        return Verdict(not found)

    def grade(self, answer, *args, **kwargs):
        found = self.feedback(answer, *args, **kwargs)
        if found:
            raise AssertionError(f"{self.title}: " + "; ".join(found))


def exercise(title):
    """Decorator: turn a problem generator into an Exercise with this title."""
    return lambda problems: Exercise(title, problems)


def as_numbers(answer):
    """A learner's answer (a torch tensor or anything array-like) as a float NumPy array."""
    if hasattr(answer, "detach"):
        answer = answer.detach().cpu().numpy()
    return np.asarray(answer, dtype=float)


def array_problems(answer, name, shape=None):
    """Yield a sentence if ``answer`` is not a numeric array of ``shape``; else nothing.

    Stop checking further properties when this yields anything.
    """
    try:
        arr = as_numbers(answer)
    except (TypeError, ValueError):
        yield f"{name} should be an array of numbers, but it is a {type(answer).__name__}"
        return
    if shape is not None and arr.shape != tuple(shape):
        yield f"{name} should have shape {tuple(shape)}, but yours has shape {arr.shape}"


def close_problems(answer, reference, name, atol=1e-3):
    """Yield a sentence if ``answer`` is not within ``atol`` of ``reference`` everywhere."""
    found = list(array_problems(answer, name, shape=np.shape(reference)))
    if found:
        yield from found
        return
    arr, ref = as_numbers(answer), as_numbers(reference)
    same_inf = np.isinf(ref) & (arr == ref)
    bad = ~(same_inf | np.isclose(arr, ref, atol=atol, rtol=0))
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        yield (f"{name} differs from the expected values in {int(bad.sum())} of {bad.size} entries "
               f"(the first at index {where})")


def number_problems(answer, reference, name, atol=1e-3):
    """Yield a sentence if ``answer`` is not a single number within ``atol`` of ``reference``."""
    try:
        value = float(answer)
    except (TypeError, ValueError):
        yield f"{name} should be a single number, but it is a {type(answer).__name__}"
        return
    if abs(value - reference) > atol:
        direction = "too large" if value > reference else "too small"
        yield f"{name} = {value:.4g} is {direction} (it should agree to ±{atol:g})"


def __getattr__(name):
    """Load chapter modules (``checks.ch02``) on first use."""
    if name.startswith("ch") and name[2:].isdigit():
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(name)
