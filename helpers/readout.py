"""Reading a forward pass as text: each traced step with its shape, and top-k tables."""
import numpy as np
import torch

from .errors import check_finite, check_positive_int, check_tensor, check_text, count, fail, is_tensor, items_of, length, \
    read_shape, shown, to_numpy, type_name, unreadable

MAX_ROWS = MAX_COLS = 1_000   # the largest matrix format_matrix writes out (a million numbers, ~8 MB of text)
MAX_DECIMALS = 20             # the most decimals a number is written with
MAX_LABEL_CHARS = 100         # a row label: a token or a step's name (every row is padded to the longest)
MAX_PRINTED = MAX_ROWS * MAX_COLS   # the most numbers one call prints (format_step's heads, print_trace's steps)
LARGEST_FIXED = 1e9           # a matrix holding a number this large is written as 1.234e+12 (1e308 has 309 digits)
SUM_TOLERANCE = 1e-3          # how far from 1 a distribution's sum may be: rounding, not a slip

SHAPE_NOTES = {
    "h0": "embedding + position", "ln1": "LayerNorm, row by row", "q": "queries, all heads",
    "k": "keys, all heads", "v": "values, all heads", "scores": "QKᵀ/√d_k, masked, per head",
    "weights": "softmax of the scores, per head", "head_out": "weights · V, per head",
    "concat": "heads side by side", "attn": "concat · W_O + b_O", "h_mid": "residual + attn",
    "ln2": "LayerNorm, row by row", "pre": "ln2 · W_1 + b_1", "act": "GELU(pre)",
    "mlp": "act · W_2 + b_2", "h": "h_mid + mlp", "final_ln": "final LayerNorm",
    "logits": "final_ln · Eᵀ", "probs": "softmax of the logits",
}


def check_size(shape):
    """Refuse, before any number is converted, an array of more than 2 axes or of more than
    MAX_ROWS rows or MAX_COLS columns (format_matrix's limit: its text grows with every cell)."""
    shape = tuple(shape)
    if len(shape) > 2:
        fail(f"format_matrix should get a 1-D or 2-D array, but got shape {shape}")
    rows, cols = (1, *shape)[-2:] if shape else (1, 1)
    if rows > MAX_ROWS or cols > MAX_COLS:
        fail(f"format_matrix should get at most {MAX_ROWS:,} rows and {MAX_COLS:,} columns (this course's limit "
             f"for a matrix as text), but got {count(rows)} x {count(cols)}: print a slice such as x[:10, :10]")


def check_row_labels(row_labels, rows):
    """``row_labels`` as a list of ``rows`` labels ([""] * rows for None): a list, tuple, array or tensor
    whose length is checked before it is listed (range(10**9) would take GBs), each label's text at most
    MAX_LABEL_CHARS characters (every row is padded to the longest). Else one sentence."""
    if row_labels is None:
        return [""] * rows
    if is_tensor(row_labels):   # a nested or sparse tensor cannot be listed: refused first
        check_tensor(row_labels, "row_labels", float8=True)
    try:   # a 0-d tensor or array, a number, a generator: no length, so no labels to count
        size = None if isinstance(row_labels, (str, bytes)) else length(row_labels)
    except (TypeError, ValueError, OverflowError, AttributeError):
        size = None
    except Exception as error:   # noqa: BLE001 (a learner's __len__ may raise anything)
        unreadable_labels(row_labels, error)
    if size is None:
        fail(f"row_labels should be a list of labels, one per row, but got {shown(row_labels)}")
    if size != rows:
        fail(f"expected one label per row: {count(rows)} rows, but {count(size)} labels")
    try:
        labels = list(row_labels)
    except Exception as error:   # noqa: BLE001 (a learner's __iter__ may raise anything)
        unreadable_labels(row_labels, error)
    if len(labels) != rows:   # a __len__ that says another number than the labels it lists
        fail(f"expected one label per row: {count(rows)} rows, but {count(len(labels))} labels")
    for label in labels:
        label_text(label, "each row label")
    return labels


