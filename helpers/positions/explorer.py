"""Chapter 06's explorer: positions on or off, the prompt scrambled, the next-token distribution.

Its controls are a prompt menu, a positions toggle, a scramble slider and a keep-last
checkbox; ``render`` calls ``compute.next_token_view`` and moves the bars of one figure
(``view_panel``), redrawn through a Blitter.
"""
import numpy as np

from ..explorer import Blitter, check_model_and_world, new_figure, show, start_at, weights_version
from ..model import check_finite_weights
from . import compute


def view_title(view, positions):
    """Three lines: the prompt as fed; positions on/off and the top word; the two changes."""
    return (" ".join(view["words"]) + "\n" +
            f"positions {'on' if positions else 'off'}:  top '{view['top']}' {view['p_top']:.3f}\n"
            f"max |Δp| vs as given with positions on: {view['change']:.3f}   "
            f"from the scramble alone: {view['scramble_change']:.3f}")


def view_panel(vocab):
    """An empty distribution figure over the whole vocabulary and the function that
    shows a next_token_view on it: (fig, draw, changing). draw(view, positions) moves the
    bars (what the model predicts now) and the black ticks (the prompt as given, positions
    on); ``changing`` lists the artists it touches (for a Blitter)."""
    from ..plots import ACCENT, BASE

    fig = new_figure((6.6, 3.6))
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.72)
    ax = fig.add_subplot()
    x = np.arange(len(vocab))
    now = ax.bar(x, np.zeros(len(vocab)), color=BASE, label="what the model predicts now")
    before, = ax.plot(x, np.zeros(len(vocab)), "_", color="black", markersize=11, markeredgewidth=2,
                      label="prompt as given, positions on")
    ax.set_xticks(x, vocab, rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(next word)")
    from matplotlib.patches import Patch

    top = Patch(color=ACCENT, label="its top word")
    ax.legend(handles=[now, top, before], loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8,
              frameon=False)
    title = fig.suptitle("", fontsize=9, y=0.99)

    def draw(view, positions=True):
        before.set_ydata(view["original"])
        for bar, p, word in zip(now, view["probs"], vocab):
            bar.set_height(p)
            bar.set_color(ACCENT if word == view["top"] else BASE)
        title.set_text(view_title(view, positions))
        return fig
    return fig, draw, [*now, before, title]


def view_figure(view, vocab, positions=True):
    """The figure of one next_token_view."""
    return view_panel(vocab)[1](view, positions)


def explorer(model, world, prompt=compute.PROMPTS[0]):
    """A prompt menu, a positions toggle, a scramble slider and a keep-last checkbox over
    one figure redrawn in place. Returns the Explorer. A model whose weights hold NaN or inf is refused
    here, in one sentence (and at a draw, if they are changed later)."""
    import ipywidgets as widgets

    check_finite_weights(check_model_and_world(model, world)[0])
    controls = dict(prompt=widgets.Dropdown(options=compute.PROMPTS, description="prompt"),
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
