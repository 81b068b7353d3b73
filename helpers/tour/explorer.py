"""The tour's explorer: type a prompt, see the next-token distribution and one head's attention."""
from .. import plots
from ..explorer import new_figure, show
from . import compute


def draw(axes, view, vocab, layer, head):
    """Redraw the two axes in place: top-8 next-token bars (left), one head's attention (right)."""
    left, right = axes
    left.clear()
    right.clear()
    plots.prob_bars(view["probs"], vocab, ax=left, top=8, title="next token")
    plots.attention_heatmap(view["weights"][layer, head], view["tokens"], ax=right,
                            title=f"layer {layer}, head {head}" + ("" if view["attention"] else " (attention off)"),
                            annotate=len(view["tokens"]) <= 8)


def explorer(model, world, prompt="<BOS> the cat is"):
    """A text box, layer/head pickers and an attention toggle around one live figure.

    Returns the Explorer (``.controls``: prompt, layer, head, attention; ``.picture()``)."""
    import ipywidgets as widgets

    controls = dict(
        prompt=widgets.Text(value=prompt, description="prompt", continuous_update=False,
                            layout=widgets.Layout(width="420px")),
        layer=widgets.Dropdown(options=range(model.cfg.n_layers), description="layer"),
        head=widgets.Dropdown(options=range(model.cfg.n_heads), description="head"),
        attention=widgets.ToggleButtons(options=[("attention on", True), ("attention off", False)]),
    )
    fig = new_figure((8.5, 3.2))
    axes = fig.subplots(1, 2, gridspec_kw=dict(width_ratios=[1.1, 1]))
    fig.subplots_adjust(left=0.07, right=0.97, bottom=0.3, top=0.9, wspace=0.35)

    def render(prompt, layer, head, attention):
        view = compute.prompt_view(model, world, prompt, attention)
        draw(axes, view, world.tokenizer.vocab, layer, head)
        return fig

    layout = widgets.VBox([controls["prompt"],
                           widgets.HBox([controls["layer"], controls["head"], controls["attention"]])])
    return show(controls, render, layout)
