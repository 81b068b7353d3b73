"""Chapter 09 explorer: slide temperature, top-k and top-p; watch the distribution, the kept set
and a few sampled continuations change.

``SlideView`` is the figure of one ``compute.slide`` result (``update`` draws it, ``png``
renders it fast by blitting); ``explorer()`` wires four sliders (and a prompt menu when given
several prompts) to it. It takes any ``helpers.model.Transformer`` with any tokenizer.
"""
import numpy as np

from ..errors import check_positive_int, check_text, fail, items_of, length as length_of, shown
from ..explorer import Blitter, new_figure, show, weights_version
from ..plots import literal
from .compute import as_tokenizer, default_prompt, is_current, prompt_state, settings_text, slide, slider_settings

GREY, BASE, ACCENT = "#c9c9c9", "#30638e", "#d1495b"
MAX_BARS = 16        # a larger vocabulary shows its 16 most probable tokens (the order never changes with T)
TOP_K_MAX = 50       # the top-k slider's last stop, which means "off"
MONO_EM = 0.602 * 9 / (7.0 * 72)   # one character of the 9-point monospace font, in figure widths


def shown_token(token):
    """A token as a bar's label: a space as ␣ and a newline as ⏎, so that every bar has one. (Drawn through
    ``plots.literal``, as every text of this figure, so that a "$" is drawn as typed, never as math.)"""
    if not isinstance(token, str):
        fail(f"token should be a token's text (a str), but got {shown(token)}")
    return token.replace(" ", "␣").replace("\n", "⏎") or "∅"


