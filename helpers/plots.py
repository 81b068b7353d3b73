"""The course's figures, one look: attention heatmaps, probability bars, the shape flow.

Each function draws on ``ax`` when given one (so a widget can redraw in place)
and returns the Axes. Inputs may be NumPy arrays or torch tensors.
"""
import matplotlib.pyplot as plt
import numpy as np

from .errors import as_array, check_index, check_number, check_positive_int, check_switch, check_text, count, fail, \
    length, shape_of, shown, type_name, unreadable
from .readout import SUM_TOLERANCE, check_probabilities, label_text, rounding

ATTENTION_CMAP = "Blues"
ACCENT = "#d1495b"
LOG_FLOOR = 1e-8   # the bottom of a logarithmic probability axis
BASE = "#30638e"
STYLE = {"figure.dpi": 100, "axes.spines.top": False, "axes.spines.right": False,
         "axes.titlesize": 11, "axes.labelsize": 10, "font.size": 9}


def use_style():
    """Apply the course's matplotlib style (called by the setup cell of each notebook)."""
    plt.rcParams.update(STYLE)


MAX_TITLE_CHARS = 300   # a title of a few lines; matplotlib lays out every character of a longer one
MAX_LABELS = 1_000_000  # the most labels a list may hold (counted before listing: range(10**9) would take GBs)
MAX_FONTSIZE = 100      # points: a number printed in a heatmap's cell (the course: 7)


def check_title(title, name="title"):
    """None (no title) or a text matplotlib can draw, of at most MAX_TITLE_CHARS characters; return it."""
    return None if title is None else check_text(title, name, empty=True, max_chars=MAX_TITLE_CHARS)


def check_labels(labels, name):
    """Each of ``labels`` (shown as str) a text matplotlib can draw, read as readout.format_matrix reads its row
    labels (``label_text``: at most readout.MAX_LABEL_CHARS characters; a __str__ that raises: one sentence);
    return the texts."""
    return [label_text(label, name) for label in labels]


def literal(text):
    """``text`` (shown as str) as matplotlib should be given it to draw it as typed: each "$" escaped, so that a
    token such as "$$" or "$x$" is not read as math (matplotlib draws an escaped "\\$" as "$")."""
    return str(text).replace("$", r"\$")


def check_ax(ax, optional=True):
    """A flat (2-D) matplotlib Axes to draw on, such as plt.subplots() gives, or None (a new figure) when
    ``optional``; return it. A 3-D, polar or map Axes (another projection) is refused: the course's figures
    put their bars, cells and labels at (x, y)."""
    from matplotlib.axes import Axes

    if not (ax is None and optional or isinstance(ax, Axes) and ax.name == "rectilinear"):
        got = f"a {ax.name} Axes ({type(ax).__name__})" if isinstance(ax, Axes) else shown(ax)
        fail(f"ax should be {'None or ' if optional else ''}a matplotlib Axes (a 2-D one, such as plt.subplots()[1]), "
             f"but got {got}")
    return ax


def check_label_list(labels, name, what, kind="labels"):
    """``labels`` as a list: a list, tuple or array of labels (``what``: what each one labels; ``kind``:
    what the entries are), not one text (its letters) or None; else one sentence."""
    from collections.abc import Sequence
    from itertools import islice

    should = f"{name} should be a list of {kind}, one per {what}"
    if isinstance(labels, (str, bytes)) or not (isinstance(labels, Sequence) or
                                                 isinstance(labels, np.ndarray) and labels.ndim >= 1):
        fail(f"{should}, but got {shown(labels)}")
    try:   # counted before listed: len of a range is free, its list is not
        size = length(labels)
    except Exception as error:   # noqa: BLE001 (a learner's __len__ may raise anything)
        unreadable(labels, error, should)
    if size > MAX_LABELS:
        fail(f"{name} should hold at most {MAX_LABELS:,} {kind} (this course's limit), one per {what}, "
             f"but holds {count(size)}")
    try:
        listed = list(islice(labels, size + 1))   # a __len__ that says less than __iter__ gives: no more read
    except Exception as error:   # noqa: BLE001 (a learner's __iter__ may raise anything)
        unreadable(labels, error, should)
    if len(listed) != size:
        fail(f"{should}, but got a {type_name(labels)} whose length ({count(size)}) is not the number of {kind} "
             f"it lists")
    return listed


