"""The tour's explorer: type a prompt, see the next-token distribution and one head's attention."""
import numpy as np

from .. import plots
from ..errors import check_index, check_switch, fail, shown, to_numpy
from ..explorer import Blitter, check_model_and_world, new_figure, show, start_at, weights_version
from ..model import check_finite_weights, weights_state
from . import compute


def draw(axes, view, vocab, layer, head):
    """Redraw the two axes in place: top-8 next-token bars (left), one head's attention (right),
    the keys the causal mask hides hatched; with attention off, the heatmap's grid says so.
    Everything is checked first (``checked``): a refused view leaves the axes as they were."""
    _, _, layer, head = checked(view, vocab, layer, head)
    left, right = axes
    left.clear()
    right.clear()
    plots.prob_bars(view["probs"], vocab, ax=left, top=min(8, len(vocab)), title="next token")
    if view["attention"]:
        plots.attention_heatmap(view["weights"][layer, head], view["tokens"], ax=right,
                                title=_title(view, layer, head), annotate=len(view["tokens"]) <= 8)
        hatch_masked(right, len(view["tokens"]))
    else:
        plots.attention_off_heatmap(view["tokens"], ax=right, title=_title(view, layer, head))


VIEW_KEYS = ("tokens", "probs", "weights", "attention")


def checked(view, vocab, layer, head):
    """What ``draw`` draws, checked before it draws: ``view`` the dict ``compute.prompt_view`` returns
    (tokens: T words, probs: (V,) over ``vocab``, weights: (L, H, T, T), attention: a switch), ``layer``
    and ``head`` indices into its weights. Returns (p: the probs as a NumPy array, w: the head's (T, T)
    weights, or None with attention off, layer, head: as ints); else one sentence."""
    if not isinstance(view, dict) or not set(VIEW_KEYS) <= set(view):
        fail(f"the view should be the dict compute.prompt_view returns (with {', '.join(VIEW_KEYS)}), "
             f"but got {shown(view)}")
    attention = check_switch(view["attention"], "the view's attention")
    weights = to_numpy(view["weights"], "the view's weights")
    if weights.ndim != 4:
        fail(f"the view's weights should be 4-D (layers, heads, T, T), but got shape {weights.shape}")
    layer = check_index(layer, f"layer (the model has {weights.shape[0]} layers)", weights.shape[0])
    head = check_index(head, f"head (the model has {weights.shape[1]} heads)", weights.shape[1])
    p = plots.check_bars(view["probs"], vocab, top=min(8, len(vocab)))[0]
    if not attention:
        plots.check_tokens(view["tokens"])
        return p, None, layer, head
    return p, plots.check_attention(view["weights"][layer, head], view["tokens"])[0], layer, head


def masked(T):
    """(T, T) bool, True above the diagonal: the keys the causal mask hides from each query."""
    return np.triu(np.ones((T, T), dtype=bool), k=1)


def hatch_masked(ax, T):
    """Hatch the masked cells of a (T, T) attention heatmap and blank their printed weights, so a
    hidden key does not read "0.00" like a visible key that got (almost) no weight."""
    from matplotlib.patches import Rectangle

    hidden = masked(T)
    for i, j in zip(*np.nonzero(hidden)):
        ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="white", edgecolor="#aaaaaa",
                               hatch="///", lw=0))
    if len(ax.texts) == T * T:
        for text, hide in zip(ax.texts, hidden.flat):
            if hide:
                text.set_text("")


def _title(view, layer, head):
    return f"layer {layer}, head {head}" + ("" if view["attention"] else " (attention off)")


