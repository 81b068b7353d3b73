"""Checks for chapter 06 (positions): the sinusoidal table, the offset rotation,
undoing a permutation.

Each check judges properties and reference values and says what is wrong
without printing the expected answer.
"""
import numpy as np

from . import array_problems, close_problems, exercise, as_numbers
from .. import reference as ref
from ..positions import offset_rotation as reference_rotation


@exercise("the sinusoidal position table")
def sinusoidal_table(answer, n, d):
    """``answer`` (n, d): row p, pair i = [sin(p w_i), cos(p w_i)], w_i = 10000**(-2i/d)."""
    found = list(array_problems(answer, "PE", shape=(n, d)))
    if found:
        yield from found
        return
    PE, right = as_numbers(answer), ref.sinusoidal_positions(n, d)
    if np.allclose(PE, right, atol=1e-3):
        return
    if np.allclose(PE[:, 0::2], right[:, 1::2], atol=1e-3) and np.allclose(PE[:, 1::2], right[:, 0::2], atol=1e-3):
        yield "sine and cosine are swapped: each pair is [sin, cos], sine in the even column"
    elif np.allclose(PE[0], right[0], atol=1e-3) and not np.allclose(PE[1], right[1], atol=1e-3):
        yield ("row 0 is right but later rows are not: check the frequencies, "
               "w_i = 10000**(-2i/d) for pair i (columns 2i and 2i+1)")
    elif np.allclose(PE[1:], right[:-1], atol=1e-3):
        yield "your rows are shifted by one: the first row is position 0, all sines 0 and cosines 1"
    else:
        yield from close_problems(PE, right, "PE")


@exercise("the rotation that moves every position k steps on")
def offset_rotation(answer, k, d):
    """``answer`` (d, d) with PE[p] @ answer = PE[p + k] for every row p of the table."""
    found = list(array_problems(answer, "R", shape=(d, d)))
    if found:
        yield from found
        return
    R = as_numbers(answer)
    PE = ref.sinusoidal_positions(20 + k, d)
    if np.allclose(PE[:-k] @ R, PE[k:], atol=1e-3):
        return
    if np.allclose(PE[k:] @ R, PE[:-k], atol=1e-3):
        yield f"your R moves every position {k} steps back, not on: turn each pair the other way"
    elif np.allclose(R, reference_rotation(k, d).T, atol=1e-3) or np.allclose(R @ R.T, np.eye(d), atol=1e-3):
        yield (f"R is a rotation, but PE[p] @ R is not PE[p + {k}]: pair i turns through k * w_i, "
               "and with rows on the left the sine's partner gets +sin")
    elif np.any(np.abs(R[np.add.outer(np.arange(d) // 2, -(np.arange(d) // 2)) != 0]) > 1e-6):
        yield "R should be block-diagonal: each 2×2 block turns one [sin, cos] pair and leaves the others alone"
    else:
        yield "PE[p] @ R does not give PE[p + k]: each 2×2 block is [[cos, -sin], [sin, cos]] of the angle k * w_i"


@exercise("the unscrambled attention output")
def unscrambled(answer, Y, perm):
    """``answer`` (T, d): the rows of Y = Attention(X[perm]) put back in X's order."""
    Y, perm = as_numbers(Y), np.asarray(perm)
    found = list(array_problems(answer, "out", shape=Y.shape))
    if found:
        yield from found
        return
    out, inverse = as_numbers(answer), np.argsort(perm)
    if np.allclose(out, Y[inverse], atol=1e-6):
        return
    if np.allclose(out, Y, atol=1e-6):
        yield "these are still the rows in scrambled order: put row i of Y back where X[perm[i]] came from"
    elif np.allclose(out, Y[perm], atol=1e-6):
        yield "you applied the permutation a second time; undo it instead (its inverse is np.argsort(perm))"
    else:
        yield "these rows are not a reordering of Y: no new attention is needed, only Y's rows moved"