def unreadable_labels(row_labels, error):
    """Refuse ``row_labels`` (tokens, for format_step and print_trace) whose length or entries raised ``error``
    when read, in the sentence to_numpy says of numbers that raise."""
    unreadable(row_labels, error, "row_labels should be a list of labels, one per row")


def label_text(label, name):
    """A row label or a token as it is printed: its text, at most MAX_LABEL_CHARS characters (a table's rows are
    padded to the longest label), else one sentence naming ``name``; return the text."""
    try:
        text = str(label)
    except Exception:   # noqa: BLE001 (a label of the learner's whose __str__ raises anything)
        fail(f"{name} should be text, but got a {type_name(label)} whose text could not be read")
    return check_text(text, name, empty=True, max_chars=MAX_LABEL_CHARS)


def check_printed(numbers, what, advice):
    """Refuse, before a line is printed, a call that would print more than MAX_PRINTED numbers (a million: about
    8 MB of text) in all; ``advice`` says what to print instead."""
    if numbers > MAX_PRINTED:
        fail(f"{what} should print at most {MAX_PRINTED:,} numbers (this course's limit for text), but would print "
             f"{count(numbers)}: {advice}")


def format_matrix(x, row_labels=None, decimals=3):
    """A 1-D or 2-D array as aligned text, one labelled row per line: at least one number, at most MAX_ROWS
    rows and MAX_COLS columns (1,000 each), at most MAX_DECIMALS decimals (20). Finite numbers, or -inf (a
    masked score, written -inf); NaN and +inf are refused. A matrix holding a number of LARGEST_FIXED (1e9)
    or more is written in scientific notation (1.234e+12), all of it, so that its columns stay aligned."""
    shape = read_shape(x, "x")   # (a nested tensor: refused)
    if isinstance(shape, tuple):
        check_size(shape)                 # a tensor or an array: its size before it is converted
    x = to_numpy(x, "x")
    check_size(x.shape)
    if x.size == 0:
        fail(f"format_matrix should get at least one number, but got shape {x.shape}")
    x = np.atleast_2d(check_finite(x, "x", minus_inf=True))   # -inf: a masked score
    decimals = check_positive_int(decimals, "decimals", minimum=0)
    if decimals > MAX_DECIMALS:
        fail(f"decimals should be at most {MAX_DECIMALS}, but got {count(decimals)}")
    labels = check_row_labels(row_labels, len(x))
    width = max((len(str(l)) for l in labels), default=0)
    scientific = bool(np.abs(x[np.isfinite(x)]).max(initial=0) >= LARGEST_FIXED)
    lines = []
    for label, row in zip(labels, x):
        cells = " ".join(cell_text(v, decimals, scientific) for v in row)
        lines.append(f"  {str(label):<{width}} [{cells}]")
    return "\n".join(lines)


def cell_text(v, decimals, scientific=False):
    """One number of format_matrix, right-aligned: with ``decimals`` decimals, fixed point (-2.492) or, when
    ``scientific``, as -2.492e+12; -inf (a masked score) as it is."""
    width = decimals + (8 if scientific else 4)
    if not np.isfinite(v):
        return f"{v:>{width}}"
    return f"{v:{width}.{decimals}{'e' if scientific else 'f'}}"


def format_step(name, x, tokens=None):
    """One traced intermediate: its name, shape and note, then its numbers (per head if 3-D)."""
    if not isinstance(name, str):
        fail(f"name should be the step's name as text, such as 'L0.q', but got {shown(name)}")
    if not isinstance(x, torch.Tensor) or check_tensor(x, "x", float8=True).dim() not in (1, 2, 3):
        fail(f"x should be a traced tensor of 1 to 3 axes, but got "
             + (f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__))
    if x.dim() == 3:
        check_size(x.shape[1:])
        if x.shape[0] > MAX_ROWS:
            fail(f"x should have at most {MAX_ROWS:,} heads to print, but has {count(x.shape[0])}")
    check_printed(x.numel(), f"format_step of shape {tuple(x.shape)}", "print a slice such as x[:2]")
    short = name.split(".")[-1]
    shape = " × ".join(str(s) for s in tuple(x.shape))
    head = f"{name}  [{shape}]  {SHAPE_NOTES.get(short, '')}"
    if x.dim() == 3:
        blocks = [f" head {i}:\n{format_matrix(x[i], tokens)}" for i in range(x.shape[0])]
        return head + "\n" + "\n".join(blocks)
    return head + "\n" + format_matrix(x, tokens)