HEATMAP_MAX_TOKENS = 256   # a label per row and column is unreadable, and the figure huge, beyond this


def attention_heatmap(weights, tokens, ax=None, title=None, keys=None, annotate=True, fontsize=7):
    """Heatmap of a (T_q, T_k) attention matrix, queries down, keys across, weights printed.

    weights: a softmax's output, each row from 0 to 1 and summing to 1 (``check_weight_rows``; a key the mask
    hides gets 0); scores are refused. tokens: query labels (T_q); keys: key labels (default: tokens);
    fontsize: of the printed weights.
    """
    w, tokens, keys = check_attention(weights, tokens, keys)
    ax, annotate = check_ax(ax), check_switch(annotate, "annotate")
    fontsize = check_number(fontsize, "fontsize", low=0, low_open=True, high=MAX_FONTSIZE)
    ax = heatmap_grid(w, tokens, keys, ax, check_title(title))
    if annotate and w.size <= 400:
        for (i, j), value in np.ndenumerate(w):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=fontsize,
                    color="white" if value > 0.6 else "black")
    return ax


def attention_off_heatmap(tokens, ax=None, title=None):
    """The grid of ``attention_heatmap`` for (T,) ``tokens`` (queries down, keys across) with no weights in it,
    for a model run with attention off: no query reads any key, and a note in the middle says so."""
    tokens = check_tokens(tokens)
    ax = check_ax(ax)
    ax = heatmap_grid(np.zeros((len(tokens), len(tokens))), tokens, tokens, ax, check_title(title))
    ax.text(0.5, 0.5, "attention off:\nno token reads\nanother", transform=ax.transAxes, ha="center",
            va="center", fontsize=9, color="#555555",
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="#aaaaaa"))
    return ax


def check_attention(weights, tokens, keys=None):
    """What ``attention_heatmap`` draws, checked before anything is drawn: weights (T_q, T_k) as a NumPy array
    (a softmax's output, ``check_weight_rows``), tokens (T_q) and keys (T_k, default: tokens) as lists.
    Returns (w, tokens, keys); else one sentence."""
    w = as_array(weights, "weights", 2)
    tokens = check_label_list(tokens, "tokens", "query (row of weights)")
    keys = tokens if keys is None else check_label_list(keys, "keys", "key (column of weights)")
    check_grid(w.shape, tokens, keys)
    if not (np.isfinite(w) & (w >= 0)).all():
        bad = w[~(np.isfinite(w) & (w >= 0))]
        fail(f"attention weights should be finite numbers >= 0 (a softmax's output), but {count(bad.size)} of "
             f"them are not, such as {bad[0]}")
    check_weight_rows(w, rounding(weights))
    return w, tokens, keys


def check_tokens(tokens):
    """The (T,) query and key labels of ``attention_off_heatmap``'s (T, T) grid as a list; else one sentence."""
    tokens = check_label_list(tokens, "tokens", "query (row of the grid)")
    check_grid((len(tokens), len(tokens)), tokens, tokens)
    return tokens


def check_grid(shape, tokens, keys):
    """A heatmap's (T_q, T_k) grid of ``shape`` has a label per row (``tokens``) and column (``keys``), at least
    one of each and at most HEATMAP_MAX_TOKENS, each label a short text; else one sentence."""
    if shape != (len(tokens), len(keys)):
        fail(f"weights should have one row per query label and one column per key label, but have shape {shape} "
             f"for {len(tokens)} query and {len(keys)} key labels")
    if min(shape) == 0:   # no row or no column: an empty map, whose axes matplotlib cannot set
        fail(f"weights should hold at least one query and one key, but have shape {shape}")
    if max(shape) > HEATMAP_MAX_TOKENS:
        fail(f"an attention heatmap shows at most {HEATMAP_MAX_TOKENS} queries and keys, each labelled (slice the "
             f"weights, such as weights[:64, :64]), but got {shape[0]:,} x {shape[1]:,}")
    check_labels(tokens, "each token label")
    check_labels(keys, "each key label")


