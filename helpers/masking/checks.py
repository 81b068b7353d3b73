"""Checks for chapter 04 (masking): the causal mask, one masked weight by hand, repairing
a mask applied after softmax, and which outputs a changed token can move.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import numpy as np

from ..errors import to_numpy
from ..exercises import Array, Number, as_wholes, close_problems, exercise, number_problems
from ..reference import softmax


@exercise("the causal mask", answer=Array(shape=lambda T: (T, T)))
def mask(answer, T=5):
    """``answer`` (T, T) is True (or 1) exactly where query i must not see key j, i.e. j > i."""
    got = answer != 0
    want = np.triu(np.ones((T, T), dtype=bool), 1)
    if (got == want).all():
        return
    if (got == np.triu(np.ones((T, T), dtype=bool))).all():
        yield "the diagonal is hidden too: a token must be allowed to see itself (diagonal=1)"
    elif (got == ~want).all():
        yield "True marks the keys a query may see; here True should mark the keys to hide"
    elif (got == want.T).all():
        yield "this hides the past and shows the future: the hidden keys are above the diagonal (j > i)"
    else:
        yield (f"{int((got != want).sum())} of {T * T} entries are wrong: hide key j from query i "
               "exactly when j > i")


@exercise("one masked weight, by hand", answer=Number())
def masked_weight(answer, scores, query, key):
    """``answer`` is weight[query, key] after the causal mask and the softmax of ``scores`` (T, T)."""
    scores = to_numpy(scores, "scores")
    expected = softmax(scores[query, :query + 1])[key]
    if abs(answer - softmax(scores[query])[key]) < 1e-3 and abs(answer - expected) >= 1e-3:
        yield f"your softmax includes keys after position {query}: the mask removes them first"
    else:
        yield from number_problems(answer, expected, "your weight", atol=1e-3)


@exercise("repairing a mask applied after softmax", answer=Array(shape=lambda zeroed: np.shape(zeroed)))
def renormalised(answer, zeroed):
    """``answer`` (T, T): the rows of ``zeroed`` (softmax, then future weights set to 0) rescaled to sum to 1."""
    zeroed = to_numpy(zeroed, "zeroed")
    sums = answer.sum(axis=1)
    worst = int(np.argmax(np.abs(sums - 1)))
    if np.abs(np.triu(answer, 1)).max() > 1e-6:
        yield "some weight above the diagonal is not 0: the future must stay hidden"
    elif not np.allclose(sums, 1, atol=1e-4):
        yield f"row {worst} sums to {sums[worst]:.3f}; divide each row by its own sum (not each column)"
    else:
        yield from close_problems(answer, zeroed / zeroed.sum(axis=1, keepdims=True), "weights", atol=1e-4)


@exercise("which outputs a changed token can move")
def moved_positions(answer, T, changed):
    """``answer``: the positions (from 0) whose output can change, in a causal model of T tokens,
    when only the token at position ``changed`` is replaced."""
    got = sorted(set(as_wholes(answer, "the positions")))
    want = list(range(changed, T))
    if got == want:
        return
    if any(p < 0 or p >= T for p in got):
        yield f"positions run from 0 to {T - 1}"
    elif any(p < changed for p in got):
        yield f"an earlier position cannot see position {changed}: the mask hides it from them"
    elif changed not in got:
        yield f"position {changed} itself changes: its own token is different"
    else:
        yield f"some later positions are missing: every query after {changed} may attend to it"
