"""The tour's exercise checks (chapter 00)."""
import numpy as np

from ..errors import MAX_WIDTH  # noqa: F401 (the limit named here)
from ..errors import as_array, check_bytes, check_index, check_size, count, entries, fail, to_numpy
from ..exercises import as_number, as_wholes, count_answer, exercise, number_problems, precision_problem, slip

# The largest sizes a check cell of this chapter may give: far past the course's models (2 heads, 64 tokens) and
# the widest published ones (d_model 18,432, d_ff 73,728; MAX_WIDTH is helpers.errors'). Below them every count a
# check compares (a shape's axis, a layer's parameters, at most 6·MAX_WIDTH² + 10·MAX_WIDTH) is below 2**53, so an
# answer read through float64 is judged exactly; past them a check cell is refused in one sentence.
MAX_HEADS = 1_024
MAX_TOKENS = 2**20
MAX_LOGIT = 1e4   # the largest logit (in size) a check takes: a model's are tens; past about 1e307 they overflow
# How many float64 tables of the logits' size a check holds at once, counted against MAX_BYTES before any is made:
# next_prob the logits, their shift and its exp; sentence_loss the logits, their log-softmax, and inside the slip of
# the wrong axis a shift and its exp.
NEXT_PROB_TABLES = 3
SENTENCE_LOSS_TABLES = 4


@exercise("the shape of the layer-1 scores")
def scores_shape(answer, n_heads, T):
    """answer: the shape of ``L1.scores``, a tuple (heads, queries, keys); n_heads at most MAX_HEADS, T at
    most MAX_TOKENS (so an axis of the answer read through float64 is judged exactly).

    The messages diagnose (which axis, where to look) without stating the numbers."""
    n_heads, T = check_size(n_heads, "n_heads", MAX_HEADS), check_size(T, "T", MAX_TOKENS)
    shape = as_wholes(answer, "the shape")
    if len(shape) != 3:
        yield (f"your shape has {len(shape)} axes, but the scores have three: one that counts "
               "heads, one for the queries and one for the keys")
    elif shape[0] != n_heads:
        hint = (" (it looks like you put a token count first)" if shape[0] == T and n_heads in shape[1:]
                else "")
        yield ("the first axis counts heads, and yours does not match this model" + hint +
               ": look at the model's config (model.cfg)")
    elif shape[1] != shape[2]:
        yield "every token is both a query and a key, so the last two axes have the same length"
    elif shape[1] != T:
        off_by_one = " (did you count <BOS>?)" if abs(shape[1] - T) == 1 else ""
        yield ("the last two axes count the prompt's tokens, and yours do not: how many tokens "
               "does the prompt have?" + off_by_one)


@exercise("a next-token probability from the logits")   # (the answer read here: a float16 one is named as such)
def next_prob(answer, last_logits, token_id):
    """answer: softmax(last_logits)[token_id], one number; last_logits: (V,), each at most MAX_LOGIT in size."""
    logits = finite_scores(last_logits, "last_logits", ndim=1, tables=NEXT_PROB_TABLES)
    token_id = check_index(token_id, "token_id", len(logits))
    value = as_number(answer, "your answer")
    e = np.exp(logits - logits.max())
    p = float(e[token_id] / e.sum())
    found = list(number_problems(value, p, "the probability", atol=1e-4))
    if not found:
        return
    with np.errstate(all="ignore"):   # a slip's value may overflow (exp of a large logit) or be ln 0: never matched
        hint = next_prob_hint(value, logits, token_id, e, p)
    yield hint or precision_problem(answer, value, p, "the probability", 1e-4) or found[0]


def next_prob_hint(answer, logits, token_id, e, p):
    """The hint for a wrong probability ``answer`` that a known slip gives, else None; e: exp(logits - max),
    p: the right probability."""
    if np.isclose(answer, np.exp(logits[token_id]), rtol=1e-3):
        return f"that is exp(logit) alone: divide by the sum of exp over all {len(logits)} logits"
    if np.isclose(answer, logits[token_id], rtol=1e-3):
        return "that is the logit itself: a probability is softmax of the logits"
    return slip(answer, [
        (np.log(p), "that is ln p, a log-probability: the probability is e to that power, between 0 and 1"),
        (100 * p, "that is a percentage: give the probability itself, between 0 and 1"),
        (e[token_id] / e.max(), "that divides by the largest exp(logit): normalise by the sum of exp over "
                                f"all {len(logits)} logits, so the probabilities add up to 1"),
        (logits[token_id] / logits.sum(), "that divides the logit by the sum of the logits: exponentiate "
                                          "first (np.exp), then divide by the sum of the exponentials"),
    ], atol=1e-4)