def print_trace(trace, tokens=None, names=None):
    """Print the chosen steps of a trace (default: all) in the order given: each step at most once, at most
    MAX_PRINTED numbers (a million) in all. Every step is checked and written before a line is printed."""
    if not isinstance(trace, dict) or not all(isinstance(key, str) for key in trace):
        fail(f"trace should be the dict model(ids, trace=True) returns, but got {type(trace).__name__}")
    if names is not None and (isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple))):
        fail(f"names should be a list of steps such as ['L0.q'], but got {shown(names)}")
    chosen = list(names or trace)
    if len(chosen) > len(trace):
        fail(f"names should name each of this trace's {len(trace)} steps at most once, but got "
             f"{count(len(chosen))} names")
    for name in chosen:
        if not isinstance(name, str) or name not in trace:
            fail(f"names should be steps of this trace (expected one of: {', '.join(list(trace)[:8])}, ...), "
                 f"but got {shown(name)}")
    if len(set(chosen)) < len(chosen):
        twice = next(name for i, name in enumerate(chosen) if name in chosen[:i])
        fail(f"names should name each step at most once, but {shown(twice)} is named {chosen.count(twice)} times")
    check_printed(sum(check_tensor(trace[name], name, float8=True).numel() for name in chosen
                      if isinstance(trace[name], torch.Tensor)),
                  f"print_trace of {len(chosen)} steps", "choose fewer steps with names=[...]")
    for text in [format_step(name, trace[name], tokens) for name in chosen]:   # all written first: none half-printed
        print(text)
        print()


def rounding(x):
    """The relative rounding of ``x``'s float type (its machine epsilon: bfloat16 0.0078, float16 0.00098,
    float32 1.2e-7), or 0.0 when ``x`` is no float array or tensor (a list: read as float64)."""
    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, torch.dtype):
        return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        return float(np.finfo(dtype).eps)
    return 0.0


def check_probabilities(p, name="probs", advice="are these logits? softmax them first", eps=0.0):
    """``p`` (a float NumPy array, (V,)) a distribution: finite, none negative, summing to 1 within
    SUM_TOLERANCE (or ``eps``, the rounding of the type it came in, if larger). Else one sentence ending
    in ``advice`` (what to do instead)."""
    finite = np.isfinite(p).all()
    total = float(p.sum()) if finite else float("nan")
    if not finite or (p < 0).any() or abs(total - 1) > max(SUM_TOLERANCE, eps):
        fail(f"{name} should be probabilities (none negative, summing to 1), but they "
             + ("hold NaN or infinity" if not finite else
                f"hold {int((p < 0).sum())} negative numbers" if (p < 0).any() else f"sum to {total:.4g}")
             + f": {advice}")


