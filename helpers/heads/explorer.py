"""Chapter 05 explorer: pick a model (cat or induction, or a Transformer of your own with its
tokenizer and prompts), a layer, a head and a prompt; the head's attention heatmap is redrawn
in place.

* ``compute.head_view`` is the compute (one head on one prompt; each prompt's attention is
  computed once for every layer and head and kept by the explorer, until the model's weights change,
  up to ``compute.MAX_CACHE_BYTES`` (256 MB) in all, the oldest dropped first).
* ``head_figure`` draws one view; ``FastHeatmap`` redraws it fast (blitting, with the axes of
  each prompt's tokens kept as a bitmap); ``explorer()`` wires the controls to it with
  ``helpers.explorer.show``.
"""
import numpy as np

from ..explorer import Blitter, new_figure, show, start_at, weights_version
from ..errors import check_number, check_positive_int, check_switch, count, fail, to_numpy, whole
from ..errors import shown as shown_value
from ..model import check_finite_weights
from .compute import MODELS, PROMPTS, YOURS, check_weights, head_view, model_and_tokenizer, prompt_tokens
from ..states import on_the_cpu


SIZE, DPI = (7.4, 6.4), 100    # 740 x 640 px: tick labels and cell values readable at 100 %


def _cell_text_class():
    """matplotlib's Text, remembering its layout for each string it has shown (made once)."""
    global CellText
    from matplotlib.text import Text

    class CellText(Text):
        """A cell's number: a Text that keeps its layout (the offsets and sizes of its line, which
        depend only on the string, the font, the alignment and the renderer) for each string it
        showed. A heatmap's numbers take a few hundred values (0.00 to 1.00), so after the first
        moves a redraw skips the layout, about half the cost of drawing a number; the pixels are
        the same, as the layout is."""

        def _get_layout(self, renderer):
            key = (self.get_text(), id(renderer), self.get_figure(root=True).dpi)
            memo = self.__dict__.setdefault("_layouts", {})
            if key not in memo:
                memo[key] = super()._get_layout(renderer)
            return memo[key]

    return CellText


def CellText(*args, **kwargs):   # replaced by the class on first use (matplotlib imported late)
    return _cell_text_class()(*args, **kwargs)


def heatmap_figure(size=SIZE):
    """The explorer's empty figure (outside pyplot, so a widget callback leaves none behind)."""
    fig = new_figure(size, dpi=DPI)
    fig.subplots_adjust(left=0.13, right=0.93, bottom=0.16, top=0.92)
    return fig