@exercise("parameters in one layer")
def per_layer(answer, d_model, d_ff):
    """answer: the parameters of one pre-LN layer with biases, a whole number (as ``Whole()``, and a
    float type too narrow for the count, bfloat16, is named as such); d_model and d_ff at most MAX_WIDTH."""
    d, d_ff = check_size(d_model, "d_model", MAX_WIDTH), check_size(d_ff, "d_ff", MAX_WIDTH)
    attention, mlp, norms = 4 * d * d + 4 * d, d * d_ff + d_ff + d_ff * d + d, 2 * 2 * d
    expected = attention + mlp + norms
    answer = count_answer(answer, "your answer", expected)
    if answer == expected:
        return
    if d_ff == 4 * d and answer == 12 * d * d + 9 * d:
        yield ("that is the Lecture's 12d² + 9d, 4 × d_model short: as the box after the dragon "
               "reads it, the formula leaves out the four attention biases (b_Q, b_K, b_V, b_O); "
               "leaving out the two LayerNorms instead gives the same count")
        return
    slips = [
        (expected - norms, "4 × d_model short: that is what the two LayerNorms hold (a scale and a "
                           "shift each), and also what the four attention biases b_Q, b_K, b_V, b_O "
                           "hold; which one did you leave out?"),
        (expected - 4 * d - d_ff - d, "you left out the biases (b_Q, b_K, b_V, b_O, b_1, b_2)"),
        (expected - attention, "you left out attention (W_Q, W_K, W_V, W_O and their biases)"),
        (expected - mlp, "you left out the MLP (W_1, b_1, W_2, b_2)"),
        (expected - d_ff - d, "d_ff + d_model short: you left out the MLP's biases (b_1 has d_ff numbers, "
                              "b_2 has d_model)"),
        (expected - 2 * d, "2 × d_model short: each of the two LayerNorms has a scale and a shift, "
                           "d_model numbers each"),
        (expected + d_ff - d, "b_2 has d_model numbers, one per output of the MLP, not d_ff"),
        (expected - d * d - d, "d_model² + d_model short: that is one attention matrix with its bias; "
                               "a layer has four, W_Q, W_K, W_V and W_O"),
        (expected + 2 * d, "2 × d_model too many: the final LayerNorm belongs to the whole model, "
                           "not to each layer; a layer has two LayerNorms"),
        (4 * d * d + 2 * d * d_ff, "that counts only the matrices: add every bias and the two "
                                   "LayerNorms (a scale and a shift each)"),
    ]
    named = [hint for value, hint in slips if value == answer]
    # a hint only when exactly one mistake gives this count (otherwise it could name the wrong one)
    yield named[0] if len(named) == 1 else (f"{answer} is not it: add up W_Q, W_K, W_V, W_O, W_1, W_2, "
                                            "every bias, and the two LayerNorms")


@exercise("the loss of one sentence")   # (the answer read here: a float16 one is named as such)
def sentence_loss(answer, logits, ids):
    """answer: the mean of -ln p(the true next token) over the T - 1 predicted positions of one
    sentence, in nats; logits: (T, V), row t predicting the token at t + 1, each at most MAX_LOGIT in size
    (so the loss is computed without overflow); ids: (T,) its token ids."""
    logits = finite_scores(logits, "the logits", ndim=2, tables=SENTENCE_LOSS_TABLES)
    ids = to_numpy(ids, "the token ids")
    if ids.shape != logits.shape[:1] or len(ids) < 2 or (ids != np.floor(ids)).any() \
            or not ((0 <= ids) & (ids < logits.shape[1])).all():
        fail(f"the token ids should be {len(logits)} whole numbers from 0 to {logits.shape[1] - 1}, one per row "
             f"of the logits (at least 2), but got shape {ids.shape} with values from {ids.min() if ids.size else 0:g} "
             f"to {ids.max() if ids.size else 0:g}")
    ids = ids.astype(int)
    value = as_number(answer, "your answer")
    log_probs = log_softmax(logits, axis=1)
    right = -log_probs[np.arange(len(ids) - 1), ids[1:]].mean()
    if abs(value - right) <= 1e-4:
        return
    with np.errstate(all="ignore"):   # a slip's value may overflow (e^loss) or be ln 0: it is then never matched
        hint = sentence_loss_hint(value, logits, ids, log_probs)
    yield hint or precision_problem(answer, value, right, "the loss", 1e-4) or \
        next(number_problems(value, right, "the loss", atol=1e-4))


