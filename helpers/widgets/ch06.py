"""Chapter 06 explorer: positions on or off, the prompt scrambled, the next-token distribution.

* ``scramble`` reorders a prompt (seeded); ``next_token_view`` is the compute
  (tests call it; the widget calls it on every change).
* ``view_figure`` draws one result; ``explorer()`` wires a dropdown, a toggle, a
  slider and a checkbox to it and redraws the figure in place.
"""
import numpy as np

from ..errors import check_positive_int, fail
from . import Blitter, png  # noqa: F401  (png: tests call explore.png)

PROMPTS = ("<BOS> the cat sat", "<BOS> the cat is", "<BOS> the mat is",
           "<BOS> the big dog sat on the", "<BOS> the small cat ran")


def scramble(words, seed, keep_last=True):
    """The prompt with its words rearranged: seed 0 keeps it as it is, every other seed
    picks one of the other distinct orders (seeded). <BOS> stays first, and the last
    word stays last when keep_last. At most 8 words are rearranged.
    """
    import itertools

    words = list(words)
    seed = check_positive_int(seed, "seed", minimum=0)
    end = len(words) - 1 if keep_last else len(words)
    middle = tuple(words[1:end])
    if len(middle) > 8:
        fail(f"scramble rearranges at most 8 words, but this prompt has {len(middle)} to rearrange")
    others = sorted(set(itertools.permutations(middle)) - {middle})
    if seed == 0 or not others:
        return words
    pick = others[int(np.random.default_rng(seed).integers(len(others)))]
    return words[:1] + list(pick) + words[end:]


def next_token_view(model, world, prompt, positions=True, seed=0, keep_last=True):
    """The next-token distribution after ``prompt``, maybe scrambled, with positions on or off.

    prompt: a string or list of words starting with <BOS>. Returns a dict: words (the
    prompt as fed), probs (V,), top (word), p_top, original (V,) the distribution for
    the prompt as given with positions on, change = max |probs - original|, and
    scramble_change = max |probs - the prompt as given with the same positions setting|.
    """
    import torch

    words = prompt.split() if isinstance(prompt, str) else list(prompt)
    if not words or words[0] != "<BOS>":
        fail(f"a cat-world prompt starts with <BOS>, but got {words[:1]}")
    fed = scramble(words, seed, keep_last)
    with torch.no_grad():
        probs = torch.softmax(model(world.tokenizer.encode(fed), positions=positions)[-1], -1).numpy()
        original = torch.softmax(model(world.tokenizer.encode(words))[-1], -1).numpy()
        unscrambled = torch.softmax(model(world.tokenizer.encode(words), positions=positions)[-1], -1).numpy()
    top = int(probs.argmax())
    return dict(words=fed, probs=probs, top=world.tokenizer.vocab[top], p_top=float(probs[top]),
                original=original, change=float(np.abs(probs - original).max()),
                scramble_change=float(np.abs(probs - unscrambled).max()))


def view_title(view, positions):
    """Three lines: the prompt as fed; positions on/off and the top word; the two changes."""
    return (" ".join(view["words"]) + "\n" +
            f"positions {'on' if positions else 'off'}:  top '{view['top']}' {view['p_top']:.3f}\n"
            f"max |Δp| vs as given with positions on: {view['change']:.3f}   "
            f"from the scramble alone: {view['scramble_change']:.3f}")


def new_figure(size=(6.6, 3.6)):
    """A matplotlib Figure outside pyplot with fixed margins (fast to redraw, never leaked)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=80)
    fig.subplots_adjust(left=0.1, right=0.98, bottom=0.22, top=0.72)
    return fig


def view_panel(vocab):
    """An empty distribution figure over the whole vocabulary and the function that
    shows a next_token_view on it: (fig, show, changing). show(view, positions) moves the
    bars (what the model predicts now) and the black ticks (the prompt as given, positions
    on); ``changing`` lists the artists it touches (for a Blitter)."""
    from ..plots import ACCENT, BASE

    fig = new_figure()
    ax = fig.add_subplot()
    x = np.arange(len(vocab))
    now = ax.bar(x, np.zeros(len(vocab)), color=BASE, label="what the model predicts now")
    before, = ax.plot(x, np.zeros(len(vocab)), "_", color="black", markersize=11, markeredgewidth=2,
                      label="prompt as given, positions on")
    ax.set_xticks(x, vocab, rotation=60, ha="right", fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("p(next word)")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=2, fontsize=8, frameon=False)
    title = fig.suptitle("", fontsize=9, y=0.99)

    def show(view, positions=True):
        before.set_ydata(view["original"])
        for bar, p, word in zip(now, view["probs"], vocab):
            bar.set_height(p)
            bar.set_color(ACCENT if word == view["top"] else BASE)
        title.set_text(view_title(view, positions))
        return fig
    return fig, show, [*now, before, title]


def view_figure(view, vocab, positions=True):
    """The figure of one next_token_view."""
    return view_panel(vocab)[1](view, positions)


def explorer(model, world, prompt=PROMPTS[0]):
    """A prompt menu, a positions toggle, a scramble slider and a keep-last checkbox; one
    figure redrawn in place (an image output replaced through its display id)."""
    import ipywidgets as widgets
    from IPython.display import Image, display

    controls = dict(prompt=widgets.Dropdown(options=PROMPTS, value=prompt, description="prompt"),
                    positions=widgets.ToggleButton(value=True, description="positions on"),
                    seed=widgets.IntSlider(value=0, min=0, max=9, description="scramble"),
                    keep_last=widgets.Checkbox(value=True, description="keep the last word"))
    fig, show, changing = view_panel(world.tokenizer.vocab)
    fast = Blitter(fig, changing)

    def image():
        values = {name: c.value for name, c in controls.items()}
        controls["positions"].description = "positions " + ("on" if values["positions"] else "off")
        show(next_token_view(model, world, **values), values["positions"])
        return Image(data=fast.png(), format="png")

    display(widgets.HBox([widgets.VBox([controls["prompt"], controls["seed"]]),
                          widgets.VBox([controls["positions"], controls["keep_last"]])]))
    handle = display(image(), display_id=True)
    for c in controls.values():
        c.observe(lambda change: handle.update(image()), names="value")
