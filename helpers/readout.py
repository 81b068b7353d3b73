"""Reading a forward pass as text: each traced step with its shape, and top-k tables."""
import numpy as np
import torch

from .errors import check_positive_int, count, fail, shown, to_numpy

MAX_ROWS = MAX_COLS = 1_000   # the largest matrix format_matrix writes out (a million numbers, ~8 MB of text)
MAX_DECIMALS = 20             # the most decimals a number is written with

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


def format_matrix(x, row_labels=None, decimals=3):
    """A 1-D or 2-D array as aligned text, one labelled row per line: at most MAX_ROWS rows and
    MAX_COLS columns (1,000 each), at most MAX_DECIMALS decimals (20)."""
    shape = getattr(x, "shape", None)
    if isinstance(shape, tuple) or isinstance(x, torch.Tensor):
        check_size(shape)                 # a tensor or an array: its size before it is converted
    x = np.atleast_2d(to_numpy(x, "x"))
    check_size(x.shape)
    decimals = check_positive_int(decimals, "decimals", minimum=0)
    if decimals > MAX_DECIMALS:
        fail(f"decimals should be at most {MAX_DECIMALS}, but got {count(decimals)}")
    if row_labels is not None and (isinstance(row_labels, (str, bytes)) or not hasattr(row_labels, "__len__")):
        fail(f"row_labels should be a list of labels, one per row, but got {shown(row_labels)}")
    labels = list(row_labels) if row_labels is not None else [""] * len(x)
    if len(labels) != len(x):
        fail(f"expected one label per row: {len(x)} rows, but {len(labels)} labels")
    width = max((len(str(l)) for l in labels), default=0)
    lines = []
    for label, row in zip(labels, x):
        cells = " ".join(f"{v:{decimals + 4}.{decimals}f}" if np.isfinite(v) else f"{v:>{decimals + 4}}" for v in row)
        lines.append(f"  {str(label):<{width}} [{cells}]")
    return "\n".join(lines)


def format_step(name, x, tokens=None):
    """One traced intermediate: its name, shape and note, then its numbers (per head if 3-D)."""
    if not isinstance(name, str):
        fail(f"name should be the step's name as text, such as 'L0.q', but got {shown(name)}")
    if not isinstance(x, torch.Tensor) or x.dim() not in (1, 2, 3):
        fail(f"x should be a traced tensor of 1 to 3 axes, but got "
             + (f"shape {tuple(x.shape)}" if isinstance(x, torch.Tensor) else type(x).__name__))
    if x.dim() == 3:
        check_size(x.shape[1:])
        if x.shape[0] > MAX_ROWS:
            fail(f"x should have at most {MAX_ROWS:,} heads to print, but has {count(x.shape[0])}")
    short = name.split(".")[-1]
    shape = " × ".join(str(s) for s in tuple(x.shape))
    head = f"{name}  [{shape}]  {SHAPE_NOTES.get(short, '')}"
    if x.dim() == 3:
        blocks = [f" head {i}:\n{format_matrix(x[i], tokens)}" for i in range(x.shape[0])]
        return head + "\n" + "\n".join(blocks)
    return head + "\n" + format_matrix(x, tokens)


def print_trace(trace, tokens=None, names=None):
    """Print the chosen steps of a trace (default: all) in forward-pass order."""
    if not isinstance(trace, dict) or not all(isinstance(key, str) for key in trace):
        fail(f"trace should be the dict model(ids, trace=True) returns, but got {type(trace).__name__}")
    if names is not None and (isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple))):
        fail(f"names should be a list of steps such as ['L0.q'], but got {shown(names)}")
    for name in names or list(trace):
        if not isinstance(name, str) or name not in trace:
            fail(f"names should be steps of this trace (expected one of: {', '.join(list(trace)[:8])}, ...), "
                 f"but got {shown(name)}")
    for name in names or list(trace):
        print(format_step(name, trace[name], tokens))
        print()


def top_tokens(probs, vocab, k=5, logits=None):
    """The k most probable tokens as rows (rank, token, logit or None, probability).

    probs: probabilities, (V,), none negative, summing to 1 (within 1e-3): logits are refused
    (softmax them first, or pass them as ``logits``). k: 1 .. V."""
    if isinstance(vocab, (str, bytes)) or not isinstance(vocab, (list, tuple)):
        fail(f"vocab should be the list of the vocabulary's tokens, but got {shown(vocab)}")
    k = check_positive_int(k, "k")
    if getattr(probs, "shape", None) is not None and tuple(probs.shape) != (len(vocab),):
        fail(f"expected probabilities of shape ({len(vocab)},), but got {tuple(probs.shape)}")
    p = torch.as_tensor(to_numpy(probs, "probs"))
    if p.dim() != 1 or len(p) != len(vocab):
        fail(f"expected probabilities of shape ({len(vocab)},), but got {tuple(p.shape)}")
    if not torch.isfinite(p).all() or (p < 0).any() or abs(float(p.sum()) - 1) > 1e-3:
        fail(f"probs should be probabilities (none negative, summing to 1), but they "
             + ("hold NaN or infinity" if not torch.isfinite(p).all() else
                f"hold {int((p < 0).sum())} negative numbers" if (p < 0).any() else f"sum to {float(p.sum()):.4g}")
             + ": are these logits? softmax them first, or pass them as logits=")
    if k > len(vocab):
        fail(f"k should be at most the vocabulary's {len(vocab):,} tokens, but got {count(k)}")
    if logits is not None:
        if getattr(logits, "shape", None) is not None and tuple(logits.shape) != (len(vocab),):
            fail(f"expected logits of shape ({len(vocab)},), but got {tuple(logits.shape)}")
        logits = to_numpy(logits, "logits")
        if logits.shape != (len(vocab),) or np.isnan(logits).any():
            fail(f"expected logits of shape ({len(vocab)},) without NaN, but got shape {logits.shape}"
                 + (" with NaN" if logits.shape == (len(vocab),) else ""))
    order = torch.argsort(p, descending=True, stable=True)[:k].tolist()
    return [(rank + 1, vocab[i], None if logits is None else float(logits[i]), float(p[i]))
            for rank, i in enumerate(order)]


def print_top(probs, vocab, k=5, logits=None):
    """Print the top-k table: rank, token, logit, probability (probs: probabilities, see ``top_tokens``)."""
    rows = top_tokens(probs, vocab, k, logits)      # every argument checked before a line is printed
    print(f"{'rank':>4}  {'token':<8}{'logit':>8}{'prob':>8}")
    for rank, token, logit, prob in rows:
        logit_text = "" if logit is None else f"{logit:8.2f}"
        print(f"{rank:>4}  {token:<8}{logit_text:>8}{prob:8.3f}")