class SlideView:
    """One figure for ``slide`` results: grey bars after temperature, coloured bars after the
    filters, the kept probabilities, the settings and the sampled continuations.
    At most ``MAX_BARS`` bars: the most probable tokens.

    ``update(result, settings)`` redraws it (returns the Figure); ``caption`` is the line over
    the bars ('after "...":  T = 1.00,  top-k off,  top-p off  →  3 of 10 tokens kept').
    ``png(result, settings)`` returns PNG bytes fast: the axes, ticks and legend are drawn
    once, and each later call redraws only the bars and texts that change (blitting). Each
    setting and each word of a continuation is its own text, placed in fixed columns (the
    continuations in a monospace font), so a redraw lays out only what it has never drawn
    (continuations of characters or word pieces: one text a row).
    ``show_order(vocab, order)`` relabels the bars for another prompt.
    """

    def __init__(self, vocab, order):
        V = len(vocab)
        self.V = V
        self.check(order)
        n = min(V, MAX_BARS)
        self.fig = fig = new_figure((7.0, 4.4), dpi=80)
        fig.subplots_adjust(left=0.09, right=0.98, bottom=0.36, top=0.86)
        self.ax = ax = fig.add_subplot()
        x = np.arange(n)
        self.before = ax.bar(x, np.zeros(n), width=0.8, color=GREY)
        self.after = ax.bar(x, np.zeros(n), width=0.5, color=BASE)
        self.after[0].set_color(ACCENT)   # the first bar is always the most probable token
        self.values = [ax.text(i, 0, "", ha="center", fontsize=8) for i in x]
        ax.set_ylim(0, 1.12)
        ax.set_ylabel("probability")
        from matplotlib.patches import Patch
        ax.legend(handles=[Patch(color=GREY, label="after temperature"),
                           Patch(color=BASE, label="drawn from (after top-k, top-p)"),
                           Patch(color=ACCENT, label="drawn from: the most probable token (the greedy choice)")],
                  loc="upper right", fontsize=8, frameon=False)
        self.heading = fig.text(0.09, 0.955, "", fontsize=10)                       # the prompt: still
        self.settings = [fig.text(x0, 0.895, "", fontsize=10) for x0 in (0.09, 0.25, 0.41, 0.58)]
        fig.text(0.09, 0.22, "sampled continuations:", fontsize=9, family="monospace", va="top")
        self.rows = [fig.text(0.09, 0.22 - 0.05 * (r + 1), f"  {r + 1}.", fontsize=9, family="monospace",
                              va="top") for r in range(3)]
        self.tokens = []           # one text per token of the continuations, made as needed
        self.prompt, self.caption, self.heading_text = None, "", ""
        self.blitter = None   # made by the first png(), which marks the changing artists animated
        self.show_order(vocab, order)

    def check(self, order):
        if sorted(order) != list(range(self.V)):
            fail(f"order should list each of the {self.V} token ids once, but got {order}")

    def show_order(self, vocab, order):
        """Label the bars with the most probable tokens of ``order`` (a new prompt's)."""
        if len(vocab) != self.V:
            fail(f"this view has {self.V} tokens, but the new vocabulary has {len(vocab)}")
        self.check(order)
        self.order = list(order)[:len(self.before)]
        self.ax.set_xticks(range(len(self.order)), [literal(shown_token(vocab[i])) for i in self.order],
                           rotation=45, ha="right")
        if self.blitter is not None:
            self.blitter.reset()

    def changing(self):
        """The artists that change from one result to the next."""
        return [*self.before, *self.after, *self.values, *self.settings, *self.tokens]

    def token_slots(self, n_tokens):
        """Texts for the three rows of continuations, at least n_tokens a row (made as needed)."""
        while len(self.tokens) < 3 * n_tokens:
            self.tokens.append(self.fig.text(0, 0, "", fontsize=9, family="monospace", va="top"))
            if self.blitter is not None:
                self.blitter.animate(self.tokens[-1])
        per_row = len(self.tokens) // 3
        return [self.tokens[r * per_row:(r + 1) * per_row] for r in range(3)]

    def update(self, result, settings=""):
        if result["order"][:len(self.order)] != self.order:
            self.show_order(result["vocab"], result["order"])
        if result["prompt"] != self.prompt:
            self.prompt = result["prompt"]
            bars = "" if self.V <= len(self.order) else f"   (bars: the {len(self.order)} most probable of {self.V})"
            self.heading_text = f"after \"{self.prompt[-60:]}\":".replace("\n", "⏎") + bars
            self.heading.set_text(literal(self.heading_text))
            if self.blitter is not None:
                self.blitter.reset()
        tempered, final, kept = result["tempered"], result["final"], set(result["kept"])
        for slot, i in enumerate(self.order):
            self.before[slot].set_height(tempered[i])
            self.after[slot].set_height(final[i])
            self.values[slot].set_position((slot, max(tempered[i], final[i]) + 0.02))
            self.values[slot].set_text(f"{final[i]:.2f}" if i in kept else "")
        pieces = [*(settings.split(",  ") + ["", "", ""])[:3], f"→  {len(kept)} of {self.V} tokens kept"]
        for text, piece in zip(self.settings, pieces):
            text.set_text(literal(piece))
        self.caption = f"{self.heading_text}  {settings}  {pieces[-1]}"
        rows = result.get("continuation_tokens") or [[c] for c in result["continuations"]]
        if not result.get("spaced", True):   # characters or word pieces: one text a row, side by side
            rows = [["".join(row)] for row in rows]
        for r, texts in enumerate(self.token_slots(max((len(row) for row in rows), default=0))):
            row = rows[r] if r < len(rows) else []
            column, y = 5, 0.22 - 0.05 * (r + 1)      # after "  1. "
            for n, text in enumerate(texts):
                piece = shown_token(row[n]) if n < len(row) else ""
                text.set_text(literal(piece))
                text.set_position((0.09 + column * MONO_EM, y))
                column += len(piece) + 1
        return self.fig

    def png(self, result, settings=""):
        """PNG bytes of the figure showing ``result``, redrawing only what changes."""
        if self.blitter is None:
            self.blitter = Blitter(self.fig, self.changing())
        self.update(result, settings)
        return self.blitter.png()


SLIDE_KEYS = ("vocab", "order", "prompt", "tempered", "final", "kept", "continuations")   # what a slide result holds


def slide_figure(result, settings=""):
    """The figure of one ``slide`` result (a matplotlib Figure); settings: the text under its heading."""
    if not isinstance(result, dict) or not all(key in result for key in SLIDE_KEYS):
        fail(f"result should be what sampling.slide returns (a dict with {', '.join(SLIDE_KEYS)}), but got {shown(result)}")
    check_text(settings, "settings", empty=True, max_chars=2000)
    return SlideView(result["vocab"], result["order"]).update(result, settings)


