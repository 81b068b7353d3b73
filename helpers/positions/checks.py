"""Chapter 06's exercise checks: the sinusoidal table, the offset rotation, undoing a
permutation.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import numpy as np

from .. import reference as ref
from ..exercises import Array, as_array, close_problems, exercise, slip
from .compute import offset_rotation as reference_rotation


def same_frequencies_problem(PE, right):
    """A sentence if every column pair of PE is [sin(p w), cos(p w)] for some w, but not
    the right w; else None. PE, right: (n, d) tables with rows for positions 0, 1, ..."""
    p = np.arange(len(PE))[:, None]
    w = np.arctan2(PE[1, 0::2], PE[1, 1::2]) if len(PE) > 1 else np.zeros(PE.shape[1] // 2)
    if not (np.allclose(PE[:, 0::2], np.sin(p * w), atol=1e-3) and np.allclose(PE[:, 1::2], np.cos(p * w), atol=1e-3)):
        return None
    if np.allclose(PE, right, atol=1e-3):
        return None
    return ("every pair is [sin(p·w), cos(p·w)], but with other frequencies: "
            "pair i (columns 2i and 2i+1) turns at w_i = 10000**(-2i/d)")


@exercise("the sinusoidal position table", answer=Array(shape=lambda n, d: (n, d)))
def sinusoidal_table(PE, n, d):
    """``PE`` (n, d): row p, pair i = [sin(p w_i), cos(p w_i)], w_i = 10000**(-2i/d)."""
    right = ref.sinusoidal_positions(n, d)
    if np.allclose(PE, right, atol=1e-3):
        return
    halves = np.concatenate([right[:, 0::2], right[:, 1::2]], axis=1)
    hint = slip(PE, [(right[:, np.arange(d) ^ 1], "sine and cosine are swapped: each pair is [sin, cos], "
                                                  "sine in the even column"),
                     (halves, "the sines fill the first half and the cosines the second; interleave them: "
                              "pair i is columns 2i (sine) and 2i+1 (cosine)"),
                     (ref.sinusoidal_positions(n + 1, d)[1:], "your rows start at position 1: the first row is "
                                                               "position 0 (all sines 0, all cosines 1)")])
    hint = hint or same_frequencies_problem(PE, right)
    if hint:
        yield hint
    else:
        yield from close_problems(PE, right, "PE")


def off_blocks(d):
    """(d, d) booleans: True outside the 2×2 blocks on the diagonal."""
    return np.add.outer(np.arange(d) // 2, -(np.arange(d) // 2)) != 0


def is_block_rotation(R):
    """Whether the block-diagonal (d, d) R has a rotation [[cos, -sin], [sin, cos]] in every block."""
    c, s = np.diagonal(R)[0::2], np.diagonal(R, -1)[0::2]
    return bool(np.allclose(np.diagonal(R)[1::2], c, atol=1e-6) and np.allclose(np.diagonal(R, 1)[0::2], -s, atol=1e-6)
                and np.allclose(c ** 2 + s ** 2, 1, atol=1e-6))


@exercise("the rotation that moves every position k steps on", answer=Array(shape=lambda d: (d, d)))
def offset_rotation(R, k, d):
    """``R`` (d, d) with PE[p] @ R = PE[p + k] for every row p of the sinusoidal table (k >= 1)."""
    PE = ref.sinusoidal_positions(20 + k, d)
    if np.allclose(PE[:-k] @ R, PE[k:], atol=1e-3):
        return
    if np.allclose(PE[k:] @ R, PE[:-k], atol=1e-3):
        yield f"your R moves every position {k} steps back, not on: turn each pair the other way"
        return
    hint = slip(R, [(reference_rotation(1, d), f"that R moves every position 1 step on; for {k} steps "
                                               f"pair i turns through {k}·w_i")])
    if hint:
        yield hint
    elif np.abs(R[off_blocks(d)]).max(initial=0) > 1e-6:
        yield "R should be block-diagonal: each 2×2 block turns one [sin, cos] pair and leaves the others alone"
    elif is_block_rotation(R):
        yield f"each block is a rotation, but not through the angle {k}·w_i with w_i = 10000**(-2i/d)"
    else:
        yield "PE[p] @ R does not give PE[p + k]: each 2×2 block is [[cos, -sin], [sin, cos]] of the angle k·w_i"


@exercise("the unscrambled attention output", answer=Array(shape=lambda Y: np.shape(Y)))
def unscrambled(out, Y, perm):
    """``out`` (T, d): the rows of Y = Attention(X[perm]) put back in X's order."""
    Y, perm = as_array(Y, "Y"), np.asarray(perm)
    if np.allclose(out, Y[np.argsort(perm)], atol=1e-6):
        return
    hint = slip(out, [(Y, "these are still the rows in scrambled order: put row i of Y back where "
                          "X[perm[i]] came from"),
                      (Y[perm], "you applied the permutation a second time; undo it instead: for each "
                                "row j of X_demo, find the row of Y that was computed from it")], atol=1e-6)
    if hint:
        yield hint
    elif sorted(map(tuple, np.round(out, 6))) == sorted(map(tuple, np.round(Y, 6))):
        yield "these are Y's rows, but in another order: row j of out is the row of Y computed from X[j]"
    else:
        yield "these rows are not Y's rows: no new attention is needed, only Y's rows move"
