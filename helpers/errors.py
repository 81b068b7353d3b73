"""One-sentence input checks shared by every public helper.

Each check raises ``ValueError`` (or ``TypeError``) whose message names what was
expected and what arrived, e.g. ``"K has d_k=4 but Q has d_k=5"``.
"""
import numpy as np


class CourseInputError(ValueError):
    """Bad input to a course helper; the message is one sentence for a learner."""


def fail(message):
    """Raise a CourseInputError with ``message``."""
    raise CourseInputError(message)


def as_array(x, name, ndim=None):
    """Return ``x`` as a float NumPy array, checking its number of axes.

    ndim: an int or a tuple of allowed ints, or None for any.
    """
    if x is None:
        fail(f"{name} is None; expected an array of numbers")
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        fail(f"{name} should be an array of numbers, but got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            fail(f"{name} should be {want}, but it has shape {arr.shape}")
    return arr


def check_positive_int(value, name, minimum=1):
    """Check that ``value`` is an integer >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        fail(f"{name} should be a whole number >= {minimum}, but got {value!r}")
    if value < minimum:
        fail(f"{name} should be at least {minimum}, but got {value}")
    return int(value)
