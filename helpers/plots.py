"""The course's figures, one look: attention heatmaps, probability bars, the shape flow.

Each function draws on ``ax`` when given one (so a widget can redraw in place)
and returns the Axes. Inputs may be NumPy arrays or torch tensors.
"""
import matplotlib.pyplot as plt
import numpy as np

from .errors import as_array, check_positive_int, fail

ATTENTION_CMAP = "Blues"
ACCENT = "#d1495b"
BASE = "#30638e"
STYLE = {"figure.dpi": 100, "axes.spines.top": False, "axes.spines.right": False,
         "axes.titlesize": 11, "axes.labelsize": 10, "font.size": 9}


def use_style():
    """Apply the course's matplotlib style (called by the setup cell of each notebook)."""
    plt.rcParams.update(STYLE)


def attention_heatmap(weights, tokens, ax=None, title=None, keys=None, annotate=True, fontsize=7):
    """Heatmap of a (T_q, T_k) attention matrix, queries down, keys across, weights printed.

    tokens: query labels (T_q); keys: key labels (default: tokens); fontsize: of the printed weights.
    """
    w = as_array(weights, "weights", 2)
    keys = tokens if keys is None else keys
    if w.shape != (len(tokens), len(keys)):
        fail(f"weights have shape {w.shape} but there are {len(tokens)} query and {len(keys)} key labels")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.6 * len(keys) + 1.6, 0.5 * len(tokens) + 1.0))
    ax.imshow(w, cmap=ATTENTION_CMAP, vmin=0, vmax=1)
    ax.set_xticks(range(len(keys)), keys, rotation=45, ha="right")
    ax.set_yticks(range(len(tokens)), tokens)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    ax.spines[:].set_visible(False)
    if annotate and w.size <= 400:
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=fontsize,
                    color="white" if value > 0.6 else "black")
    if title:
        ax.set_title(title)
    return ax


def prob_bars(probs, vocab, ax=None, top=None, title=None, highlight=()):
    """Bar chart of a next-token distribution (V,), optionally only the ``top`` most probable."""
    p = as_array(probs, "probs", 1)
    if len(vocab) != len(p):
        fail(f"probs has {len(p)} entries but the vocabulary has {len(vocab)} words")
    if top is not None:
        top = check_positive_int(top, "top")
    order = np.argsort(-p, kind="stable")[:top] if top else np.arange(len(p))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 0.4 * len(order) + 1.0), 2.6))
    colors = [ACCENT if vocab[i] in highlight else BASE for i in order]
    bars = ax.bar(range(len(order)), p[order], color=colors)
    ax.set_xticks(range(len(order)), [vocab[i] for i in order], rotation=45, ha="right")
    ax.set_ylim(0, 1.08)
    ax.set_ylabel("probability")
    for bar, value in zip(bars, p[order]):
        if value >= 0.01:
            ax.text(bar.get_x() + bar.get_width() / 2, value + 0.02, f"{value:.2f}",
                    ha="center", fontsize=7)
    if title:
        ax.set_title(title)
    return ax


def shape_flow(trace, ax=None, layer=0):
    """The forward pass as a column of boxes, one per traced step, each with its shape.

    trace: the dict returned by ``model(ids, trace=True)``. Shows h0, one layer's
    steps (``layer``), and the read-out.
    """
    names = [n for n in trace if "." not in n or n.startswith(f"L{layer}.")]
    if ax is None:
        _, ax = plt.subplots(figsize=(4.2, 0.42 * len(names) + 0.6))
    for row, name in enumerate(names):
        shape = " × ".join(str(s) for s in tuple(trace[name].shape))
        y = len(names) - row
        wide = trace[name].shape[-1] != trace["h0"].shape[-1] or trace[name].dim() == 3
        ax.add_patch(plt.Rectangle((0.05, y - 0.33), 0.9, 0.66, color=ACCENT if wide else BASE, alpha=0.15))
        ax.text(0.08, y, name.split(".")[-1], va="center", fontsize=9, family="monospace")
        ax.text(0.92, y, shape, va="center", ha="right", fontsize=9, family="monospace")
        if row:
            ax.annotate("", (0.5, y + 0.34), (0.5, y + 0.66), arrowprops=dict(arrowstyle="->", lw=0.8))
    ax.set_xlim(0, 1)
    ax.set_ylim(0.4, len(names) + 0.6)
    ax.axis("off")
    ax.set_title(f"one forward pass (layer {layer} shown; others repeat it)")
    return ax
