"""Chapter 06's exercise checks: the learner's sinusoidal_positions(n, d) and rotate(x, start)
(pieces of their GPT, run against the shipped cat and induction models), the offset rotation,
undoing a permutation.

Each check judges properties and reference values and says what is wrong without
printing the expected answer.
"""
import numpy as np
import torch

from .. import reference as ref
from .. import weights, worlds
from ..exercises import (Function, NOT_ANSWERED, call, close_problems, exercise, numbers as output_numbers,
                         precision_problem, settled, slip)
from ..exercises import as_array as answer_array   # (a learner's answer, Wrong; errors' as_array: the check's inputs)
from ..model import KVCache, rotate_pairs, sinusoidal_angles, sinusoidal_table
from ..errors import as_array as numbers, check_answer_shape, check_finite, check_positive_int, count, fail, \
    shape_of
from ..heads.compute import check_shipped
from .compute import check_perm, offset_rotation as reference_rotation

MAX_K = 10_000   # the offset_rotation check's largest k (its table has 20 + k rows)

NOT_YET = NOT_ANSWERED.split(":")[0]
TABLE_ATOL = 1e-4    # a float32 table against the model's own (sin and cos of angles up to 50)
TURN_ATOL = 1e-4     # rotated queries and keys (entries up to about 10) against the model's own


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


def kind(x):
    """The type of x by its full name (numpy.ndarray, builtins.list)."""
    return f"{type(x).__module__}.{type(x).__name__}"


def table_slips(n, d):
    """[(the (n, d) table a known slip gives, the sentence that names it), ...]"""
    right = ref.sinusoidal_positions(n, d)
    p, column = np.arange(n)[:, None], np.arange(d)
    own_frequency = 10000.0 ** (-column / d)
    return [(right[:, column ^ 1], "sine and cosine are swapped: pair i is [sin(p·w_i), cos(p·w_i)], the sine in "
                                   "the even column 2i"),
            (ref.sinusoidal_positions(n, d, base=100.0), "the frequencies are 10000**(-i/d); pair i (columns 2i and "
                                                         "2i+1) turns at w_i = 10000**(-2i/d)"),
            (ref.sinusoidal_positions(n, d, base=1e8), "the frequencies are 10000**(-4i/d): torch.arange(0, d, 2) "
                                                       "already gives 2i, so do not double it again"),
            (np.where(column % 2 == 0, np.sin(p * own_frequency), np.cos(p * own_frequency)),
             "each column has its own frequency 10000**(-j/d), j the column; the two columns of pair i share "
             "one, w_i = 10000**(-2i/d)"),
            (np.concatenate([right[:, 0::2], right[:, 1::2]], axis=1),
             "the sines fill the first half and the cosines the second; interleave them: pair i is columns 2i "
             "(sine) and 2i+1 (cosine)"),
            (ref.sinusoidal_positions(n + 1, d)[1:], "your rows start at position 1: the first row is position 0 "
                                                      "(all sines 0, all cosines 1)")]


def table_cases(cat):
    """[(what, n, d, the table the check expects), ...]: the cat model's own positions (what its
    trace adds to the embeddings on a cat-world sentence, and its PE buffer), then a wider table."""
    ids = worlds.cat_world().tokenizer.encode("<BOS> the big dog sat on the mat".split())
    with torch.no_grad():
        added = cat(ids, trace=True)["h0"] - cat.E[ids]
    n_max, d = cat.PE.shape
    return [("the rows the cat model adds to '<BOS> the big dog sat on the mat'", len(ids), d, added),
            ("the cat model's whole table (its PE buffer)", n_max, d, cat.PE),
            ("a wider table", 50, 16, sinusoidal_table(50, 16))]


# The course's functions that compute sin and cos of the angles p·w_i, w_i = 10000**(-2i/d): the sinusoidal table,
# and every rotation by those angles (a pair (0, 1) turned back by p·w_i is [sin, cos]; PE[0] @ offset_rotation(p, d)
# is row p). Each gives the answer of either exercise of this chapter for the right arguments, so both name them all.
TABLE, ROTATE = "helpers.positions.compute.sinusoidal_positions", "helpers.positions.compute.rotate"
COURSES_ANGLES = (   # besides the chapter's own two, TABLE and ROTATE (each check names its own first: kept by it)
    "helpers.reference.sinusoidal_positions", "helpers.model.sinusoidal_table", "helpers.model.sinusoidal_angles",
    "helpers.model.rotary_cos_sin", "helpers.reference.rotate_pairs", "helpers.model.rotate_pairs",
    "helpers.patching.rotary_rotation", "helpers.positions.compute.offset_rotation")