def heatmap_grid(w, tokens, keys, ax, title):
    """Draw the checked (T_q, T_k) grid ``w`` with its labels and ``title`` on ``ax`` (None: a new figure,
    about 0.6 inch a key and 0.5 a query, at most 16 inches a side); return the Axes."""
    if ax is None:
        _, ax = plt.subplots(figsize=(min(0.6 * len(keys) + 1.6, 16), min(0.5 * len(tokens) + 1.0, 16)))
    ax.imshow(w, cmap=ATTENTION_CMAP, vmin=0, vmax=1)
    ax.set_xticks(range(len(keys)), [literal(key) for key in keys], rotation=45, ha="right")
    ax.set_yticks(range(len(tokens)), [literal(token) for token in tokens])
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    ax.spines[:].set_visible(False)
    if title:
        ax.set_title(literal(title))
    return ax


def check_weight_rows(w, eps=0.0):
    """Refuse attention weights ``w`` (T_q, T_k), finite and >= 0, whose rows do not each sum to 1 within
    SUM_TOLERANCE (or ``eps``, the rounding of the type they came in, if larger), as a softmax makes them
    (a hidden key 0, the visible ones summing to 1): scores or an unnormalised row would be drawn as weights."""
    if w.size:
        gaps = np.abs(w.sum(axis=1) - 1)
        worst = int(np.argmax(gaps))
        if gaps[worst] > max(SUM_TOLERANCE, eps):
            fail(f"attention weights should have rows that each sum to 1 (a softmax's output, a hidden key 0), but "
                 f"row {worst} sums to {w[worst].sum():.4g}: for scores, take their softmax first")


def cell_numbers(ax, labels, colors, fontsize=7):
    """Print a label centred in each cell of an imshow grid on ``ax``: labels[i][j] at x = j,
    y = i ("" leaves a cell blank), in colors[i][j]. Returns the artist.

    One PathCollection instead of one ax.text per cell: each distinct label's outline is made
    once (TextPath, the font's own glyphs) and stamped at every cell that shows it, so a grid
    of a few hundred numbers draws in a few milliseconds instead of about a millisecond per
    number. The glyphs are filled outlines, without the pixel hinting of ax.text.
    """
    from matplotlib.collections import PathCollection
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath
    from matplotlib.transforms import Affine2D

    from matplotlib.colors import is_color_like

    ax = check_ax(ax, optional=False)
    fontsize = check_number(fontsize, "fontsize", low=0, low_open=True, high=MAX_FONTSIZE)
    labels = [check_labels(check_label_list(row, "each row of labels", "cell"), "each label")
              for row in check_label_list(labels, "labels", "row of the grid (labels[i][j] for cell (i, j))", "rows")]
    colors = [check_label_list(row, "each row of colors", "cell", "colours")
              for row in check_label_list(colors, "colors", "row of the grid (colors[i][j] for cell (i, j))", "rows")]
    unknown = next((color for row in colors for color in row if not is_color_like(color)), None)
    if unknown is not None:
        fail(f"each colour should be a colour matplotlib knows, such as 'black' or '#30638e', but got {shown(unknown)}")
    if len(colors) != len(labels) or any(len(c) != len(r) for c, r in zip(colors, labels)):
        fail(f"expected a colour for every label ({len(labels)} rows), but the colours have "
             f"{[len(c) for c in colors]} per row against {[len(r) for r in labels]}")
    prop, outlines = FontProperties(size=fontsize), {}
    paths, offsets, faces = [], [], []
    for i, row in enumerate(labels):
        for j, label in enumerate(row):
            if not label:
                continue
            if label not in outlines:            # in points, centred on its own ink
                path = TextPath((0, 0), literal(label), prop=prop)
                box = path.get_extents()
                outlines[label] = path.transformed(Affine2D().translate(-(box.x0 + box.x1) / 2,
                                                                        -(box.y0 + box.y1) / 2))
            paths.append(outlines[label])
            offsets.append((j, i))
            faces.append(colors[i][j])
    numbers = PathCollection(paths, offsets=offsets or None, offset_transform=ax.transData,
                             facecolors=faces, edgecolors="none", linewidths=0)
    numbers.set_transform(Affine2D().scale(1 / 72) + ax.get_figure(root=True).dpi_scale_trans)  # points -> pixels
    numbers.set_in_layout(False)
    ax.add_collection(numbers, autolim=False)
    return numbers