def explorer(model, tokenizer, prompts=None, length=None):
    """Sliders for temperature, top-k, top-p and the seed, and one figure redrawn in place.

    model: any ``helpers.model.Transformer``; tokenizer: any object with ``vocab``,
    ``encode(text)`` and ``decode(ids)`` (a ``helpers.worlds.World`` gives its own); prompts: one
    prompt or a list of them (a menu picks one), None for the dragon world's "<BOS> dragon drinks"
    (``compute.DEFAULT_PROMPT``; a model of another vocabulary needs its own); length: the tokens of each of the three sampled
    continuations (default 4 words for a word-level tokenizer, 8 tokens for any other).
    top-k at its last stop (the vocabulary size, at most ``TOP_K_MAX``) and top-p at 1.00 mean
    "off". Returns the Explorer. Each prompt's pass is made once and kept, and made again when the
    model's weights have changed since (a model trained further between two moves of a slider).
    """
    import ipywidgets as widgets

    from ..worlds import Tokenizer

    tokenizer = as_tokenizer(tokenizer)
    prompts = default_prompt(model, tokenizer) if prompts is None else prompts
    if isinstance(prompts, (list, tuple)) and not length_of(prompts):   # (read by the built-ins: a subclass's
        fail("expected at least one prompt, but got an empty list")      # __len__ or __iter__ may lie or raise)
    if not (isinstance(prompts, str) or isinstance(prompts, (list, tuple)) and length_of(prompts) <= 100
            and all(isinstance(p, str) for p in items_of(prompts))):
        fail(f"prompts should be a text or a list of at most 100 texts, but got {shown(prompts)}")
    prompts = [prompts] if isinstance(prompts, str) else items_of(prompts)
    if length is None:
        length = 4 if isinstance(tokenizer, Tokenizer) else 8
    length = check_positive_int(length, "length (tokens a continuation)")   # True or 0: refused
    states = {}   # each prompt's ids, logits and cache: the sliders never change them, new weights do

    def state_of(prompt):
        """The prompt's state, made again when the model's weights changed since (trained further)."""
        if prompt not in states or not is_current(model, states[prompt]):
            states[prompt] = prompt_state(model, tokenizer, prompt, room=length)
        return states[prompt]

    for prompt in prompts:      # a prompt this model cannot take is refused here, in one sentence
        state_of(prompt)
    V = model.cfg.vocab_size
    k_max = min(V, TOP_K_MAX)
    label = dict(style={"description_width": "8em"})   # the default width cuts "temperature" short
    controls = dict(
        temperature=widgets.FloatSlider(value=1.0, min=0.0, max=3.0, step=0.05, description="temperature", **label),
        top_k=widgets.IntSlider(value=k_max, min=1, max=k_max, description="top-k", **label),
        top_p=widgets.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.01, description="top-p", **label),
        seed=widgets.IntSlider(value=0, min=0, max=50, description="seed", **label))
    if len(prompts) > 1:
        controls["prompt"] = widgets.Dropdown(options=prompts, value=prompts[0], description="prompt",
                                              layout=widgets.Layout(width="420px"))
    first = slide(model, tokenizer, prompts[0], n_continuations=0, length=length, state=state_of(prompts[0]))
    view = SlideView(first["vocab"], first["order"])

    def render(temperature, top_k, top_p, seed, prompt=prompts[0]):
        t, k, p = slider_settings(temperature, top_k, top_p, k_max)
        k = None if k is None or k >= V else k
        result = slide(model, tokenizer, prompt, t, k, p, length=length, seed=seed, state=state_of(prompt))
        return view.png(result, settings_text(t, k, p))
    rows = [widgets.HBox([widgets.VBox([controls["temperature"], controls["seed"]]),
                          widgets.VBox([controls["top_k"], controls["top_p"]])])]
    if "prompt" in controls:
        rows.insert(0, controls["prompt"])
    return show(controls, render, widgets.VBox(rows) if len(rows) > 1 else rows[0], version=weights_version(model))