@exercise("your sinusoidal_positions(n, d)", answer=Function("a function sinusoidal_positions(n, d)",
                                                            own=(TABLE, ROTATE, *COURSES_ANGLES)), keeps="06")
def sinusoidal_positions(fn, cat):
    """``fn(n, d)`` -> the (n, d) torch table: row p, pair i = [sin(p w_i), cos(p w_i)],
    w_i = 10000**(-2i/d); equal to the cat model's own positions and the course's table."""
    check_shipped(cat, "cat")
    # the expected tables come from the shipped file, not from ``cat``: an earlier cell may have changed
    # its weights or its PE buffer (an experiment), which must not make a right table look wrong
    for what, n, d, expected in table_cases(weights.load_cat()):
        out = call(fn, n, d, what=f"for sinusoidal_positions({n}, {d})")
        if out is None:
            yield f"{NOT_YET}: sinusoidal_positions returns None; build the table and return it"
            return
        if not isinstance(out, torch.Tensor):
            yield (f"sinusoidal_positions({n}, {d}) returned a {kind(out)}; return a torch tensor "
                   "(torch.sin, torch.cos): the model adds it to its embeddings")
            return
        check_answer_shape(out, f"sinusoidal_positions({n}, {d})", (n, d))   # before it is converted
        table = output_numbers(out, f"sinusoidal_positions({n}, {d})", shape=(n, d))
        expected = expected.double().numpy()
        if np.allclose(table, expected, atol=TABLE_ATOL, rtol=0):
            if out.dtype != torch.float32:
                yield (f"sinusoidal_positions({n}, {d}) has the right values but is {out.dtype}; return float32, "
                       "torch's default (no dtype=torch.float64, no NumPy array turned into a tensor): your GPT "
                       "adds it to float32 embeddings")
                return
            continue
        hint = precision_problem(out, table, expected, f"sinusoidal_positions({n}, {d})", TABLE_ATOL) or \
            slip(table, table_slips(n, d), atol=TABLE_ATOL) or same_frequencies_problem(table, expected)
        if hint:
            yield f"against {what}: {hint}"
        else:
            yield from (f"against {what}: {sentence}" for sentence in
                        close_problems(table, expected, f"sinusoidal_positions({n}, {d})", atol=TABLE_ATOL))
        return


def turned(x, start, base=10000.0, pairs="adjacent", sign=1, swap=False):
    """x (..., T, d_k) turned as ``rotate`` does, or as one of its known slips does: sign=-1 turns
    the other way, swap=True uses sin where cos belongs and cos where sin belongs."""
    if pairs == "halves" or (sign == 1 and not swap):
        return rotate_pairs(x, start, base=base, pairs=pairs)
    angle = sign * sinusoidal_angles(start, x.shape[-2], x.shape[-1], base)
    cos, sin = angle.cos(), angle.sin()
    if swap:
        cos, sin = sin, cos
    even, odd = x[..., 0::2], x[..., 1::2]
    out = x.clone()
    out[..., 0::2], out[..., 1::2] = even * cos - odd * sin, even * sin + odd * cos
    return out


def turn_slips(x, start):
    """[(what a known slip makes of x at ``start``, the sentence that names it), ...]"""
    slips = [(turned(x, start, pairs="halves"), "you paired column i with column i + d_k/2 (Llama's layout); here "
                                                "a pair is two adjacent columns, 2i and 2i+1"),
             (turned(x, start, sign=-1), "your pairs turn the wrong way: (e, o) becomes (e·cos − o·sin, "
                                         "e·sin + o·cos), the sine subtracted in the even column"),
             (turned(x, start, swap=True), "cos and sin are swapped: (e, o) becomes "
                                           "(e·cos − o·sin, e·sin + o·cos)"),
             (turned(x, start, base=100.0), "the frequencies are 10000**(-i/d_k) (the same as 10000**(-2i/d_model) "
                                            "here): pair i of a head turns at w_i = 10000**(-2i/d_k), d_k = "
                                            "x.shape[-1], the head's width"),
             (turned(x, start, base=1e8), "the frequencies are 10000**(-4i/d_k): torch.arange(0, d_k, 2) already "
                                          "gives 2i, so do not double it again"),
             (turned(x, start + 1), f"your positions start at {start + 1}: the first token of x sits at position "
                                    f"start ({start} here)"),
             (x, "x comes back unturned: every pair of token t turns through the angle (start + t)·w_i")]
    if start:
        slips.insert(0, (turned(x, 0), f"start is ignored: after {start} tokens in the cache, the first new token "
                                       f"sits at position {start}, so token t of x turns by (start + t)·w_i"))
    return [(value.numpy(), hint) for value, hint in slips]