class TourView:
    """The figure ``draw`` makes, redrawn fast: the axes, the heatmap's token ticks and the
    labels are drawn once per prompt and switch; a new layer or head moves only the bars, their
    values and word labels, the heatmap's colours and weights and its title (a ``Blitter``).

    ``png(view, layer, head)`` returns PNG bytes of the same picture ``draw`` draws. A view it
    refuses (``checked``) leaves the figure and what it has drawn as they were."""

    TOP = 8

    def __init__(self, vocab):
        self.vocab, self.still = vocab, None   # still: the (tokens, attention) the figure was drawn for
        self.fig = fig = new_figure((8.5, 3.2))
        self.axes = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.1, 1]))
        fig.subplots_adjust(left=0.07, right=0.97, bottom=0.3, top=0.9, wspace=0.35)

    def _still(self, view, layer, head):
        """Draw everything for a new prompt or switch (its tokens fix the heatmap's ticks) and pick
        the moving artists."""
        draw(self.axes, view, self.vocab, layer, head)
        left, right = self.axes
        for text in left.texts[:]:
            text.remove()
        n = len(left.patches)
        self.values = [left.text(0, 0, "", ha="center", fontsize=7) for _ in range(n)]
        self.words = [_copy_text(tick.label1, left) for tick in left.xaxis.get_major_ticks()[:n]]
        left.xaxis.set_ticklabels([""] * n)   # the words are drawn as moving texts in the same place
        self.still = (list(view["tokens"]), bool(view["attention"]))
        self.blit = Blitter(self.fig, [*left.patches, *self.values, *self.words,
                                       right.images[0], *right.patches, *right.texts, right.title])

    def png(self, view, layer, head):
        p, w, layer, head = checked(view, self.vocab, layer, head)   # before anything is drawn
        if self.still != (list(view["tokens"]), bool(view["attention"])):
            self._still(view, layer, head)
        left, right = self.axes
        order = np.argsort(-p, kind="stable")[:len(left.patches)]
        for bar, text, i in zip(left.patches, self.values, order):
            bar.set_height(p[i])
            text.set_position((bar.get_x() + bar.get_width() / 2, p[i] + 0.02))
            text.set_text(f"{p[i]:.2f}" if p[i] >= 0.01 else "")
        for word, i in zip(self.words, order):
            word.set_text(plots.literal(self.vocab[i]))
        if w is not None:   # attention on: the head's weights
            right.images[0].set_data(w)
            for text, value, hide in zip(right.texts, w.flat, masked(len(w)).flat):
                text.set_text("" if hide else f"{value:.2f}")
                text.set_color("white" if value > 0.6 else "black")
        right.set_title(_title(view, layer, head))
        return self.blit.png()


def _copy_text(label, ax):
    """A Text on ``ax`` drawn exactly like the tick label ``label`` (same place, font, rotation)."""
    from matplotlib.text import Text

    text = Text()
    text.update_from(label)
    text.set_transform(label.get_transform())
    text.set_position(label.get_position())
    text.set_clip_on(False)
    ax.add_artist(text)
    return text


def explorer(model, world, prompt="<BOS> the cat is"):
    """A text box, layer/head pickers and an attention toggle around one live figure.

    Returns the Explorer (``.controls``: prompt, layer, head, attention; ``.picture()``). A model whose
    weights hold NaN or inf is refused here, in one sentence (and at a draw, if they are changed later)."""
    import ipywidgets as widgets

    check_finite_weights(check_model_and_world(model, world)[0])
    controls = dict(
        prompt=widgets.Text(description="prompt", continuous_update=False, layout=widgets.Layout(width="420px")),
        layer=widgets.Dropdown(options=range(model.cfg.n_layers), description="layer"),
        head=widgets.Dropdown(options=range(model.cfg.n_heads), description="head"),
        attention=widgets.ToggleButtons(options=[("attention on", True), ("attention off", False)]),
    )
    start_at(controls, prompt=prompt)
    vocab = world.tokenizer.vocab
    figures = {True: TourView(vocab), False: TourView(vocab)}   # one a switch position: a toggle redraws no still part
    views = {}

    def render(prompt, layer, head, attention):
        key = (prompt, attention, weights_state(model))   # a model changed in place since: computed again
        if key not in views:   # layer and head only pick from a view: compute it once
            views.clear() if len(views) > 64 else None
            views[key] = compute.prompt_view(model, world, prompt, attention)
        return figures[attention].png(views[key], layer, head)

    layout = widgets.VBox([controls["prompt"],
                           widgets.HBox([controls["layer"], controls["head"], controls["attention"]])])
    return show(controls, render, layout, version=weights_version(model))