def head_figure(view, fig=None):
    """Draw a ``head_view`` result as a heatmap on ``fig`` (a new one if None).

    The first call builds the axes and the image; later calls on the same figure only
    swap the image data, the tick labels and the title. Weights are printed in the cells on
    and below the diagonal (above it the mask leaves 0) for prompts of up to 12 tokens.
    """
    from ..plots import ATTENTION_CMAP, literal

    view = check_heads_view(view, fig)
    fig = heatmap_figure() if fig is None else fig
    w, tokens = view["weights"], view["tokens"]
    T = len(tokens)
    if not fig.axes:
        ax = fig.add_subplot()
        # "nearest" is what "auto" picks for an image this much enlarged, the same pixels
        # drawn in half the time (no check for down-sampling on every draw)
        image = ax.imshow(w, cmap=ATTENTION_CMAP, vmin=0, vmax=1, interpolation="nearest")
        ax.set_xlabel("key (attended to)", fontsize=11)
        ax.set_ylabel("query", fontsize=11)
        ax.spines[:].set_visible(False)
        ax.tick_params(length=0, labelsize=10)
        fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="attention weight")
    ax = fig.axes[0]
    image = ax.images[0]
    image.set_data(w)
    image.set_extent((-0.5, T - 0.5, T - 0.5, -0.5))
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_ylim(T - 0.5, -0.5)
    labels = [literal(shown(token)) for token in tokens]
    size = 10 if T <= 24 else max(5, 10 * 24 // T)   # a long prompt (a character model's): smaller labels
    ax.set_xticks(range(T), labels, rotation=45 if T <= 24 else 90, ha="right" if T <= 24 else "center",
                  fontsize=size)
    ax.set_yticks(range(T), labels, fontsize=size)
    for text in list(ax.texts):
        text.remove()
    if T <= 12:
        for i, j in zip(*np.tril_indices(T)):    # the masked cells above the diagonal stay blank
            ax.add_artist(CellText(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=9,
                                   color="white" if w[i, j] > 0.6 else "black", transform=ax.transData, clip_on=False))
    ax.set_title(literal(view["title"]), fontsize=11)
    return fig


def check_heads_view(view, fig=None):
    """head_figure's arguments: ``view`` a head_view result, a dict of weights (T, T) (attention weights, finite,
    from 0 to 1), tokens (T labels) and title (a text or None); ``fig`` None or a figure head_figure drew on
    (empty, or holding its heatmap); else one sentence, before anything is drawn. Returns the view checked:
    a dict of weights (a NumPy array), tokens (a list of texts) and title (a text)."""
    from matplotlib.figure import Figure

    if not isinstance(view, dict) or not {"weights", "tokens", "title"} <= set(view):
        fail(f"view should be the dict head_view gives (weights, tokens and title), but got {shown_value(view)}")
    if fig is not None and not (isinstance(fig, Figure) and (not fig.axes or fig.axes[0].images)):
        fail(f"fig should be None or a figure head_figure drew on (empty, or holding its heatmap), "
             f"but got {shown_value(fig)}")
    (weights,), tokens, (title,) = check_maps([view["weights"]], view["tokens"], [view["title"]], 1, 1, False)
    check_weights(weights)
    return dict(weights=weights, tokens=[str(token) for token in tokens], title=title or "")


def shown(token):
    """A token as a tick label: a space, newline or tab (a character model's) as a visible sign."""
    return {" ": "␣", "\n": "↵", "\t": "⇥"}.get(token, token)


class FastHeatmap:
    """A heatmap that re-renders quickly (a ``Blitter``). The colour bar and the axes'
    background are drawn once; both axes (tick labels and axis labels) are a "seldom" layer,
    drawn again only when the tokens change, and kept as a bitmap for each list of tokens
    (the last ``KEEP``), so going back to a prompt costs no axis drawing; an update paints
    the new image, cell numbers and title over them.

    ``render(view)`` takes a ``head_view`` result and returns PNG bytes.
    """

    KEEP = 16   # axes bitmaps kept (740 x 640 RGBA, 1.9 MB each)

    def __init__(self, size=SIZE):
        self.fig = heatmap_figure(size)
        self.tokens, self.blitter, self.layers = None, None, {}

    def render(self, view):
        from ..plots import literal

        view = check_heads_view(view)              # (before anything is drawn)
        if view["tokens"] != self.tokens:          # new tick labels and cells
            tokens = tuple(view["tokens"])
            ax = head_figure(view, self.fig).axes[0]
            # The axes' box and the title's place come from the first full draw only: they
            # hold because every view is T x T (a square box) with no ticks on top. The axes
            # are painted under the image here (over it in a full draw): the same pixels,
            # since the ticks have no length and there is no grid.
            if self.blitter is None:
                self.blitter = Blitter(self.fig, seldom=[ax.xaxis, ax.yaxis])
            self.blitter.replace_moving([ax.images[0], *ax.texts, ax.title])   # new cell texts
            if tokens in self.layers:               # these tokens' axes, drawn before
                self.blitter.layer = self.layers.pop(tokens)
            else:
                self.blitter.refresh()              # the next png() draws them
            self.tokens = view["tokens"]
        ax = self.fig.axes[0]
        ax.images[0].set_data(view["weights"])
        for text, value in zip(ax.texts, view["weights"][np.tril_indices(len(view["tokens"]))]):
            text.set_text(f"{value:.2f}")
            text.set_color("white" if value > 0.6 else "black")
        ax.title.set_text(literal(view["title"]))
        picture = self.blitter.png()
        self.layers[tuple(self.tokens)] = self.blitter.layer   # the newest last
        while len(self.layers) > self.KEEP:
            self.layers.pop(next(iter(self.layers)))
        return picture


MAX_PROMPTS = 100   # the prompt menu's longest list


def check_prompts(net, tokenizer, prompts, name):
    """The prompt menu: a list or tuple of 1 to MAX_PROMPTS texts (a newline alone is one: what counts is
    that the tokenizer turns each into at least one token), else one sentence. The prompt shown first is
    read by the tokenizer here, before anything is built (``prompt_tokens``); another that does not fit
    the model says so when it is chosen."""
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
        fail(("a model of your own needs prompts, a non-empty list of texts" if name == YOURS else
              "prompts should be a non-empty list of texts") + f", but got {shown_value(prompts)}")
    if len(prompts) > MAX_PROMPTS:
        fail(f"prompts should be at most {MAX_PROMPTS} texts (a menu of them), but got {len(prompts):,}")
    prompt_tokens(net, tokenizer, prompts[0], name)


@on_the_cpu
def explorer(model="induction", layer=None, head=0, tokenizer=None, prompts=None):
    """Model, layer, head and prompt controls and one heatmap redrawn in place. Returns the Explorer.

    model: "induction" or "cat" (the model menu offers both), or any helpers.model.Transformer,
    then with its ``tokenizer`` (vocab, encode(text), decode(ids); or a World) and ``prompts``
    (a list of strings; the menu then offers only that model, as "your model"). layer: the layer
    shown first, None for the model's last (layer 1 of the course's two-layer models); head: 0 by
    default, which every model has."""
    import ipywidgets as widgets

    net, its_tokenizer, name = model_and_tokenizer(model, tokenizer)
    if name == YOURS:
        check_finite_weights(net)   # refused when made, as every view of it would be
    if name == YOURS or prompts is not None:
        check_prompts(net, its_tokenizer, prompts, name)
    if name == YOURS:
        choices = {YOURS: (model, tuple(prompts))}
    else:
        choices = {m: (m, tuple(prompts) if prompts and m == name else PROMPTS[m]) for m in MODELS}
    cfg = net.cfg
    controls = dict(
        model=widgets.Dropdown(options=list(choices), value=name, description="model"),
        prompt=widgets.Dropdown(options=choices[name][1], description="prompt", layout=widgets.Layout(width="420px")),
        layer=widgets.IntSlider(min=0, max=cfg.n_layers - 1, description="layer"),
        head=widgets.IntSlider(min=0, max=cfg.n_heads - 1, description="head"))
    layer = cfg.n_layers - 1 if layer is None else layer
    start_at(controls, layer=layer, head=head)   # out of range: refused, not clamped
    heatmap, attention = FastHeatmap(), {}   # attention: each (model's weights, prompt)'s, kept up to 256 MB

    def model_changed(change):
        new = model_and_tokenizer(choices[change["new"]][0], tokenizer)[0].cfg
        controls["prompt"].options = choices[change["new"]][1]    # first: the prompt must fit the model
        controls["layer"].max, controls["head"].max = new.n_layers - 1, new.n_heads - 1

    def render(model, prompt, layer, head):
        return heatmap.render(head_view(choices[model][0], layer, head, prompt, tokenizer, cache=attention))

    controls["model"].observe(model_changed, names="value")
    layout = widgets.HBox([widgets.VBox([controls["model"], controls["prompt"]]),
                           widgets.VBox([controls["layer"], controls["head"]])])
    return show(controls, render, layout, version=weights_version(net))


MAX_GRID, MAX_NUMBERED, MAX_INCHES = 16, 30, 40   # maps in one figure, tokens of a numbered map, figure side


def check_grid(grid, size, numbers):
    """maps_figure's layout: grid (rows, columns) of at most MAX_GRID maps, size (width, height) in
    inches up to MAX_INCHES, numbers a switch; returns (rows, columns, numbers)."""
    if not isinstance(grid, (tuple, list)) or len(grid) != 2:
        fail(f"grid should be (rows, columns), but got {shown_value(grid)}")
    rows, columns = (check_positive_int(n, "each side of the grid") for n in grid)
    if rows * columns > MAX_GRID:
        fail(f"grid should hold at most {MAX_GRID} maps, but got {rows} x {columns}")
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        fail(f"size should be (width, height) in inches, but got {shown_value(size)}")
    for side in size:
        check_number(side, "each side of the figure (inches)", 0, MAX_INCHES, low_open=True)
    return rows, columns, check_switch(numbers, "numbers")


def check_maps(maps, tokens, titles, rows, columns, numbers):
    """maps_figure's maps, tokens and titles: rows * columns maps (a list or tuple) of (T, T) numbers, as many
    titles (each None or a text), T token labels (a list, tuple or array of 1 to HEATMAP_MAX_TOKENS labels;
    at most MAX_NUMBERED with ``numbers``); else one sentence. The maps are read one by one, each refused
    as soon as its shape is wrong. Returns (maps as NumPy arrays, tokens as a list of texts, titles as a
    list)."""
    from ..plots import HEATMAP_MAX_TOKENS, check_label_list, check_labels, check_title

    if not isinstance(maps, (list, tuple)):
        fail(f"maps should be a list of (T, T) attention maps, one per cell of the grid, but got {shown_value(maps)}")
    titles = check_label_list(titles, "titles", "map", kind="titles")
    if len(maps) != rows * columns or len(titles) != len(maps):
        fail(f"expected {rows * columns} maps and as many titles for a {rows} x {columns} grid, "
             f"but got {len(maps)} maps and {len(titles)} titles")
    titles = [check_title(name, "each title") for name in titles]
    what = "row and column of each map"
    tokens = check_label_list(tokens, "tokens", what)   # (a text, its letters: refused here)
    T = len(tokens)
    if numbers and T > MAX_NUMBERED:
        fail(f"numbers=True prints a weight in each cell, so the maps should have at most {MAX_NUMBERED} tokens, "
             f"but they have {T}: give numbers=False")
    if not 0 < T <= HEATMAP_MAX_TOKENS:
        fail(f"tokens should hold 1 to {HEATMAP_MAX_TOKENS} labels (a map shows each one), but got {count(T)}")
    arrays = []
    for i, m in enumerate(maps):
        arrays.append(to_numpy(m, "each map"))
        if arrays[-1].shape != (T, T):
            fail(f"each map should be ({T}, {T}), a weight for each pair of the {T} tokens, but map {i} has shape "
                 f"{arrays[-1].shape}")
    return arrays, check_labels(tokens, "each token label"), titles   # as texts: draw_maps measures them


def check_first_copy(first_copy, T):
    """None, or the rows of a repeated sequence's first copy after the first row: a whole number from 1 to
    T - 2, so the line under them has rows of the map on both sides; return it."""
    if first_copy is None:
        return None
    expected = (f"None or a whole number from 1 to {T - 2} (the rows of the first copy, after the first row; "
                "the line under them needs rows of the map on both sides)" if T > 2 else
                f"None for maps of {T} tokens (a line under the first copy needs rows on both sides)")
    rows = whole(first_copy, "first_copy", expected)
    if not 1 <= rows <= T - 2:
        fail(f"first_copy should be {expected}, but got {shown_value(first_copy)}")
    return rows


def maps_figure(maps, tokens, titles, grid=(1, 2), size=(13, 6.6), numbers=False, first_copy=None, title=None):
    """Several attention maps side by side, sharing one colour bar (a pyplot figure; returns it).

    maps: rows * columns (T, T) weights (queries down, keys across; a list); tokens: the T labels; titles:
    one per map; grid: (rows, columns). numbers: print each weight in its cell on and below the diagonal
    (above it the mask leaves 0, and those cells stay blank, as in the explorer). first_copy: draw a
    line under that many rows after the first (the end of a repeated sequence's first copy; 1 to T - 2).
    Everything is checked before the figure is made; a refusal while drawing closes it.
    """
    import matplotlib.pyplot as plt

    from ..plots import check_title, literal

    rows, columns, numbers = check_grid(grid, size, numbers)
    title = check_title(title)
    maps, tokens, titles = check_maps(maps, tokens, titles, rows, columns, numbers)
    first_copy = check_first_copy(first_copy, len(tokens))
    fig, axes = plt.subplots(rows, columns, figsize=size, squeeze=False)
    try:
        draw_maps(fig, axes, maps, tokens, titles, numbers, first_copy)
    except BaseException:   # a map attention_heatmap refuses (NaN, a negative weight): no figure left open
        plt.close(fig)
        raise
    if title:
        fig.suptitle(literal(title))
    return fig


def draw_maps(fig, axes, maps, tokens, titles, numbers, first_copy):
    """maps_figure's drawing on checked arguments: each map on its axes (``attention_heatmap``), the
    numbers, the first copy's line, one colour bar."""
    from ..plots import ACCENT, attention_heatmap

    longest = max(len(str(token)) for token in tokens)     # room for the query labels of the next map
    fig.subplots_adjust(wspace=0.3 + 0.025 * max(0, longest - 6), hspace=0.4)   # (the picture is cropped)
    for ax, w, name in zip(axes.flat, maps, titles):
        attention_heatmap(w, tokens, ax=ax, title=name, annotate=False)
        ax.tick_params(labelsize=10)
        if numbers:
            for i, j in zip(*np.tril_indices(len(tokens))):
                ax.add_artist(CellText(j, i, f"{w[i, j]:.2f}", ha="center", va="center", fontsize=9,
                                       color="white" if w[i, j] > 0.6 else "black", transform=ax.transData,
                                       in_layout=False))
        if first_copy is not None:
            ax.axhline(first_copy + 0.5, color=ACCENT, lw=1.5, label="below the line: the second copy")
            ax.legend(loc="upper right", fontsize=10)
    fig.colorbar(axes.flat[0].images[0], ax=axes.ravel().tolist(), fraction=0.03 if axes.shape[0] > 1 else 0.02,
                 pad=0.02, label="attention weight")
