"""Chapter 10's explorer: a checkbox per head (and attention off) around the live next-token bars,
titled with the number of copula types still answered in class."""
from .. import plots
from ..explorer import new_figure, show
from . import compute

PROMPTS = ("<BOS> the cat is", "<BOS> the mat was", "<BOS> the dog sat")


def explorer(model, world, prompts=PROMPTS):
    """A prompt picker, a checkbox per head ("L0H1" ...) and "attention off" around one bar chart.

    Returns the Explorer (``.controls``: prompt, attention_off, one per head; ``.picture()``)."""
    import ipywidgets as widgets

    heads = {f"L{l}H{h}": (l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)}
    prompt = widgets.Dropdown(options=prompts, description="prompt")
    boxes = {name: widgets.Checkbox(value=False, description=f"remove {name}", indent=False)
             for name in heads}
    off = widgets.Checkbox(value=False, description="attention off", indent=False)
    fig = new_figure((7, 2.8))
    ax = fig.add_subplot()
    fig.subplots_adjust(bottom=0.25, top=0.85)

    def render(prompt, attention_off, **removed):
        heads_off = [heads[name] for name, on in removed.items() if on]
        view = compute.ablation_view(model, world, prompt, heads_off, attention=not attention_off)
        ax.clear()
        plots.prob_bars(view["probs"], world.tokenizer.vocab, ax=ax, top=8,
                        highlight=("big", "small", "red", "blue"),
                        title=f"{prompt}   ·   copula types answered in class: {view['in_class']}/{view['types']}")
        return fig

    layout = widgets.VBox([prompt, widgets.HBox([*boxes.values(), off])])
    return show(dict(prompt=prompt, attention_off=off, **boxes), render, layout)
