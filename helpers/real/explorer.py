"""Chapter 11's explorer: type a prompt, pick a layer and a head, see that head's attention
and the model's top next tokens."""
import functools

from .. import plots
from ..explorer import new_figure, show
from . import compute


def label(piece):
    """A token as a readable label: its spaces and newlines made visible."""
    return piece.replace(" ", "·").replace("\n", "⏎") or "∅"


def draw(axes, view, layer, head):
    """Redraw both axes: one head's attention (left), the top next tokens (right)."""
    left, right = axes
    left.clear()
    right.clear()
    pieces = [label(p) for p in view["pieces"]]
    plots.attention_heatmap(view["weights"][layer, head], pieces, ax=left,
                            title=f"layer {layer}, head {head}: where each token looks", annotate=len(pieces) <= 8)
    names, probs = zip(*view["top"])
    right.barh(range(len(probs))[::-1], probs, color="#4c72b0")
    right.set_yticks(range(len(probs))[::-1], [label(n) for n in names])
    right.set_xlim(0, 1)
    right.set_xlabel("probability")
    right.set_title("next token")


def explorer(model, tok, prompt="The Time Traveller smiled at us. The Time Traveller smiled at"):
    """A text box and layer/head sliders around one live figure; returns the Explorer."""
    import ipywidgets as widgets

    controls = dict(
        prompt=widgets.Text(value=prompt, description="prompt", continuous_update=False,
                            layout=widgets.Layout(width="520px")),
        layer=widgets.IntSlider(value=17, min=0, max=model.cfg.n_layers - 1, description="layer"),
        head=widgets.IntSlider(value=5, min=0, max=model.cfg.n_heads - 1, description="head"),
    )
    fig = new_figure((10, 4.4))
    axes = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.5, 1]))
    fig.subplots_adjust(left=0.1, right=0.97, bottom=0.25, top=0.92, wspace=0.45)
    view_of = functools.lru_cache(maxsize=8)(lambda text: compute.prompt_view(model, tok, text))

    def render(prompt, layer, head):
        draw(axes, view_of(prompt), layer, head)
        return fig

    layout = widgets.VBox([controls["prompt"], widgets.HBox([controls["layer"], controls["head"]])])
    return show(controls, render, layout)