def sentence_loss_hint(answer, logits, ids, log_probs):
    """The hint for a wrong loss ``answer`` that a known slip gives, else None; logits (T, V), ids (T,) ints,
    log_probs: ln softmax of each row."""
    rows, targets = np.arange(len(ids) - 1), ids[1:]
    per_position = -log_probs[rows, targets]
    right = per_position.mean()
    return slip(answer, [
        (per_position.sum(), "that is the sum over the predicted positions: the loss is their mean"),
        (-right, "a loss is never negative: it is minus the log of a probability"),
        (right / np.log(10), "that is in base-10 logarithms: the loss uses the natural log (np.log)"),
        (right / np.log(2), "that is in bits (log base 2): the loss uses the natural log (np.log)"),
        (np.exp(right), "that is e^loss, the perplexity: the loss is its natural log"),
        (per_position.sum() / len(ids), f"that divides by T = {len(ids)}, the number of tokens: the "
                                        f"mean is over the T - 1 = {len(ids) - 1} predicted positions "
                                        "(the last token predicts nothing)"),
        (-log_softmax(logits, axis=0)[rows, targets].mean(),
         "that softmax runs down each column (axis 0, over the positions): p is the softmax of one "
         "row, over the vocabulary (axis=1)"),
        (-log_probs[rows, ids[:-1]].mean(), "row t predicts the token after it: compare row t with "
                                            "token t + 1, not with token t"),
        (-log_probs[np.arange(len(ids)), ids].mean(), "that scores all T rows against their own tokens: row t "
                                                      "predicts token t + 1, so use rows 0 to T - 2 with ids[1:]"),
        (-log_probs[rows + 1, targets].mean(), "that takes rows 1 to T - 1: row t predicts token t + 1, so "
                                               "the rows are 0 to T - 2 (the last row predicts nothing)"),
        (per_position[1:].mean() if len(rows) > 1 else np.nan,   # no first prediction to skip with one position
         "that skips the first prediction: row 0 (<BOS>) predicts the first word, and counts like every other row"),
        (-logits[rows, targets].mean(), "that is minus the logits: a logit is not a log-probability, "
                                        "take the log of the softmax of each row first"),
        (-np.log(np.exp(log_probs[rows, targets]).mean()), "that is minus the log of the mean probability: "
                                                           "take -ln p at each position first, then the mean"),
    ], atol=1e-4)


def log_softmax(logits, axis):
    """ln of the softmax of ``logits`` (a 2-D array of checked scores, ``finite_scores``) along ``axis``: over
    the vocabulary (axis 1) for a next-token loss, over the positions (axis 0) for the slip of the wrong axis."""
    shifted = logits - logits.max(axis=axis, keepdims=True)
    shifted -= np.log(np.exp(shifted).sum(axis=axis, keepdims=True))   # (in place: no third table)
    return shifted


def finite_scores(x, name, ndim, tables):
    """``x`` as a float array of ``ndim`` axes of finite numbers, each at most MAX_LOGIT in size (a softmax of
    them then neither overflows nor loses the loss's digits), else CourseInputError. ``tables``: how many float64
    tables of x's size the check holds at once (check_table_bytes), counted before x is converted (an array's or
    a tensor's size, read as it is) and again after (a list's, which to_numpy counts as it converts it)."""
    check_table_bytes(entries(x, name), name, tables)
    arr = as_array(x, name, ndim=ndim)
    check_table_bytes(arr.size, name, tables)
    if arr.size == 0 or not np.isfinite(arr).all():
        fail(f"{name} should hold finite numbers (at least one), but got shape {arr.shape} "
             f"with {int((~np.isfinite(arr)).sum())} not finite")
    largest = max(float(arr.max()), -float(arr.min()))   # (np.abs would make one more table)
    if largest > MAX_LOGIT:
        fail(f"{name} should hold numbers of size at most {MAX_LOGIT:,.0f} (a model's logits are tens), "
             f"but one has size {largest:.3g}")
    return arr


def check_table_bytes(size, name, tables):
    """Refuse up front a check on ``size`` numbers (``name``: what they are) that holds ``tables`` float64 tables
    of that size at once, when they pass MAX_BYTES."""
    check_bytes(8 * tables * size, f"judging {name} ({count(size)} numbers)", "give fewer logits")


# --- an answer right to its own precision: every chapter's checks (00-06) ask this before naming a slip ----------