MAX_BARS = 300   # the most bars prob_bars draws, each labelled


def prob_bars(probs, vocab, ax=None, top=None, title=None, highlight=(), log=False):
    """Bar chart of a next-token distribution (V,), optionally only the ``top`` most probable.

    probs: probabilities, each from 0 to 1, summing to 1 (within 1e-3, as ``readout.top_tokens`` checks).

    log: a logarithmic probability axis, so runners-up a thousand times smaller stay visible
    (each bar then carries its value in scientific notation).
    """
    p, vocab, order, highlight = check_bars(probs, vocab, top, highlight)
    ax, log = check_ax(ax), check_switch(log, "log")
    title = check_title(title)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.0, 0.4 * len(order) + 1.0), 2.6))
    colors = [ACCENT if isinstance(vocab[i], str) and vocab[i] in highlight else BASE for i in order]
    bars = ax.bar(range(len(order)), p[order], color=colors)
    ax.set_xticks(range(len(order)), [literal(vocab[i]) for i in order], rotation=45, ha="right")
    if log:
        ax.set_yscale("log")
        ax.set_ylim(LOG_FLOOR, 30)
        ax.set_ylabel("probability (log scale)")
    else:
        ax.set_ylim(0, 1.08)
        ax.set_ylabel("probability")
    for bar, value in zip(bars, p[order]):
        x = bar.get_x() + bar.get_width() / 2
        if log:
            text = (f"{value:.2f}" if value >= 0.01 else f"{value:.0e}".replace("e-0", "e-")
                    if value >= LOG_FLOOR else f"<{LOG_FLOOR:.0e}".replace("e-0", "e-"))
            ax.text(x, max(value, LOG_FLOOR) * 1.4, text, ha="center", va="bottom", fontsize=6.5, rotation=90)
        elif value >= 0.01:
            ax.text(x, value + 0.02, f"{value:.2f}", ha="center", fontsize=7)
    if title:
        ax.set_title(literal(title))
    return ax


def check_bars(probs, vocab, top=None, highlight=()):
    """What ``prob_bars`` draws, checked before anything is drawn: probs (V,) a distribution as a NumPy array,
    vocab (V words) as a list, the order of the bars (the ``top`` most probable, or all V) and the words to
    highlight as a tuple. Returns (p, vocab, order, highlight); else one sentence."""
    p = as_array(probs, "probs", 1)
    vocab = check_label_list(vocab, "vocab", "word of the vocabulary")
    if len(vocab) != len(p):
        fail(f"probs should have one entry per word of the vocabulary, but has {count(len(p))} entries for "
             f"{count(len(vocab))} words")
    if not np.isfinite(p).all() or (p < 0).any() or (p > 1 + 1e-6).any():
        real = p[~np.isnan(p)]
        fail("probs should be probabilities, each from 0 to 1 (for logits take their softmax first), but got "
             + (f"numbers from {real.min():.3g} to {real.max():.3g}" if len(real) else "no number")
             + (f" and {int(np.isnan(p).sum())} NaN" if len(real) < len(p) else ""))
    check_probabilities(p, "probs", "take a softmax (the exponentials divided by their sum, not by their "
                        "largest), and renormalise what a filter keeps", rounding(probs))
    if isinstance(highlight, str):   # one word, not its letters
        highlight = (highlight,)
    if not isinstance(highlight, (list, tuple, set)):
        fail(f"highlight should be a list of the vocabulary's words, but got {type(highlight).__name__}")
    for word in highlight:   # a word is a string: an array entry would compare element by element
        if not isinstance(word, str):
            fail(f"highlight should be a list of the vocabulary's words (strings), but it holds {shown(word)}")
    words = {word for word in vocab if isinstance(word, str)}   # only a string can equal a string
    unknown = [word for word in highlight if word not in words]
    if unknown:
        fail("highlight should be a list of the vocabulary's words, but got words not in it: "
             + ", ".join(shown(word) for word in unknown[:5]))
    if top is not None:
        top = check_positive_int(top, "top")
        if top > len(p):
            fail(f"top should be at most the {count(len(p))} words of the vocabulary (one bar a word), "
                 f"but got {count(top)}")
    bars = len(p) if top is None else min(top, len(p))
    if bars > MAX_BARS:
        fail(f"a bar chart shows at most {MAX_BARS} bars (more are unreadable), but this one would have "
             f"{count(bars)}: pass top=20 (or any top <= {MAX_BARS}) to show the most probable")
    order = np.argsort(-p, kind="stable")[:top] if top else np.arange(len(p))
    check_labels([vocab[i] for i in order], "each word of the vocabulary shown")
    return p, vocab, order, tuple(highlight)