def turned_by(fn, x, start, what):
    """(fn's turn of x (B, H, T, d_k) at ``start``, None) if it is the model's own turn, else (None, the sentence)."""
    given = {}

    def watched(x, **start):            # call hands fn a copy of x: keep it to see whether fn changed it
        given["x"], given["before"] = x, x.clone()
        return fn(x, **start)

    out = call(watched, x, start=start, what=what) if start else call(watched, x, what=what)
    if given and not torch.equal(given["x"], given["before"]):
        return None, (f"rotate changed x in place {what}; leave x as it is and write the turn into a new "
                      "tensor (torch.empty_like(x), or torch.stack of the two halves of every pair)")
    if out is None:
        return None, f"{NOT_YET}: rotate returns None; turn the pairs and return the result"
    if not isinstance(out, torch.Tensor):
        return None, f"rotate returned a {kind(out)} {what}; return a torch tensor of x's shape"
    check_answer_shape(out, f"rotate's result {what}", x.shape)   # before it is converted
    got = output_numbers(out, f"rotate's result {what}", shape=tuple(x.shape))
    if np.allclose(got, turned(x, start).numpy(), atol=TURN_ATOL, rtol=0):
        if out.dtype != x.dtype:
            return None, (f"rotate turns right {what}, but returns {out.dtype} for x of {x.dtype}; keep x's dtype "
                          "(angles from torch.arange(..., dtype=torch.float32), no float64 and no NumPy)")
        return out, None
    hint = precision_problem(out, got, turned(x, start).numpy(), f"rotate's result {what}", TURN_ATOL) or \
        slip(got, turn_slips(x, start), atol=TURN_ATOL) or one_part_wrong(got, turned(x, start).numpy())
    return None, f"{what}: " + (hint or "the result differs from the model's own turn; pair (e, o) of token t "
                                        "becomes (e·cos a − o·sin a, e·sin a + o·cos a), a = (start + t)·w_i, "
                                        "w_i = 10000**(-2i/d_k)")


def one_part_wrong(got, right):
    """A sentence when some sequences of the batch (axis 0) or some heads (axis 1) of ``got`` (B, H, T, d_k) are
    turned right and others not, naming the first wrong one; else None."""
    for axis, part in ((0, "sequence"), (1, "head")):
        ok = [np.allclose(np.take(got, i, axis), np.take(right, i, axis), atol=TURN_ATOL, rtol=0)
              for i in range(got.shape[axis])]
        if any(ok) and not all(ok):
            return (f"the turn is right for {part} {ok.index(True)} but wrong for {part} {ok.index(False)} (counting "
                    f"from 0, of {len(ok)}): every {part} turns on its own by the same angles, so work on x's last "
                    "two axes (x[..., 0::2], x[..., 1::2]) and keep the others as they are")
    return None


def by_head(trace_rows, n_heads):
    """A trace's (T, H·d_k) queries or keys as (1, H, T, d_k), as the model splits them."""
    T = trace_rows.shape[0]
    return trace_rows.reshape(T, n_heads, -1).transpose(0, 1)[None].contiguous()


def scores_from(q, k):
    """Causal scores (H, T_q, T_k) of turned q (1, H, T_q, d_k) and k (1, H, T_k, d_k), the queries
    being the last T_q positions."""
    S = (q @ k.transpose(-2, -1))[0] / q.shape[-1] ** 0.5
    T_q, T_k = S.shape[-2:]
    return S.masked_fill(torch.triu(torch.ones(T_q, T_k, dtype=torch.bool), diagonal=T_k - T_q + 1), float("-inf"))


@exercise("your rotate(x, start=0)", answer=Function("a function rotate(x, start=0)",
                                                     own=(ROTATE, TABLE, *COURSES_ANGLES)),
          keeps="06")