def check_softmax_of(logits, p, vocab, eps_probs=0.0, eps_logits=0.0):
    """``logits`` (float NumPy, (V,), no NaN; -inf allowed) the logits ``p`` is the softmax of, to rounding:
    SUM_TOLERANCE or ``eps_probs`` (the probs' type), plus what rounding the logits to their type
    (``eps_logits``) moves a softmax by. Else one sentence naming the token where they differ most."""
    top = logits.max()
    with np.errstate(over="ignore"):   # -1e308 - 1e308 is -inf, and its exp 0, as it should be
        soft = np.exp(logits - top) if np.isfinite(top) else np.full(len(logits), np.nan)
    soft = soft / soft.sum()
    gap = np.abs(soft - p)
    gap[np.isnan(gap)] = np.inf
    allowed = max(SUM_TOLERANCE, eps_probs) + 2 * eps_logits * float(np.abs(logits[np.isfinite(logits)]).max(initial=0))
    worst = int(np.argmax(gap))
    if gap[worst] > allowed:
        fail(f"logits should be the logits whose softmax is probs, but softmax(logits) "
             + (f"gives {soft[worst]:.3f} to {shown(vocab[worst])} where probs has {p[worst]:.3f}" if np.isfinite(top)
                else "is not defined (" + ("+inf" if top > 0 else "every logit -inf") + ")")
             + ": pass the logits of the same model, prompt and position as the probs")


def top_tokens(probs, vocab, k=5, logits=None):
    """The k most probable tokens as rows (rank, token, logit or None, probability).

    probs: probabilities, (V,), none negative, summing to 1 (within 1e-3): logits are refused
    (softmax them first, or pass them as ``logits``). k: 1 .. V. logits: (V,), those whose softmax is
    ``probs`` (to rounding), or None."""
    if isinstance(vocab, (str, bytes)) or not isinstance(vocab, (list, tuple)):
        fail(f"vocab should be the list of the vocabulary's tokens, but got {shown(vocab)}")
    vocab = items_of(vocab)   # (read by the built-ins: a subclass's __len__ may lie or raise)
    k = check_positive_int(k, "k")
    shape = read_shape(probs, "probs")   # (a nested tensor: refused)
    if shape is not None and tuple(shape) != (len(vocab),):
        fail(f"expected probabilities of shape ({len(vocab)},), but got {tuple(shape)}")
    p = to_numpy(probs, "probs")
    if p.ndim != 1 or len(p) != len(vocab):
        fail(f"expected probabilities of shape ({len(vocab)},), but got {tuple(p.shape)}")
    check_probabilities(p, "probs", "are these logits? softmax them first, or pass them as logits=",
                        rounding(probs))
    if k > len(vocab):
        fail(f"k should be at most the vocabulary's {len(vocab):,} tokens, but got {count(k)}")
    logits_given = logits
    if logits is not None:
        shape = read_shape(logits, "logits")
        if shape is not None and tuple(shape) != (len(vocab),):
            fail(f"expected logits of shape ({len(vocab)},), but got {tuple(shape)}")
        logits = to_numpy(logits, "logits")
        if logits.shape != (len(vocab),) or np.isnan(logits).any():
            fail(f"expected logits of shape ({len(vocab)},) without NaN, but got shape {logits.shape}"
                 + (" with NaN" if logits.shape == (len(vocab),) else ""))
        check_softmax_of(logits, p, vocab, rounding(probs), rounding(logits_given))
    order = np.argsort(-p, kind="stable")[:k].tolist()   # ties keep the vocabulary's order
    return [(rank + 1, vocab[i], None if logits is None else float(logits[i]), float(p[i]))
            for rank, i in enumerate(order)]


def print_top(probs, vocab, k=5, logits=None):
    """Print the top-k table: rank, token, logit, probability (probs: probabilities, see ``top_tokens``): at most
    MAX_ROWS rows (1,000), each token's text at most MAX_LABEL_CHARS characters (100)."""
    if check_positive_int(k, "k") > MAX_ROWS:
        fail(f"k should be at most {MAX_ROWS:,} rows to print (this course's limit for a table as text), "
             f"but got {count(k)}")
    rows = top_tokens(probs, vocab, k, logits)      # every argument checked before a line is printed
    texts = [label_text(token, "each token printed") for _, token, _, _ in rows]
    print(f"{'rank':>4}  {'token':<8}{'logit':>8}{'prob':>8}")
    for (rank, _, logit, prob), token in zip(rows, texts):
        logit_text = "" if logit is None else f"{logit:8.2f}"
        print(f"{rank:>4}  {token:<8}{logit_text:>8}{prob:8.3f}")