# Where each traced step sits in the shape-flow figure: (x centre, row), rows counted downward.
FLOW_LAYOUT = {
    "h0": (0.55, 0), "ln1": (0.55, 1), "q": (0.29, 2), "k": (0.55, 2), "v": (0.81, 2),
    "scores": (0.42, 3), "weights": (0.42, 4), "head_out": (0.55, 5), "concat": (0.55, 6),
    "attn": (0.55, 7), "h_mid": (0.55, 8), "ln2": (0.55, 9), "pre": (0.55, 10), "act": (0.55, 11),
    "mlp": (0.55, 12), "h": (0.55, 13), "final_ln": (0.55, 15), "logits": (0.55, 16), "probs": (0.55, 17),
}
# Arrows between steps (from, to); the two residual additions are drawn apart, as skips.
FLOW_EDGES = [("h0", "ln1"), ("ln1", "q"), ("ln1", "k"), ("ln1", "v"), ("q", "scores"), ("k", "scores"),
              ("scores", "weights"), ("weights", "head_out"), ("v", "head_out"), ("head_out", "concat"),
              ("concat", "attn"), ("attn", "h_mid"), ("h_mid", "ln2"), ("ln2", "pre"), ("pre", "act"),
              ("act", "mlp"), ("mlp", "h"), ("final_ln", "logits"), ("logits", "probs")]
FLOW_SKIPS = [("h0", "h_mid"), ("h_mid", "h")]
FLOW_WIDE = "#f4c7cc"    # another shape than T × d_model
FLOW_STREAM = "#cfdcea"  # the residual stream's shape T × d_model


