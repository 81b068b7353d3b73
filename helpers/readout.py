"""Reading a forward pass as text: each traced step with its shape, and top-k tables."""
import numpy as np
import torch

from .errors import check_positive_int, fail, to_numpy

SHAPE_NOTES = {
    "h0": "embedding + position", "ln1": "LayerNorm, row by row", "q": "queries, all heads",
    "k": "keys, all heads", "v": "values, all heads", "scores": "QKᵀ/√d_k, masked, per head",
    "weights": "softmax of the scores, per head", "head_out": "weights · V, per head",
    "concat": "heads side by side", "attn": "concat · W_O + b_O", "h_mid": "residual + attn",
    "ln2": "LayerNorm, row by row", "pre": "ln2 · W_1 + b_1", "act": "GELU(pre)",
    "mlp": "act · W_2 + b_2", "h": "h_mid + mlp", "final_ln": "final LayerNorm",
    "logits": "final_ln · Eᵀ", "probs": "softmax of the logits",
}


def format_matrix(x, row_labels=None, decimals=3):
    """A 1-D or 2-D array as aligned text, one labelled row per line."""
    x = np.atleast_2d(to_numpy(x, "x"))
    if x.ndim != 2:
        fail(f"format_matrix prints a 1-D or 2-D array, but got shape {x.shape}")
    decimals = check_positive_int(decimals, "decimals", minimum=0)
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
    short = name.split(".")[-1]
    shape = " × ".join(str(s) for s in tuple(x.shape))
    head = f"{name}  [{shape}]  {SHAPE_NOTES.get(short, '')}"
    if x.dim() == 3:
        blocks = [f" head {i}:\n{format_matrix(x[i], tokens)}" for i in range(x.shape[0])]
        return head + "\n" + "\n".join(blocks)
    return head + "\n" + format_matrix(x, tokens)


def print_trace(trace, tokens=None, names=None):
    """Print the chosen steps of a trace (default: all) in forward-pass order."""
    for name in names or list(trace):
        if name not in trace:
            fail(f"'{name}' is not a step of this trace; expected one of: {', '.join(trace)}")
        print(format_step(name, trace[name], tokens))
        print()


def top_tokens(probs, vocab, k=5, logits=None):
    """The k most probable tokens as rows (rank, token, logit or None, probability)."""
    k = check_positive_int(k, "k")
    p = torch.as_tensor(to_numpy(probs, "probs"))
    if p.dim() != 1 or len(p) != len(vocab):
        fail(f"expected probabilities of shape ({len(vocab)},), but got {tuple(p.shape)}")
    order = torch.argsort(p, descending=True, stable=True)[:k].tolist()
    return [(rank + 1, vocab[i], None if logits is None else float(logits[i]), float(p[i]))
            for rank, i in enumerate(order)]


def print_top(probs, vocab, k=5, logits=None):
    """Print the top-k table: rank, token, logit, probability."""
    print(f"{'rank':>4}  {'token':<8}{'logit':>8}{'prob':>8}")
    for rank, token, logit, prob in top_tokens(probs, vocab, k, logits):
        logit_text = "" if logit is None else f"{logit:8.2f}"
        print(f"{rank:>4}  {token:<8}{logit_text:>8}{prob:8.3f}")