def rotate(fn, induction):
    """``fn(x, start=0)``: x (B, H, T, d_k) with every adjacent pair (2i, 2i+1) of token t turned
    through (start + t)·10000**(-2i/d_k). Run on the shipped induction model's queries and keys
    (both layers, a repeated-token sequence): the turned vectors and the scores they give must
    equal the trace of the shipped file's model (``induction`` is only checked to be of its
    Config), in one pass and after a cache of 9 tokens (start=9); then a batch of two different
    sequences (B = 2), both ways (``batch_cases``)."""
    check_shipped(induction, "induction")
    # the expected turns and scores come from the shipped file, not from ``induction``: an earlier cell may
    # have changed its weights or its rotary settings (an experiment), which must not make a right rotate
    # look wrong
    induction = weights.load_induction()
    ids = worlds.repeated_tokens(1, 8, induction.cfg.vocab_size, seed=2024)[0]
    H, cut = induction.cfg.n_heads, 9
    with torch.no_grad():
        whole = induction(ids, trace=True)
        cache = KVCache(induction.cfg.n_layers)
        induction(ids[:cut], cache=cache)
        later = induction(ids[cut:], cache=cache, trace=True)
    for layer in range(induction.cfg.n_layers):
        turns = []
        for name in ("q", "k", "new q", "new k"):
            trace, start = (whole, 0) if "new" not in name else (later, cut)
            x = by_head(trace[f"L{layer}.{name[-1]}"], H)
            what = (f"on layer {layer}'s {'queries' if name[-1] == 'q' else 'keys'} of the induction model"
                    + (f", after a cache of {cut} tokens (start={cut})" if start else ""))
            out, problem = turned_by(fn, x, start, what)
            if problem:
                yield problem
                return
            turns.append(out)
        q, k, q_new, k_new = (t.detach().float() for t in turns)
        if not torch.allclose(scores_from(q, k), whole[f"L{layer}.scores"], atol=10 * TURN_ATOL):
            yield f"layer {layer}: your turned queries and keys do not give the model's own scores"
            return
        cached = torch.cat([k[..., :cut, :], k_new], dim=-2)   # the keys in the cache, then the new ones
        if not torch.allclose(scores_from(q_new, cached), later[f"L{layer}.scores"], atol=10 * TURN_ATOL):
            yield (f"layer {layer}, after a cache of {cut} tokens: your turned queries and keys do not give "
                   "the model's own scores")
            return
    for x, start, what in batch_cases(induction, cut):   # x (2, H, T, d_k): each sequence its own numbers
        problem = turned_by(fn, x, start, what)[1]
        if problem:
            yield problem
            return


def batch_cases(induction, cut):
    """[(x (2, H, T, d_k), start, what)]: layer 0's queries of the induction model on two different
    repeated-token sequences, stacked as a batch, whole (start=0) and their last tokens after a cache of
    ``cut`` (start=cut), so that a rotate that turns one sequence for all of them is found out."""
    rows = worlds.repeated_tokens(2, 8, induction.cfg.vocab_size, seed=7)
    with torch.no_grad():
        x = torch.cat([by_head(induction(row, trace=True)["L0.q"], induction.cfg.n_heads) for row in rows])
    where = "on a batch of two sequences' layer-0 queries of the induction model"
    return [(x, 0, f"{where} (x of shape {tuple(x.shape)})"),
            (x[..., cut:, :].contiguous(), cut, f"{where}, their tokens after a cache of {cut} (start={cut}, x of "
                                                f"shape {tuple(x[..., cut:, :].shape)})")]