def shape_flow(trace, ax=None, layer=0):
    """The forward pass as a graph of boxes, one per traced step, each with its shape.

    trace: the dict returned by ``model(ids, trace=True)``. Shows h0, one layer's steps
    (``layer``) and the read-out: q, k and v side by side (three projections of ln1), the
    residual additions h_mid = h0 + attn and h = h_mid + mlp as skip arrows on the left;
    blue boxes have the residual stream's shape T × d_model, red ones another shape.
    """
    if not isinstance(trace, dict):
        fail(f"shape_flow expected the dict model(ids, trace=True) returns, but got {type(trace).__name__} "
             f"{shown(trace)}")
    n_layers = next(i for i in range(len(trace) + 1) if f"L{i}.h" not in trace)
    layer = check_index(layer, f"layer (this trace has {n_layers} layers)", max(n_layers, 1))
    ax = check_ax(ax)
    names = {n.split(".")[-1]: n for n in trace if isinstance(n, str) and ("." not in n or n.startswith(f"L{layer}."))}
    missing = [n for n in FLOW_LAYOUT if n not in names]
    if missing:
        fail(f"shape_flow needs every step of a full trace, but this one lacks {', '.join(missing)}")
    shapes = {name: shape_of(value, f"the trace's {shown(name)}") for name, value in trace.items()}
    unshaped = next((name for name, shape in shapes.items() if shape is None), None)
    if unshaped is not None:   # checked before anything is drawn
        fail(f"each step of the trace should be a tensor or an array, but got {shown(trace[unshaped])} "
             f"for {shown(unshaped)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(5.6, 9.1))
    stream = shapes["h0"]
    half = {"q": 0.12, "k": 0.12, "v": 0.12, "scores": 0.18, "weights": 0.18}
    for short, (x, row) in FLOW_LAYOUT.items():
        shape = shapes[names[short]]
        w = half.get(short, 0.3)
        colour = FLOW_STREAM if shape == stream else FLOW_WIDE
        ax.add_patch(plt.Rectangle((x - w, -row - 0.32), 2 * w, 0.64, color=colour))
        label = {"h_mid": "h_mid = h0 + attn", "h": "h = h_mid + mlp"}.get(short, short)
        size = " × ".join(str(s) for s in shape)
        if w < 0.2:
            ax.text(x, -row, f"{label}  {size}", ha="center", va="center", fontsize=8, family="monospace")
        else:
            ax.text(x - w + 0.02, -row, label, va="center", fontsize=8.5, family="monospace")
            ax.text(x + w - 0.02, -row, size, va="center", ha="right", fontsize=8.5, family="monospace")
    # between the layer shown and final_ln: a box for the layers after it (row 14), if any
    later = list(range(layer + 1, n_layers))
    (xh, rh), (xf, rf) = FLOW_LAYOUT["h"], FLOW_LAYOUT["final_ln"]
    if later:
        shape = shapes[f"L{later[-1]}.h"]
        which = f"layer {later[0]}" if len(later) == 1 else f"layers {later[0]}–{later[-1]}"
        ax.add_patch(plt.Rectangle((xh - 0.3, -14 - 0.32), 0.6, 0.64, color=FLOW_STREAM, ls="--", fill=True))
        ax.text(xh - 0.28, -14, f"{which}: the same steps", va="center", fontsize=8.5, family="monospace")
        ax.text(xh + 0.28, -14, " × ".join(str(s) for s in shape), va="center", ha="right", fontsize=8.5,
                family="monospace")
        ax.annotate("", (xh, -14 + 0.33), (xh, -rh - 0.33), arrowprops=dict(arrowstyle="->", lw=0.8))
        ax.annotate("", (xf, -rf + 0.33), (xh, -14 - 0.33), arrowprops=dict(arrowstyle="->", lw=0.8))
    else:
        ax.annotate("", (xf, -rf + 0.33), (xh, -rh - 0.33), arrowprops=dict(arrowstyle="->", lw=0.8))
    for a, b in FLOW_EDGES:
        (xa, ra), (xb, rb) = FLOW_LAYOUT[a], FLOW_LAYOUT[b]
        ax.annotate("", (xb, -rb + 0.33), (xa, -ra - 0.33), arrowprops=dict(arrowstyle="->", lw=0.8))
    for a, b in FLOW_SKIPS:   # out of the lower half of a's left side, down, into the upper half of b
        (xa, ra), (xb, rb) = FLOW_LAYOUT[a], FLOW_LAYOUT[b]
        left, lane, out, into = xa - 0.3, 0.12, -ra - 0.14, -rb + 0.14   # two skips never meet
        ax.plot([left, lane, lane], [out, out, into], color=BASE, lw=1.4)
        ax.annotate("", (left, into), (lane, into), arrowprops=dict(arrowstyle="->", lw=1.4, color=BASE))
        ax.text(lane - 0.02, -(ra + rb) / 2, "residual skip", color=BASE, fontsize=8, rotation=90,
                ha="right", va="center")
    for row, text in ((4, "attention"), (10.8, "MLP")):
        ax.text(1.0, -row, text, rotation=90, fontsize=9, color="#555555", ha="center", va="center")
    ax.plot([0.97, 0.97], [-1.5, -7.4], color="#999999", lw=1)
    ax.plot([0.97, 0.97], [-8.6, -12.4], color="#999999", lw=1)
    ax.set_xlim(-0.02, 1.04)
    ax.set_ylim(-17.6, 0.6)
    ax.axis("off")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=FLOW_STREAM),
                       plt.Rectangle((0, 0), 1, 1, color=FLOW_WIDE)],
              labels=[f"{stream[0]} × {stream[1]}: the residual stream's shape (T × d_model)",
                      "another shape: per head, the MLP's hidden layer, the vocabulary"],
              loc="upper center", bbox_to_anchor=(0.5, 0.0), frameon=False, fontsize=8)
    ax.set_title(f"one forward pass (layer {layer} in full; later layers repeat its steps)")
    return ax
