"""Chapter 06's explorer: positions on or off, the prompt scrambled, the next-token distribution.

Its controls are a prompt menu, a positions toggle, a scramble slider and a keep-last
checkbox; ``render`` calls ``compute.next_token_view`` and moves the bars of one figure
(``view_panel``), redrawn through a Blitter.
"""
import numpy as np

from ..explorer import Blitter, check_model_and_world, new_figure, show, start_at, weights_version
from ..errors import check_number, check_switch, count, fail, shown, to_numpy
from ..model import check_finite_weights
from ..readout import check_probabilities
from ..worlds import words_of
from . import compute


MAX_BARS = 500   # the most words view_panel draws a bar for (the course's worlds have 10 to 20)
VIEW_KEYS = ("words", "probs", "top", "p_top", "original", "change", "scramble_change")


def check_positions_view(view, vocab=None):
    """``view`` as compute.next_token_view returns it: a dict with words (a non-empty list of texts), probs and
    original (V,) probabilities (V = len(vocab), when given), top (a word, one of vocab) and p_top, change,
    scramble_change (numbers from 0 to 1); else one sentence. Returns it."""
    if not isinstance(view, dict) or not set(VIEW_KEYS) <= set(view):
        fail(f"view should be the dict next_token_view returns (with {', '.join(VIEW_KEYS)}), but got {shown(view)}")
    words = view["words"]
    if not isinstance(words, (list, tuple)) or not words or not all(type(word) is str for word in words_of(words)):
        fail(f"view['words'] should be the prompt as fed, a non-empty list of words, but got {shown(words)}")
    for name in ("probs", "original"):
        p = to_numpy(view[name], f"view[{name!r}]")
        if p.ndim != 1 or (vocab is not None and len(p) != len(vocab)):
            fail(f"view[{name!r}] should be one probability per word of the vocabulary"
                 + (f" ({len(vocab)})" if vocab is not None else "") + f", but it has shape {p.shape}")
        check_probabilities(p, f"view[{name!r}]", "pass a view next_token_view made")
    if type(view["top"]) is not str or (vocab is not None and view["top"] not in vocab):
        fail(f"view['top'] should be a word of the vocabulary, but got {shown(view['top'])}")
    for name in ("p_top", "change", "scramble_change"):
        check_number(view[name], f"view[{name!r}]", 0.0, 1.0)
    return view


def view_title(view, positions):
    """Three lines: the prompt as fed; positions on/off and the top word; the two changes."""
    check_positions_view(view)
    positions = check_switch(positions, "positions")
    return (" ".join(view["words"]) + "\n" +
            f"positions {'on' if positions else 'off'}:  top '{view['top']}' {view['p_top']:.3f}\n"
            f"max |Δp| vs as given with positions on: {view['change']:.3f}   "
            f"from the scramble alone: {view['scramble_change']:.3f}")


def view_panel(vocab):
    """An empty distribution figure over the whole vocabulary and the function that
    shows a next_token_view on it: (fig, draw, changing). draw(view, positions) moves the
    bars (what the model predicts now) and the black ticks (the prompt as given, positions
    on); ``changing`` lists the artists it touches (for a Blitter)."""
    from ..plots import ACCENT, BASE, check_label_list, check_labels, literal

    vocab = check_label_list(vocab, "vocab", "bar", "words")
    if not 1 <= len(vocab) <= MAX_BARS:
        fail(f"vocab should hold 1 to {MAX_BARS} words (one bar each), but holds {count(len(vocab))}")
    check_labels(vocab, "each word of vocab")
    fig = new_figure((6.6, 3.6))
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.72)
    ax = fig.add_subplot()
    x = np.arange(len(vocab))
    now = ax.bar(x, np.zeros(len(vocab)), color=BASE, label="what the model predicts now")
    before, = ax.plot(x, np.zeros(len(vocab)), "_", color="black", markersize=11, markeredgewidth=2,
                      label="prompt as given, positions on")
    ax.set_xticks(x, [literal(word) for word in vocab], rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(next word)")
    from matplotlib.patches import Patch

    top = Patch(color=ACCENT, label="its top word")
    ax.legend(handles=[now, top, before], loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8,
              frameon=False)
    title = fig.suptitle("", fontsize=9, y=0.99)

    def draw(view, positions=True):
        check_positions_view(view, vocab)
        before.set_ydata(view["original"])
        for bar, p, word in zip(now, view["probs"], vocab):
            bar.set_height(p)
            bar.set_color(ACCENT if word == view["top"] else BASE)
        title.set_text(literal(view_title(view, positions)))
        return fig
    return fig, draw, [*now, before, title]


def view_figure(view, vocab, positions=True):
    """The figure of one next_token_view."""
    return view_panel(vocab)[1](view, positions)


def explorer(model, world, prompt=None):
    """A prompt menu, a positions toggle, a scramble slider and a keep-last checkbox over
    one figure redrawn in place. Returns the Explorer. The menu holds prompts of the model's own world
    (``compute.prompts_for``); prompt: one of them (None: the first). A model whose weights hold NaN or inf
    is refused here, in one sentence (and at a draw, if they are changed later)."""
    import ipywidgets as widgets

    check_finite_weights(check_model_and_world(model, world)[0])
    menu = compute.prompts_for(model, world)
    prompt = menu[0] if prompt is None else prompt
    controls = dict(prompt=widgets.Dropdown(options=menu, description="prompt"),
                    positions=widgets.ToggleButton(value=True, description="positions on"),
                    seed=widgets.IntSlider(value=0, min=0, max=9, description="scramble"),
                    keep_last=widgets.Checkbox(value=True, description="keep the last word"))
    start_at(controls, prompt=prompt)   # one of the menu's prompts
    fig, draw, changing = view_panel(world.tokenizer.vocab)
    fast = Blitter(fig, changing)

    def relabel(change):
        controls["positions"].description = "positions " + ("on" if change["new"] else "off")

    def render(prompt, positions, seed, keep_last):
        draw(compute.next_token_view(model, world, prompt, positions, seed, keep_last), positions)
        return fast.png()

    controls["positions"].observe(relabel, names="value")
    layout = widgets.HBox([widgets.VBox([controls["prompt"], controls["seed"]]),
                           widgets.VBox([controls["positions"], controls["keep_last"]])])
    return show(controls, render, layout, version=weights_version(model))