def off_blocks(d):
    """(d, d) booleans: True outside the 2×2 blocks on the diagonal."""
    return np.add.outer(np.arange(d) // 2, -(np.arange(d) // 2)) != 0


def is_block_rotation(R):
    """Whether the block-diagonal (d, d) R has a rotation [[cos, -sin], [sin, cos]] in every block."""
    c, s = np.diagonal(R)[0::2], np.diagonal(R, -1)[0::2]
    return bool(np.allclose(np.diagonal(R)[1::2], c, atol=1e-6) and np.allclose(np.diagonal(R, 1)[0::2], -s, atol=1e-6)
                and np.allclose(c ** 2 + s ** 2, 1, atol=1e-6))


def rotation_shape(d):
    """(d, d) for the check's width d (an even whole number, at most 1,024), else one sentence."""
    d = check_positive_int(d, "d", minimum=2)
    if d % 2 or d > 1024:
        fail(f"d should be an even whole number from 2 to 1,024 (the width of the sinusoidal table), but got {count(d)}")
    return d, d


ROTATION_ATOL = 1e-3   # how far PE[p] @ R may be from PE[p + k] (a float32 R, or one rounded to 4 decimals)


@exercise("the rotation that moves every position k steps on")   # (the answer read here: a float16 one is named)
def offset_rotation(R, k, d):
    """``R`` (d, d) with PE[p] @ R = PE[p + k] for every row p of the sinusoidal table (k >= 1)."""
    d, k = rotation_shape(d)[0], check_positive_int(k, "k")
    if k > MAX_K:
        fail(f"k should be at most {MAX_K:,} (this check's limit), but got {count(k)}")
    given, R = R, answer_array(R, "your answer", shape=(d, d))   # (given: as the learner gave it, with its dtype)
    PE = ref.sinusoidal_positions(20 + k, d)
    if np.allclose(PE[:-k] @ R, PE[k:], atol=ROTATION_ATOL):
        return
    rounded = precision_problem(given, R, reference_rotation(k, d), "R", ROTATION_ATOL)
    if rounded:
        yield rounded
        return
    if np.allclose(PE[k:] @ R, PE[:-k], atol=ROTATION_ATOL):
        yield f"your R moves every position {k} steps back, not on: turn each pair the other way"
        return
    hint = slip(R, [(reference_rotation(1, d), f"that R moves every position 1 step on; for {k} steps "
                                               f"pair i turns through {k}·w_i")], atol=ROTATION_ATOL)
    if hint:
        yield hint
    elif np.abs(R[off_blocks(d)]).max(initial=0) > 1e-6:
        yield "R should be block-diagonal: each 2×2 block turns one [sin, cos] pair and leaves the others alone"
    elif is_block_rotation(R):
        yield f"each block is a rotation, but not through the angle {k}·w_i with w_i = 10000**(-2i/d)"
    else:
        yield "PE[p] @ R does not give PE[p + k]: each 2×2 block is [[cos, -sin], [sin, cos]] of the angle k·w_i"


# The largest Y the unscrambled check takes (the chapter's is 5 rows of 4 numbers): it sorts Y's rows and perm.
MAX_SCRAMBLED_ROWS = 10_000
MAX_SCRAMBLED_NUMBERS = 1_000_000


@exercise("the unscrambled attention output")   # (the answer read here: a float16 one is named as such)
def unscrambled(out, Y, perm):
    """``out`` (T, d): the rows of Y = Attention(X[perm]) put back in X's order. Y: at most MAX_SCRAMBLED_ROWS
    rows and MAX_SCRAMBLED_NUMBERS numbers."""
    check_scrambled_size(shape_of(Y, "Y"))   # an array's or a tensor's shape, before it is converted
    Y = check_finite(numbers(Y, "Y", 2), "Y")
    check_scrambled_size(Y.shape)   # (a list's, once converted)
    perm = check_perm(perm, len(Y))
    given, out = out, answer_array(out, "your answer", shape=Y.shape)   # (given: with its dtype)
    right = Y[np.argsort(perm)]
    done = settled(given, out, right, "the unscrambled rows", 1e-6)
    if done is not None:
        yield from done
        return
    hint = slip(out, [(Y, "these are still the rows in scrambled order: put row i of Y back where "
                          "X[perm[i]] came from"),
                      (Y[perm], "you applied the permutation a second time; undo it instead: for each "
                                "row j of X_demo, find the row of Y that was computed from it")], atol=1e-6)
    if hint:
        yield hint
    elif np.array_equal(sorted_rows(out), sorted_rows(Y)):
        yield "these are Y's rows, but in another order: row j of out is the row of Y computed from X[j]"
    else:
        yield "these rows are not Y's rows: no new attention is needed, only Y's rows move"


def check_scrambled_size(shape):
    """Refuse a Y of ``shape`` (None: not known before it is converted, nothing to refuse yet) with more than
    MAX_SCRAMBLED_ROWS rows or MAX_SCRAMBLED_NUMBERS numbers, in one sentence."""
    if shape is not None and len(shape) and (shape[0] > MAX_SCRAMBLED_ROWS or np.prod(shape) > MAX_SCRAMBLED_NUMBERS):
        fail(f"Y should have at most {MAX_SCRAMBLED_ROWS:,} rows and {MAX_SCRAMBLED_NUMBERS:,} numbers for this check "
             f"(the chapter's has 5 rows of 4), but it has shape {tuple(shape)}")


def sorted_rows(x):
    """The rows of x (T, d) rounded to 6 decimals, sorted by their first number, then their second, ...: (T, d).
    Two tables hold the same rows in any order exactly when their sorted rows are equal."""
    x = np.round(x, 6)
    return x[np.lexsort(x.T[::-1])] if x.shape[1] else x
