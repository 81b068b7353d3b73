"""Chapter 11's explorer: type a prompt, pick a layer and a head, see that head's attention
and the model's top next tokens.

A new prompt runs the model once (its trace is kept) and redraws the whole figure; a new
layer or head only swaps the heatmap's pixels and title (``Blitter``), so moving a slider
draws two artists, not the figure.
"""
import functools

from ..explorer import Blitter, check_unchanged, new_figure, show, start_at, weights_version
from ..plots import ATTENTION_CMAP, literal
from . import compute


def label(piece):
    """A token as a readable label to draw: its spaces and newlines made visible, each "$" drawn as typed
    (``plots.literal``: SmolLM2 has tokens such as "$$", which matplotlib would read as math)."""
    return literal(piece.replace(" ", "·").replace("\n", "⏎") or "∅")


def draw_prompt(axes, view):
    """Redraw both axes for a new prompt; returns (the heatmap image, its title), the moving parts."""
    left, right = axes
    left.clear()
    right.clear()
    pieces = [label(p) for p in view["pieces"]]
    image = left.imshow(view["weights"][0, 0].numpy(), cmap=ATTENTION_CMAP, vmin=0, vmax=1)
    left.set_xticks(range(len(pieces)), pieces, rotation=60, ha="right", fontsize=8)
    left.set_yticks(range(len(pieces)), pieces, fontsize=8)
    left.set_xlabel("key (attended to)")
    left.set_ylabel("query")
    names, probs = zip(*view["top"])
    right.barh(range(len(probs))[::-1], probs, color="#4c72b0")
    right.set_yticks(range(len(probs))[::-1], [label(n) for n in names])
    right.set_xlim(0, 1)
    right.set_xlabel("probability")
    right.set_title("next token")
    return image, left.set_title("")


def check_model(model, tok):
    """model a course Transformer and tok a SmolLM2 tokenizer of its vocabulary (``compute.load()``), else one sentence."""
    compute.check_pair(model, tok)


def explorer(model, tok, layer=0, head=0,
             prompt="The Time Traveller smiled at us. The Time Traveller smiled at"):
    """A text box and layer/head sliders around one live figure, opening on head (layer, head);
    returns the Explorer. model, tok: ``compute.load()``'s; every argument is checked before
    anything is drawn (a layer or head out of range is refused, not clamped)."""
    import ipywidgets as widgets

    check_model(model, tok)
    controls = dict(
        prompt=widgets.Text(value="", description="prompt", continuous_update=False,
                            layout=widgets.Layout(width="520px")),
        layer=widgets.IntSlider(value=0, min=0, max=model.cfg.n_layers - 1, description="layer"),
        head=widgets.IntSlider(value=0, min=0, max=model.cfg.n_heads - 1, description="head"),
    )
    start_at(controls, prompt=prompt, layer=layer, head=head)   # out of range: refused, not clamped
    view_of = functools.lru_cache(maxsize=8)(lambda text: compute.prompt_view(model, tok, text))
    version = weights_version(model)
    made = version()
    view_of(prompt)                          # a prompt the view refuses (too long) is refused before any drawing
    fig = new_figure((10, 4.6))
    axes = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.5, 1]))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.27, top=0.92, wspace=0.45)
    fig.colorbar(axes[0].imshow([[0.0]], cmap=ATTENTION_CMAP, vmin=0, vmax=1), ax=axes[0], label="attention weight")
    state = dict(prompt=None, blit=None)

    def render(prompt, layer, head):
        check_unchanged(version, made)   # the views kept were computed from the weights as they were
        view = view_of(prompt)
        if prompt != state["prompt"]:
            image, title = draw_prompt(axes, view)
            state.update(prompt=prompt, blit=Blitter(fig, moving=(image, title)), image=image, title=title)
        state["image"].set_data(view["weights"][layer, head].numpy())
        state["title"].set_text(f"layer {layer}, head {head}: where each token looks")
        return state["blit"].png()

    layout = widgets.VBox([controls["prompt"], widgets.HBox([controls["layer"], controls["head"]])])
    return show(controls, render, layout, version=version)
