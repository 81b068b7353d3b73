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


def to_numpy(x, name="the input"):
    """``x`` (a torch tensor, with or without grad, a NumPy array, a list, a number) as a
    float64 NumPy array: the package's one converter. Complex or non-numeric input fails."""
    if x is None:
        fail(f"{name} is None; expected an array of numbers")
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        x = x.detach().cpu().numpy()
    if np.iscomplexobj(x):
        fail(f"{name} should hold real numbers, but it holds complex ones")
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError):
        fail(f"{name} should be an array of numbers, but got {type(x).__name__}")
    return arr


def as_array(x, name, ndim=None):
    """Return ``x`` as a float NumPy array (``to_numpy``), checking its number of axes.

    ndim: an int or a tuple of allowed ints, or None for any.
    """
    arr = to_numpy(x, name)
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if arr.ndim not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            fail(f"{name} should be {want}, but it has shape {arr.shape}")
    return arr


def check_positive_int(value, name, minimum=1):
    """Check that ``value`` is an integer >= ``minimum`` (a NumPy integer counts); return it as int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        fail(f"{name} should be a whole number >= {minimum}, but got {value!r}")
    if value < minimum:
        fail(f"{name} should be at least {minimum}, but got {value}")
    return int(value)


def check_seed(seed, name="seed"):
    """A random seed: a whole number >= 0 (a NumPy integer counts); return it as int."""
    return check_positive_int(seed, name, minimum=0)


def check_number(value, name, low=None, high=None, low_open=False):
    """A finite real number within [low, high] (or (low, high] with low_open); return it as float."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        fail(f"{name} should be a number, but got {value!r}")
    value = float(value)
    if not np.isfinite(value):
        fail(f"{name} should be a finite number, but got {value}")
    if low is not None and (value <= low if low_open else value < low):
        fail(f"{name} should be {'>' if low_open else '>='} {low:g}, but got {value:g}")
    if high is not None and value > high:
        fail(f"{name} should be at most {high:g}, but got {value:g}")
    return value
