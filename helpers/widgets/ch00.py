"""The tour's explorer: type a prompt, see the next-token distribution and one head's attention."""
import torch

from .. import plots
from ..errors import CourseInputError


def prompt_view(model, world, prompt, attention=True):
    """Everything the explorer draws for one prompt.

    Returns dict(tokens (T words), probs (V,) for the next word, weights (L, h, T, T)).
    """
    ids = world.tokenizer.encode(prompt)
    with torch.no_grad():
        trace = model(ids, trace=True, attention=attention)
    weights = torch.stack([trace[f"L{l}.weights"] for l in range(model.cfg.n_layers)]) if attention \
        else torch.zeros(model.cfg.n_layers, model.cfg.n_heads, len(ids), len(ids))
    return dict(tokens=world.tokenizer.decode(ids), probs=trace["probs"][-1], weights=weights,
                attention=attention)


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
    """A text box, layer/head pickers and an attention toggle around one live figure."""
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    text = widgets.Text(value=prompt, description="prompt", continuous_update=False,
                        layout=widgets.Layout(width="420px"))
    layer = widgets.Dropdown(options=range(model.cfg.n_layers), description="layer")
    head = widgets.Dropdown(options=range(model.cfg.n_heads), description="head")
    attention = widgets.ToggleButtons(options=[("attention on", True), ("attention off", False)])
    message = widgets.HTML()
    out = widgets.Output()
    fig, axes = plt.subplots(1, 2, figsize=(8.5, 3.2), gridspec_kw=dict(width_ratios=[1.1, 1]))
    fig.subplots_adjust(left=0.07, right=0.97, bottom=0.3, top=0.9, wspace=0.35)
    plt.close(fig)  # drawn only into the Output below

    def update(_=None):
        try:
            view = prompt_view(model, world, text.value, attention.value)
        except CourseInputError as error:
            message.value = f"<span style='color:#d1495b'>{error}</span>"
            return
        message.value = ""
        draw(axes, view, world.tokenizer.vocab, layer.value, head.value)
        with out:
            out.clear_output(wait=True)
            display(fig)

    for w in (text, layer, head, attention):
        w.observe(update, names="value")
    update()
    return widgets.VBox([text, widgets.HBox([layer, head, attention]), message, out])
